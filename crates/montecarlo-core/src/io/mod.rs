//! Readers and writers, one file per format: TIM-OS (`.mesh`, `.opt`, `.source`), MMC
//! (`node_*.dat`/`elem_*.dat` and its JSON input), Gmsh (`.msh`), VTK (`.vtk`/`.vtu`) and
//! the result files of a run (`summary.json`, VTK, CSV).

pub mod gmsh;
pub mod mmc;
pub mod mmc_json;
pub mod results;
pub mod timos;
pub mod vtk;

use crate::error::{Error, Result};
use crate::model::mesh::Imported;
use std::path::Path;

/// Read a mesh file by its extension: Gmsh `.msh`, VTK `.vtk`/`.vtu` (`region_array`: the
/// cell array holding regions, None for the defaults of [`vtk::REGION_ARRAYS`]) or TIM-OS
/// `.mesh`.
pub fn read_mesh(path: &Path, region_array: Option<&str>) -> Result<Imported> {
    let ext = path
        .extension()
        .and_then(|e| e.to_str())
        .unwrap_or("")
        .to_ascii_lowercase();
    match ext.as_str() {
        "msh" => gmsh::read_gmsh(path),
        "vtk" | "vtu" => vtk::read_vtk(path, region_array),
        "mesh" => Ok(Imported {
            mesh: timos::read_mesh(path)?,
            ignored: 0,
            notes: Vec::new(),
        }),
        other => Err(Error::Invalid(format!(
            "{}: unknown mesh extension `{other}` (.msh, .vtk, .vtu, .mesh)",
            path.display()
        ))),
    }
}
