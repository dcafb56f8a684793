//! The transport kernel: hop-drop-spin with Fresnel, roulette and a time limit (f32), the
//! CPU reference's physics (montecarlo-core `cpu/transport.rs`) event for event; and its
//! launch wrapper [`transport`] with the device buffers ([`McScene`], [`McTallies`]) and
//! the launch settings ([`McBatch`]) it takes.
//!
//! **Loop structure.** By default one flat loop of events per thread: when a lane's packet
//! ends, that lane launches the next photon in the same loop (photon indices handed out by
//! one atomic counter, each lane holding the next index ahead of need), so a warp never
//! waits for its longest packet (packet lifetimes are heavy-tailed: on cube60 the median
//! packet scatters 8 times, 1% scatter over 1,000 times). The nested structure (each lane
//! runs its photon to the end, photons `i, i + stride, ...`) is kept as a variant.
//!
//! **Memory per event.** The four face planes of the current tetrahedron are four 16-byte
//! loads (one 64-byte record); the material of the current region stays in registers and
//! is reloaded only at faces flagged as a change of material (bit 30 of the neighbour).
//! An ordinary interior face costs one 16-byte neighbour load and no other memory access.
//!
//! **Tallies** are exact fixed point (2^-24 of a packet weight): every drop is rounded to an
//! integer before it is added, so sums are independent of the order of atomics, of which
//! thread ran which photon, of batching and of the number of devices.

// CubeCL 0.10 evaluates both sides of `&&` in kernels, calls included: a condition with
// side effects must stay a nested `if`, which clippy would collapse.
#![allow(clippy::collapsible_if)]

use super::photon::{Photon, exit_face, exit_of, photon_zero, pick, set_material};
use super::rng::{Rng, rng_seed, rng_zero, seed_keys, uniform};
use super::source::launch;
use super::{
    DET_F_HEAD, DET_FLOATS, DET_U32, F_DETECT, F_FACES, F_GATES, F_IEEE, F_KEEP_PLANES, F_NESTED,
    F_NO_CACHE, F_PREFETCH, F_STATIC, F_TRACK, FACE_FLOATS, MAT_FLOATS, MAX_TET, McVariant,
    NEIGH_INTS, SRC_FLOATS, T_EXPIRED, T_GAINED, T_KILLED, T_LOST, T_SPECULAR, TOTALS,
};
use crate::configured::{array, settings_1d};
use cubecl::prelude::*;
use gpu_runtime::{Error, Gpu, GpuArray, Result};

/// Per-lane sums in fixed point: the accumulation cache (last tetrahedron and the weight
/// dropped there) and the weights that leave the balance other than by absorption or
/// escape. Each is flushed by atomics before it could overflow 32 bits.
#[derive(CubeType)]
pub(crate) struct Acc {
    pub cache_t: u32,
    pub cache_q: u32,
    /// With `F_GATES`: a second cache for the gated tally, keyed by gate x tets + tet.
    pub gate_key: u32,
    pub gate_q: u32,
    pub killed: u32,
    pub gained: u32,
    pub expired: u32,
    pub lost: u32,
    /// Weight reflected at launch (specular), banked by `source::launch`.
    pub specular: u32,
}

/// Weight in fixed point (2^-24 units), rounded to nearest. Weights are at most 1.
#[cube]
pub(crate) fn fixed(v: f32) -> u32 {
    (v * 16_777_216.0f32 + 0.5f32) as u32
}

/// Add `x` to the 64-bit entry `idx` (two u32 words: low, then the carry into high).
#[cube]
pub(crate) fn add_fixed(tally: &mut Array<Atomic<u32>>, idx: u32, x: u32) {
    let i = (idx * 2u32) as usize;
    let old = tally[i].fetch_add(x);
    if old > 0xFFFF_FFFFu32 - x {
        tally[i + 1].fetch_add(1u32);
    }
}

/// Add the signed fixed-point value `x` (of magnitude `q`, negative when `neg`) to the
/// 64-bit two's-complement entry `idx` (words low, high; sums are exact modulo 2^64).
#[cube]
pub(crate) fn add_fixed_signed(tally: &mut Array<Atomic<u32>>, idx: u32, q: u32, neg: bool) {
    let i = (idx * 2u32) as usize;
    let lo = select(neg, 0u32 - q, q);
    let mut hi = select(neg && q != 0u32, 0xFFFF_FFFFu32, 0u32);
    let old = tally[i].fetch_add(lo);
    if old > 0xFFFF_FFFFu32 - lo {
        hi += 1u32;
    }
    if hi != 0u32 {
        tally[i + 1].fetch_add(hi);
    }
}

/// `acc + x`, flushed into `totals[k]` once it reaches 2^31 (adds are at most 2^24 + 1).
#[cube]
pub(crate) fn bank(acc: u32, x: u32, totals: &mut Array<Atomic<u32>>, #[comptime] k: u32) -> u32 {
    let mut a = acc + x;
    if a >= 0x8000_0000u32 {
        add_fixed(totals, k, a);
        a = 0u32;
    }
    a
}

/// A copy of `x`. CubeCL 0.10 binds `let a = p.field` to the field's own variable, so `a`
/// would change with later writes to `p.field`; assigning to a new variable copies.
#[cube]
#[allow(unused_assignments)]
pub(crate) fn copy_of(x: f32) -> f32 {
    let mut y = 0.0f32;
    y = x;
    y
}

/// 1/sqrt(x) with the hardware approximation (2 ulp): built outside fast-math, which in
/// CubeCL 0.10 means the IEEE-rounded `__frsqrt_rn` (slower) rather than `rsqrtf`.
#[cube(fast_math = FastMath::AllowReciprocal | FastMath::UnsignedZero)]
pub(crate) fn rsqrt_approx(x: f32) -> f32 {
    f32::inverse_sqrt(x)
}

/// sqrt(x) for x >= 0 as x / sqrt(x) (0 at 0), or IEEE sqrt with `ieee`.
#[cube]
pub(crate) fn sqrt_any(x: f32, #[comptime] ieee: bool) -> f32 {
    if comptime!(ieee) {
        f32::sqrt(x)
    } else {
        x * rsqrt_approx(f32::max(x, 1.0e-30f32))
    }
}

