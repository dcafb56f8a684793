//! Light sources: where packets start and in which direction. The user gives points; the
//! start tetrahedron is found once per source (a beam given on the surface starts in the
//! tetrahedron it enters). Several sources share the photons in proportion to `power`.
//!
//! Specular reflection at launch: a beam (pencil, cone, disk, Gaussian) whose start point
//! lies on the mesh surface, entering from outside, first crosses the step from the outside
//! index to its start region's; the normal-incidence Fresnel reflectance
//! Rsp = ((n_out - n1) / (n_out + n1))^2 of that step ([`Placed::rsp`]) never enters the
//! medium (MCML's and MCX's rule). Isotropic, line and volume sources emit inside the medium,
//! and surface sources model light already inside it (a Lambertian emitter or a beam just
//! past the surface), so none of them loses anything at launch.

use crate::error::{Error, Result};
use crate::model::mesh::Mesh;
use crate::model::rng::Xoshiro128;
use serde::{Deserialize, Serialize};
use std::f64::consts::PI;

fn one() -> f64 {
    1.0
}

/// A source as written in the simulation file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum Source {
    /// Infinitely thin beam from `pos` along `dir`.
    Pencil {
        pos: [f64; 3],
        dir: [f64; 3],
        #[serde(default = "one")]
        power: f64,
    },
    /// Isotropic point source.
    Isotropic {
        pos: [f64; 3],
        #[serde(default = "one")]
        power: f64,
    },
    /// Uniform disk of `radius` centred at `pos`, perpendicular to `dir`, emitting along `dir`.
    Disk {
        pos: [f64; 3],
        dir: [f64; 3],
        radius: f64,
        #[serde(default = "one")]
        power: f64,
    },
    /// Gaussian beam of 1/e^2 radius `waist` centred at `pos`, emitting along `dir`.
    Gaussian {
        pos: [f64; 3],
        dir: [f64; 3],
        waist: f64,
        #[serde(default = "one")]
        power: f64,
    },
    /// Line (cylindrical diffuser) from `pos` to `end`, emitting isotropically from points
    /// uniform along it.
    Line {
        pos: [f64; 3],
        end: [f64; 3],
        #[serde(default = "one")]
        power: f64,
    },
    /// Fibre tip at `pos` emitting uniformly in solid angle into the cone of numerical
    /// aperture `na` around `dir` (half angle asin(na / n) in the medium of index n).
    Cone {
        pos: [f64; 3],
        dir: [f64; 3],
        na: f64,
        #[serde(default = "one")]
        power: f64,
    },
    /// Uniform in the volume of a region (`region`) or of one tetrahedron (`tet`, 1-based as
    /// in tets.csv), emitting isotropically. Give exactly one of the two.
    Volume {
        #[serde(default)]
        region: Option<u32>,
        #[serde(default)]
        tet: Option<u32>,
        #[serde(default = "one")]
        power: f64,
    },
    /// Uniform per unit area over boundary triangles (`triangles`: 0-based indices as in
    /// exitance.csv) or over the surface of a region (`region`: the faces of its tetrahedra
    /// whose other side is outside the mesh or another region), emitting into the mesh /
    /// region: Lambertian (cosine-weighted about the inward normal), or along `dir` when
    /// given (it must enter through every selected face).
    Surface {
        #[serde(default)]
        triangles: Option<Vec<u32>>,
        #[serde(default)]
        region: Option<u32>,
        #[serde(default)]
        dir: Option<[f64; 3]>,
        #[serde(default = "one")]
        power: f64,
    },
}

/// Source kinds as numbers, defined once with the GPU kernel.
pub use gpu_kernels::montecarlo::{
    KIND_CONE, KIND_DISK, KIND_GAUSSIAN, KIND_ISOTROPIC, KIND_LINE, KIND_PENCIL, KIND_SURFACE,
    KIND_VOLUME,
};

