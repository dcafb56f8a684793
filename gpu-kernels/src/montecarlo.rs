//! Monte Carlo light transport in tetrahedral meshes (f32), after FullMonteCUDA.
//!
//! **Design for speed.** Persistent threads: each thread loops over photons
//! `i, i + stride, ...` of the batch, so the launch costs nothing per photon and a thread
//! keeps its accumulation cache across photons. The mesh is structure-of-arrays: 16 floats
//! per tetrahedron (four face planes `nx ny nz c`, contiguous, one 64-byte line), four
//! neighbour ints (>0 a tetrahedron, <= 0 boundary triangle `-v`) and the region. The
//! per-thread accumulation cache holds the last tetrahedron and the weight absorbed there;
//! it is flushed by one `Atomic<f32>` add when the packet drops weight in another
//! tetrahedron (the paper's best single trick: consecutive drops mostly land in the same
//! tetrahedron). Energy that leaves the balance elsewhere (roulette, time limit, abandoned)
//! is summed per thread and added once at the end.
//!
//! **Physics** is the CPU reference's (montecarlo-core `transport`): a dimensionless step
//! carried across faces, drop `w mua/mu_t`, Henyey-Greenstein spin, exact unpolarised
//! Fresnel with total internal reflection where the indices differ, roulette.
//!
//! **RNG**: xoshiro128** per photon, seeded from (seed, global photon index) with the same
//! integer hash as montecarlo-core's `rng::photon_state`, so a photon's stream does not
//! depend on the batch or thread that runs it.

// Kernel code is expanded by CubeCL, which has no `rotate_left`, `clamp` or float constant
// paths for every backend; the spelled-out forms are what it compiles.
#![allow(clippy::manual_rotate, clippy::approx_constant, clippy::manual_clamp)]

use crate::catalog::{CatalogEntry, array, entry, settings_1d};
use cubecl::prelude::*;
use gpu_runtime::{Error, Gpu, GpuArray, Result};

/// Floats per tetrahedron in the face array.
pub const FACE_FLOATS: usize = 16;
/// Floats per region in the material array: mua, mus, 1/mu_t, g, n, mua/mu_t, mu_t, 0.
pub const MAT_FLOATS: usize = 8;
/// Floats per source: kind, cumulative share, cos(half angle), 0, pos(3), 0, dir(3), 0,
/// u(3), v... packed as [kind, cum, param, -, px, py, pz, -, dx, dy, dz, -, ux, uy, uz, -]
/// with v = d x u computed in the kernel.
pub const SRC_FLOATS: usize = 16;
/// Units per cube.
pub const UNITS: u32 = 128;
/// Source kinds the kernel launches (the same numbers as montecarlo-core's).
pub const KIND_PENCIL: u32 = 0;
pub const KIND_ISOTROPIC: u32 = 1;
pub const KIND_CONE: u32 = 2;

#[cube]
fn mix32(x: u32) -> u32 {
    let mut v = x;
    v ^= v >> 16u32;
    v *= 0x7feb_352du32;
    v ^= v >> 15u32;
    v *= 0x846c_a68bu32;
    v ^= v >> 16u32;
    v
}

/// xoshiro128** state.
#[derive(CubeType)]
struct Rng {
    s0: u32,
    s1: u32,
    s2: u32,
    s3: u32,
}

#[cube]
fn rotl(x: u32, k: u32) -> u32 {
    (x << k) | (x >> (32u32 - k))
}

#[cube]
fn rng_new(seed_lo: u32, seed_hi: u32, p_lo: u32, p_hi: u32) -> Rng {
    let a = mix32(p_lo ^ mix32(seed_lo + 0x9e37_79b9u32));
    let b = mix32(a ^ p_hi ^ mix32(seed_hi + 0x85eb_ca6bu32));
    let c = mix32((b + 0xc2b2_ae35u32) ^ p_lo);
    let d = mix32(c + 0x27d4_eb2fu32) | 1u32;
    Rng {
        s0: a,
        s1: b,
        s2: c,
        s3: d,
    }
}