/// One event without the scattering: move to the interaction point inside the current
/// tetrahedron (returns 1: [`scatter`] follows) or to its exit face and across it, with
/// Fresnel where the index changes (returns 0), or end the packet (returns 2: time limit,
/// escape, event limit).
#[cube]
#[allow(clippy::too_many_arguments)]
pub(crate) fn advance(
    p: &mut Photon,
    rng: &mut Rng,
    acc: &mut Acc,
    faces: &Array<Vector<f32, Const<4>>>,
    neigh: &Array<Vector<i32, Const<4>>>,
    region: &Array<u32>,
    mats: &Array<Vector<f32, Const<4>>>,
    face_slot: &Array<u32>,
    face_normal: &Array<Vector<f32, Const<4>>>,
    escaped: &mut Array<Atomic<u32>>,
    totals: &mut Array<Atomic<u32>>,
    face_tally: &mut Array<Atomic<u32>>,
    absorbed: &mut Array<Atomic<u32>>,
    gated: &mut Array<Atomic<u32>>,
    tmax: f32,
    n_out: f32,
    max_events: u32,
    n_tets: u32,
    gate_count: u32,
    gate_inv_width: f32,
    detectors: &Array<Vector<f32, Const<4>>>,
    det_tally: &mut Array<Atomic<u32>>,
    rec_u: &mut Array<u32>,
    rec_f: &mut Array<f32>,
    n_det: u32,
    rec_cap: u32,
    #[comptime] flags: u32,
    #[comptime] det_regions: u32,
    #[comptime] momentum: bool,
) -> u32 {
    let mut code = 0u32;
    let mut nbv = Vector::<i32, Const<4>>::new(0i32);
    if comptime!(flags & F_PREFETCH != 0) {
        nbv = neigh[p.t as usize];
    }
    let ex = if comptime!(flags & F_KEEP_PLANES != 0) {
        // Reload only after a crossing (or at a launch into another tetrahedron).
        if p.ft != p.t {
            let b = (p.t * 4u32) as usize;
            p.f0 = faces[b];
            p.f1 = faces[b + 1];
            p.f2 = faces[b + 2];
            p.f3 = faces[b + 3];
            p.ft = p.t;
        }
        exit_of(p.f0, p.f1, p.f2, p.f3, p.px, p.py, p.pz, p.dx, p.dy, p.dz)
    } else {
        exit_face(faces, p.t, p.px, p.py, p.pz, p.dx, p.dy, p.dz)
    };
    let h = ex.h;
    let exit_f = ex.f;
    let l = p.s * p.inv_mut;
    let step = f32::min(l, h);
    let t0 = copy_of(p.time);
    p.time += step * p.n_over_c;
    p.events += 1u32;
    if comptime!(flags & F_DETECT != 0) {
        // Partial pathlength in the current region (as the CPU's `seg`).
        let ri = (p.region - 1u32) as usize;
        p.ppath[ri] += step;
    }
    if p.time > tmax {
        if comptime!(flags & F_TRACK != 0) {
            // The weight decays up to the time limit, then what is left expires.
            let cut = f32::max((tmax - t0) / p.n_over_c, 0.0f32);
            decay_along(
                p,
                acc,
                absorbed,
                gated,
                cut,
                t0,
                n_tets,
                gate_count,
                gate_inv_width,
                flags,
            );
        }
        acc.expired = bank(acc.expired, fixed(p.w), totals, T_EXPIRED);
        code = 2u32;
    } else {
        if comptime!(flags & F_TRACK != 0) {
            decay_along(
                p,
                acc,
                absorbed,
                gated,
                step,
                t0,
                n_tets,
                gate_count,
                gate_inv_width,
                flags,
            );
        }
        p.px += step * p.dx;
        p.py += step * p.dy;
        p.pz += step * p.dz;
        if l < h {
            code = 1u32;
        } else {
            // Keep the leftover optical depth for the next region.
            p.s -= h * p.mu_t;
            if comptime!(flags & F_PREFETCH == 0) {
                nbv = neigh[p.t as usize];
            }
            let v = pick(nbv, exit_f);
            if ((v - 1i32) as u32) < 0x1FFF_FFFFu32 {
                // Same material on both sides, no tally: nothing to do but move on.
                p.t = v as u32;
            } else {
                code = cross_interface(
                    p,
                    rng,
                    v,
                    exit_f,
                    faces,
                    region,
                    mats,
                    face_slot,
                    face_normal,
                    escaped,
                    face_tally,
                    n_out,
                    gate_count,
                    gate_inv_width,
                    detectors,
                    det_tally,
                    rec_u,
                    rec_f,
                    n_det,
                    rec_cap,
                    flags,
                    det_regions,
                    momentum,
                );
            }
            if code == 0u32 && p.s <= 0.0f32 {
                p.s = -f32::ln(uniform(rng));
            }
        }
    }
    if code != 2u32 && p.events >= max_events {
        acc.lost = bank(acc.lost, fixed(p.w), totals, T_LOST);
        code = 2u32;
    }
    code
}

