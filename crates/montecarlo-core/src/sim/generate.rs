//! Mesh generators for the standard benchmarks: a box meshed as a regular grid with 5 or 6
//! tetrahedra per cell, layered slabs (a grid box whose regions follow z layers) and nested
//! spheres (a grid ball whose regions follow spherical shells: a layered head).

use crate::error::{Error, Result};
use crate::model::mesh::{FACE_NODES, Mesh};

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
    let (nodes, tets, regions) = grid_tets(xs, ys, zs, per_cell, |centre, _| Some(region(centre)))?;
    Mesh::new(nodes, tets, regions)
}

/// The nodes and tetrahedra of [`grid_mesh`] before validation, with `keep(cell centre, tet
/// centroid)` giving each tetrahedron's region, or `None` to leave it out (the spheres
/// generator classifies each tetrahedron by its own centroid, not its cell's centre). Nodes
/// used by no kept tetrahedron are dropped, so the node list stays as small as the mesh.
#[allow(clippy::type_complexity)]
fn grid_tets(
    xs: &[f64],
    ys: &[f64],
    zs: &[f64],
    per_cell: u32,
    keep: impl Fn([f64; 3], [f64; 3]) -> Option<u32>,
) -> Result<(Vec<[f64; 3]>, Vec<[u32; 4]>, Vec<u32>)> {
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
                let split: &[[usize; 4]] = if per_cell == 6 {
                    &SIX
                } else if (i + j + k) % 2 == 0 {
                    &FIVE_EVEN
                } else {
                    &FIVE_ODD
                };
                for t in split {
                    let tet = t.map(|v| c[v]);
                    let p = tet.map(|v| nodes[v as usize]);
                    let centroid =
                        [0, 1, 2].map(|a| 0.25 * (p[0][a] + p[1][a] + p[2][a] + p[3][a]));
                    if let Some(r) = keep(centre, centroid) {
                        tets.push(tet);
                        regions.push(r);
                    }
                }
            }
        }
    }
    if tets.len() < cells * per_cell as usize {
        let (n, t) = drop_unused_nodes(nodes, tets);
        return Ok((n, t, regions));
    }
    Ok((nodes, tets, regions))
}