/// One element of a volume or surface source: a tetrahedron (volume) or the face of the
/// tetrahedron a packet enters (surface), with the cumulative share of the source's power up
/// to and including it (volume or area weighted; the last of a source is exactly 1).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Element {
    pub cdf: f64,
    pub tet: u32,
    /// Face 0..=3 of `tet` (surface sources); 4 for volume elements.
    pub face: u32,
}

/// A source resolved against a mesh: start tetrahedron found, direction normalised.
#[derive(Debug, Clone, Copy)]
pub struct Placed {
    pub kind: u32,
    pub pos: [f64; 3],
    pub dir: [f64; 3],
    /// Cone: cosine of the half angle; disk: radius; Gaussian: waist; line: length;
    /// surface: 0 Lambertian, 1 along `dir`.
    pub param: f64,
    /// Cumulative share of the photons up to and including this source, in (0, 1].
    pub cumulative: f64,
    /// Start tetrahedron (volume and surface sources: that of their first element).
    pub tet: u32,
    /// Volume and surface sources: their elements are `elements[first..first + count]` of
    /// the table [`place`] returns; 0 and 0 for the others.
    pub first: u32,
    pub count: u32,
    /// Normal-incidence Fresnel reflectance ((n_out - n1) / (n_out + n1))^2 between the
    /// outside and the start region (disk/Gaussian: the centre's) when this is a beam
    /// entering the mesh from outside at its start point; 0 otherwise (interior points,
    /// non-beam sources, matched indices).
    pub rsp: f64,
}

impl Placed {
    /// The share of a launched packet's weight reflected at the surface before it enters:
    /// [`Placed::rsp`] with specular reflection on (`Params::specular`), else 0. A packet
    /// starts with weight 1 minus this.
    pub fn specular(&self, on: bool) -> f64 {
        if on { self.rsp } else { 0.0 }
    }
}

/// Normal-incidence Fresnel reflectance of the step from index `n_out` to `n1`.
///
/// ```
/// use montecarlo_core::model::source::normal_reflectance;
/// assert!((normal_reflectance(1.0, 1.4) - 1.0 / 36.0).abs() < 1e-15);
/// assert_eq!(normal_reflectance(1.37, 1.37), 0.0);
/// ```
pub fn normal_reflectance(n_out: f64, n1: f64) -> f64 {
    ((n_out - n1) / (n_out + n1)).powi(2)
}

/// Whether a beam starting at `pos` along unit `dir` enters the mesh there from outside: a
/// point a hair behind it (1e-7 of the mesh size, 100 x `Mesh::locate`'s tolerance) is in
/// no tetrahedron. Interior points, and points on the surface with the beam pointing out,
/// are not.
fn enters_from_outside(mesh: &Mesh, pos: [f64; 3], dir: [f64; 3]) -> bool {
    let e = 1e-7 * mesh.scale();
    let behind = [0, 1, 2].map(|k| pos[k] - e * dir[k]);
    mesh.locate(behind, None).is_none()
}

fn normalise(d: [f64; 3], index: usize) -> Result<[f64; 3]> {
    let l = (d[0] * d[0] + d[1] * d[1] + d[2] * d[2]).sqrt();
    if !(l > 0.0 && l.is_finite()) {
        return Err(Error::BadSource {
            index,
            why: format!("direction {d:?} has no length"),
        });
    }
    Ok([d[0] / l, d[1] / l, d[2] / l])
}