/// Uniform in (0, 1] from the top 24 bits.
#[cube]
fn uniform(r: &mut Rng) -> f32 {
    let result = rotl(r.s1 * 5u32, 7u32) * 9u32;
    let t = r.s1 << 9u32;
    r.s2 ^= r.s0;
    r.s3 ^= r.s1;
    r.s1 ^= r.s2;
    r.s0 ^= r.s3;
    r.s2 ^= t;
    r.s3 = rotl(r.s3, 11u32);
    ((result >> 8u32) + 1u32) as f32 * (1.0f32 / 16_777_216.0f32)
}

/// Fixed-point scale of the tallies: weights are added as round(v * 2^24) into 64-bit
/// integers (two u32 words: low word, then a carry into the high word), so sums are exact,
/// independent of the order of the atomics, and never lose small drops to a large f32 sum.
/// Resolution 6e-8 of a packet weight per add; capacity 2^40 packet weights per entry.
pub const FIXED_SCALE: f32 = 16_777_216.0;
/// The accumulation cache is flushed before it exceeds this weight (so one add fits u32).
pub const CACHE_LIMIT: f32 = 64.0;

#[cube]
fn add_fixed(tally: &mut Array<Atomic<u32>>, idx: u32, v: f32) {
    let x = (v * 16_777_216.0f32 + 0.5f32) as u32;
    let i = (idx as usize) * 2;
    let old = tally[i].fetch_add(x);
    if old > 0xFFFF_FFFFu32 - x {
        tally[i + 1].fetch_add(1u32);
    }
}