/// Crossing a face flagged as a change of material (bit 30), a tallied face (bit 29) or
/// the boundary (`v <= 0`, boundary triangle `-v`): exact unpolarised Fresnel with total
/// internal reflection where the indices differ; where the packet goes through, the face
/// tally (with the direction before refraction, as on the CPU), then escape or the new
/// tetrahedron and its material.
#[cube]
#[allow(clippy::too_many_arguments)]
fn cross_interface(
    p: &mut Photon,
    rng: &mut Rng,
    v: i32,
    f: u32,
    faces: &Array<Vector<f32, Const<4>>>,
    region: &Array<u32>,
    mats: &Array<Vector<f32, Const<4>>>,
    face_slot: &Array<u32>,
    face_normal: &Array<Vector<f32, Const<4>>>,
    escaped: &mut Array<Atomic<u32>>,
    face_tally: &mut Array<Atomic<u32>>,
    n_out: f32,
    gate_count: u32,
    gate_inv_width: f32,
    detectors: &Array<Vector<f32, Const<4>>>,
    det_tally: &mut Array<Atomic<u32>>,
    rec_u: &mut Array<u32>,
    rec_f: &mut Array<f32>,
    n_det: u32,
    rec_cap: u32,
    #[comptime] flags: u32,
    #[comptime] det_regions: u32,
    #[comptime] momentum: bool,
) -> u32 {
    let ieee = comptime!(flags & F_IEEE != 0);
    let mut code = 0u32;
    let boundary = v <= 0i32;
    let material_change = (v & 0x4000_0000i32) != 0i32;
    let nb = (v & 0x1FFF_FFFFi32) as u32;
    let n1 = p.n;
    let mut n2 = n1;
    let mut r2 = 0u32;
    if boundary {
        n2 = n_out;
    } else if material_change {
        r2 = region[nb as usize];
        n2 = mats[(r2 * 2u32) as usize][2];
    }
    // The direction before refraction, for the face tally (a copy: see [`copy_of`]).
    let dx0 = copy_of(p.dx);
    let dy0 = copy_of(p.dy);
    let dz0 = copy_of(p.dz);
    let mut reflected = false;
    if n1 != n2 {
        let a = faces[(p.t * 4u32 + f) as usize];
        let nx = a[0];
        let ny = a[1];
        let nz = a[2];
        let ci = f32::min(nx * p.dx + ny * p.dy + nz * p.dz, 1.0f32);
        let eta = n1 / n2;
        let sin_t2 = eta * eta * (1.0f32 - ci * ci);
        let mut r = 1.0f32;
        let mut ctr = 0.0f32;
        if sin_t2 < 1.0f32 {
            ctr = sqrt_any(1.0f32 - sin_t2, ieee);
            let rs = (n1 * ci - n2 * ctr) / (n1 * ci + n2 * ctr);
            let rp = (n1 * ctr - n2 * ci) / (n1 * ctr + n2 * ci);
            r = 0.5f32 * (rs * rs + rp * rp);
        }
        if uniform(rng) <= r {
            reflected = true;
            p.dx -= 2.0f32 * ci * nx;
            p.dy -= 2.0f32 * ci * ny;
            p.dz -= 2.0f32 * ci * nz;
        } else {
            let k = ctr - eta * ci;
            let ex = eta * p.dx + k * nx;
            let ey = eta * p.dy + k * ny;
            let ez = eta * p.dz + k * nz;
            let inv = rsqrt_any(ex * ex + ey * ey + ez * ez, ieee);
            p.dx = ex * inv;
            p.dy = ey * inv;
            p.dz = ez * inv;
        }
    }
    if !reflected {
        if comptime!(flags & F_FACES != 0) {
            if boundary || (v & 0x2000_0000i32) != 0i32 {
                let slot = face_slot[(p.t * 4u32 + f) as usize];
                if slot != 0xFFFF_FFFFu32 {
                    let n = face_normal[slot as usize];
                    let cos = n[0] * dx0 + n[1] * dy0 + n[2] * dz0;
                    let a = f32::abs(cos);
                    let fluence = p.w / select(a < 0.1f32, 0.05f32, a);
                    add_fixed(face_tally, slot * 2u32, fixed(fluence));
                    add_fixed_signed(face_tally, slot * 2u32 + 1u32, fixed(p.w), cos < 0.0f32);
                }
            }
        }
        if boundary {
            add_fixed(escaped, (-v) as u32, fixed(p.w));
            if comptime!(flags & F_DETECT != 0) {
                detect(
                    p,
                    detectors,
                    det_tally,
                    rec_u,
                    rec_f,
                    n_det,
                    rec_cap,
                    gate_count,
                    gate_inv_width,
                    flags,
                    det_regions,
                    momentum,
                );
            }
            code = 2u32;
        } else {
            p.t = nb;
            if material_change {
                set_material(p, mats, r2);
                if comptime!(flags & F_DETECT != 0) {
                    // The host flags every change of region as an interface with detectors.
                    p.region = r2;
                }
            }
        }
    }
    code
}

/// With `F_DETECT`: a packet escaping at its current position is detected by the first
/// detector whose disk (`[x, y, z, r^2]`, 3-D distance) holds it, as `Detection::hit`: the
/// exact totals (weight, count, TPSF gate of the exit time) and a record in slot
/// `det_tally[0]++` when that is below `rec_cap` (past it only the counter moves).
#[cube]
#[allow(clippy::too_many_arguments)]
fn detect(
    p: &mut Photon,
    detectors: &Array<Vector<f32, Const<4>>>,
    det_tally: &mut Array<Atomic<u32>>,
    rec_u: &mut Array<u32>,
    rec_f: &mut Array<f32>,
    n_det: u32,
    rec_cap: u32,
    gate_count: u32,
    gate_inv_width: f32,
    #[comptime] flags: u32,
    #[comptime] det_regions: u32,
    #[comptime] momentum: bool,
) {
    let mut hit = n_det;
    let mut j = n_det;
    while j > 0u32 {
        j -= 1u32;
        let d = detectors[j as usize];
        let ex = p.px - d[0];
        let ey = p.py - d[1];
        let ez = p.pz - d[2];
        if ex * ex + ey * ey + ez * ez <= d[3] {
            hit = j;
        }
    }
    if hit < n_det {
        let q = fixed(p.w);
        add_fixed(det_tally, 1u32 + hit, q);
        add_fixed(det_tally, 1u32 + n_det + hit, 1u32);
        if comptime!(flags & F_GATES != 0) {
            let gf = p.time * gate_inv_width;
            if gf < gate_count as f32 {
                add_fixed(
                    det_tally,
                    1u32 + 2u32 * n_det + hit * gate_count + gf as u32,
                    q,
                );
            }
        }
        let slot = det_tally[0].fetch_add(1u32);
        if slot < rec_cap {
            let b = (slot * comptime!(DET_U32 as u32)) as usize;
            rec_u[b] = hit + 1u32;
            rec_u[b + 1] = p.idx_lo;
            rec_u[b + 2] = p.idx_hi;
            rec_u[b + 3] = p.scatters;
            let per = comptime!(DET_F_HEAD as u32 + det_regions * if momentum { 2 } else { 1 });
            let f = (slot * per) as usize;
            rec_f[f] = p.w;
            rec_f[f + 1] = p.time;
            rec_f[f + 2] = p.px;
            rec_f[f + 3] = p.py;
            rec_f[f + 4] = p.pz;
            rec_f[f + 5] = p.dx;
            rec_f[f + 6] = p.dy;
            rec_f[f + 7] = p.dz;
            #[unroll]
            for r in 0..det_regions {
                rec_f[f + comptime!(DET_F_HEAD + r as usize)] = p.ppath[r as usize];
            }
            if comptime!(momentum) {
                #[unroll]
                for r in 0..det_regions {
                    rec_f[f + comptime!(DET_F_HEAD + (det_regions + r) as usize)] =
                        p.mom[r as usize];
                }
            }
        }
    }
}

