//! Readers and writers, one file per format: TIM-OS (`.mesh`, `.opt`, `.source`), MMC
//! (`node_*.dat`/`elem_*.dat` and its JSON input), Gmsh (`.msh`), VTK (`.vtk`/`.vtu`) and
//! the result files of a run (`summary.json`, VTK, CSV).
//!
//! Untrusted input: every reader checks each count it reads against a cap (the constants
//! below) and never reserves more than the bytes actually left in the file can fill, checks
//! that a file's counts and its data agree (no silently dropped or ignored records), rejects
//! non-finite coordinates, out-of-range node indices and zero-volume tetrahedra, and names the
//! file and the line (text) or byte offset (binary) in every error. Optical properties are
//! checked by [`crate::Material::validate`]: `mua`, `mus` finite and >= 0, `g` in (-1, 1), `n`
//! finite and >= 1.

pub mod gmsh;
pub mod mmc;
pub mod mmc_json;
pub mod results;
pub mod timos;
pub mod vtk;

use crate::error::{Error, Result};
use crate::model::mesh::{Imported, Mesh};
use std::path::Path;

/// The most tetrahedra a mesh file may announce: 2^30, the most [`Mesh::new`] supports.
pub const MAX_TETS: usize = 1 << 30;
/// The most nodes a mesh file may announce (node indices are 32-bit).
pub const MAX_NODES: usize = u32::MAX as usize;
/// The most regions (materials) a TIM-OS `.opt` file may announce.
pub const MAX_REGIONS: usize = 1 << 20;
/// The most sources a TIM-OS `.source` file may announce.
pub const MAX_SOURCES: usize = 1 << 20;

/// Check a count read from a file before anything is reserved for it: the count must be at
/// most `cap` (else the error says so; the caller adds the file and the line or offset), and
/// the capacity to reserve is bounded by the records of at least `min_bytes` each that fit
/// in the `left` bytes that follow (the last one may lack its separator). Returns (count,
/// capacity). A count larger than the capacity cannot be met by the data: reading the
/// records then fails at the first missing or malformed one, which names it.
pub(crate) fn check_count(
    what: &str,
    count: u64,
    cap: usize,
    min_bytes: usize,
    left: usize,
) -> std::result::Result<(usize, usize), String> {
    if count > cap as u64 {
        return Err(format!(
            "{what} {count} is above the limit of {cap} this reader accepts"
        ));
    }
    let fit = (left as u64 + 1) / min_bytes.max(1) as u64;
    Ok((count as usize, count.min(fit) as usize))
}

/// [`Mesh::new`] for a mesh read from `path`, with the file named in every error;
/// `tet_at(k)` says where tetrahedron `k` (1-based, in reading order) is in the file (`line
/// 12`, `element 7`, `cell 3`).
pub(crate) fn build_mesh(
    path: &Path,
    nodes: Vec<[f64; 3]>,
    tets: Vec<[u32; 4]>,
    regions: Vec<u32>,
    tet_at: impl Fn(usize) -> String,
) -> Result<Mesh> {
    Mesh::new(nodes, tets, regions).map_err(|e| match e {
        Error::BadTet { tet, why } => Error::Format {
            path: path.to_path_buf(),
            at: tet_at(tet),
            why: format!("tetrahedron {tet} (1-based) {why}"),
        },
        other => Error::Format {
            path: path.to_path_buf(),
            at: "mesh".into(),
            why: other.to_string(),
        },
    })
}

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
