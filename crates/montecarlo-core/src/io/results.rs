//! The result files of a run: `summary.json` always; `result.vtu` / `result.vtk`,
//! `tets.csv`, `exitance.csv`, `faces.csv` and `gates.csv` as the simulation's `outputs`
//! ask, and `detected.npy` / `detected.csv` / `detectors.csv` with detectors. Units: absorbed weight per photon; fluence, exitance, face fluence and current per
//! length^2 per photon; gate fluence integrated over the gate.

use crate::error::{Error, Result};
use crate::io::vtk;
use crate::model::detector::DetectedPhoton;
use crate::model::simulation::Simulation;
use crate::model::tally::McResult;
use std::fmt::Write as _;
use std::path::Path;

/// The files [`write()`] writes for `sim`, in the order it writes them (so a caller can
/// check each name before anything is written).
pub fn file_names(sim: &Simulation) -> Vec<&'static str> {
    let mut names = vec!["summary.json"];
    if sim.outputs.vtk {
        names.push("result.vtu");
    }
    if sim.outputs.vtk_legacy {
        names.push("result.vtk");
    }
    if sim.outputs.csv {
        names.extend(["tets.csv", "exitance.csv"]);
        if !sim.faces.is_empty() {
            names.push("faces.csv");
        }
        if sim.gates.is_some_and(|g| g.count > 0) {
            names.push("gates.csv");
        }
    }
    if sim.outputs.detection.is_some() {
        names.push("detected.npy");
        if sim.outputs.csv {
            names.extend(["detected.csv", "detectors.csv"]);
        }
    }
    names
}

/// Column names of `detected.npy` / `detected.csv` for `sim` (MCX's `detp` fields: detector
/// id, photon index (replay seed), exit weight, time of flight (ns), scattering count, exit
/// point (mm), exit direction, partial pathlength per region (mm), and momentum transfer per
/// region when asked for).
pub fn detected_columns(sim: &Simulation) -> Vec<String> {
    let mut cols: Vec<String> = [
        "detector", "photon", "weight", "time_ns", "scatters", "x", "y", "z", "ux", "uy", "uz",
    ]
    .map(String::from)
    .to_vec();
    let regions = sim.mesh.max_region().max(sim.optics.materials.len() as u32);
    cols.extend((1..=regions).map(|r| format!("ppath_{r}")));
    if sim.outputs.detection.as_ref().is_some_and(|d| d.momentum) {
        cols.extend((1..=regions).map(|r| format!("momentum_{r}")));
    }
    cols
}

/// The detected photons of `r` as rows of [`detected_columns`].
pub fn detected_rows(r: &McResult) -> Vec<Vec<f64>> {
    r.tally
        .detectors
        .photons
        .iter()
        .map(|d| {
            let mut row = vec![
                f64::from(d.detector),
                d.photon as f64,
                d.weight,
                d.time_ns,
                f64::from(d.scatters),
            ];
            row.extend(d.pos);
            row.extend(d.dir);
            row.extend(&d.ppath);
            row.extend(&d.momentum);
            row
        })
        .collect()
}

/// The detected photons of a `detected.npy` written by [`write()`]: detector, photon index,
/// weight, time, scatterings, exit point and direction, then the partial pathlengths (and
/// momentum transfers), as [`detected_columns`] lists them; `regions` says how many
/// pathlength columns follow the first eleven (momentum columns, if any, after them).
pub fn read_detected(path: &Path, regions: usize) -> Result<Vec<DetectedPhoton>> {
    let bad = |why: String| Error::Invalid(format!("{}: {why}", path.display()));
    let table: ndarray::Array2<f64> = ndarray_npy::read_npy(path).map_err(|e| {
        bad(format!(
            "not a 2-D float64 .npy table of detected photons ({e})"
        ))
    })?;
    let cols = table.ncols();
    if cols != 11 + regions && cols != 11 + 2 * regions {
        return Err(bad(format!(
            "{cols} columns; detected photons of a {regions}-region simulation have {} (or {} with momentum)",
            11 + regions,
            11 + 2 * regions
        )));
    }
    let whole = |v: f64, max: f64, what: &str, i: usize| -> Result<f64> {
        if v.is_finite() && v >= 0.0 && v.fract() == 0.0 && v <= max {
            Ok(v)
        } else {
            Err(bad(format!(
                "row {i}: {what} {v} is not a whole number in 0..={max}"
            )))
        }
    };
    table
        .rows()
        .into_iter()
        .enumerate()
        .map(|(i, r)| {
            Ok(DetectedPhoton {
                detector: whole(r[0], f64::from(u32::MAX), "detector", i)? as u32,
                photon: whole(r[1], 2f64.powi(53), "photon index", i)? as u64,
                weight: r[2],
                time_ns: r[3],
                scatters: whole(r[4], f64::from(u32::MAX), "scatterings", i)? as u32,
                pos: [r[5], r[6], r[7]],
                dir: [r[8], r[9], r[10]],
                ppath: r.iter().skip(11).take(regions).copied().collect(),
                momentum: r.iter().skip(11 + regions).copied().collect(),
            })
        })
        .collect()
}

