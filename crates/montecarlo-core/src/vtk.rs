//! Legacy VTK writer (ASCII unstructured grid) with per-tetrahedron cell data, for ParaView.

use crate::error::{Error, Result};
use crate::mesh::Mesh;
use std::io::Write;
use std::path::Path;

/// Write `mesh` with the named per-tetrahedron arrays (each `mesh.len()` long, tet 1 first)
/// and the region as cell data.
pub fn write_vtk(path: &Path, mesh: &Mesh, cell_data: &[(&str, &[f64])]) -> Result<()> {
    for (name, v) in cell_data {
        if v.len() != mesh.len() {
            return Err(Error::Invalid(format!(
                "cell array `{name}` has {} values for {} tetrahedra",
                v.len(),
                mesh.len()
            )));
        }
    }
    let file = std::fs::File::create(path).map_err(|e| Error::io(path, e))?;
    let mut w = std::io::BufWriter::new(file);
    let io = |e| Error::io(path, e);
    let n = mesh.len();
    writeln!(
        w,
        "# vtk DataFile Version 3.0\nbiogpu mc\nASCII\nDATASET UNSTRUCTURED_GRID"
    )
    .map_err(io)?;
    writeln!(w, "POINTS {} double", mesh.nodes.len()).map_err(io)?;
    for p in &mesh.nodes {
        writeln!(w, "{} {} {}", p[0], p[1], p[2]).map_err(io)?;
    }
    writeln!(w, "CELLS {n} {}", 5 * n).map_err(io)?;
    for t in &mesh.tets[1..] {
        writeln!(w, "4 {} {} {} {}", t[0], t[1], t[2], t[3]).map_err(io)?;
    }
    writeln!(w, "CELL_TYPES {n}").map_err(io)?;
    for _ in 0..n {
        writeln!(w, "10").map_err(io)?;
    }
    writeln!(
        w,
        "CELL_DATA {n}\nSCALARS region int 1\nLOOKUP_TABLE default"
    )
    .map_err(io)?;
    for r in &mesh.regions[1..] {
        writeln!(w, "{r}").map_err(io)?;
    }
    for (name, v) in cell_data {
        writeln!(w, "SCALARS {name} double 1\nLOOKUP_TABLE default").map_err(io)?;
        for x in *v {
            writeln!(w, "{x:e}").map_err(io)?;
        }
    }
    w.flush().map_err(io)
}
