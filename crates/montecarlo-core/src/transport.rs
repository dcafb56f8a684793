//! The CPU reference: hop-drop-spin transport in f64, one xoshiro stream per photon, rayon
//! over blocks of photons with one tally per worker.
//!
//! Per event: draw a dimensionless step s = -ln(u) (in units of mean free paths), walk it
//! through tetrahedra (at each face the leftover s is kept, so the physical length rescales
//! with mu_t of the next region), drop w mua/mu_t at the interaction, scatter by
//! Henyey-Greenstein. Faces between different indices apply the exact unpolarised Fresnel
//! reflectance (with total internal reflection); equal indices are crossed untouched.
//! Below `wmin` a packet survives roulette with probability 1/prwin, weight x prwin.

use crate::mesh::{Mesh, exit_face};
use crate::optics::{Material, Optics};
use crate::rng::Xoshiro128;
use crate::source::{Placed, launch};
use crate::tally::Tally;
use rayon::prelude::*;
use std::sync::atomic::{AtomicBool, Ordering};

/// Speed of light in vacuum in mm/ns (time limits assume lengths in mm).
pub const C_MM_PER_NS: f64 = 299.792_458;
/// Events after which a packet is abandoned (counted in `lost`): a guard against packets
/// trapped by rounding, never reached in the tests.
pub const MAX_EVENTS: u32 = 10_000_000;

/// Transport parameters shared by the CPU and GPU paths.
#[derive(Debug, Clone, Copy)]
pub struct Params {
    /// Roulette threshold weight.
    pub wmin: f64,
    /// Roulette: survive with probability 1/prwin.
    pub prwin: f64,
    /// Stop packets after this many ns of flight (lengths in mm); None = no limit.
    pub time_limit_ns: Option<f64>,
    /// Seed of all photon streams.
    pub seed: u64,
    /// GPU launch size in cubes of 128 threads (persistent threads); None = the default
    /// (4096 on CUDA, 64 on wgpu). Results do not depend on it beyond f32 summation order.
    pub gpu_cubes: Option<u32>,
}

impl Default for Params {
    fn default() -> Self {
        Params {
            wmin: 1e-4,
            prwin: 10.0,
            time_limit_ns: None,
            seed: 1,
            gpu_cubes: None,
        }
    }
}

/// Cosine of the Henyey-Greenstein deflection for uniform `u`.
pub fn hg_cos(g: f64, u: f64) -> f64 {
    if g.abs() < 1e-6 {
        2.0 * u - 1.0
    } else {
        let t = (1.0 - g * g) / (1.0 - g + 2.0 * g * u);
        ((1.0 + g * g - t * t) / (2.0 * g)).clamp(-1.0, 1.0)
    }
}

/// Rotate unit `d` by polar angle `acos(ct)` and azimuth `phi` (MCML's formula).
pub fn spin(d: [f64; 3], ct: f64, phi: f64) -> [f64; 3] {
    let st = (1.0 - ct * ct).max(0.0).sqrt();
    let (sp, cp) = phi.sin_cos();
    if d[2].abs() > 0.99999 {
        return [st * cp, st * sp, ct * d[2].signum()];
    }
    let tmp = (1.0 - d[2] * d[2]).sqrt();
    let out = [
        st * (d[0] * d[2] * cp - d[1] * sp) / tmp + d[0] * ct,
        st * (d[1] * d[2] * cp + d[0] * sp) / tmp + d[1] * ct,
        -st * cp * tmp + d[2] * ct,
    ];
    let l = (out[0] * out[0] + out[1] * out[1] + out[2] * out[2]).sqrt();
    [out[0] / l, out[1] / l, out[2] / l]
}

/// Exact unpolarised Fresnel reflectance from index `n1` into `n2` at incidence cosine
/// `cos_i` (> 0), and the transmitted cosine; 1 (total internal reflection) past the
/// critical angle.
///
/// ```
/// let (r, _) = montecarlo_core::transport::fresnel(1.0, 1.5, 1.0);
/// assert!((r - 0.04).abs() < 1e-12); // ((n1-n2)/(n1+n2))^2 at normal incidence
/// ```
pub fn fresnel(n1: f64, n2: f64, cos_i: f64) -> (f64, f64) {
    let sin_t = n1 / n2 * (1.0 - cos_i * cos_i).max(0.0).sqrt();
    if sin_t >= 1.0 {
        return (1.0, 0.0);
    }
    let cos_t = (1.0 - sin_t * sin_t).sqrt();
    let rs = (n1 * cos_i - n2 * cos_t) / (n1 * cos_i + n2 * cos_t);
    let rp = (n1 * cos_t - n2 * cos_i) / (n1 * cos_t + n2 * cos_i);
    (0.5 * (rs * rs + rp * rp), cos_t)
}

/// Per-region constants used in the inner loop.
#[derive(Debug, Clone, Copy)]
struct Region {
    mua: f64,
    mut_: f64,
    g: f64,
    n: f64,
    /// n / c: ns per mm of flight.
    n_over_c: f64,
}