/// With `F_DETECT`: the log of a packet just launched (photon `lo`, `hi` in tetrahedron
/// `p.t`): its index, region, no scatterings, zero path lengths.
#[cube]
pub(crate) fn start_log(
    p: &mut Photon,
    region: &Array<u32>,
    lo: u32,
    hi: u32,
    #[comptime] det_regions: u32,
    #[comptime] momentum: bool,
) {
    p.idx_lo = lo;
    p.idx_hi = hi;
    p.region = region[p.t as usize];
    p.scatters = 0u32;
    #[unroll]
    for r in 0..det_regions {
        p.ppath[r as usize] = 0.0f32;
        if comptime!(momentum) {
            p.mom[r as usize] = 0.0f32;
        }
    }
}

/// 1/sqrt(x) for x > 0: the hardware approximation, or IEEE sqrt and a division.
#[cube]
pub(crate) fn rsqrt_any(x: f32, #[comptime] ieee: bool) -> f32 {
    if comptime!(ieee) {
        1.0f32 / f32::sqrt(x)
    } else {
        rsqrt_approx(x)
    }
}

/// Score the fixed-point weight `q` absorbed in tetrahedron `t` through the accumulation
/// cache.
#[cube]
pub(crate) fn score(
    acc: &mut Acc,
    absorbed: &mut Array<Atomic<u32>>,
    t: u32,
    q: u32,
    #[comptime] flags: u32,
) {
    if comptime!(flags & F_NO_CACHE != 0) {
        add_fixed(absorbed, t, q);
    } else {
        if t != acc.cache_t || acc.cache_q >= 0x8000_0000u32 {
            if acc.cache_q > 0u32 {
                add_fixed(absorbed, acc.cache_t, acc.cache_q);
            }
            acc.cache_t = t;
            acc.cache_q = 0u32;
        }
        acc.cache_q += q;
    }
}

/// Score `q` in the gated tally's entry `key` (gate x tets + tet) through the second cache.
#[cube]
pub(crate) fn score_gate(acc: &mut Acc, gated: &mut Array<Atomic<u32>>, key: u32, q: u32) {
    if key != acc.gate_key || acc.gate_q >= 0x8000_0000u32 {
        if acc.gate_q > 0u32 {
            add_fixed(gated, acc.gate_key, acc.gate_q);
        }
        acc.gate_key = key;
        acc.gate_q = 0u32;
    }
    acc.gate_q += q;
}

/// 1 - exp(-x) for x >= 0: x (1 - x/2) below x = 1e-3, where the f32 subtraction would
/// lose digits (relative error below 2e-7 either way).
#[cube]
pub(crate) fn decay_share(x: f32) -> f32 {
    select(
        x < 1.0e-3f32,
        x * (1.0f32 - 0.5f32 * x),
        1.0f32 - f32::exp(-x),
    )
}

/// Track length: the packet flies `len` mm through its tetrahedron from time `t0`; its
/// weight decays by exp(-mua len) (`p.absorb` holds mua with `F_TRACK`), the loss scored
/// there. With `F_GATES` the loss is split at the gate boundaries the segment crosses, as
/// on the CPU.
#[cube]
#[allow(clippy::too_many_arguments)]
pub(crate) fn decay_along(
    p: &mut Photon,
    acc: &mut Acc,
    absorbed: &mut Array<Atomic<u32>>,
    gated: &mut Array<Atomic<u32>>,
    len: f32,
    t0: f32,
    n_tets: u32,
    gate_count: u32,
    gate_inv_width: f32,
    #[comptime] flags: u32,
) {
    let mua = p.absorb;
    let dw = p.w * decay_share(mua * len);
    let q = fixed(dw);
    if q > 0u32 {
        score(acc, absorbed, p.t, q, flags);
        if comptime!(flags & F_GATES != 0) {
            let gf = t0 * gate_inv_width;
            if gf < gate_count as f32 {
                let mut g = gf as u32;
                let mut w = copy_of(p.w);
                let mut a = 0.0f32;
                let mut more = true;
                while more {
                    // Where (in mm along the segment) gate g ends.
                    let end = ((g + 1u32) as f32 / gate_inv_width - t0) / p.n_over_c;
                    let b = f32::min(f32::max(end, a), len);
                    let part = w * decay_share(mua * (b - a));
                    score_gate(acc, gated, g * n_tets + p.t, fixed(part));
                    w -= part;
                    a = b;
                    g += 1u32;
                    more = a < len && g < gate_count;
                }
            }
        }
    }
    p.w -= dw;
}

/// Drop `w mua/mu_t` into the current tetrahedron (through the accumulation cache), spin
/// by Henyey-Greenstein, play roulette below `wmin`, and draw the next optical depth.
/// Returns true when roulette ended the packet.
#[cube]
#[allow(clippy::too_many_arguments)]
pub(crate) fn scatter(
    p: &mut Photon,
    rng: &mut Rng,
    acc: &mut Acc,
    absorbed: &mut Array<Atomic<u32>>,
    totals: &mut Array<Atomic<u32>>,
    gated: &mut Array<Atomic<u32>>,
    wmin: f32,
    prwin: f32,
    n_tets: u32,
    gate_count: u32,
    gate_inv_width: f32,
    #[comptime] flags: u32,
    #[comptime] momentum: bool,
) -> bool {
    let ieee = comptime!(flags & F_IEEE != 0);
    if comptime!(flags & F_TRACK == 0) {
        let dw = p.w * p.absorb;
        let q = fixed(dw);
        score(acc, absorbed, p.t, q, flags);
        if comptime!(flags & F_GATES != 0) {
            // Time-resolved: the same drop in the gate of the time of flight, if any.
            let gf = p.time * gate_inv_width;
            if gf < gate_count as f32 {
                score_gate(acc, gated, (gf as u32) * n_tets + p.t, q);
            }
        }
        p.w -= dw;
    }
    // Henyey-Greenstein deflection cosine.
    let g = p.g;
    let u = uniform(rng);
    let mut ct = 2.0f32 * u - 1.0f32;
    if f32::abs(g) > 1.0e-6f32 {
        let tt = (1.0f32 - g * g) / (1.0f32 - g + 2.0f32 * g * u);
        ct = (1.0f32 + g * g - tt * tt) / (2.0f32 * g);
        ct = f32::max(f32::min(ct, 1.0f32), -1.0f32);
    }
    if comptime!(flags & F_DETECT != 0) {
        p.scatters += 1u32;
        if comptime!(momentum) {
            let ri = (p.region - 1u32) as usize;
            p.mom[ri] += 1.0f32 - ct;
        }
    }
    let st = sqrt_any(f32::max(1.0f32 - ct * ct, 0.0f32), ieee);
    // Azimuth in [-pi, pi), where the fast sine and cosine are accurate.
    let phi = 6.283_185_3f32 * uniform(rng) - 3.141_592_7f32;
    let cp = f32::cos(phi);
    let sp = f32::sin(phi);
    let dx = p.dx;
    let dy = p.dy;
    let dz = p.dz;
    if f32::abs(dz) > 0.99999f32 {
        p.dx = st * cp;
        p.dy = st * sp;
        p.dz = select(dz < 0.0f32, -ct, ct);
    } else {
        let q2 = 1.0f32 - dz * dz;
        let rq = rsqrt_any(q2, ieee);
        let tmp = q2 * rq;
        let nx = st * (dx * dz * cp - dy * sp) * rq + dx * ct;
        let ny = st * (dy * dz * cp + dx * sp) * rq + dy * ct;
        let nz = -st * cp * tmp + dz * ct;
        let inv = rsqrt_any(nx * nx + ny * ny + nz * nz, ieee);
        p.dx = nx * inv;
        p.dy = ny * inv;
        p.dz = nz * inv;
    }
    let mut ended = false;
    if p.w < wmin {
        if uniform(rng) * prwin <= 1.0f32 {
            acc.gained = bank(acc.gained, fixed(p.w * (prwin - 1.0f32)), totals, T_GAINED);
            p.w *= prwin;
        } else {
            acc.killed = bank(acc.killed, fixed(p.w), totals, T_KILLED);
            ended = true;
        }
    }
    if !ended {
        p.s = -f32::ln(uniform(rng));
    }
    ended
}

