//! Tetrahedral mesh with per-tetrahedron regions, outward face planes, face neighbours and
//! volumes, built once and validated so that transport code never checks geometry again.
//!
//! Tetrahedra are numbered from 1; index 0 of every per-tet array is a placeholder that
//! stands for "outside the mesh" (a neighbour of 0 means the face is on the boundary).
//! Face `i` of a tetrahedron is the face opposite its node `i`.

use crate::error::{Error, Result};
use rayon::prelude::*;

/// A validated tetrahedral mesh. Lengths are in the user's unit (mm in the benchmarks).
#[derive(Debug, Clone)]
pub struct Mesh {
    /// Node coordinates.
    pub nodes: Vec<[f64; 3]>,
    /// Node indices (0-based) per tetrahedron, positively oriented; `tets[0]` is unused.
    pub tets: Vec<[u32; 4]>,
    /// Region (material index, from 1) per tetrahedron; `regions[0] = 0` is outside.
    pub regions: Vec<u32>,
    /// Face planes `(nx, ny, nz, c)`: unit outward normal and offset, so that a point `x`
    /// is inside the face when `n . x <= c`.
    pub faces: Vec<[[f64; 4]; 4]>,
    /// Neighbour tetrahedron across each face; 0 = outside.
    pub neighbours: Vec<[u32; 4]>,
    /// Boundary triangle index of each face (`u32::MAX` for interior faces).
    pub boundary_index: Vec<[u32; 4]>,
    /// Boundary triangles as (tet, face).
    pub boundary: Vec<(u32, u8)>,
    /// Area of each boundary triangle.
    pub boundary_area: Vec<f64>,
    /// Volume per tetrahedron (`volumes[0] = 0`).
    pub volumes: Vec<f64>,
    /// Tetrahedron ids in [`Mesh::morton_order`], computed on load: a memory order for
    /// per-tet data that keeps neighbours close (the CPU transport packs the mesh in it; any
    /// permutation is correct, this one is fast).
    pub order: Vec<u32>,
}

/// A mesh read from a file, with what the reader left out or assumed (printed by the CLI).
#[derive(Debug, Clone)]
pub struct Imported {
    pub mesh: Mesh,
    /// Elements that are not 4-node tetrahedra (surface triangles, points, ...), not used.
    pub ignored: usize,
    /// What was ignored or assumed, one line each.
    pub notes: Vec<String>,
}

fn sub(a: [f64; 3], b: [f64; 3]) -> [f64; 3] {
    [a[0] - b[0], a[1] - b[1], a[2] - b[2]]
}
fn cross(a: [f64; 3], b: [f64; 3]) -> [f64; 3] {
    [
        a[1] * b[2] - a[2] * b[1],
        a[2] * b[0] - a[0] * b[2],
        a[0] * b[1] - a[1] * b[0],
    ]
}
pub(crate) fn dot(a: [f64; 3], b: [f64; 3]) -> f64 {
    a[0] * b[0] + a[1] * b[1] + a[2] * b[2]
}

/// Node triples of the four faces (face i opposite node i).
pub const FACE_NODES: [[usize; 3]; 4] = [[1, 2, 3], [0, 2, 3], [0, 1, 3], [0, 1, 2]];

