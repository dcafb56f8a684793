//! DCE perfusion: per-voxel pharmacokinetic fits, the model curve, and simulated curves.
//!
//! Curves come in as (voxels, time) float32 arrays (the Python layer flattens volumes with
//! time last); times in s, input functions and curves in concentration units (mM).

use crate::device::{for_job, resolve};
use crate::error::{IntoPyResult, compute, compute_interruptible, value_error};
use numpy::{IntoPyArray, PyReadonlyArray2};
use perfusion_core::io::input::read_dce_series;
use perfusion_core::population::{Compartment, PopulationInput};
use perfusion_core::sim::Simulation;
use perfusion_core::{
    Control, FitInput, FitParams, FitStatus, Flags, Method, Model, Precision, Problem,
};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::collections::HashMap;
use std::sync::atomic::AtomicBool;

/// The parameters of each model: name, unit, default bounds and start, description.
#[pyfunction]
fn perfusion_models(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    let out = PyDict::new(py);
    for model in Model::ALL {
        let params = model
            .params()
            .iter()
            .map(|p| {
                let d = PyDict::new(py);
                d.set_item("name", p.name)?;
                d.set_item("unit", p.unit)?;
                d.set_item("lower", p.lower)?;
                d.set_item("upper", p.upper)?;
                d.set_item("start", p.start)?;
                d.set_item("delay", p.delay)?;
                d.set_item("description", p.description)?;
                Ok(d)
            })
            .collect::<PyResult<Vec<_>>>()?;
        out.set_item(model.name(), params)?;
    }
    Ok(out)
}

/// Fit every curve; see `biogpu.perfusion.fit`.
#[pyfunction]
#[pyo3(signature = (curves, t, aif, pif, model, method, fixed, bounds, start, max_iterations, precision, standard_errors, device))]
fn perfusion_fit<'py>(
    py: Python<'py>,
    curves: PyReadonlyArray2<'py, f32>,
    t: Vec<f64>,
    aif: Vec<f64>,
    pif: Option<Vec<f64>>,
    model: &str,
    method: &str,
    fixed: HashMap<String, f64>,
    bounds: HashMap<String, (f64, f64)>,
    start: HashMap<String, f64>,
    max_iterations: Option<u32>,
    precision: &str,
    standard_errors: bool,
    device: &str,
) -> PyResult<Bound<'py, PyDict>> {
    let model = model.parse::<Model>().py()?;
    let method = method.parse::<Method>().py()?;
    let problem = Problem::new(&t, &aif, pif.as_deref()).py()?;
    let mut params = FitParams::new(model)
        .with_method(method)
        .with_precision(precision.parse::<Precision>().py()?)
        .with_standard_errors(standard_errors);
    // Sorted, so that an error names the same parameter every run.
    let sorted = |m: &HashMap<String, f64>| {
        let mut v: Vec<(String, f64)> = m.iter().map(|(k, v)| (k.clone(), *v)).collect();
        v.sort_by(|a, b| a.0.cmp(&b.0));
        v
    };
    let mut bound_list: Vec<_> = bounds.into_iter().collect();
    bound_list.sort_by(|a, b| a.0.cmp(&b.0));
    for (name, (lo, hi)) in bound_list {
        params = params.with_bounds(&name, lo, hi).py()?;
    }
    for (name, v) in sorted(&start) {
        params = params.with_start_of(&name, v).py()?;
    }
    for (name, v) in sorted(&fixed) {
        params = params.with_fixed(&name, v).py()?;
    }
    if let Some(n) = max_iterations {
        params = params.with_max_iterations(n);
    }
    let curves = curves.as_array();
    let device = resolve(py, device)?;
    let device = for_job(
        &device,
        perfusion_core::job_estimate(curves.nrows(), curves.ncols(), method),
    );
    let stop = AtomicBool::new(false);
    let control = Control {
        progress: None,
        stop: Some(&stop),
    };
    let input = FitInput::new(curves, &problem);
    let (fits, info) = compute_interruptible(py, &stop, || {
        perfusion_core::fit_with(input, &params, &device, &control).py()
    })?;
    let names: Vec<&str> = model.params().iter().map(|p| p.name).collect();
    let values = PyDict::new(py);
    let errors = PyDict::new(py);
    for (i, name) in names.iter().enumerate() {
        values.set_item(name, fits.params.row(i).to_owned().into_pyarray(py))?;
        errors.set_item(name, fits.se.row(i).to_owned().into_pyarray(py))?;
    }
    let out = PyDict::new(py);
    out.set_item("params", values)?;
    out.set_item("se", errors)?;
    out.set_item("param_names", names)?;
    let units: Vec<&str> = model.params().iter().map(|p| p.unit).collect();
    out.set_item("units", units)?;
    out.set_item("sse", fits.sse.into_pyarray(py))?;
    out.set_item("r2", fits.r2.into_pyarray(py))?;
    out.set_item("iterations", fits.iterations.into_pyarray(py))?;
    out.set_item("status", fits.status.into_pyarray(py))?;
    let status_names: Vec<&str> = FitStatus::ALL.iter().map(|s| s.name()).collect();
    out.set_item("status_names", status_names)?;
    out.set_item("flags", fits.flags.into_pyarray(py))?;
    let flag_names = PyDict::new(py);
    for (bit, name) in Flags::ALL {
        flag_names.set_item(name, bit)?;
    }
    out.set_item("flag_bits", flag_names)?;
    out.set_item("model", model.name())?;
    out.set_item("method", method.name())?;
    out.set_item("precision", info.precision)?;
    out.set_item("device", info.device)?;
    Ok(out)
}

