//! The result files of a run: `summary.json` always; `result.vtu` / `result.vtk`,
//! `tets.csv`, `exitance.csv`, `faces.csv` and `gates.csv` as the simulation's `outputs`
//! ask. Units: absorbed weight per photon; fluence, exitance, face fluence and current per
//! length^2 per photon; gate fluence integrated over the gate.

use crate::error::{Error, Result};
use crate::io::vtk;
use crate::model::simulation::Simulation;
use crate::model::tally::McResult;
use std::fmt::Write as _;
use std::path::Path;

/// The files [`write`] writes for `sim`, in the order it writes them (so a caller can
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
    names
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
    Ok(())
}