/// Locate every source in `mesh` and normalise powers; volume and surface sources get their
/// elements in the returned table. `n_at` gives the refractive index of a region (for the
/// cone's half angle in the medium and the specular reflectance), `n_outside` the index
/// outside the mesh.
pub fn place(
    sources: &[Source],
    mesh: &Mesh,
    n_at: impl Fn(u32) -> f64,
    n_outside: f64,
) -> Result<(Vec<Placed>, Vec<Element>)> {
    if sources.is_empty() {
        return Err(Error::Invalid("no sources".into()));
    }
    let mut placed = Vec::with_capacity(sources.len());
    let mut elements = Vec::new();
    let mut total = 0.0;
    for (index, s) in sources.iter().enumerate() {
        let bad = |why: String| Error::BadSource { index, why };
        let (kind, pos, dir, param, power) = match s {
            Source::Pencil { pos, dir, power } => (KIND_PENCIL, *pos, Some(*dir), 0.0, *power),
            Source::Isotropic { pos, power } => (KIND_ISOTROPIC, *pos, None, 0.0, *power),
            Source::Cone {
                pos,
                dir,
                na,
                power,
            } => (KIND_CONE, *pos, Some(*dir), *na, *power),
            Source::Disk {
                pos,
                dir,
                radius,
                power,
            } => (KIND_DISK, *pos, Some(*dir), *radius, *power),
            Source::Gaussian {
                pos,
                dir,
                waist,
                power,
            } => (KIND_GAUSSIAN, *pos, Some(*dir), *waist, *power),
            Source::Line { pos, end, power } => {
                let d = [end[0] - pos[0], end[1] - pos[1], end[2] - pos[2]];
                let len = (d[0] * d[0] + d[1] * d[1] + d[2] * d[2]).sqrt();
                if !(len > 0.0 && len.is_finite()) {
                    return Err(bad(format!("line from {pos:?} to {end:?} has no length")));
                }
                if mesh.locate(*end, None).is_none() {
                    return Err(bad(format!("line end {end:?} lies outside the mesh")));
                }
                (KIND_LINE, *pos, Some(d), len, *power)
            }
            Source::Volume { region, tet, power } => {
                let first = elements.len();
                volume_elements(mesh, *region, *tet, &mut elements).map_err(bad)?;
                check_power(index, *power)?;
                total += power;
                placed.push(table_source(
                    KIND_VOLUME,
                    0.0,
                    [0.0, 0.0, 1.0],
                    total,
                    first,
                    &elements,
                ));
                continue;
            }
            Source::Surface {
                triangles,
                region,
                dir,
                power,
            } => {
                let first = elements.len();
                let dir = match dir {
                    Some(d) => Some(normalise(*d, index)?),
                    None => None,
                };
                surface_elements(mesh, triangles.as_deref(), *region, dir, &mut elements)
                    .map_err(bad)?;
                check_power(index, *power)?;
                total += power;
                let (param, d) = dir.map_or((0.0, [0.0, 0.0, 1.0]), |d| (1.0, d));
                placed.push(table_source(
                    KIND_SURFACE,
                    param,
                    d,
                    total,
                    first,
                    &elements,
                ));
                continue;
            }
        };
        check_power(index, power)?;
        if pos.iter().any(|v| !v.is_finite()) {
            return Err(bad(format!("position {pos:?} is not finite")));
        }
        let dir = match dir {
            Some(d) => Some(normalise(d, index)?),
            None => None,
        };
        let tet = mesh
            .locate(pos, dir)
            .ok_or_else(|| bad(format!("position {pos:?} lies outside the mesh")))?;
        let param = match kind {
            KIND_CONE => {
                let n = n_at(mesh.regions[tet as usize]);
                if !(param > 0.0 && param <= n) {
                    return Err(bad(format!(
                        "numerical aperture {param} must lie in (0, n = {n}]"
                    )));
                }
                (1.0 - (param / n).powi(2)).max(0.0).sqrt()
            }
            KIND_LINE => param,
            KIND_DISK | KIND_GAUSSIAN => {
                if !(param > 0.0 && param.is_finite()) {
                    return Err(bad(format!("radius/waist {param} must be > 0")));
                }
                param
            }
            _ => 0.0,
        };
        // Only beams cross the surface at launch (see the module doc); line sources have a
        // direction too, but it only spans the segment.
        let beam = matches!(kind, KIND_PENCIL | KIND_CONE | KIND_DISK | KIND_GAUSSIAN);
        let rsp = match dir {
            Some(d) if beam && enters_from_outside(mesh, pos, d) => {
                normal_reflectance(n_outside, n_at(mesh.regions[tet as usize]))
            }
            _ => 0.0,
        };
        total += power;
        placed.push(Placed {
            kind,
            pos,
            dir: dir.unwrap_or([0.0, 0.0, 1.0]),
            param,
            cumulative: total,
            tet,
            first: 0,
            count: 0,
            rsp,
        });
    }
    for p in &mut placed {
        p.cumulative /= total;
    }
    if let Some(last) = placed.last_mut() {
        last.cumulative = 1.0;
    }
    Ok((placed, elements))
}