fn regions(optics: &Optics, mesh: &Mesh) -> Vec<Region> {
    (0..=mesh.max_region().max(optics.materials.len() as u32))
        .map(|r| {
            let m: Material = optics.get(r);
            Region {
                mua: m.mua,
                mut_: m.mua + m.mus,
                g: m.g,
                n: m.n,
                n_over_c: m.n / C_MM_PER_NS,
            }
        })
        .collect()
}

/// Everything the inner loop reads about one tetrahedron, in one place (two cache lines
/// plus a few bytes instead of three scattered arrays).
#[derive(Debug, Clone, Copy)]
struct Tet {
    faces: [[f64; 4]; 4],
    neighbours: [u32; 4],
    region: u32,
}

fn packed(mesh: &Mesh) -> Vec<Tet> {
    (0..=mesh.len())
        .map(|t| Tet {
            faces: mesh.faces[t],
            neighbours: mesh.neighbours[t],
            region: mesh.regions[t],
        })
        .collect()
}

/// Run photon `index` and add its weights to `tally`.
fn run_photon(
    mesh: &Mesh,
    tets: &[Tet],
    regs: &[Region],
    sources: &[Placed],
    p: &Params,
    index: u64,
    tally: &mut Tally,
) {
    let mut rng = Xoshiro128::for_photon(p.seed, index);
    let (mut pos, mut d, tet) = launch(sources, mesh, &mut rng);
    let Some(mut t) = tet else {
        tally.lost += 1.0;
        return;
    };
    let mut w = 1.0f64;
    let mut s = 0.0f64;
    let mut time = 0.0f64;
    let tmax = p.time_limit_ns.unwrap_or(f64::INFINITY);
    for _ in 0..MAX_EVENTS {
        if s <= 0.0 {
            s = -rng.uniform().ln();
        }
        let tet = &tets[t as usize];
        let r = regs[tet.region as usize];
        let (h, f) = exit_face(&tet.faces, pos, d);
        let l = if r.mut_ > 0.0 {
            s / r.mut_
        } else {
            f64::INFINITY
        };
        let step = l.min(h);
        time += step * r.n_over_c;
        if time > tmax {
            tally.expired += w;
            return;
        }
        if l < h {
            // Hop to the interaction, drop, spin.
            pos = [0, 1, 2].map(|k| pos[k] + l * d[k]);
            s = 0.0;
            let dw = w * r.mua / r.mut_;
            tally.absorbed[t as usize] += dw;
            w -= dw;
            let ct = hg_cos(r.g, rng.uniform());
            d = spin(d, ct, 2.0 * std::f64::consts::PI * rng.uniform());
            if w < p.wmin {
                if rng.uniform() * p.prwin <= 1.0 {
                    tally.roulette -= w * (p.prwin - 1.0);
                    w *= p.prwin;
                } else {
                    tally.roulette += w;
                    return;
                }
            }
        } else {
            // Hop to the face, keep the leftover optical depth.
            pos = [0, 1, 2].map(|k| pos[k] + h * d[k]);
            s -= h * r.mut_;
            let next = tet.neighbours[f];
            let n2 = regs[tets[next as usize].region as usize].n;
            if r.n != n2 {
                let fp = tet.faces[f];
                let nrm = [fp[0], fp[1], fp[2]];
                let cos_i = (nrm[0] * d[0] + nrm[1] * d[1] + nrm[2] * d[2]).min(1.0);
                let (refl, cos_t) = fresnel(r.n, n2, cos_i);
                if rng.uniform() <= refl {
                    d = [0, 1, 2].map(|k| d[k] - 2.0 * cos_i * nrm[k]);
                    continue;
                }
                let eta = r.n / n2;
                d = [0, 1, 2].map(|k| eta * d[k] + (cos_t - eta * cos_i) * nrm[k]);
                let l = (d[0] * d[0] + d[1] * d[1] + d[2] * d[2]).sqrt();
                d = [d[0] / l, d[1] / l, d[2] / l];
            }
            if next == 0 {
                tally.escaped[mesh.boundary_index[t as usize][f] as usize] += w;
                return;
            }
            t = next;
        }
    }
    tally.lost += w;
}

/// Run photons `first..first + count` on the CPU with rayon; stops early (with the photons
/// finished so far counted) when `stop` is set.
pub fn run_cpu(
    mesh: &Mesh,
    optics: &Optics,
    sources: &[Placed],
    params: &Params,
    first: u64,
    count: u64,
    stop: Option<&AtomicBool>,
) -> Tally {
    const BLOCK: u64 = 4096;
    let regs = regions(optics, mesh);
    let tets = packed(mesh);
    let blocks = count.div_ceil(BLOCK);
    (0..blocks)
        .into_par_iter()
        .fold(
            || Tally::new(mesh),
            |mut tally, b| {
                if stop.is_some_and(|s| s.load(Ordering::Relaxed)) {
                    return tally;
                }
                let lo = first + b * BLOCK;
                let hi = (lo + BLOCK).min(first + count);
                for i in lo..hi {
                    run_photon(mesh, &tets, &regs, sources, params, i, &mut tally);
                }
                tally.photons += hi - lo;
                tally
            },
        )
        .reduce(|| Tally::new(mesh), Tally::merge)
}