/// Transport photons `first + i` for `i < n_photons` (see the module doc for the loop
/// structure and the layouts in [`super::McScene`]). `counter[0]` must be 0 at launch
/// (dynamic hand-out); `stride` is the number of threads of the launch (static hand-out
/// and the nested variant). `key_lo`/`key_hi` come from [`super::seed_keys`]. `absorbed`,
/// `escaped` and `totals` ([killed, gained, expired, lost, specular]) are 64-bit
/// fixed-point entries (two u32 words each) that this launch adds to. With `F_DETECT`:
/// `n_det` detectors in `detectors`, totals and the record counter in `det_tally`, records
/// in `rec_u`/`rec_f` up to `rec_cap` (layouts in [`super::det_entries`], [`DET_U32`],
/// [`DET_F_HEAD`]); without it those are one-element placeholders.
///
/// Built with fast math (`__fdividef`, `__logf`, `__sinf`, `__cosf`, and `rsqrtf` for
/// square roots unless `F_IEEE`): relative errors ~1e-6, far below Monte Carlo noise.
#[cube(launch_unchecked, fast_math = FastMath::all())]
#[allow(clippy::too_many_arguments)]
pub fn mc_transport_kernel(
    faces: &Array<Vector<f32, Const<4>>>,
    neigh: &Array<Vector<i32, Const<4>>>,
    region: &Array<u32>,
    mats: &Array<Vector<f32, Const<4>>>,
    srcs: &Array<Vector<f32, Const<4>>>,
    src_tet: &Array<u32>,
    src_aux: &Array<Vector<f32, Const<4>>>,
    face_slot: &Array<u32>,
    face_normal: &Array<Vector<f32, Const<4>>>,
    counter: &mut Array<Atomic<u32>>,
    absorbed: &mut Array<Atomic<u32>>,
    escaped: &mut Array<Atomic<u32>>,
    totals: &mut Array<Atomic<u32>>,
    gated: &mut Array<Atomic<u32>>,
    face_tally: &mut Array<Atomic<u32>>,
    detectors: &Array<Vector<f32, Const<4>>>,
    det_tally: &mut Array<Atomic<u32>>,
    rec_u: &mut Array<u32>,
    rec_f: &mut Array<f32>,
    n_photons: u32,
    first_lo: u32,
    first_hi: u32,
    key_lo: u32,
    key_hi: u32,
    n_sources: u32,
    stride: u32,
    max_events: u32,
    budget: u32,
    n_tets: u32,
    gate_count: u32,
    wmin: f32,
    prwin: f32,
    tmax: f32,
    n_out: f32,
    gate_inv_width: f32,
    n_det: u32,
    rec_cap: u32,
    #[comptime] flags: u32,
    #[comptime] cross_k: u32,
    #[comptime] det_regions: u32,
    #[comptime] momentum: bool,
) {
    let mut rng = rng_zero();
    let mut p = photon_zero(det_regions, momentum);
    let mut acc = Acc {
        cache_t: 0u32,
        cache_q: 0u32,
        gate_key: 0u32,
        gate_q: 0u32,
        killed: 0u32,
        gained: 0u32,
        expired: 0u32,
        lost: 0u32,
        specular: 0u32,
    };
    let one = 16_777_216u32;
    if comptime!(flags & F_NESTED != 0) {
        // Each lane runs its photon to the end; photons i, i + stride, ...
        let mut idx = ABSOLUTE_POS as u32;
        while idx < n_photons {
            let lo = first_lo + idx;
            let hi = first_hi + select(lo < first_lo, 1u32, 0u32);
            rng_seed(&mut rng, key_lo, key_hi, lo, hi);
            if launch(
                &mut p, &mut rng, &mut acc, totals, srcs, src_tet, src_aux, faces, neigh, region,
                mats, n_sources, max_events,
            ) {
                if comptime!(flags & F_DETECT != 0) {
                    start_log(&mut p, region, lo, hi, det_regions, momentum);
                }
                let mut alive = true;
                while alive {
                    let mut code = advance(
                        &mut p,
                        &mut rng,
                        &mut acc,
                        faces,
                        neigh,
                        region,
                        mats,
                        face_slot,
                        face_normal,
                        escaped,
                        totals,
                        face_tally,
                        absorbed,
                        gated,
                        tmax,
                        n_out,
                        max_events,
                        n_tets,
                        gate_count,
                        gate_inv_width,
                        detectors,
                        det_tally,
                        rec_u,
                        rec_f,
                        n_det,
                        rec_cap,
                        flags,
                        det_regions,
                        momentum,
                    );
                    // Not `code == 1 && scatter(..)`: CubeCL 0.10 does not short-circuit
                    // `&&`, it would scatter after every event.
                    if code == 1u32 {
                        if scatter(
                            &mut p,
                            &mut rng,
                            &mut acc,
                            absorbed,
                            totals,
                            gated,
                            wmin,
                            prwin,
                            n_tets,
                            gate_count,
                            gate_inv_width,
                            flags,
                            momentum,
                        ) {
                            code = 2u32;
                        }
                    }
                    alive = code != 2u32;
                }
            } else {
                acc.lost = bank(acc.lost, one, totals, T_LOST);
            }
            idx += stride;
        }
    } else {
        // One flat loop of events; a lane whose packet ended launches the next photon.
        // Dynamic hand-out: each lane holds the next two photon indices (fetched ahead of
        // need, so the atomic's latency hides behind a packet's lifetime). After `budget`
        // iterations a lane takes no new index but still runs those it holds, so no index
        // is lost; the host relaunches until the counter passes `n_photons`.
        let dynamic = comptime!(flags & F_STATIC == 0);
        let mut idx = ABSOLUTE_POS as u32;
        let mut next = 0u32;
        if dynamic {
            idx = counter[0].fetch_add(1u32);
            next = counter[0].fetch_add(1u32);
        }
        let mut iters = 0u32;
        let mut active = true;
        let mut need = true;
        while active {
            if need {
                if idx >= n_photons {
                    active = false;
                } else {
                    let cur = idx;
                    if dynamic {
                        idx = next;
                        next = n_photons;
                        if iters < budget {
                            next = counter[0].fetch_add(1u32);
                        }
                    } else {
                        idx += stride;
                    }
                    let lo = first_lo + cur;
                    let hi = first_hi + select(lo < first_lo, 1u32, 0u32);
                    rng_seed(&mut rng, key_lo, key_hi, lo, hi);
                    if launch(
                        &mut p, &mut rng, &mut acc, totals, srcs, src_tet, src_aux, faces, neigh,
                        region, mats, n_sources, max_events,
                    ) {
                        if comptime!(flags & F_DETECT != 0) {
                            start_log(&mut p, region, lo, hi, det_regions, momentum);
                        }
                        need = false;
                    } else {
                        acc.lost = bank(acc.lost, one, totals, T_LOST);
                    }
                }
            }
            if active && !need {
                let mut code = advance(
                    &mut p,
                    &mut rng,
                    &mut acc,
                    faces,
                    neigh,
                    region,
                    mats,
                    face_slot,
                    face_normal,
                    escaped,
                    totals,
                    face_tally,
                    absorbed,
                    gated,
                    tmax,
                    n_out,
                    max_events,
                    n_tets,
                    gate_count,
                    gate_inv_width,
                    detectors,
                    det_tally,
                    rec_u,
                    rec_f,
                    n_det,
                    rec_cap,
                    flags,
                    det_regions,
                    momentum,
                );
                if comptime!(cross_k > 1) {
                    // Cross up to `cross_k` faces before the warp scatters together.
                    let kmax = cross_k.runtime();
                    let mut k = 1u32;
                    while code == 0u32 && k < kmax {
                        code = advance(
                            &mut p,
                            &mut rng,
                            &mut acc,
                            faces,
                            neigh,
                            region,
                            mats,
                            face_slot,
                            face_normal,
                            escaped,
                            totals,
                            face_tally,
                            absorbed,
                            gated,
                            tmax,
                            n_out,
                            max_events,
                            n_tets,
                            gate_count,
                            gate_inv_width,
                            detectors,
                            det_tally,
                            rec_u,
                            rec_f,
                            n_det,
                            rec_cap,
                            flags,
                            det_regions,
                            momentum,
                        );
                        k += 1u32;
                    }
                }
                if code == 1u32 {
                    if scatter(
                        &mut p,
                        &mut rng,
                        &mut acc,
                        absorbed,
                        totals,
                        gated,
                        wmin,
                        prwin,
                        n_tets,
                        gate_count,
                        gate_inv_width,
                        flags,
                        momentum,
                    ) {
                        code = 2u32;
                    }
                }
                need = code == 2u32;
            }
            iters += 1u32;
        }
    }
    if acc.cache_q > 0u32 {
        add_fixed(absorbed, acc.cache_t, acc.cache_q);
    }
    if acc.gate_q > 0u32 {
        add_fixed(gated, acc.gate_key, acc.gate_q);
    }
    if acc.killed > 0u32 {
        add_fixed(totals, T_KILLED, acc.killed);
    }
    if acc.gained > 0u32 {
        add_fixed(totals, T_GAINED, acc.gained);
    }
    if acc.expired > 0u32 {
        add_fixed(totals, T_EXPIRED, acc.expired);
    }
    if acc.lost > 0u32 {
        add_fixed(totals, T_LOST, acc.lost);
    }
    if acc.specular > 0u32 {
        add_fixed(totals, T_SPECULAR, acc.specular);
    }
}