fn check_power(index: usize, power: f64) -> Result<()> {
    if power > 0.0 && power.is_finite() {
        Ok(())
    } else {
        Err(Error::BadSource {
            index,
            why: format!("power {power} must be finite and > 0"),
        })
    }
}

/// A volume/surface source over `elements[first..]` (their weights turned into a CDF).
fn table_source(
    kind: u32,
    param: f64,
    dir: [f64; 3],
    cumulative: f64,
    first: usize,
    elements: &[Element],
) -> Placed {
    Placed {
        kind,
        pos: [0.0; 3],
        dir,
        param,
        cumulative,
        tet: elements[first].tet,
        first: first as u32,
        count: (elements.len() - first) as u32,
        rsp: 0.0,
    }
}

/// Turn the weights (in `cdf`) of `elements[first..]` into their cumulative share.
fn to_cdf(elements: &mut [Element]) {
    let total: f64 = elements.iter().map(|e| e.cdf).sum();
    let mut acc = 0.0;
    for e in elements.iter_mut() {
        acc += e.cdf;
        e.cdf = acc / total;
    }
    if let Some(last) = elements.last_mut() {
        last.cdf = 1.0;
    }
}

fn volume_elements(
    mesh: &Mesh,
    region: Option<u32>,
    tet: Option<u32>,
    out: &mut Vec<Element>,
) -> std::result::Result<(), String> {
    let first = out.len();
    match (region, tet) {
        (Some(r), None) => {
            for t in 1..=mesh.len() {
                if mesh.regions[t] == r {
                    out.push(Element {
                        cdf: mesh.volumes[t],
                        tet: t as u32,
                        face: 4,
                    });
                }
            }
            if out.len() == first {
                return Err(format!("region {r} has no tetrahedra"));
            }
        }
        (None, Some(t)) => {
            if t == 0 || t as usize > mesh.len() {
                return Err(format!(
                    "tetrahedron {t} does not exist (1..={})",
                    mesh.len()
                ));
            }
            out.push(Element {
                cdf: 1.0,
                tet: t,
                face: 4,
            });
        }
        _ => return Err("a volume source needs exactly one of `region` and `tet`".into()),
    }
    to_cdf(&mut out[first..]);
    Ok(())
}

fn surface_elements(
    mesh: &Mesh,
    triangles: Option<&[u32]>,
    region: Option<u32>,
    dir: Option<[f64; 3]>,
    out: &mut Vec<Element>,
) -> std::result::Result<(), String> {
    let first = out.len();
    match (triangles, region) {
        (Some(list), None) => {
            if list.is_empty() {
                return Err("`triangles` is empty".into());
            }
            for &i in list {
                let Some(&(t, f)) = mesh.boundary.get(i as usize) else {
                    return Err(format!(
                        "boundary triangle {i} does not exist (0..{})",
                        mesh.boundary.len()
                    ));
                };
                out.push(Element {
                    cdf: mesh.boundary_area[i as usize],
                    tet: t,
                    face: u32::from(f),
                });
            }
        }
        (None, Some(r)) => {
            for t in 1..=mesh.len() {
                if mesh.regions[t] != r {
                    continue;
                }
                for f in 0..4 {
                    let nb = mesh.neighbours[t][f];
                    if nb == 0 || mesh.regions[nb as usize] != r {
                        out.push(Element {
                            cdf: mesh.face_area(t as u32, f),
                            tet: t as u32,
                            face: f as u32,
                        });
                    }
                }
            }
            if out.len() == first {
                return Err(format!("region {r} has no tetrahedra"));
            }
        }
        _ => {
            return Err("a surface source needs exactly one of `triangles` and `region`".into());
        }
    }
    if let Some(d) = dir {
        for e in &out[first..] {
            let n = mesh.faces[e.tet as usize][e.face as usize];
            if n[0] * d[0] + n[1] * d[1] + n[2] * d[2] >= 0.0 {
                return Err(format!(
                    "direction {d:?} does not enter through face {} of tetrahedron {} (outward normal {:?})",
                    e.face,
                    e.tet,
                    [n[0], n[1], n[2]]
                ));
            }
        }
    }
    to_cdf(&mut out[first..]);
    Ok(())
}

