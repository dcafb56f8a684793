//! Mesh generators for the standard benchmarks: a box meshed as a regular grid with 5 or 6
//! tetrahedra per cell, and layered slabs (a grid box whose regions follow z layers).

use crate::error::{Error, Result};
use crate::model::mesh::Mesh;

/// The most tetrahedra a generator builds: 50 million (the mesh alone takes about 250 bytes a
/// tetrahedron, 12 GB). A cell size that would give more is an error saying how many it
/// would give.
pub const MAX_GENERATED_TETS: usize = 50_000_000;

fn check_per_cell(per_cell: u32) -> Result<()> {
    if per_cell == 5 || per_cell == 6 {
        Ok(())
    } else {
        Err(Error::Invalid(format!(
            "tetrahedra per cell must be 5 or 6, not {per_cell}"
        )))
    }
}

/// Check that `cells` (per axis, as reals so that nothing overflows) x `per_cell` tetrahedra
/// stay within [`MAX_GENERATED_TETS`]; `what` says where the cell counts came from.
fn check_size(what: &str, cells: [f64; 3], per_cell: u32) -> Result<()> {
    let tets = cells.iter().product::<f64>() * f64::from(per_cell);
    if tets.is_finite() && tets <= MAX_GENERATED_TETS as f64 {
        return Ok(());
    }
    Err(Error::Invalid(format!(
        "{what} gives {} x {} x {} cells x {per_cell} = {tets:.3e} tetrahedra, above the cap of \
         {MAX_GENERATED_TETS} (MAX_GENERATED_TETS): use a coarser grid",
        cells[0], cells[1], cells[2]
    )))
}

/// Corner offsets of a grid cell, indexed `i + 2j + 4k`.
const CORNER: [[usize; 3]; 8] = [
    [0, 0, 0],
    [1, 0, 0],
    [0, 1, 0],
    [1, 1, 0],
    [0, 0, 1],
    [1, 0, 1],
    [0, 1, 1],
    [1, 1, 1],
];
/// Five tetrahedra per cell; the odd-parity cell uses the mirrored split so that the face
/// diagonals of neighbouring cells agree (the mesh is conforming).
const FIVE_EVEN: [[usize; 4]; 5] = [
    [1, 2, 4, 7],
    [0, 1, 2, 4],
    [3, 1, 2, 7],
    [5, 1, 4, 7],
    [6, 2, 4, 7],
];
const FIVE_ODD: [[usize; 4]; 5] = [
    [0, 3, 5, 6],
    [1, 0, 3, 5],
    [2, 0, 3, 6],
    [4, 0, 5, 6],
    [7, 3, 5, 6],
];
/// Six tetrahedra around the main diagonal 0-7 (Kuhn split; conforming without parity).
const SIX: [[usize; 4]; 6] = [
    [0, 1, 3, 7],
    [0, 1, 5, 7],
    [0, 2, 3, 7],
    [0, 2, 6, 7],
    [0, 4, 5, 7],
    [0, 4, 6, 7],
];

/// Mesh the rectilinear grid with node planes `xs`, `ys`, `zs` (each increasing, at least
/// two values) into `per_cell` (5 or 6) tetrahedra per cell; `region(centre)` gives each
/// cell's region.
pub fn grid_mesh(
    xs: &[f64],
    ys: &[f64],
    zs: &[f64],
    per_cell: u32,
    region: impl Fn([f64; 3]) -> u32,
) -> Result<Mesh> {
    for (name, v) in [("x", xs), ("y", ys), ("z", zs)] {
        if v.len() < 2 || v.windows(2).any(|w| w[1] <= w[0] || !w[1].is_finite()) {
            return Err(Error::Invalid(format!(
                "grid {name} planes must be at least two increasing finite values"
            )));
        }
    }
    check_per_cell(per_cell)?;
    let (nx, ny, nz) = (xs.len(), ys.len(), zs.len());
    check_size(
        "the grid",
        [nx - 1, ny - 1, nz - 1].map(|n| n as f64),
        per_cell,
    )?;
    let node = |i: usize, j: usize, k: usize| (i + nx * (j + ny * k)) as u32;
    let mut nodes = Vec::with_capacity(nx * ny * nz);
    for &z in zs {
        for &y in ys {
            for &x in xs {
                nodes.push([x, y, z]);
            }
        }
    }
    let cells = (nx - 1) * (ny - 1) * (nz - 1);
    let mut tets = Vec::with_capacity(cells * per_cell as usize);
    let mut regions = Vec::with_capacity(tets.capacity());
    for k in 0..nz - 1 {
        for j in 0..ny - 1 {
            for i in 0..nx - 1 {
                let c = CORNER.map(|o| node(i + o[0], j + o[1], k + o[2]));
                let centre = [
                    0.5 * (xs[i] + xs[i + 1]),
                    0.5 * (ys[j] + ys[j + 1]),
                    0.5 * (zs[k] + zs[k + 1]),
                ];
                let r = region(centre);
                let split: &[[usize; 4]] = if per_cell == 6 {
                    &SIX
                } else if (i + j + k) % 2 == 0 {
                    &FIVE_EVEN
                } else {
                    &FIVE_ODD
                };
                for t in split {
                    tets.push(t.map(|v| c[v]));
                    regions.push(r);
                }
            }
        }
    }
    Mesh::new(nodes, tets, regions)
}