/// The summary of `r`: its [`crate::Summary`] with the mesh size, seed, units, mesh notes,
/// and per tallied plane its faces, area, mean fluence and net current.
pub fn summary_json(sim: &Simulation, r: &McResult) -> serde_json::Value {
    let gates = r.tally.gates();
    let gate_width = sim.gates.map_or(0.0, |g| g.width_ns);
    // A struct of numbers, strings and options: serialising it cannot fail.
    let mut summary = serde_json::to_value(&r.summary).unwrap_or_default();
    summary["tetrahedra"] = sim.mesh.len().into();
    summary["boundary_triangles"] = sim.mesh.boundary.len().into();
    summary["seed"] = sim.params.seed.into();
    summary["units"] = "absorbed: weight per photon; fluence, exitance, face fluence and current: 1/length^2 per photon; gate fluence: integrated over the gate".into();
    if !sim.notes.is_empty() {
        summary["mesh_notes"] = sim.notes.clone().into();
    }
    if !sim.outputs.planes.is_empty() {
        let face_fluence = r.face_fluence(&sim.faces);
        let face_current = r.face_current(&sim.faces);
        let planes: Vec<serde_json::Value> = sim
            .outputs
            .planes
            .iter()
            .enumerate()
            .map(|(p, pl)| {
                let (mut area, mut fl, mut cur, mut faces) = (0.0, 0.0, 0.0, 0usize);
                for i in 0..sim.faces.len() {
                    if sim.faces.plane[i] == Some(p as u32) {
                        let a = sim.faces.areas[i];
                        area += a;
                        fl += face_fluence[i] * a;
                        cur += face_current[i] * a;
                        faces += 1;
                    }
                }
                serde_json::json!({
                    "point": pl.point, "normal": pl.normal, "faces": faces, "area": area,
                    "mean_fluence": fl / area, "net_current": cur,
                })
            })
            .collect();
        summary["planes"] = planes.into();
    }
    if gates > 0 {
        summary["gate_width_ns"] = gate_width.into();
    }
    if let Some(det) = &sim.outputs.detection {
        let d = &r.tally.detectors;
        let n = r.tally.photons.max(1) as f64;
        let per: Vec<serde_json::Value> = det
            .detectors
            .iter()
            .enumerate()
            .map(|(k, spec)| {
                let mut v = serde_json::json!({
                    "pos": spec.pos, "radius": spec.radius,
                    "photons": d.count.get(k).copied().unwrap_or(0),
                    "weight": d.weight.get(k).copied().unwrap_or(0.0) / n,
                });
                if gates > 0 && !d.tpsf.is_empty() {
                    let tpsf: Vec<f64> = d.tpsf[k * gates..(k + 1) * gates]
                        .iter()
                        .map(|w| w / n)
                        .collect();
                    v["tpsf"] = tpsf.into();
                }
                v
            })
            .collect();
        summary["detectors"] = per.into();
        summary["detected_records"] = d.photons.len().into();
        summary["detected_dropped"] = d.dropped.into();
        summary["detected_columns"] = detected_columns(sim).into();
    }
    summary
}

fn write_text(path: &Path, text: &str) -> Result<()> {
    std::fs::write(path, text).map_err(|e| Error::io(path, e))
}

