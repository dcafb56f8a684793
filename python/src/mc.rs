//! Monte Carlo light transport in tetrahedral meshes, from numpy `node`/`elem` arrays.
//!
//! Elements arrive 0-based with their regions (the Python layer converts pmmc's 1-based
//! `elem` and its `prop` table); sources as JSON in montecarlo-core's `Source` form
//! (`{"type": "pencil", "pos": [...], "dir": [...]}`), which the Python layer builds from
//! pmmc's `srctype`/`srcpos`/`srcdir`/`srcparam1`.

use crate::device::{for_job, resolve};
use crate::error::{IntoPyResult, compute, compute_interruptible, value_error};
use montecarlo_core::model::detector::{Detection, Detector, DetectorTally};
use montecarlo_core::{Material, Mesh, Optics, Outputs, Params, RunParams, Simulation, Source};
use numpy::{IntoPyArray, PyReadonlyArray1, PyReadonlyArray2, PyUntypedArrayMethods};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::sync::atomic::AtomicBool;

/// Rows of an (n, 3) or (n, 4) array as fixed-size arrays.
fn rows<const N: usize, T: Copy + numpy::Element>(
    name: &str,
    a: &PyReadonlyArray2<'_, T>,
) -> PyResult<Vec<[T; N]>> {
    if a.shape()[1] != N {
        return Err(value_error(format!(
            "{name} must have {N} columns; got shape {:?}",
            a.shape()
        )));
    }
    Ok(a.as_array()
        .rows()
        .into_iter()
        .map(|r| std::array::from_fn(|i| r[i]))
        .collect())
}