/// Two unit vectors completing `d` to an orthonormal basis.
pub fn basis(d: [f64; 3]) -> ([f64; 3], [f64; 3]) {
    let a = if d[0].abs() < 0.9 {
        [1.0, 0.0, 0.0]
    } else {
        [0.0, 1.0, 0.0]
    };
    let dot = a[0] * d[0] + a[1] * d[1] + a[2] * d[2];
    let mut u = [a[0] - dot * d[0], a[1] - dot * d[1], a[2] - dot * d[2]];
    let l = (u[0] * u[0] + u[1] * u[1] + u[2] * u[2]).sqrt();
    u = [u[0] / l, u[1] / l, u[2] / l];
    let v = [
        d[1] * u[2] - d[2] * u[1],
        d[2] * u[0] - d[0] * u[2],
        d[0] * u[1] - d[1] * u[0],
    ];
    (u, v)
}

/// Index of the element picked by uniform `u` in (0, 1] among a source's elements: the
/// first whose cdf >= u (binary search).
pub fn pick_element(elements: &[Element], u: f64) -> usize {
    elements
        .partition_point(|e| e.cdf < u)
        .min(elements.len() - 1)
}

/// Barycentric weights of a uniform point in a tetrahedron from three uniforms: sorted
/// a <= b <= c give (a, b - a, c - b, 1 - c), uniform on the simplex.
pub fn tet_barycentric(u: [f64; 3]) -> [f64; 4] {
    let [mut a, mut b, mut c] = u;
    if a > b {
        std::mem::swap(&mut a, &mut b);
    }
    if b > c {
        std::mem::swap(&mut b, &mut c);
    }
    if a > b {
        std::mem::swap(&mut a, &mut b);
    }
    [a, b - a, c - b, 1.0 - c]
}

/// Barycentric weights of a uniform point in a triangle: r = sqrt(u1),
/// (1 - r, r (1 - u2), r u2).
pub fn triangle_barycentric(u1: f64, u2: f64) -> [f64; 3] {
    let r = u1.sqrt();
    [1.0 - r, r * (1.0 - u2), r * u2]
}

/// Isotropic unit direction: cos theta = 2 u1 - 1, phi = 2 pi u2.
pub fn isotropic(u1: f64, u2: f64) -> [f64; 3] {
    let cz = 2.0 * u1 - 1.0;
    let phi = 2.0 * PI * u2;
    let sz = (1.0 - cz * cz).max(0.0).sqrt();
    [sz * phi.cos(), sz * phi.sin(), cz]
}

/// Where and how a packet starts ([`launch`]).
#[derive(Debug, Clone, Copy)]
pub struct Launched {
    pub pos: [f64; 3],
    pub dir: [f64; 3],
    /// Start tetrahedron; None when a disk/Gaussian/line sample falls outside the mesh (the
    /// packet is counted as lost).
    pub tet: Option<u32>,
    /// Index of the source that emitted it (its launch weight: [`Placed::specular`]).
    pub source: usize,
}

/// Launch a packet: pick a source by its power share, then sample its start.
pub fn launch(
    sources: &[Placed],
    elements: &[Element],
    mesh: &Mesh,
    rng: &mut Xoshiro128,
) -> Launched {
    let pick = rng.uniform();
    let source = sources
        .iter()
        .position(|s| pick <= s.cumulative)
        .unwrap_or(sources.len() - 1);
    let (pos, dir, tet) = sample(&sources[source], elements, mesh, rng);
    Launched {
        pos,
        dir,
        tet,
        source,
    }
}