/// Write the files of [`file_names`] into the folder `dir` (which must exist), replacing
/// files of those names.
pub fn write(dir: &Path, sim: &Simulation, r: &McResult) -> Result<()> {
    let absorbed = r.absorbed();
    let fluence = r.fluence(&sim.mesh, &sim.optics);
    let gates = r.tally.gates();
    let gate_width = sim.gates.map_or(0.0, |g| g.width_ns);
    let summary = summary_json(sim, r);
    let path = dir.join("summary.json");
    let text = serde_json::to_string_pretty(&summary).map_err(|source| Error::Json {
        path: path.clone(),
        source,
    })?;
    write_text(&path, &(text + "\n"))?;
    let gated: Vec<(String, Vec<f64>)> = (0..gates)
        .map(|g| {
            (
                format!("fluence_gate_{g:03}"),
                r.gated_fluence(g, &sim.mesh, &sim.optics),
            )
        })
        .collect();
    let mut cells: Vec<(&str, &[f64])> = vec![("absorbed", &absorbed), ("fluence", &fluence)];
    for (name, v) in &gated {
        cells.push((name, v));
    }
    if sim.outputs.vtk {
        vtk::write_vtu(&dir.join("result.vtu"), &sim.mesh, &cells)?;
    }
    if sim.outputs.vtk_legacy {
        vtk::write_vtk(&dir.join("result.vtk"), &sim.mesh, &cells)?;
    }
    if sim.outputs.csv {
        // Writing into a String cannot fail.
        let mut w = String::new();
        let _ = writeln!(w, "tet,region,volume,absorbed,fluence");
        for t in 1..=sim.mesh.len() {
            let _ = writeln!(
                w,
                "{t},{},{:e},{:e},{:e}",
                sim.mesh.regions[t],
                sim.mesh.volumes[t],
                absorbed[t - 1],
                fluence[t - 1]
            );
        }
        write_text(&dir.join("tets.csv"), &w)?;
        let mut w = String::new();
        let _ = writeln!(w, "triangle,tet,face,area,exitance");
        for (i, (e, &(t, f))) in r
            .exitance(&sim.mesh)
            .iter()
            .zip(&sim.mesh.boundary)
            .enumerate()
        {
            let _ = writeln!(w, "{i},{t},{f},{:e},{e:e}", sim.mesh.boundary_area[i]);
        }
        write_text(&dir.join("exitance.csv"), &w)?;
        if !sim.faces.is_empty() {
            let face_fluence = r.face_fluence(&sim.faces);
            let face_current = r.face_current(&sim.faces);
            let mut w = String::new();
            let _ = writeln!(w, "index,tet,face,plane,x,y,z,area,fluence,current");
            for (i, &(t, f)) in sim.faces.faces.iter().enumerate() {
                let c = sim.mesh.face_centroid(t, f as usize);
                let plane = sim.faces.plane[i].map_or(-1, i64::from);
                let _ = writeln!(
                    w,
                    "{i},{t},{f},{plane},{},{},{},{:e},{:e},{:e}",
                    c[0], c[1], c[2], sim.faces.areas[i], face_fluence[i], face_current[i]
                );
            }
            write_text(&dir.join("faces.csv"), &w)?;
        }
        if gates > 0 {
            let mut w = String::new();
            let _ = writeln!(w, "gate,start_ns,end_ns,absorbed");
            for (g, a) in r.summary.absorbed_per_gate.iter().flatten().enumerate() {
                let _ = writeln!(
                    w,
                    "{g},{},{},{a:e}",
                    g as f64 * gate_width,
                    (g + 1) as f64 * gate_width
                );
            }
            write_text(&dir.join("gates.csv"), &w)?;
        }
    }
    if sim.outputs.detection.is_some() {
        write_detected(dir, sim, r, gates, gate_width)?;
    }
    Ok(())
}

/// `detected.npy` (f64, one row per detected photon, columns [`detected_columns`]), and
/// with CSV output `detected.csv` (the same table) and `detectors.csv` (per detector and
/// gate: detected weight per launched photon, the TPSF; one row per detector without gates).
fn write_detected(
    dir: &Path,
    sim: &Simulation,
    r: &McResult,
    gates: usize,
    gate_width: f64,
) -> Result<()> {
    let cols = detected_columns(sim);
    let rows = detected_rows(r);
    let flat: Vec<f64> = rows.iter().flatten().copied().collect();
    let table = ndarray::Array2::from_shape_vec((rows.len(), cols.len()), flat)
        .map_err(|e| Error::Invalid(format!("detected photons table: {e}")))?;
    let path = dir.join("detected.npy");
    ndarray_npy::write_npy(&path, &table)
        .map_err(|e| Error::io(&path, std::io::Error::other(e.to_string())))?;
    if !sim.outputs.csv {
        return Ok(());
    }
    let mut w = String::new();
    let _ = writeln!(w, "{}", cols.join(","));
    for row in &rows {
        let line: Vec<String> = row.iter().map(|v| format!("{v}")).collect();
        let _ = writeln!(w, "{}", line.join(","));
    }
    write_text(&dir.join("detected.csv"), &w)?;
    let d = &r.tally.detectors;
    let n = r.tally.photons.max(1) as f64;
    let mut w = String::new();
    let _ = writeln!(w, "detector,gate,start_ns,end_ns,photons,weight");
    for k in 0..d.count.len() {
        if gates == 0 || d.tpsf.is_empty() {
            let _ = writeln!(w, "{},,,,{},{:e}", k + 1, d.count[k], d.weight[k] / n);
        } else {
            for g in 0..gates {
                let _ = writeln!(
                    w,
                    "{},{g},{},{},,{:e}",
                    k + 1,
                    g as f64 * gate_width,
                    (g + 1) as f64 * gate_width,
                    d.tpsf[k * gates + g] / n
                );
            }
        }
    }
    write_text(&dir.join("detectors.csv"), &w)?;
    Ok(())
}