/// Device buffers of a mesh, its materials and sources.
#[derive(Debug)]
pub struct McScene {
    /// [`FACE_FLOATS`] per tetrahedron (index 0 a placeholder).
    pub faces: GpuArray<f32>,
    /// [`NEIGH_INTS`] per tetrahedron.
    pub neigh: GpuArray<i32>,
    /// Region per tetrahedron.
    pub region: GpuArray<u32>,
    /// [`MAT_FLOATS`] per region (index 0 = outside).
    pub mats: GpuArray<f32>,
    /// [`SRC_FLOATS`] per source.
    pub srcs: GpuArray<f32>,
    /// Start tetrahedron per source.
    pub src_tet: GpuArray<u32>,
    /// Elements of volume and surface sources, `4 AUX_VECS` floats each (at least 4
    /// floats).
    pub src_aux: GpuArray<f32>,
    /// Per tetrahedron face (4 per tet): the index of its face tally or [`NO_SLOT`](super::NO_SLOT) (at
    /// least one element).
    pub face_slot: GpuArray<u32>,
    /// Reference unit normal per tallied face, 4 floats each (at least 4 floats).
    pub face_normal: GpuArray<f32>,
    /// Tallied faces.
    pub tallied_faces: usize,
    /// Time gates of the gated tally (0: none).
    pub gates: u32,
    /// Tetrahedra including the placeholder 0.
    pub tets: usize,
    pub boundary: usize,
    pub sources: u32,
    /// The track-length estimator ([`F_TRACK`]; `mats` then holds 1/mus, mus and mua where
    /// the interaction estimator has 1/mu_t, mu_t and mua/mu_t).
    pub track: bool,
    /// [`DET_FLOATS`] per detector, `[x, y, z, r^2]` (at least 4 floats).
    pub detectors: GpuArray<f32>,
    /// Detectors (0: no detection, the kernel is built without [`F_DETECT`]).
    pub n_det: u32,
    /// Regions R of the partial pathlengths (with detectors).
    pub det_regions: u32,
    /// Records carry the momentum transfer per region too.
    pub det_momentum: bool,
}

