//! Light sources: where packets start and in which direction. The user gives points; the
//! start tetrahedron is found once per source (a beam given on the surface starts in the
//! tetrahedron it enters). Several sources share the photons in proportion to `power`.

use crate::error::{Error, Result};
use crate::mesh::Mesh;
use crate::rng::Xoshiro128;
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
}

/// Source kinds as numbers (shared with the GPU kernel).
pub const KIND_PENCIL: u32 = 0;
pub const KIND_ISOTROPIC: u32 = 1;
pub const KIND_CONE: u32 = 2;
pub const KIND_DISK: u32 = 3;
pub const KIND_GAUSSIAN: u32 = 4;
pub const KIND_LINE: u32 = 5;

/// A source resolved against a mesh: start tetrahedron found, direction normalised.
#[derive(Debug, Clone, Copy)]
pub struct Placed {
    pub kind: u32,
    pub pos: [f64; 3],
    pub dir: [f64; 3],
    /// Cone: cosine of the half angle; disk: radius; Gaussian: waist.
    pub param: f64,
    /// Cumulative share of the photons up to and including this source, in (0, 1].
    pub cumulative: f64,
    pub tet: u32,
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

/// Locate every source in `mesh` and normalise powers. `n_at` gives the refractive index of
/// a region (for the cone's half angle in the medium).
pub fn place(sources: &[Source], mesh: &Mesh, n_at: impl Fn(u32) -> f64) -> Result<Vec<Placed>> {
    if sources.is_empty() {
        return Err(Error::Invalid("no sources".into()));
    }
    let mut placed = Vec::with_capacity(sources.len());
    let mut total = 0.0;
    for (index, s) in sources.iter().enumerate() {
        let (kind, pos, dir, param, power) = match *s {
            Source::Pencil { pos, dir, power } => (KIND_PENCIL, pos, Some(dir), 0.0, power),
            Source::Isotropic { pos, power } => (KIND_ISOTROPIC, pos, None, 0.0, power),
            Source::Cone {
                pos,
                dir,
                na,
                power,
            } => (KIND_CONE, pos, Some(dir), na, power),
            Source::Disk {
                pos,
                dir,
                radius,
                power,
            } => (KIND_DISK, pos, Some(dir), radius, power),
            Source::Gaussian {
                pos,
                dir,
                waist,
                power,
            } => (KIND_GAUSSIAN, pos, Some(dir), waist, power),
            Source::Line { pos, end, power } => {
                let d = [end[0] - pos[0], end[1] - pos[1], end[2] - pos[2]];
                let len = (d[0] * d[0] + d[1] * d[1] + d[2] * d[2]).sqrt();
                if !(len > 0.0 && len.is_finite()) {
                    return Err(Error::BadSource {
                        index,
                        why: format!("line from {pos:?} to {end:?} has no length"),
                    });
                }
                if mesh.locate(end, None).is_none() {
                    return Err(Error::BadSource {
                        index,
                        why: format!("line end {end:?} lies outside the mesh"),
                    });
                }
                (KIND_LINE, pos, Some(d), len, power)
            }
        };
        if !(power > 0.0 && power.is_finite()) {
            return Err(Error::BadSource {
                index,
                why: format!("power {power} must be finite and > 0"),
            });
        }
        if pos.iter().any(|v| !v.is_finite()) {
            return Err(Error::BadSource {
                index,
                why: format!("position {pos:?} is not finite"),
            });
        }
        let dir = match dir {
            Some(d) => Some(normalise(d, index)?),
            None => None,
        };
        let tet = mesh.locate(pos, dir).ok_or_else(|| Error::BadSource {
            index,
            why: format!("position {pos:?} lies outside the mesh"),
        })?;
        let param = match kind {
            KIND_CONE => {
                let n = n_at(mesh.regions[tet as usize]);
                if !(param > 0.0 && param <= n) {
                    return Err(Error::BadSource {
                        index,
                        why: format!("numerical aperture {param} must lie in (0, n = {n}]"),
                    });
                }
                (1.0 - (param / n).powi(2)).max(0.0).sqrt()
            }
            KIND_LINE => param,
            KIND_DISK | KIND_GAUSSIAN => {
                if !(param > 0.0 && param.is_finite()) {
                    return Err(Error::BadSource {
                        index,
                        why: format!("radius/waist {param} must be > 0"),
                    });
                }
                param
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
        });
    }
    for p in &mut placed {
        p.cumulative /= total;
    }
    if let Some(last) = placed.last_mut() {
        last.cumulative = 1.0;
    }
    Ok(placed)
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

/// A launched packet: position, direction, tetrahedron (None when a disk/Gaussian sample
/// falls outside the mesh: the packet is counted as lost).
pub fn launch(
    sources: &[Placed],
    mesh: &Mesh,
    rng: &mut Xoshiro128,
) -> ([f64; 3], [f64; 3], Option<u32>) {
    let pick = rng.uniform();
    let s = sources
        .iter()
        .find(|s| pick <= s.cumulative)
        .unwrap_or(&sources[sources.len() - 1]);
    match s.kind {
        KIND_ISOTROPIC => {
            let cz = 2.0 * rng.uniform() - 1.0;
            let phi = 2.0 * PI * rng.uniform();
            let sz = (1.0 - cz * cz).max(0.0).sqrt();
            (s.pos, [sz * phi.cos(), sz * phi.sin(), cz], Some(s.tet))
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
            let cz = 2.0 * rng.uniform() - 1.0;
            let phi = 2.0 * PI * rng.uniform();
            let sz = (1.0 - cz * cz).max(0.0).sqrt();
            let d = [sz * phi.cos(), sz * phi.sin(), cz];
            (to, d, mesh.walk(s.tet, s.pos, to))
        }
        _ => (s.pos, s.dir, Some(s.tet)),
    }
}