/// Run a simulation; see `biogpu.mc.run`.
#[pyfunction]
#[pyo3(signature = (node, elem, region, materials, n_outside, sources, photons, seed, time_limit_ns, specular, detectors, max_detected, device, jacobian=None))]
fn mc_run<'py>(
    py: Python<'py>,
    node: PyReadonlyArray2<'py, f64>,
    elem: PyReadonlyArray2<'py, i64>,
    region: PyReadonlyArray1<'py, i64>,
    materials: PyReadonlyArray2<'py, f64>,
    n_outside: f64,
    sources: &str,
    photons: u64,
    seed: u64,
    time_limit_ns: Option<f64>,
    specular: bool,
    detectors: Option<PyReadonlyArray2<'py, f64>>,
    max_detected: u64,
    device: &str,
    jacobian: Option<u32>,
) -> PyResult<Bound<'py, PyDict>> {
    if jacobian.is_some() && detectors.is_none() {
        return Err(value_error("jacobian needs detectors (detpos)"));
    }
    let detection = detectors
        .map(|d| -> PyResult<Detection> {
            Ok(Detection {
                detectors: rows::<4, f64>("detpos", &d)?
                    .into_iter()
                    .map(|[x, y, z, radius]| Detector {
                        pos: [x, y, z],
                        radius,
                    })
                    .collect(),
                max_photons: max_detected,
                momentum: false,
            })
        })
        .transpose()?;
    let nodes = rows::<3, f64>("node", &node)?;
    let n_nodes = nodes.len();
    let tets = rows::<4, i64>("elem", &elem)?
        .into_iter()
        .enumerate()
        .map(|(i, t)| {
            let mut out = [0u32; 4];
            for (o, &v) in out.iter_mut().zip(&t) {
                if v < 0 || v as usize >= n_nodes {
                    return Err(value_error(format!(
                        "element {} (1-based) names node {} (1-based), but there are {n_nodes} \
                         nodes",
                        i + 1,
                        v + 1
                    )));
                }
                *o = v as u32;
            }
            Ok(out)
        })
        .collect::<PyResult<Vec<_>>>()?;
    let regions = region
        .as_array()
        .iter()
        .map(|&r| {
            u32::try_from(r).map_err(|_| value_error(format!("region label {r} must be >= 1")))
        })
        .collect::<PyResult<Vec<_>>>()?;
    let materials = rows::<4, f64>("prop", &materials)?
        .into_iter()
        .map(|[mua, mus, g, n]| Material { mua, mus, g, n })
        .collect();
    let sources: Vec<Source> = serde_json::from_str(sources)
        .map_err(|e| value_error(format!("bad source description: {e}")))?;
    let params = Params::default()
        .with_seed(seed)
        .with_time_limit_ns(time_limit_ns)
        .with_specular(specular);
    let optics = Optics {
        materials,
        n_outside,
    };
    let sim = compute(py, || {
        let mesh = Mesh::new(nodes, tets, regions).py()?;
        let mut sim = Simulation::new(mesh, optics, &sources, photons, params).py()?;
        if detection.is_some() {
            sim.set_outputs(Outputs {
                detection,
                ..Outputs::default()
            })
            .py()?;
        }
        Ok(sim)
    })?;
    let device = resolve(py, device)?;
    // A replay repeats the CPU's f64 paths: with a Jacobian the run is on the CPU.
    let device = match jacobian {
        Some(_) if device.is_gpu() && !device.picked_by_auto() => {
            return Err(value_error(format!(
                "jacobian replays the detected photons on the CPU, which cannot repeat {}'s f32 paths: use device=\"cpu\" (or \"auto\")",
                device.info().id
            )));
        }
        Some(_) => gpu_runtime::Device::cpu(),
        None => for_job(&device, montecarlo_core::job_estimate(photons)),
    };
    let stop = AtomicBool::new(false);
    let (result, info) = compute_interruptible(py, &stop, || {
        let run = RunParams::new().with_stop(&stop);
        montecarlo_core::api::run(&sim, &run, &device).py()
    })?;
    let out = PyDict::new(py);
    out.set_item(
        "fluence",
        result.fluence(&sim.mesh, &sim.optics).into_pyarray(py),
    )?;
    out.set_item("absorbed", result.absorbed().into_pyarray(py))?;
    out.set_item("exitance", result.exitance(&sim.mesh).into_pyarray(py))?;
    out.set_item("volume", sim.mesh.volumes[1..].to_vec().into_pyarray(py))?;
    let boundary: Vec<[u32; 3]> = sim
        .mesh
        .boundary
        .iter()
        .map(|&(t, f)| {
            let tet = sim.mesh.tets[t as usize];
            let [a, b, c] = montecarlo_core::model::mesh::FACE_NODES[f as usize];
            [tet[a], tet[b], tet[c]]
        })
        .collect();
    let boundary = ndarray::Array2::from_shape_vec(
        (boundary.len(), 3),
        boundary.into_iter().flatten().collect(),
    )
    .expect("three nodes per triangle");
    out.set_item("boundary", boundary.into_pyarray(py))?;
    let s = &result.summary;
    let summary = PyDict::new(py);
    summary.set_item("photons", s.photons)?;
    summary.set_item("absorbed", s.absorbed)?;
    summary.set_item("escaped", s.escaped)?;
    summary.set_item("specular", s.specular)?;
    summary.set_item("roulette", s.roulette)?;
    summary.set_item("expired", s.expired)?;
    summary.set_item("lost", s.lost)?;
    summary.set_item("balance_error", s.balance_error)?;
    summary.set_item("seconds", s.seconds)?;
    summary.set_item("photons_per_ms", s.photons_per_ms)?;
    summary.set_item("interrupted", info.interrupted)?;
    out.set_item("summary", summary)?;
    if sim.outputs.detection.is_some() {
        out.set_item("detp", detected(py, &result.tally.detectors)?)?;
    }
    if let Some(k) = jacobian {
        let tally = &result.tally.detectors;
        if tally.dropped > 0 {
            return Err(value_error(format!(
                "jacobian: {} detected photons were not kept (maxdetphoton); raise it to replay them all",
                tally.dropped
            )));
        }
        let jac = compute(py, || sim.replay_cpu(&tally.photons, k).py())?;
        out.set_item(
            "jacobian",
            jac.dw_dmua(result.tally.photons).into_pyarray(py),
        )?;
        out.set_item("mean_path", jac.mean_path().into_pyarray(py))?;
    }
    out.set_item("device", device.info().id.clone())?;
    Ok(out)
}