impl Mesh {
    /// Build from nodes and 0-based tetrahedra with regions. Inverted tetrahedra are
    /// re-oriented; degenerate ones, bad node indices and faces shared by more than two
    /// tetrahedra are errors naming the element.
    ///
    /// ```
    /// use montecarlo_core::Mesh;
    /// let nodes = vec![[0.0, 0.0, 0.0], [1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]];
    /// let mesh = Mesh::new(nodes, vec![[0, 1, 2, 3]], vec![1])?;
    /// assert!((mesh.volumes[1] - 1.0 / 6.0).abs() < 1e-12);
    /// assert_eq!(mesh.boundary.len(), 4);
    /// # Ok::<(), montecarlo_core::Error>(())
    /// ```
    pub fn new(nodes: Vec<[f64; 3]>, tets: Vec<[u32; 4]>, regions: Vec<u32>) -> Result<Mesh> {
        if tets.len() != regions.len() {
            return Err(Error::Invalid(format!(
                "{} tetrahedra but {} regions",
                tets.len(),
                regions.len()
            )));
        }
        if tets.is_empty() {
            return Err(Error::Invalid("the mesh has no tetrahedra".into()));
        }
        if let Some(i) = nodes.iter().position(|p| p.iter().any(|v| !v.is_finite())) {
            return Err(Error::Invalid(format!(
                "node {} has a non-finite coordinate",
                i + 1
            )));
        }
        let (lo, hi) = bounds(&nodes);
        let scale = (0..3)
            .map(|k| hi[k] - lo[k])
            .fold(0.0, f64::max)
            .max(f64::MIN_POSITIVE);
        let n = tets.len();
        let mut out_tets = Vec::with_capacity(n + 1);
        out_tets.push([0; 4]);
        let mut volumes = vec![0.0; n + 1];
        let mut faces = vec![[[0.0; 4]; 4]; n + 1];
        for (i, t) in tets.iter().enumerate() {
            let id = i + 1;
            if let Some(&bad) = t.iter().find(|&&v| v as usize >= nodes.len()) {
                return Err(Error::BadTet {
                    tet: id,
                    why: format!(
                        "refers to node {} but the mesh has {} nodes",
                        bad + 1,
                        nodes.len()
                    ),
                });
            }
            let mut t = *t;
            let p = t.map(|v| nodes[v as usize]);
            let v6 = dot(sub(p[1], p[0]), cross(sub(p[2], p[0]), sub(p[3], p[0])));
            if v6.abs() <= 1e-12 * scale * scale * scale || !v6.is_finite() {
                return Err(Error::BadTet {
                    tet: id,
                    why: format!("has zero volume (nodes {:?})", t.map(|v| v + 1)),
                });
            }
            if v6 < 0.0 {
                t.swap(2, 3);
            }
            let p = t.map(|v| nodes[v as usize]);
            for (f, fn_) in FACE_NODES.iter().enumerate() {
                let (a, b, c) = (p[fn_[0]], p[fn_[1]], p[fn_[2]]);
                let nrm = cross(sub(b, a), sub(c, a));
                // Outward: away from the opposite node.
                let sign = if dot(nrm, sub(p[f], a)) > 0.0 {
                    -1.0
                } else {
                    1.0
                };
                let len = sign * dot(nrm, nrm).sqrt();
                let u = [nrm[0] / len, nrm[1] / len, nrm[2] / len];
                faces[id][f] = [u[0], u[1], u[2], dot(u, a)];
            }
            volumes[id] = v6.abs() / 6.0;
            out_tets.push(t);
        }
        // Face adjacency: one record per (tet, face) holding the face's sorted node triple
        // (96 bits) above 4 x tet + face (32 bits); after sorting, the two sides of an
        // interior face are adjacent and a triple found three or more times is non-manifold.
        if n >= 1 << 30 {
            return Err(Error::Invalid(format!(
                "{n} tetrahedra: at most 2^30 are supported"
            )));
        }
        let mut records: Vec<u128> = (1..=n)
            .into_par_iter()
            .flat_map_iter(|id| {
                let t = out_tets[id];
                FACE_NODES.iter().enumerate().map(move |(f, fn_)| {
                    let mut key = fn_.map(|k| t[k]);
                    key.sort_unstable();
                    u128::from(key[0]) << 96
                        | u128::from(key[1]) << 64
                        | u128::from(key[2]) << 32
                        | (4 * id + f) as u128
                })
            })
            .collect();
        records.par_sort_unstable();
        let mut neighbours = vec![[0u32; 4]; n + 1];
        let triple = |r: u128| r >> 32;
        let side = |r: u128| ((r as u32 >> 2) as usize, (r as u32 & 3) as usize);
        let mut i = 0;
        while i < records.len() {
            let mut j = i + 1;
            while j < records.len() && triple(records[j]) == triple(records[i]) {
                j += 1;
            }
            if j - i > 2 {
                let k = triple(records[i]);
                return Err(Error::NonManifold {
                    nodes: [(k >> 64) as u32 + 1, (k >> 32) as u32 + 1, k as u32 + 1],
                    count: j - i,
                });
            }
            if j - i == 2 {
                let ((a, fa), (b, fb)) = (side(records[i]), side(records[i + 1]));
                neighbours[a][fa] = b as u32;
                neighbours[b][fb] = a as u32;
            }
            i = j;
        }
        let mut boundary = Vec::new();
        let mut boundary_area = Vec::new();
        let mut boundary_index = vec![[u32::MAX; 4]; n + 1];
        for id in 1..=n {
            for f in 0..4 {
                if neighbours[id][f] == 0 {
                    boundary_index[id][f] = boundary.len() as u32;
                    boundary.push((id as u32, f as u8));
                    let fn_ = FACE_NODES[f];
                    let p = fn_.map(|k| nodes[out_tets[id][k] as usize]);
                    let c = cross(sub(p[1], p[0]), sub(p[2], p[0]));
                    boundary_area.push(0.5 * dot(c, c).sqrt());
                }
            }
        }
        let mut all_regions = Vec::with_capacity(n + 1);
        all_regions.push(0);
        all_regions.extend_from_slice(&regions);
        let mut mesh = Mesh {
            nodes,
            tets: out_tets,
            regions: all_regions,
            faces,
            neighbours,
            boundary_index,
            boundary,
            boundary_area,
            volumes,
            order: Vec::new(),
        };
        mesh.order = mesh.morton_order();
        Ok(mesh)
    }