/// The tallies a run adds to: 64-bit fixed-point entries as two u32 words
/// (see [`FIXED_SCALE`](super::FIXED_SCALE)), zero at the start.
#[derive(Debug)]
pub struct McTallies {
    /// Two words per tetrahedron.
    pub absorbed: GpuArray<u32>,
    /// Two words per boundary triangle.
    pub escaped: GpuArray<u32>,
    /// Two words per [`TOTALS`] entry.
    pub totals: GpuArray<u32>,
    /// Two words per gate and tetrahedron (`gate x tets + tet`; two words without gates).
    pub gated: GpuArray<u32>,
    /// Per tallied face: fluence (two words), then net current (two words, two's
    /// complement).
    pub face_tally: GpuArray<u32>,
    /// With detectors: the record counter and the detector totals (two words per
    /// [`super::det_entries`] entry; two words without detectors).
    pub det_tally: GpuArray<u32>,
    /// [`DET_U32`] words per record (at least one word).
    pub rec_u: GpuArray<u32>,
    /// [`super::det_floats`] words per record (at least one word).
    pub rec_f: GpuArray<f32>,
    /// Records the buffers hold.
    pub rec_cap: u32,
}

impl McTallies {
    /// Zeroed tallies for `scene`, cleared on the device (the gated tally of a
    /// time-resolved run is gates x tets x 8 bytes: tens of MB that need not cross the link),
    /// with room for `rec_cap` detected-photon records (when the scene has detectors).
    pub fn zeroed<R: Runtime>(gpu: &Gpu<R>, scene: &McScene, rec_cap: u32) -> Result<McTallies> {
        let det = scene.n_det > 0;
        let cap = if det { rec_cap as usize } else { 0 };
        let zeros = |len: usize| -> Result<GpuArray<u32>> {
            let a = gpu.empty::<u32>(len)?;
            zero_words(gpu, &a)?;
            Ok(a)
        };
        Ok(McTallies {
            absorbed: zeros(2 * scene.tets)?,
            escaped: zeros(2 * scene.boundary.max(1))?,
            totals: zeros(2 * TOTALS)?,
            gated: zeros(2 * (scene.gates as usize * scene.tets).max(1))?,
            face_tally: zeros(4 * scene.tallied_faces.max(1))?,
            det_tally: zeros(if det {
                2 * super::det_entries(scene.n_det, scene.gates)
            } else {
                2
            })?,
            rec_u: gpu.empty::<u32>((DET_U32 * cap).max(1))?,
            rec_f: gpu.empty::<f32>(
                (super::det_floats(scene.det_regions, scene.det_momentum) * cap).max(1),
            )?,
            rec_cap: cap as u32,
        })
    }
}

/// Set every word of `out` to 0 (grid-stride loop: any length on a fixed grid).
#[cube(launch)]
pub fn zero_words_kernel(out: &mut Array<u32>, stride: u32) {
    let mut i = ABSOLUTE_POS as u32;
    while (i as usize) < out.len() {
        out[i as usize] = 0u32;
        i += stride;
    }
}

/// Clear `out` on the device.
pub fn zero_words<R: Runtime>(gpu: &Gpu<R>, out: &GpuArray<u32>) -> Result<()> {
    const UNITS: u32 = 256;
    let cubes = (out.len().div_ceil(UNITS as usize)).clamp(1, 4096) as u32;
    gpu.launch("zero_words", CubeCount::Static(cubes, 1, 1), |count| {
        zero_words_kernel::launch::<R>(
            gpu.client(),
            count,
            CubeDim::new_1d(UNITS),
            out.arg(),
            cubes * UNITS,
        );
    })
}

/// One launch's settings.
#[derive(Debug, Clone, Copy)]
pub struct McBatch {
    /// Global index of the first photon.
    pub first: u64,
    pub photons: u32,
    pub seed: u64,
    pub wmin: f32,
    pub prwin: f32,
    /// ns; `f32::MAX` for no limit.
    pub tmax_ns: f32,
    /// Refractive index outside the mesh.
    pub n_out: f32,
    /// Width of the time gates in ns (with `scene.gates` > 0).
    pub gate_width_ns: f32,
    pub max_events: u32,
    /// Loop iterations after which a lane of the flat loop takes no new photon (it ends
    /// after the two it holds); the launch is repeated until every photon was handed out.
    /// `u32::MAX` on GPUs; lavapipe ends any shader loop after 65,535 iterations, so it
    /// needs a finite budget there.
    pub budget: u32,
    /// Cubes of `variant.units` threads.
    pub cubes: u32,
    pub variant: McVariant,
}