/// What the detectors saw: pmmc's `detp` fields (one row per kept record, sorted by photon
/// index) and the per-detector totals.
fn detected<'py>(py: Python<'py>, tally: &DetectorTally) -> PyResult<Bound<'py, PyDict>> {
    let p = &tally.photons;
    let regions = p.first().map_or(0, |d| d.ppath.len());
    let table = |f: &dyn Fn(&montecarlo_core::model::detector::DetectedPhoton) -> Vec<f64>, n| {
        ndarray::Array2::from_shape_vec((p.len(), n), p.iter().flat_map(f).collect())
            .expect("one row per record")
    };
    let d = PyDict::new(py);
    d.set_item(
        "detid",
        p.iter()
            .map(|d| d.detector)
            .collect::<Vec<_>>()
            .into_pyarray(py),
    )?;
    d.set_item(
        "photon",
        p.iter()
            .map(|d| d.photon)
            .collect::<Vec<_>>()
            .into_pyarray(py),
    )?;
    d.set_item(
        "weight",
        p.iter()
            .map(|d| d.weight)
            .collect::<Vec<_>>()
            .into_pyarray(py),
    )?;
    d.set_item(
        "time_ns",
        p.iter()
            .map(|d| d.time_ns)
            .collect::<Vec<_>>()
            .into_pyarray(py),
    )?;
    d.set_item(
        "nscat",
        p.iter()
            .map(|d| d.scatters)
            .collect::<Vec<_>>()
            .into_pyarray(py),
    )?;
    d.set_item("p", table(&|d| d.pos.to_vec(), 3).into_pyarray(py))?;
    d.set_item("v", table(&|d| d.dir.to_vec(), 3).into_pyarray(py))?;
    d.set_item(
        "ppath",
        table(&|d| d.ppath.clone(), regions).into_pyarray(py),
    )?;
    d.set_item("count", tally.count.clone().into_pyarray(py))?;
    d.set_item("detected_weight", tally.weight.clone().into_pyarray(py))?;
    d.set_item("dropped", tally.dropped)?;
    Ok(d)
}

/// A box mesh of `cell`-sized cubes; see `biogpu.mc.box_mesh`.
#[pyfunction]
#[pyo3(signature = (origin, size, cell, per_cell))]
fn mc_box_mesh(
    py: Python<'_>,
    origin: [f64; 3],
    size: [f64; 3],
    cell: f64,
    per_cell: u32,
) -> PyResult<Bound<'_, PyDict>> {
    let mesh = compute(py, || {
        montecarlo_core::sim::generate::box_mesh(origin, size, cell, per_cell).py()
    })?;
    let nodes: Vec<f64> = mesh.nodes.iter().flatten().copied().collect();
    let elem: Vec<i64> = mesh.tets[1..]
        .iter()
        .zip(&mesh.regions[1..])
        .flat_map(|(t, &r)| t.iter().map(|&v| i64::from(v) + 1).chain([i64::from(r)]))
        .collect();
    let out = PyDict::new(py);
    let node = ndarray::Array2::from_shape_vec((mesh.nodes.len(), 3), nodes)
        .expect("three coordinates per node");
    let elem =
        ndarray::Array2::from_shape_vec((mesh.len(), 5), elem).expect("five columns per element");
    out.set_item("node", node.into_pyarray(py))?;
    out.set_item("elem", elem.into_pyarray(py))?;
    Ok(out)
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(mc_run, m)?)?;
    m.add_function(wrap_pyfunction!(mc_box_mesh, m)?)?;
    Ok(())
}