    /// Number of tetrahedra (ids 1..=len).
    pub fn len(&self) -> usize {
        self.tets.len() - 1
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Highest region id used.
    pub fn max_region(&self) -> u32 {
        self.regions.iter().copied().max().unwrap_or(0)
    }

    /// Per region: its tetrahedra and their total volume, by region number.
    pub fn region_stats(&self) -> std::collections::BTreeMap<u32, (usize, f64)> {
        let mut regions = std::collections::BTreeMap::new();
        for t in 1..=self.len() {
            let e = regions.entry(self.regions[t]).or_insert((0usize, 0.0f64));
            e.0 += 1;
            e.1 += self.volumes[t];
        }
        regions
    }

    /// Axis-aligned bounds (min, max).
    pub fn bounds(&self) -> ([f64; 3], [f64; 3]) {
        bounds(&self.nodes)
    }

    /// Largest extent; tolerances scale with it.
    pub fn scale(&self) -> f64 {
        let (lo, hi) = self.bounds();
        (0..3).map(|k| hi[k] - lo[k]).fold(0.0, f64::max)
    }

    /// Area of face `f` (opposite node `f`) of tetrahedron `t`.
    pub fn face_area(&self, t: u32, f: usize) -> f64 {
        let p = FACE_NODES[f].map(|k| self.nodes[self.tets[t as usize][k] as usize]);
        let c = cross(sub(p[1], p[0]), sub(p[2], p[0]));
        0.5 * dot(c, c).sqrt()
    }

    /// The three nodes of face `f` (0..=3, opposite node `f`) of tetrahedron `t`.
    pub fn face_nodes(&self, t: u32, f: usize) -> [[f64; 3]; 3] {
        FACE_NODES[f].map(|k| self.nodes[self.tets[t as usize][k] as usize])
    }

    /// Centroid of face `f` of tetrahedron `t`.
    pub fn face_centroid(&self, t: u32, f: usize) -> [f64; 3] {
        let p = FACE_NODES[f].map(|k| self.nodes[self.tets[t as usize][k] as usize]);
        [0, 1, 2].map(|k| (p[0][k] + p[1][k] + p[2][k]) / 3.0)
    }

    /// Centroid of tetrahedron `t`.
    pub fn centroid(&self, t: u32) -> [f64; 3] {
        let p = self.tets[t as usize].map(|v| self.nodes[v as usize]);
        [0, 1, 2].map(|k| 0.25 * (p[0][k] + p[1][k] + p[2][k] + p[3][k]))
    }

    /// Tetrahedron ids (1-based) in Morton (Z-curve) order of their centroids on a
    /// 2^10-per-axis grid over the mesh bounds, ties kept in id order. Packing per-tet data
    /// in this order puts tetrahedra that are close in space close in memory (the CPU
    /// transport does; the GPU path may too); results are mapped back to mesh ids.
    pub fn morton_order(&self) -> Vec<u32> {
        let (lo, hi) = self.bounds();
        let scale = (0..3).map(|k| 1023.0 / (hi[k] - lo[k]).max(f64::MIN_POSITIVE));
        let scale: Vec<f64> = scale.collect();
        let spread = |mut x: u64| {
            // Put the 10 bits of x at every third position.
            x &= 0x3ff;
            x = (x | (x << 16)) & 0x0300_00ff;
            x = (x | (x << 8)) & 0x0300_f00f;
            x = (x | (x << 4)) & 0x030c_30c3;
            (x | (x << 2)) & 0x0924_9249
        };
        // Key in the high 32 bits, id in the low: one u64 sort.
        let mut keyed: Vec<u64> = (1..=self.len() as u32)
            .into_par_iter()
            .map(|t| {
                let c = self.centroid(t);
                let q = [0, 1, 2].map(|k| ((c[k] - lo[k]) * scale[k]).clamp(0.0, 1023.0) as u64);
                (spread(q[0]) | spread(q[1]) << 1 | spread(q[2]) << 2) << 32 | u64::from(t)
            })
            .collect();
        keyed.par_sort_unstable();
        keyed.into_iter().map(|k| k as u32).collect()
    }

    /// How far `p` lies outside tetrahedron `t` (<= 0 inside).
    pub fn outside_by(&self, t: u32, p: [f64; 3]) -> f64 {
        self.faces[t as usize]
            .iter()
            .map(|f| dot([f[0], f[1], f[2]], p) - f[3])
            .fold(f64::NEG_INFINITY, f64::max)
    }

    /// The tetrahedron holding `p`, or `None` when `p` is outside the mesh. When `dir` is
    /// given and `p` lies on a face, the tetrahedron that a step along `dir` enters wins, so
    /// a beam given on the surface starts inside. Linear scan: used once per source.
    pub fn locate(&self, p: [f64; 3], dir: Option<[f64; 3]>) -> Option<u32> {
        let tol = 1e-9 * self.scale().max(1e-300);
        let probe = dir.map_or(p, |d| {
            let e = 1e-7 * self.scale();
            [p[0] + e * d[0], p[1] + e * d[1], p[2] + e * d[2]]
        });
        let best = |q: [f64; 3]| {
            (1..=self.len() as u32)
                .map(|t| (t, self.outside_by(t, q)))
                .filter(|&(_, d)| d <= tol)
                .min_by(|a, b| a.1.total_cmp(&b.1))
                .map(|(t, _)| t)
        };
        best(probe).or_else(|| best(p))
    }

    /// Walk from `from` (a point inside tetrahedron `t`) in a straight line to `to`,
    /// returning the tetrahedron holding `to`, or `None` when the segment leaves the mesh.
    pub fn walk(&self, mut t: u32, from: [f64; 3], to: [f64; 3]) -> Option<u32> {
        let d = sub(to, from);
        let len = dot(d, d).sqrt();
        if len == 0.0 {
            return Some(t);
        }
        let u = [d[0] / len, d[1] / len, d[2] / len];
        let mut travelled = 0.0;
        for _ in 0..self.len() + 4 {
            let (h, f) = exit_face(&self.faces[t as usize], from_plus(from, u, travelled), u);
            if travelled + h >= len {
                return Some(t);
            }
            travelled += h;
            let next = self.neighbours[t as usize][f];
            if next == 0 {
                return None;
            }
            t = next;
        }
        None
    }
}

fn from_plus(p: [f64; 3], u: [f64; 3], s: f64) -> [f64; 3] {
    [p[0] + s * u[0], p[1] + s * u[1], p[2] + s * u[2]]
}

/// Distance along unit `d` from `p` to the first face the ray leaves through, and that face.
/// Faces whose normal does not point along `d` are never exits. Negative distances (point a
/// hair outside due to rounding) clamp to zero.
pub(crate) fn exit_face(faces: &[[f64; 4]; 4], p: [f64; 3], d: [f64; 3]) -> (f64, usize) {
    let mut best = f64::INFINITY;
    let mut face = 0;
    for (i, f) in faces.iter().enumerate() {
        let cos = f[0] * d[0] + f[1] * d[1] + f[2] * d[2];
        if cos > 0.0 {
            let h = (f[3] - (f[0] * p[0] + f[1] * p[1] + f[2] * p[2])) / cos;
            if h < best {
                best = h;
                face = i;
            }
        }
    }
    (best.max(0.0), face)
}

fn bounds(nodes: &[[f64; 3]]) -> ([f64; 3], [f64; 3]) {
    let mut lo = [f64::INFINITY; 3];
    let mut hi = [f64::NEG_INFINITY; 3];
    for p in nodes {
        for k in 0..3 {
            lo[k] = lo[k].min(p[k]);
            hi[k] = hi[k].max(p[k]);
        }
    }
    (lo, hi)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unit() -> Vec<[f64; 3]> {
        vec![
            [0.0, 0.0, 0.0],
            [1.0, 0.0, 0.0],
            [0.0, 1.0, 0.0],
            [0.0, 0.0, 1.0],
        ]
    }

    #[test]
    fn inverted_tet_is_reoriented_with_outward_normals() {
        let m = Mesh::new(unit(), vec![[0, 2, 1, 3]], vec![1]).unwrap();
        let centre = [0.25, 0.25, 0.25];
        for f in &m.faces[1] {
            assert!(dot([f[0], f[1], f[2]], centre) < f[3]);
        }
        assert!(m.outside_by(1, centre) < 0.0);
    }

    #[test]
    fn zero_volume_tet_is_named() {
        let mut n = unit();
        n[3] = [1.0, 1.0, 0.0];
        let e = Mesh::new(n, vec![[0, 1, 2, 3]], vec![1]).unwrap_err();
        assert!(e.to_string().contains("tetrahedron 1"), "{e}");
        assert!(e.to_string().contains("zero volume"), "{e}");
    }

    #[test]
    fn non_manifold_face_is_an_error() {
        let mut n = unit();
        n.push([0.0, 0.0, -1.0]);
        n.push([-1.0, -1.0, -1.0]);
        let e = Mesh::new(
            n,
            vec![[0, 1, 2, 3], [0, 1, 2, 4], [0, 1, 2, 5]],
            vec![1, 1, 1],
        )
        .unwrap_err();
        assert!(matches!(e, Error::NonManifold { .. }), "{e}");
    }

    #[test]
    fn bad_node_index_is_named() {
        let e = Mesh::new(unit(), vec![[0, 1, 2, 9]], vec![1]).unwrap_err();
        assert!(e.to_string().contains("node 10"), "{e}");
    }
}