/// Transport one batch of photons, adding into `tallies`.
pub fn transport<R: Runtime>(
    gpu: &Gpu<R>,
    scene: &McScene,
    batch: &McBatch,
    tallies: &McTallies,
) -> Result<()> {
    let mut name = batch.variant.kernel_name();
    if scene.gates > 0 {
        name.push_str("_gates");
    }
    if scene.tallied_faces > 0 {
        name.push_str("_faces");
    }
    if !scene.track {
        name.push_str("_interaction");
    }
    let det = scene.n_det > 0;
    if det {
        name.push_str("_detect");
    }
    let bad = |why: String| Error::invalid_launch(&name, why);
    batch.variant.check().map_err(bad)?;
    if scene.faces.len() < scene.tets * FACE_FLOATS
        || scene.neigh.len() < scene.tets * NEIGH_INTS
        || scene.region.len() < scene.tets
        || scene.mats.len() < MAT_FLOATS
        || !scene.mats.len().is_multiple_of(MAT_FLOATS)
        || tallies.absorbed.len() < 2 * scene.tets
        || tallies.escaped.len() < 2 * scene.boundary.max(1)
        || tallies.totals.len() < 2 * TOTALS
        || scene.srcs.len() < scene.sources as usize * SRC_FLOATS
        || scene.src_tet.len() < scene.sources as usize
        || scene.src_aux.len() < 4
        || scene.face_slot.is_empty()
        || (scene.tallied_faces > 0 && scene.face_slot.len() < 4 * scene.tets)
        || scene.face_normal.len() < 4 * scene.tallied_faces.max(1)
        || tallies.gated.len() < 2 * (scene.gates as usize * scene.tets).max(1)
        || tallies.face_tally.len() < 4 * scene.tallied_faces.max(1)
        || scene.gates as usize * scene.tets >= 1 << 31
        || scene.sources == 0
        || scene.tets > MAX_TET + 1
        || scene.detectors.len() < DET_FLOATS * scene.n_det.max(1) as usize
        || (det && scene.det_regions == 0)
        || tallies.det_tally.len()
            < if det {
                2 * super::det_entries(scene.n_det, scene.gates)
            } else {
                2
            }
        || tallies.rec_u.len() < (DET_U32 * tallies.rec_cap as usize).max(1)
        || tallies.rec_f.len()
            < (super::det_floats(scene.det_regions, scene.det_momentum) * tallies.rec_cap as usize)
                .max(1)
    {
        return Err(bad("buffer lengths do not match the scene".into()));
    }
    if batch.cubes == 0 {
        return Err(bad("no cubes".into()));
    }
    let stride = u64::from(batch.cubes) * u64::from(batch.variant.units);
    if stride > u64::from(u32::MAX / 2) || u64::from(batch.photons) > u64::from(u32::MAX / 2) {
        return Err(bad(format!(
            "{} photons on {stride} threads: both must stay below 2^31",
            batch.photons
        )));
    }
    let (key_lo, key_hi) = seed_keys(batch.seed);
    let counter = gpu.upload(&[0u32])?;
    let count = CubeCount::Static(batch.cubes, 1, 1);
    let v = batch.variant;
    let dynamic = v.flags & (F_NESTED | F_STATIC) == 0;
    let mut flags = v.flags;
    if scene.gates > 0 {
        flags |= F_GATES;
    }
    if scene.tallied_faces > 0 {
        flags |= F_FACES;
    }
    if scene.track {
        flags |= F_TRACK;
    }
    let (det_regions, momentum) = if det {
        flags |= F_DETECT;
        (scene.det_regions, scene.det_momentum)
    } else {
        (0, false)
    };
    let mut handed_out = 0u32;
    loop {
        gpu.launch(&name, count.clone(), |count| {
            // SAFETY: lengths checked above; the host builds neighbours, regions and source
            // tetrahedra in range (montecarlo-core validates the mesh); f32/i32 buffers read
            // as float4/int4 hold whole vectors (lengths are multiples of 4, allocations are
            // aligned), and u32 buffers read as Atomic<u32> have the same layout.
            unsafe {
                let vec4f =
                    |a: &GpuArray<f32>| ArrayArg::from_raw_parts(a.handle().clone(), a.len() / 4);
                let vec4i =
                    |a: &GpuArray<i32>| ArrayArg::from_raw_parts(a.handle().clone(), a.len() / 4);
                let atomic =
                    |a: &GpuArray<u32>| ArrayArg::from_raw_parts(a.handle().clone(), a.len());
                mc_transport_kernel::launch_unchecked::<R>(
                    gpu.client(),
                    count,
                    CubeDim::new_1d(v.units),
                    vec4f(&scene.faces),
                    vec4i(&scene.neigh),
                    scene.region.arg(),
                    vec4f(&scene.mats),
                    vec4f(&scene.srcs),
                    scene.src_tet.arg(),
                    vec4f(&scene.src_aux),
                    scene.face_slot.arg(),
                    vec4f(&scene.face_normal),
                    atomic(&counter),
                    atomic(&tallies.absorbed),
                    atomic(&tallies.escaped),
                    atomic(&tallies.totals),
                    atomic(&tallies.gated),
                    atomic(&tallies.face_tally),
                    vec4f(&scene.detectors),
                    atomic(&tallies.det_tally),
                    tallies.rec_u.arg(),
                    tallies.rec_f.arg(),
                    batch.photons,
                    batch.first as u32,
                    (batch.first >> 32) as u32,
                    key_lo,
                    key_hi,
                    scene.sources,
                    stride as u32,
                    batch.max_events,
                    batch.budget,
                    scene.tets as u32,
                    scene.gates,
                    batch.wmin,
                    batch.prwin,
                    batch.tmax_ns,
                    batch.n_out,
                    if scene.gates > 0 {
                        1.0 / batch.gate_width_ns
                    } else {
                        0.0
                    },
                    scene.n_det,
                    tallies.rec_cap,
                    flags,
                    v.cross_k,
                    det_regions,
                    momentum,
                );
            }
        })?;
        if !dynamic || batch.budget == u32::MAX {
            return Ok(());
        }
        // Lanes past their budget stopped taking photons: go on until all were handed out.
        let now = gpu.download(&counter)?[0];
        if now >= batch.photons {
            return Ok(());
        }
        if now <= handed_out {
            return Err(bad(format!(
                "no progress: {now} of {} photons handed out",
                batch.photons
            )));
        }
        handed_out = now;
    }
}

/// The transport kernel configured as [`transport`] launches it: a 1-D cube of `units`
/// threads, `flags` (the variant's [`McVariant::flags`] and the output bits `F_GATES`,
/// `F_FACES`, `F_TRACK`, `F_DETECT`), `cross_k` faces per iteration, and with `F_DETECT`
/// `det_regions` regions and momentum transfer or not. The catalog builds its entries here.
pub(crate) fn configured<R: Runtime>(
    client: &ComputeClient<R>,
    units: u32,
    flags: u32,
    cross_k: u32,
    det_regions: u32,
    momentum: bool,
) -> mc_transport_kernel::McTransportKernel<R> {
    mc_transport_kernel::McTransportKernel::<R>::new(
        settings_1d(units),
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
        array(),
        array(),
        array(),
        array(),
        array(),
        array(),
        array(),
        array(),
        (),
        (),
        (),
        (),
        (),
        (),
        (),
        (),
        (),
        (),
        (),
        (),
        (),
        (),
        (),
        (),
        (),
        (),
        flags,
        cross_k,
        det_regions,
        momentum,
    )
}