/// Transport photons `first + i` for `i < n_photons` (persistent threads, `stride` = total
/// threads of the launch). `params` = [wmin, prwin, tmax_ns, inv_c (ns/mm)]; `ints` =
/// [n_photons, first_lo, first_hi, seed_lo, seed_hi, n_sources, stride, max_events].
/// `totals` = [roulette, expired, lost] weight sums (f32: one add per thread).
/// `absorbed` and `escaped` hold two u32 words per entry (see [`FIXED_SCALE`]).
/// Built with fast math (reciprocal division, `__logf`/`__sinf`/`__cosf`): MC noise is far
/// above their ~1e-6 relative error; no value in the kernel is NaN or infinite.
#[cube(launch_unchecked, fast_math = FastMath::all())]
pub fn mc_transport_kernel(
    faces: &Array<f32>,
    neigh: &Array<i32>,
    region: &Array<u32>,
    mats: &Array<f32>,
    srcs: &Array<f32>,
    src_tet: &Array<u32>,
    params: &Array<f32>,
    ints: &Array<u32>,
    absorbed: &mut Array<Atomic<u32>>,
    escaped: &mut Array<Atomic<u32>>,
    totals: &mut Array<Atomic<f32>>,
) {
    let n_photons = ints[0];
    let first_lo = ints[1];
    let first_hi = ints[2];
    let seed_lo = ints[3];
    let seed_hi = ints[4];
    let n_sources = ints[5];
    let stride = ints[6];
    let max_events = ints[7];
    let wmin = params[0];
    let prwin = params[1];
    let tmax = params[2];
    let inv_c = params[3];
    let n_out = mats[4];
    let two_pi = 6.283_185_3f32;
    let pi = 3.141_592_7f32;

    let mut cache_tet = 0u32;
    let mut cache_w = 0.0f32;
    let mut roulette = 0.0f32;
    let mut expired = 0.0f32;
    let mut lost = 0.0f32;

    let mut photon = ABSOLUTE_POS as u32;
    while photon < n_photons {
        let p_lo = first_lo + photon;
        let mut p_hi = first_hi;
        if p_lo < first_lo {
            p_hi += 1u32;
        }
        let mut rng = rng_new(seed_lo, seed_hi, p_lo, p_hi);
        // Pick a source by its cumulative share.
        let pick = uniform(&mut rng);
        let mut k = n_sources - 1u32;
        let mut j = n_sources;
        while j > 0u32 {
            j -= 1u32;
            if pick <= srcs[(j as usize) * 16 + 1] {
                k = j;
            }
        }
        let sb = (k as usize) * 16;
        let kind = srcs[sb] as u32;
        let mut px = srcs[sb + 4];
        let mut py = srcs[sb + 5];
        let mut pz = srcs[sb + 6];
        let mut dx = srcs[sb + 8];
        let mut dy = srcs[sb + 9];
        let mut dz = srcs[sb + 10];
        if kind == 1u32 {
            let cz = 2.0f32 * uniform(&mut rng) - 1.0f32;
            let phi = two_pi * uniform(&mut rng) - pi;
            let sz = f32::sqrt(f32::max(1.0f32 - cz * cz, 0.0f32));
            dx = sz * f32::cos(phi);
            dy = sz * f32::sin(phi);
            dz = cz;
        }
        if kind == 2u32 {
            let ux = srcs[sb + 12];
            let uy = srcs[sb + 13];
            let uz = srcs[sb + 14];
            let vx = dy * uz - dz * uy;
            let vy = dz * ux - dx * uz;
            let vz = dx * uy - dy * ux;
            let c = 1.0f32 - uniform(&mut rng) * (1.0f32 - srcs[sb + 2]);
            let phi = two_pi * uniform(&mut rng) - pi;
            let sn = f32::sqrt(f32::max(1.0f32 - c * c, 0.0f32));
            let cp = f32::cos(phi);
            let sp = f32::sin(phi);
            dx = c * dx + sn * (cp * ux + sp * vx);
            dy = c * dy + sn * (cp * uy + sp * vy);
            dz = c * dz + sn * (cp * uz + sp * vz);
        }
        let mut t = src_tet[k as usize];
        let mut w = 1.0f32;
        let mut s = 0.0f32;
        let mut time = 0.0f32;
        let mut events = 0u32;
        let mut alive = true;
        while alive {
            if s <= 0.0f32 {
                s = -f32::ln(uniform(&mut rng));
            }
            let rb = (region[t as usize] as usize) * 8;
            let inv_mut = mats[rb + 2];
            let g = mats[rb + 3];
            let n1 = mats[rb + 4];
            let absorb = mats[rb + 5];
            let mu_t = mats[rb + 6];
            // Distance to the exit face.
            let fb = (t as usize) * 16;
            let mut h = 3.0e38f32;
            let mut f = 0u32;
            for i in 0..4u32 {
                let o = fb + (i as usize) * 4;
                let nx = faces[o];
                let ny = faces[o + 1];
                let nz = faces[o + 2];
                let cosv = nx * dx + ny * dy + nz * dz;
                if cosv > 0.0f32 {
                    let hh = (faces[o + 3] - (nx * px + ny * py + nz * pz)) / cosv;
                    if hh < h {
                        h = hh;
                        f = i;
                    }
                }
            }
            h = f32::max(h, 0.0f32);
            let l = s * inv_mut;
            let step = f32::min(l, h);
            time += step * n1 * inv_c;
            if time > tmax {
                expired += w;
                alive = false;
            } else if l < h {
                // Hop, drop, spin.
                px += l * dx;
                py += l * dy;
                pz += l * dz;
                s = 0.0f32;
                let dw = w * absorb;
                if t != cache_tet || cache_w > 64.0f32 {
                    if cache_w > 0.0f32 {
                        add_fixed(absorbed, cache_tet, cache_w);
                    }
                    cache_tet = t;
                    cache_w = 0.0f32;
                }
                cache_w += dw;
                w -= dw;
                let u = uniform(&mut rng);
                let mut ct = 2.0f32 * u - 1.0f32;
                if f32::abs(g) > 1.0e-6f32 {
                    let tt = (1.0f32 - g * g) / (1.0f32 - g + 2.0f32 * g * u);
                    ct = (1.0f32 + g * g - tt * tt) / (2.0f32 * g);
                    ct = f32::max(f32::min(ct, 1.0f32), -1.0f32);
                }
                let st = f32::sqrt(f32::max(1.0f32 - ct * ct, 0.0f32));
                let phi = two_pi * uniform(&mut rng) - pi;
                let cp = f32::cos(phi);
                let sp = f32::sin(phi);
                if f32::abs(dz) > 0.99999f32 {
                    dx = st * cp;
                    dy = st * sp;
                    if dz < 0.0f32 {
                        dz = -ct;
                    } else {
                        dz = ct;
                    }
                } else {
                    let tmp = f32::sqrt(1.0f32 - dz * dz);
                    let nx = st * (dx * dz * cp - dy * sp) / tmp + dx * ct;
                    let ny = st * (dy * dz * cp + dx * sp) / tmp + dy * ct;
                    let nz = -st * cp * tmp + dz * ct;
                    let inv = 1.0f32 / f32::sqrt(nx * nx + ny * ny + nz * nz);
                    dx = nx * inv;
                    dy = ny * inv;
                    dz = nz * inv;
                }
                if w < wmin {
                    if uniform(&mut rng) * prwin <= 1.0f32 {
                        roulette -= w * (prwin - 1.0f32);
                        w *= prwin;
                    } else {
                        roulette += w;
                        alive = false;
                    }
                }
            } else {
                // Hop to the face; keep the leftover optical depth.
                px += h * dx;
                py += h * dy;
                pz += h * dz;
                s -= h * mu_t;
                let nb = neigh[(t as usize) * 4 + (f as usize)];
                let mut n2 = n_out;
                if nb > 0i32 {
                    n2 = mats[(region[nb as usize] as usize) * 8 + 4];
                }
                let mut reflected = false;
                if n1 != n2 {
                    let o = fb + (f as usize) * 4;
                    let nx = faces[o];
                    let ny = faces[o + 1];
                    let nz = faces[o + 2];
                    let ci = f32::min(nx * dx + ny * dy + nz * dz, 1.0f32);
                    let eta = n1 / n2;
                    let sin_t2 = eta * eta * (1.0f32 - ci * ci);
                    let mut r = 1.0f32;
                    let mut ctr = 0.0f32;
                    if sin_t2 < 1.0f32 {
                        ctr = f32::sqrt(1.0f32 - sin_t2);
                        let rs = (n1 * ci - n2 * ctr) / (n1 * ci + n2 * ctr);
                        let rp = (n1 * ctr - n2 * ci) / (n1 * ctr + n2 * ci);
                        r = 0.5f32 * (rs * rs + rp * rp);
                    }
                    if uniform(&mut rng) <= r {
                        reflected = true;
                        dx -= 2.0f32 * ci * nx;
                        dy -= 2.0f32 * ci * ny;
                        dz -= 2.0f32 * ci * nz;
                    } else {
                        let a = ctr - eta * ci;
                        let ex = eta * dx + a * nx;
                        let ey = eta * dy + a * ny;
                        let ez = eta * dz + a * nz;
                        let inv = 1.0f32 / f32::sqrt(ex * ex + ey * ey + ez * ez);
                        dx = ex * inv;
                        dy = ey * inv;
                        dz = ez * inv;
                    }
                }
                if !reflected {
                    if nb <= 0i32 {
                        add_fixed(escaped, (-nb) as u32, w);
                        alive = false;
                    } else {
                        t = nb as u32;
                    }
                }
            }
            events += 1u32;
            if alive && events >= max_events {
                lost += w;
                alive = false;
            }
        }
        photon += stride;
    }
    if cache_w > 0.0f32 {
        add_fixed(absorbed, cache_tet, cache_w);
    }
    if roulette != 0.0f32 {
        totals[0].fetch_add(roulette);
    }
    if expired != 0.0f32 {
        totals[1].fetch_add(expired);
    }
    if lost != 0.0f32 {
        totals[2].fetch_add(lost);
    }
}