/// The model curve of `theta`; see `biogpu.perfusion.predict`.
#[pyfunction]
#[pyo3(signature = (t, aif, pif, model, theta))]
fn perfusion_predict<'py>(
    py: Python<'py>,
    t: Vec<f64>,
    aif: Vec<f64>,
    pif: Option<Vec<f64>>,
    model: &str,
    theta: Vec<f64>,
) -> PyResult<Bound<'py, numpy::PyArray1<f64>>> {
    let model = model.parse::<Model>().py()?;
    let problem = Problem::new(&t, &aif, pif.as_deref()).py()?;
    if theta.len() != model.params().len() {
        return Err(value_error(format!(
            "{model} has {} parameters ({}); got {}",
            model.params().len(),
            model
                .params()
                .iter()
                .map(|p| p.name)
                .collect::<Vec<_>>()
                .join(", "),
            theta.len()
        )));
    }
    let curve = compute(py, || perfusion_core::predict(&problem, model, &theta).py())?;
    Ok(curve.into_pyarray(py))
}

/// Simulated curves with known parameters; see `biogpu.perfusion.simulate`.
#[pyfunction]
#[pyo3(signature = (model, truth, nt, duration, cnr, voxels, seed))]
fn perfusion_simulate<'py>(
    py: Python<'py>,
    model: &str,
    truth: Vec<f64>,
    nt: usize,
    duration: f64,
    cnr: Option<f64>,
    voxels: usize,
    seed: u64,
) -> PyResult<Bound<'py, PyDict>> {
    let model = model.parse::<Model>().py()?;
    if truth.len() != model.params().len() {
        return Err(value_error(format!(
            "{model} has {} parameters; truth has {}",
            model.params().len(),
            truth.len()
        )));
    }
    let mut sim = Simulation::new(model, &truth)
        .with_nt(nt)
        .with_cnr(cnr)
        .with_voxels(voxels)
        .with_seed(seed);
    sim.duration_s = duration;
    let s = compute(py, || sim.run().py())?;
    let out = PyDict::new(py);
    out.set_item("t", s.problem.times().to_vec().into_pyarray(py))?;
    out.set_item("aif", s.problem.arterial().to_vec().into_pyarray(py))?;
    if let Some(p) = s.problem.portal() {
        out.set_item("pif", p.to_vec().into_pyarray(py))?;
    }
    out.set_item("curves", s.curves.into_pyarray(py))?;
    out.set_item("clean", s.clean.into_pyarray(py))?;
    Ok(out)
}

/// A population input function sampled at `t`; see `biogpu.perfusion.population_input`.
#[pyfunction]
#[pyo3(signature = (t, name, arrival_s))]
fn perfusion_population<'py>(
    py: Python<'py>,
    t: Vec<f64>,
    name: &str,
    arrival_s: Option<f64>,
) -> PyResult<(Bound<'py, numpy::PyArray1<f64>>, &'static str)> {
    let which = name.parse::<PopulationInput>().py()?;
    if t.is_empty() || t.iter().any(|v| !v.is_finite()) || t.windows(2).any(|w| w[1] <= w[0]) {
        return Err(value_error(
            "t: sample times in s, finite and increasing, at least one",
        ));
    }
    let arrival = arrival_s.unwrap_or(t[0]);
    if !arrival.is_finite() {
        return Err(value_error(format!("arrival_s {arrival}: a time in s")));
    }
    let compartment = match which.compartment() {
        Compartment::Blood => "blood",
        Compartment::Plasma => "plasma",
    };
    Ok((which.sample(&t, arrival).into_pyarray(py), compartment))
}

/// A DCE series from NIfTI or DICOM; see `biogpu.perfusion.read_dce`.
#[pyfunction]
#[pyo3(signature = (path, series))]
fn perfusion_read_dce<'py>(
    py: Python<'py>,
    path: std::path::PathBuf,
    series: Option<&str>,
) -> PyResult<Bound<'py, PyDict>> {
    let dce = compute(py, || read_dce_series(&path, series).py())?;
    let out = PyDict::new(py);
    let h = &dce.series.header;
    out.set_item("voxel_size", [h.pixdim[1], h.pixdim[2], h.pixdim[3]])?;
    out.set_item("data", dce.series.data.into_pyarray(py))?;
    out.set_item("times", dce.times.map(|t| t.into_pyarray(py)))?;
    let acq = dce.acquisition.unwrap_or_default();
    out.set_item("flip_angle_deg", acq.flip_angle_deg)?;
    out.set_item("tr_s", acq.tr_s)?;
    out.set_item("field_t", acq.field_t)?;
    Ok(out)
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(perfusion_models, m)?)?;
    m.add_function(wrap_pyfunction!(perfusion_fit, m)?)?;
    m.add_function(wrap_pyfunction!(perfusion_predict, m)?)?;
    m.add_function(wrap_pyfunction!(perfusion_simulate, m)?)?;
    m.add_function(wrap_pyfunction!(perfusion_population, m)?)?;
    m.add_function(wrap_pyfunction!(perfusion_read_dce, m)?)?;
    Ok(())
}