/// `nodes` less those no tetrahedron uses, and `tets` renumbered to match (order kept).
fn drop_unused_nodes(
    nodes: Vec<[f64; 3]>,
    mut tets: Vec<[u32; 4]>,
) -> (Vec<[f64; 3]>, Vec<[u32; 4]>) {
    let mut new_id = vec![u32::MAX; nodes.len()];
    for t in &tets {
        for &v in t {
            new_id[v as usize] = 0;
        }
    }
    let mut kept = Vec::new();
    for (old, id) in new_id.iter_mut().enumerate() {
        if *id == 0 {
            *id = kept.len() as u32;
            kept.push(nodes[old]);
        }
    }
    for t in &mut tets {
        *t = t.map(|v| new_id[v as usize]);
    }
    (kept, tets)
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

/// Nested spheres about `centre` (a layered head, for example): `radii[i]` is the outer
/// radius of region `i + 1`, strictly decreasing, so region 1 is the outer shell and region
/// `radii.len()` the inner ball. The cube around the outer sphere is meshed as
/// [`box_mesh`] does (a grid of about `cell`, `per_cell` = 5 or 6 tetrahedra per cell);
/// each tetrahedron takes the region of its centroid's distance from `centre`, and those
/// whose centroid lies beyond `radii[0]` are left out. Classifying by centroid (not by the
/// cell's centre) keeps each shell's volume close to the sphere's (the errors of the
/// tetrahedra cut by a sphere largely cancel), and the surface is a staircase of grid faces
/// and cell diagonals inside the outer sphere. Neighbours and the boundary are rebuilt by
/// [`Mesh::new`] from the tetrahedra kept, so the mesh is conforming and closed.
///
/// The [`MAX_GENERATED_TETS`] cap applies to the grid around the outer sphere, of which
/// pi/6 (about 52%) is kept.
///
/// ```
/// use montecarlo_core::sim::generate::spheres_mesh;
/// let m = spheres_mesh([0.0; 3], &[10.0, 6.0], 1.0, 5)?;
/// let regions = m.region_stats();
/// let ball = 4.0 / 3.0 * std::f64::consts::PI * 6.0_f64.powi(3);
/// assert!((regions[&2].1 - ball).abs() < 0.05 * ball);
/// # Ok::<(), montecarlo_core::Error>(())
/// ```
pub fn spheres_mesh(centre: [f64; 3], radii: &[f64], cell: f64, per_cell: u32) -> Result<Mesh> {
    if radii.is_empty()
        || radii.iter().any(|&r| !(r > 0.0 && r.is_finite()))
        || radii.windows(2).any(|w| w[1] >= w[0])
    {
        return Err(Error::Invalid(format!(
            "sphere radii {radii:?} must be positive, finite and strictly decreasing \
             (radii[i] is the outer radius of region i + 1)"
        )));
    }
    if centre.iter().any(|c| !c.is_finite()) {
        return Err(Error::Invalid(format!(
            "sphere centre {centre:?} must be finite"
        )));
    }
    if !(cell > 0.0 && cell.is_finite()) {
        return Err(Error::Invalid(format!(
            "sphere cell {cell} must be positive and finite"
        )));
    }
    check_per_cell(per_cell)?;
    let outer = radii[0];
    let n = (2.0 * outer / cell).round().max(1.0);
    check_size(
        &format!(
            "spheres of outer radius {outer} with cell {cell} (the grid around the outer sphere)"
        ),
        [n; 3],
        per_cell,
    )?;
    let n = n as usize;
    let axis = |c: f64| planes(c - outer, c + outer, n);
    let (xs, ys, zs) = (axis(centre[0]), axis(centre[1]), axis(centre[2]));
    let (nodes, tets, regions) = grid_tets(&xs, &ys, &zs, per_cell, |_, p| {
        let d = [0, 1, 2].map(|k| p[k] - centre[k]);
        let r = (d[0] * d[0] + d[1] * d[1] + d[2] * d[2]).sqrt();
        // Region i + 1 for radii[i + 1] < r <= radii[i]: the count of radii >= r.
        let inside = radii.iter().take_while(|&&ri| r <= ri).count();
        (inside > 0).then_some(inside as u32)
    })?;
    if tets.is_empty() {
        return Err(Error::Invalid(format!(
            "cell {cell} is too coarse for a sphere of radius {outer}: no tetrahedron has its \
             centroid inside"
        )));
    }
    Mesh::new(nodes, tets, regions)
}

/// Where a ray from `from` along `dir` first meets the mesh surface, or `None` if it misses.
/// A beam source must start on or in the mesh; on a generated surface that is not flat (the
/// staircase of [`spheres_mesh`]) this finds the point to give it. Every boundary triangle is
/// tested (Moller-Trumbore), so it costs one pass over the surface.
///
/// ```
/// use montecarlo_core::sim::generate::{box_mesh, surface_entry};
/// let m = box_mesh([0.0; 3], [4.0; 3], 1.0, 5)?;
/// let p = surface_entry(&m, [1.1, 2.3, 9.0], [0.0, 0.0, -1.0]).unwrap();
/// assert!((p[2] - 4.0).abs() < 1e-12);
/// assert!(surface_entry(&m, [9.0, 9.0, 9.0], [0.0, 0.0, 1.0]).is_none());
/// # Ok::<(), montecarlo_core::Error>(())
/// ```
pub fn surface_entry(mesh: &Mesh, from: [f64; 3], dir: [f64; 3]) -> Option<[f64; 3]> {
    let sub = |a: [f64; 3], b: [f64; 3]| [a[0] - b[0], a[1] - b[1], a[2] - b[2]];
    let cross = |a: [f64; 3], b: [f64; 3]| {
        [
            a[1] * b[2] - a[2] * b[1],
            a[2] * b[0] - a[0] * b[2],
            a[0] * b[1] - a[1] * b[0],
        ]
    };
    let dot = |a: [f64; 3], b: [f64; 3]| a[0] * b[0] + a[1] * b[1] + a[2] * b[2];
    // Barycentric slack: a ray through a shared edge hits one of its two triangles.
    let eps = 1e-12;
    let mut best = f64::INFINITY;
    for &(t, f) in &mesh.boundary {
        let tet = mesh.tets[t as usize];
        let p = FACE_NODES[f as usize].map(|k| mesh.nodes[tet[k] as usize]);
        let (e1, e2) = (sub(p[1], p[0]), sub(p[2], p[0]));
        let h = cross(dir, e2);
        let det = dot(e1, h);
        if det.abs() < 1e-300 {
            continue;
        }
        let s = sub(from, p[0]);
        let u = dot(s, h) / det;
        let q = cross(s, e1);
        let v = dot(dir, q) / det;
        if u < -eps || v < -eps || u + v > 1.0 + eps {
            continue;
        }
        let dist = dot(e2, q) / det;
        if dist >= 0.0 && dist < best {
            best = dist;
        }
    }
    best.is_finite()
        .then(|| [0, 1, 2].map(|k| from[k] + best * dir[k]))
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

    fn shell_volume(outer: f64, inner: f64) -> f64 {
        4.0 / 3.0 * std::f64::consts::PI * (outer.powi(3) - inner.powi(3))
    }

    /// Each region's volume approaches its spherical shell's as the cell shrinks: the largest
    /// relative error over the three regions falls with the cell and is below 1.5% at a
    /// cell of 1/20 of the outer radius, 1/8 of the inner ball's (measured worst errors at
    /// cells 2, 1, 0.5: 7.4%, 0.47%, 0.53% with 5 tets per cell; 13%, 3.0%, 1.0% with 6,
    /// the inner ball being the worst; at 0.25: 0.15% and 0.44%).
    #[test]
    fn sphere_region_volumes_approach_the_shells() {
        let radii = [10.0, 7.0, 4.0];
        for per in [5, 6] {
            let mut errors = Vec::new();
            for cell in [2.0, 1.0, 0.5] {
                let m = spheres_mesh([0.3, -0.2, 0.1], &radii, cell, per).unwrap();
                let stats = m.region_stats();
                assert_eq!(stats.len(), 3, "cell {cell}: every shell has tetrahedra");
                let worst = (0..3)
                    .map(|i| {
                        let inner = radii.get(i + 1).copied().unwrap_or(0.0);
                        let want = shell_volume(radii[i], inner);
                        (stats[&(i as u32 + 1)].1 - want).abs() / want
                    })
                    .fold(0.0, f64::max);
                errors.push(worst);
            }
            assert!(
                errors[2] < errors[0] && errors[2] < 0.015,
                "{per} tets per cell: worst relative shell-volume error at cells 2, 1, 0.5: {errors:?}"
            );
        }
    }

    /// The spheres mesh is closed and conforming after the tetrahedra outside are removed:
    /// neighbours are mutual, the boundary encloses exactly the mesh volume (divergence
    /// theorem over the boundary triangles, which also checks their outward orientation),
    /// every tetrahedron's region follows its centroid's radius and no centroid lies outside.
    #[test]
    fn spheres_mesh_is_closed_conforming_and_classified_by_centroid() {
        let (centre, radii) = ([1.0, 2.0, 3.0], [6.0, 5.0, 2.5]);
        let m = spheres_mesh(centre, &radii, 0.7, 5).unwrap();
        for t in 1..=m.len() {
            for f in 0..4 {
                let n = m.neighbours[t][f] as usize;
                if n != 0 {
                    assert!(m.neighbours[n].contains(&(t as u32)), "tet {t} face {f}");
                }
            }
            let c = m.centroid(t as u32);
            let r = (0..3)
                .map(|k| (c[k] - centre[k]).powi(2))
                .sum::<f64>()
                .sqrt();
            let want = radii.iter().filter(|&&ri| r <= ri).count() as u32;
            assert!(want >= 1, "tet {t} at radius {r} is outside");
            assert_eq!(m.regions[t], want, "tet {t} at radius {r}");
        }
        let volume: f64 = m.volumes.iter().sum();
        let flux: f64 = m
            .boundary
            .iter()
            .zip(&m.boundary_area)
            .map(|(&(t, f), &a)| {
                let p = m.faces[t as usize][f as usize];
                // n . x is the plane's offset for any point x on the face.
                a * p[3]
            })
            .sum::<f64>()
            / 3.0;
        assert!((flux - volume).abs() < 1e-9 * volume, "{flux} vs {volume}");
        // Every node is used (the unused grid corners outside were dropped).
        let mut used = vec![false; m.nodes.len()];
        for t in &m.tets[1..] {
            for &v in t {
                used[v as usize] = true;
            }
        }
        assert!(used.iter().all(|&u| u), "unused nodes left in the mesh");
    }

    #[test]
    fn bad_spheres_are_clear_errors() {
        for (radii, cell, per, want) in [
            (vec![], 1.0, 5, "strictly decreasing"),
            (vec![5.0, 6.0], 1.0, 5, "strictly decreasing"),
            (vec![5.0, 5.0], 1.0, 5, "strictly decreasing"),
            (vec![5.0, -1.0], 1.0, 5, "positive"),
            (vec![5.0], 0.0, 5, "cell 0"),
            (vec![5.0], 1.0, 4, "5 or 6"),
            (vec![5.0], 1e-3, 5, "MAX_GENERATED_TETS"),
        ] {
            let e = spheres_mesh([0.0; 3], &radii, cell, per)
                .unwrap_err()
                .to_string();
            assert!(e.contains(want), "{radii:?} {cell} {per}: {e}");
        }
    }

    #[test]
    fn surface_entry_finds_the_first_boundary_crossing() {
        let m = spheres_mesh([0.0; 3], &[5.0], 1.0, 6).unwrap();
        let p = surface_entry(&m, [0.1, 0.2, 20.0], [0.0, 0.0, -1.0]).unwrap();
        // On the staircase: within a cell of the sphere, and a beam there starts inside.
        assert!(p[2] > 5.0 - 1.8 && p[2] <= 5.0, "{p:?}");
        assert!(m.locate(p, Some([0.0, 0.0, -1.0])).is_some());
        assert!(surface_entry(&m, [0.1, 0.2, 20.0], [0.0, 0.0, 1.0]).is_none());
    }
}