/// Device buffers of a mesh, its materials and sources (see the kernel for the layouts).
#[derive(Debug)]
pub struct McScene {
    pub faces: GpuArray<f32>,
    pub neigh: GpuArray<i32>,
    pub region: GpuArray<u32>,
    pub mats: GpuArray<f32>,
    pub srcs: GpuArray<f32>,
    pub src_tet: GpuArray<u32>,
    /// Tetrahedra including the placeholder 0.
    pub tets: usize,
    pub boundary: usize,
    pub sources: u32,
}

/// One batch's settings.
#[derive(Debug, Clone, Copy)]
pub struct McBatch {
    pub first: u64,
    pub photons: u32,
    pub seed: u64,
    pub wmin: f32,
    pub prwin: f32,
    /// ns; `f32::MAX` for no limit.
    pub tmax_ns: f32,
    pub inv_c: f32,
    pub max_events: u32,
    /// Cubes of `UNITS` threads (persistent threads).
    pub cubes: u32,
}

/// Transport one batch, adding into `absorbed` (2 x `scene.tets` words), `escaped`
/// (2 x `scene.boundary` words, fixed point, see [`FIXED_SCALE`]) and `totals` (3 floats).
pub fn transport<R: Runtime>(
    gpu: &Gpu<R>,
    scene: &McScene,
    batch: &McBatch,
    absorbed: &GpuArray<u32>,
    escaped: &GpuArray<u32>,
    totals: &GpuArray<f32>,
) -> Result<()> {
    let name = "mc_transport";
    let bad = |why: String| Error::InvalidLaunch {
        kernel: name.into(),
        why,
    };
    if scene.faces.len() < scene.tets * FACE_FLOATS
        || scene.neigh.len() < scene.tets * 4
        || scene.region.len() < scene.tets
        || absorbed.len() < 2 * scene.tets
        || escaped.len() < 2 * scene.boundary.max(1)
        || totals.len() < 3
        || scene.srcs.len() < scene.sources as usize * SRC_FLOATS
        || scene.src_tet.len() < scene.sources as usize
        || scene.sources == 0
    {
        return Err(bad("buffer lengths do not match the scene".into()));
    }
    if batch.cubes == 0 {
        return Err(bad("no cubes".into()));
    }
    let stride = batch.cubes * UNITS;
    let params = gpu.upload(&[batch.wmin, batch.prwin, batch.tmax_ns, batch.inv_c])?;
    let ints = gpu.upload(&[
        batch.photons,
        batch.first as u32,
        (batch.first >> 32) as u32,
        batch.seed as u32,
        (batch.seed >> 32) as u32,
        scene.sources,
        stride,
        batch.max_events,
    ])?;
    let count = CubeCount::Static(batch.cubes, 1, 1);
    gpu.launch(name, count, |count| {
        // SAFETY: lengths checked above; the host builds neighbours, regions and source
        // tetrahedra in range (montecarlo-core validates the mesh), and u32/f32 buffers read
        // as Atomic<u32>/Atomic<f32> have the same layout.
        unsafe {
            let atomic_u =
                |a: &GpuArray<u32>| ArrayArg::from_raw_parts(a.handle().clone(), a.len());
            let atomic = |a: &GpuArray<f32>| ArrayArg::from_raw_parts(a.handle().clone(), a.len());
            mc_transport_kernel::launch_unchecked::<R>(
                gpu.client(),
                count,
                CubeDim::new_1d(UNITS),
                scene.faces.arg(),
                scene.neigh.arg(),
                scene.region.arg(),
                scene.mats.arg(),
                scene.srcs.arg(),
                scene.src_tet.arg(),
                params.arg(),
                ints.arg(),
                atomic_u(absorbed),
                atomic_u(escaped),
                atomic(totals),
            );
        }
    })
}

/// This module's kernels, configured as their launch wrappers configure them.
pub(crate) fn catalog<R: Runtime>(client: &ComputeClient<R>) -> Vec<CatalogEntry> {
    let k = mc_transport_kernel::McTransportKernel::<R>::new(
        settings_1d(UNITS),
        client.clone(),
        array(),
        array(),
        array(),
        array(),
        array(),
        array(),
        array(),
        array(),
        array(),
        array(),
        array(),
    );
    vec![entry("montecarlo", "mc_transport", k)]
}