/// Position, direction and tetrahedron of a packet of source `s`.
fn sample(
    s: &Placed,
    elements: &[Element],
    mesh: &Mesh,
    rng: &mut Xoshiro128,
) -> ([f64; 3], [f64; 3], Option<u32>) {
    match s.kind {
        KIND_ISOTROPIC => {
            let d = isotropic(rng.uniform(), rng.uniform());
            (s.pos, d, Some(s.tet))
        }
        KIND_CONE => {
            let c = 1.0 - rng.uniform() * (1.0 - s.param);
            let phi = 2.0 * PI * rng.uniform();
            let sn = (1.0 - c * c).max(0.0).sqrt();
            let (u, v) = basis(s.dir);
            let d = [0, 1, 2].map(|k| c * s.dir[k] + sn * (phi.cos() * u[k] + phi.sin() * v[k]));
            (s.pos, d, Some(s.tet))
        }
        KIND_DISK | KIND_GAUSSIAN => {
            let u1 = rng.uniform();
            let r = if s.kind == KIND_DISK {
                s.param * u1.sqrt()
            } else {
                s.param * (-0.5 * u1.ln()).sqrt()
            };
            let phi = 2.0 * PI * rng.uniform();
            let (u, v) = basis(s.dir);
            // Walk just inside the surface (a hair along the beam) from the centre.
            let e = 1e-7 * mesh.scale();
            let from = [0, 1, 2].map(|k| s.pos[k] + e * s.dir[k]);
            let to = [0, 1, 2].map(|k| from[k] + r * (phi.cos() * u[k] + phi.sin() * v[k]));
            (to, s.dir, mesh.walk(s.tet, from, to))
        }
        KIND_LINE => {
            let along = s.param * rng.uniform();
            let to = [0, 1, 2].map(|k| s.pos[k] + along * s.dir[k]);
            let d = isotropic(rng.uniform(), rng.uniform());
            (to, d, mesh.walk(s.tet, s.pos, to))
        }
        KIND_VOLUME => {
            let table = &elements[s.first as usize..(s.first + s.count) as usize];
            let t = table[pick_element(table, rng.uniform())].tet;
            let b = tet_barycentric([rng.uniform(), rng.uniform(), rng.uniform()]);
            let v = mesh.tets[t as usize].map(|i| mesh.nodes[i as usize]);
            let p = [0, 1, 2]
                .map(|k| b[0] * v[0][k] + b[1] * v[1][k] + b[2] * v[2][k] + b[3] * v[3][k]);
            let d = isotropic(rng.uniform(), rng.uniform());
            (p, d, Some(t))
        }
        KIND_SURFACE => {
            let table = &elements[s.first as usize..(s.first + s.count) as usize];
            let e = table[pick_element(table, rng.uniform())];
            let b = triangle_barycentric(rng.uniform(), rng.uniform());
            let fnodes = crate::model::mesh::FACE_NODES[e.face as usize];
            let v = fnodes.map(|k| mesh.nodes[mesh.tets[e.tet as usize][k] as usize]);
            let p = [0, 1, 2].map(|k| b[0] * v[0][k] + b[1] * v[1][k] + b[2] * v[2][k]);
            let d = if s.param > 0.5 {
                s.dir
            } else {
                let f = mesh.faces[e.tet as usize][e.face as usize];
                lambertian([-f[0], -f[1], -f[2]], rng.uniform(), rng.uniform())
            };
            (p, d, Some(e.tet))
        }
        _ => (s.pos, s.dir, Some(s.tet)),
    }
}

/// Cosine-weighted (Lambertian) unit direction about unit `n`: cos theta = sqrt(u1),
/// phi = 2 pi u2, in the basis ([`basis`]) of `n`.
pub fn lambertian(n: [f64; 3], u1: f64, u2: f64) -> [f64; 3] {
    let ct = u1.sqrt();
    let st = (1.0 - u1).max(0.0).sqrt();
    let phi = 2.0 * PI * u2;
    let (a, b) = basis(n);
    let (sp, cp) = phi.sin_cos();
    [0, 1, 2].map(|k| ct * n[k] + st * (cp * a[k] + sp * b[k]))
}