/// `n + 1` evenly spaced planes from `a` to `b`.
pub fn planes(a: f64, b: f64, n: usize) -> Vec<f64> {
    (0..=n).map(|i| a + (b - a) * i as f64 / n as f64).collect()
}

/// A box `[0, size]^3`-style cube from `origin` with edge `size` on a grid of `cell`, one
/// region. The cube60 benchmark is `box_mesh([0.;3], [60.;3], 2.0, 5)` (135,000 tets).
///
/// ```
/// let m = montecarlo_core::sim::generate::box_mesh([0.0; 3], [4.0; 3], 2.0, 5)?;
/// assert_eq!(m.len(), 8 * 5);
/// # Ok::<(), montecarlo_core::Error>(())
/// ```
pub fn box_mesh(origin: [f64; 3], size: [f64; 3], cell: f64, per_cell: u32) -> Result<Mesh> {
    if !(cell > 0.0 && cell.is_finite()) || size.iter().any(|&s| !(s > 0.0 && s.is_finite())) {
        return Err(Error::Invalid(format!(
            "box size {size:?} and cell {cell} must be positive and finite"
        )));
    }
    if origin.iter().any(|o| !o.is_finite()) {
        return Err(Error::Invalid(format!(
            "box origin {origin:?} must be finite"
        )));
    }
    check_per_cell(per_cell)?;
    let cells = size.map(|s| (s / cell).round().max(1.0));
    check_size(
        &format!("box size {size:?} with cell {cell}"),
        cells,
        per_cell,
    )?;
    let n = cells.map(|c| c as usize);
    grid_mesh(
        &planes(origin[0], origin[0] + size[0], n[0]),
        &planes(origin[1], origin[1] + size[1], n[1]),
        &planes(origin[2], origin[2] + size[2], n[2]),
        per_cell,
        |_| 1,
    )
}

/// Layered slabs: a `width x width` square centred on the z axis, layers stacked from
/// z = 0 with the given thicknesses (region i+1 for layer i), `lateral` cells across and
/// `per_layer` cells through each layer.
pub fn slab_mesh(
    width: f64,
    thickness: &[f64],
    lateral: usize,
    per_layer: usize,
    per_cell: u32,
) -> Result<Mesh> {
    if thickness.is_empty()
        || thickness.iter().any(|&t| !(t > 0.0 && t.is_finite()))
        || !(width > 0.0 && width.is_finite())
    {
        return Err(Error::Invalid(
            "slab width and every layer thickness must be positive and finite".into(),
        ));
    }
    check_per_cell(per_cell)?;
    let lat = lateral.max(1) as f64;
    check_size(
        &format!(
            "a slab of {} layers with {lateral} lateral cells and {per_layer} cells per layer",
            thickness.len()
        ),
        [lat, lat, thickness.len() as f64 * per_layer.max(1) as f64],
        per_cell,
    )?;
    let mut zs = vec![0.0];
    let mut tops = Vec::new();
    for &t in thickness {
        let z0 = *zs.last().unwrap();
        for i in 1..=per_layer.max(1) {
            zs.push(z0 + t * i as f64 / per_layer.max(1) as f64);
        }
        tops.push(z0 + t);
    }
    let xy = planes(-0.5 * width, 0.5 * width, lateral.max(1));
    grid_mesh(&xy, &xy, &zs, per_cell, |c| {
        tops.iter()
            .position(|&top| c[2] < top)
            .unwrap_or(tops.len() - 1) as u32
            + 1
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check_closed(m: &Mesh, area: f64, volume: f64) {
        let a: f64 = m.boundary_area.iter().sum();
        let v: f64 = m.volumes.iter().sum();
        assert!((a - area).abs() < 1e-9 * area, "area {a} vs {area}");
        assert!((v - volume).abs() < 1e-9 * volume, "volume {v} vs {volume}");
    }

    #[test]
    fn five_and_six_tet_boxes_are_conforming() {
        for per in [5, 6] {
            let m = box_mesh([0.0; 3], [3.0, 2.0, 4.0], 1.0, per).unwrap();
            assert_eq!(m.len(), 24 * per as usize);
            // Only the outer surface is boundary: interior faces all matched.
            check_closed(&m, 2.0 * (6.0 + 12.0 + 8.0), 24.0);
        }
    }

    #[test]
    fn cube60_has_135000_tets() {
        let m = box_mesh([0.0; 3], [60.0; 3], 2.0, 5).unwrap();
        assert_eq!(m.len(), 135_000);
        check_closed(&m, 6.0 * 3600.0, 216_000.0);
    }

    #[test]
    fn slab_regions_follow_layers() {
        let m = slab_mesh(2.0, &[0.1, 0.2], 2, 2, 6).unwrap();
        for t in 1..=m.len() {
            let zc: f64 = m.tets[t]
                .iter()
                .map(|&v| m.nodes[v as usize][2])
                .sum::<f64>()
                / 4.0;
            assert_eq!(m.regions[t], if zc < 0.1 { 1 } else { 2 });
        }
    }
}
