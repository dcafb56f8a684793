//! Global analysis (flim-core's `fit_global`) in f32: lifetimes (and a fitted IRF shift)
//! shared by the pixels of a segment, amplitudes (and a fitted offset) per pixel, on the
//! per-pixel fit's model, objectives and bounds ([`super::fit`]'s `evaluate`, reused).
//!
//! **Design.** One cube per segment, one unit per pixel (a stride loop when the segment has
//! more pixels than the cube has units). A segment starts from the fit of its summed decay,
//! which [`global_fit`] runs first with the per-pixel fit kernel (one "pixel" per segment),
//! and from per-pixel amplitudes by weighted linear least squares at those lifetimes, as
//! flim-core does. Each Levenberg-Marquardt iteration then has cube-wide reductions in
//! shared memory (tree reductions, independent of the plane width: lavapipe's planes have 8
//! lanes, NVIDIA's 32):
//! 1. every unit eliminates its pixels' amplitude blocks (Schur complement, as variable
//!    projection does) and the cube sums the reduced system of the shared parameters:
//!    undamped once per new point (the stopping rule), damped for the step;
//! 2. every unit solves that small system itself (all units get the same step, so no
//!    broadcast is needed), steps its pixels, evaluates model, objective and normal
//!    equations at the trial point, and the cube sums the trial objective and the shared
//!    curvature and gradient.
//!
//! Per-pixel normal equations live in a global scratch buffer (two slots: current and
//! trial), field-major so that a cube's loads coalesce; nothing per pixel is kept in
//! registers across iterations, so a unit can stride over any number of pixels. The model
//! is evaluated at one call site (the start is the first "trial"), which keeps the kernel
//! small: lavapipe compiles it in ~2 s. Model weights (`EST_MODEL`) iterate as the Poisson
//! fit (the same fixed point) and add a second call site: Pearson's chi^2 of each pixel at
//! the fit, the goodness of fit they report (as the per-pixel kernel does).
//!
//! Segments come as CSR (offsets into a compact, segment-ordered copy of the fitted pixels'
//! decays), so runs, label images and the whole image all work. Launches are grouped by
//! segment size: a segment of `n` pixels runs on the smallest cube of [`UNIT_CLASSES`] that
//! holds it (32..256 units), so 32-pixel runs waste no units and a whole image uses 256.
//! A single segment runs on one multiprocessor: the whole-image analysis of a large image is
//! therefore far slower than GA-32 (see docs/flim-methods.md).
//!
//! **f32 versus flim-core's f64** (flim-core's rule in parentheses). A segment's objective
//! is summed as an unevaluated pair of f32 values (per-pixel compensated sums, then
//! two-sums up the tree). A step that lowers it by less than `max(tol, 1e-6 / n)` relative
//! converges (`tol`): the per-pixel kernel's 1e-6 of one pixel's objective. At each new
//! point the fit has converged when every free shared parameter's remaining Newton step is
//! below 1e-2 standard errors of the segment's fit (from the undamped reduced system) and
//! every local one's below 1e-2 of its own (`|g| / sqrt(H)`, per pixel) (no such rule);
//! when no step lowers the objective, when all are below 0.1 (the shared gradient below
//! 1e-3), and then without damping on to 1e16. A shared remaining step below
//! [`SHARED_RESOLUTION`] counts as stationary whatever its standard error.

// CubeCL evaluates `if comptime!(..)` at expansion time; merging it with a runtime
// condition would turn it into a runtime branch.
#![allow(clippy::collapsible_if)]

use super::fit::{
    self, EST_MODEL, EST_PEARSON, EST_POISSON, F32_TOLERANCE, FIT_CONVERGED, FIT_FAILED, FitParams,
    Geo, IRF_FITTED, IRF_NONE, STATIONARY, STUCK, evaluate, params, project,
};
use super::{KIND_F32, KIND_U16, count, holds_decays};
use crate::configured::{CatalogEntry, array, entry, settings_1d};
use crate::linalg::cholesky_solve;
use cubecl::prelude::*;
use gpu_runtime::{Error, Gpu, GpuArray, Result};

/// Resolution of the f32 model in a shared parameter (ln tau; the shift in bins): a
/// segment pools all its pixels' photons, so its shared parameters' standard errors can
/// fall below what the f32 model resolves, and the f32 objective's minimum then lies this
/// far from its gradient's zero (measured: 8e-5 in ln tau at 2.5 million photons with an
/// IRF). A remaining step below it counts as stationary whatever the standard error.
pub const SHARED_RESOLUTION: f32 = 2e-4;

/// Damping beyond which a failed step at a point within STUCK standard errors of
/// stationarity ends the fit (steps are then ~1e-4 of Newton's).
const STUCK_DAMPING: f32 = 1e4;

/// Units per cube of each segment-size class: a segment of `n` pixels runs on the first
/// that is >= `n` (the last, with a stride loop, for larger segments).
pub const UNIT_CLASSES: [u32; 4] = [32, 64, 128, 256];

/// Shared parameters: the log-lifetimes, and the shift when fitted.
pub const fn shared_params(k: u32, irf_mode: u32) -> u32 {
    k + (irf_mode == IRF_FITTED) as u32
}

/// Local (per-pixel) parameters: the amplitudes, and the offset when fitted.
pub const fn local_params(k: u32, offset_fitted: bool) -> u32 {
    k + offset_fitted as u32
}

/// Full-vector index of shared parameter `u`.
const fn shared_index(k: u32, zfit: bool, irf_mode: u32, u: u32) -> u32 {
    if u < k {
        k + u
    } else {
        params(k, zfit, irf_mode) - 1
    }
}

/// Full-vector index of local parameter `a`.
const fn local_index(k: u32, a: u32) -> u32 {
    if a < k { a } else { 2 * k }
}

/// Position of entry `(a, b)` of a symmetric `n x n` matrix in its packed upper triangle.
const fn packed(n: u32, a: u32, b: u32) -> u32 {
    let (a, b) = if a <= b { (a, b) } else { (b, a) };
    a * (2 * n - a + 1) / 2 + (b - a)
}

/// Scratch fields per pixel and slot: parameters, objective (hi, lo), packed curvature,
/// gradient.
pub const fn scratch_fields(np: u32) -> u32 {
    np + 2 + np * (np + 1) / 2 + np
}

/// Values of the cube-wide reductions. At a new point: the objective pair, the shared
/// curvature (packed) and gradient, and the local stationarity (a maximum, last). For the
/// reduced system: the eliminated blocks (packed), the right-hand side, and a failed local
/// solve (a maximum, last).
const fn reduced_values(ns: u32) -> u32 {
    3 + ns * (ns + 1) / 2 + ns
}

/// `a + b` for two unevaluated f32 pairs `(hi, lo)`, renormalised (Knuth's two-sum): the
/// sum carries ~48 bits where the compiler keeps float operations in order (CUDA), so a
/// segment's objective resolves the small decreases near the minimum however many pixels it
/// sums. (Mesa's lavapipe reassociates float algebra under WGSL, which cannot mark
/// operations exact: there the error terms fold to zero and the sums are plain f32.)
#[cube]
fn pair_add(a_hi: f32, a_lo: f32, b_hi: f32, b_lo: f32, out: &mut Array<f32>) {
    let s = a_hi + b_hi;
    let bp = s - a_hi;
    let e = (a_hi - (s - bp)) + (b_hi - bp);
    let lo = a_lo + b_lo + e;
    let hi = s + lo;
    out[0] = hi;
    out[1] = lo - (hi - s);
}

/// Sum `vals[0..nv]` over the cube's units through shared memory (a tree of halvings, so
/// the result does not depend on the plane width), and give every unit the totals.
/// `vals[0..2]` is an f32 pair when `pair`; `vals[nv - 1]` is reduced by maximum.
#[cube]
fn reduce(
    red: &mut SharedMemory<f32>,
    vals: &mut Array<f32>,
    tmp: &mut Array<f32>,
    #[comptime] nv: u32,
    #[comptime] units: u32,
    #[comptime] pair: bool,
) {
    let t = UNIT_POS_X;
    #[unroll]
    for v in 0..nv {
        red[(v * units + t) as usize] = vals[v as usize];
    }
    sync_cube();
    let levels = comptime!(units.trailing_zeros());
    #[unroll]
    for l in 0..levels {
        let half = comptime!(units >> (l + 1));
        if t < half {
            #[unroll]
            for v in 0..nv {
                let a = (v * units + t) as usize;
                let b = a + half as usize;
                if comptime!(pair && v == 0) {
                    let lo_a = a + units as usize;
                    let lo_b = b + units as usize;
                    pair_add(red[a], red[lo_a], red[b], red[lo_b], tmp);
                    red[a] = tmp[0];
                    red[lo_a] = tmp[1];
                } else if comptime!(pair && v == 1) {
                    // Reduced with the first value.
                } else if comptime!(v == nv - 1) {
                    red[a] = f32::max(red[a], red[b]);
                } else {
                    red[a] += red[b];
                }
            }
        }
        sync_cube();
    }
    #[unroll]
    for v in 0..nv {
        vals[v as usize] = red[(v * units) as usize];
    }
    // The next reduction overwrites `red`: every unit must have read the totals first.
    sync_cube();
}

/// Scratch index of field `f` of compact pixel `q` in slot `slot`.
#[cube]
fn at(slot: u32, q: u32, pixels: u32, #[comptime] f: u32, #[comptime] nf: u32) -> usize {
    ((slot * nf + f) * pixels + q) as usize
}

/// Store a pixel's parameters, objective pair and normal equations (from `evaluate`).
#[cube]
fn store(
    scratch: &mut Array<f32>,
    slot: u32,
    q: u32,
    pixels: u32,
    theta: &Array<f32>,
    acc: &Array<f32>,
    hm: &Array<f32>,
    g: &Array<f32>,
    #[comptime] np: u32,
) {
    let nf = comptime!(scratch_fields(np));
    #[unroll]
    for u in 0..np {
        scratch[at(slot, q, pixels, u, nf)] = theta[u as usize];
        scratch[at(
            slot,
            q,
            pixels,
            comptime!(np + 2 + np * (np + 1) / 2 + u),
            nf,
        )] = g[u as usize];
        #[unroll]
        for v in u..np {
            scratch[at(slot, q, pixels, comptime!(np + 2 + packed(np, u, v)), nf)] =
                hm[(u * 8 + v) as usize];
        }
    }
    // Kahan's sum: the objective is acc[0] less the compensation acc[4].
    scratch[at(slot, q, pixels, np, nf)] = acc[0];
    scratch[at(slot, q, pixels, comptime!(np + 1), nf)] = -acc[4];
}

/// Add a freshly evaluated pixel to the unit's sums: objective pair, shared curvature and
/// gradient, and its local stationarity (largest `|g| / sqrt(H)` of its free local
/// parameters, in standard errors).
#[cube]
fn add_point(
    vals: &mut Array<f32>,
    tmp: &mut Array<f32>,
    theta: &Array<f32>,
    acc: &Array<f32>,
    hm: &Array<f32>,
    g: &Array<f32>,
    #[comptime] k: u32,
    #[comptime] zfit: bool,
    #[comptime] irf_mode: u32,
) {
    let ns = comptime!(shared_params(k, irf_mode));
    let nl = comptime!(local_params(k, zfit));
    let nv = comptime!(reduced_values(ns));
    pair_add(vals[0], vals[1], acc[0], -acc[4], tmp);
    vals[0] = tmp[0];
    vals[1] = tmp[1];
    #[unroll]
    for u in 0..ns {
        let iu = comptime!(shared_index(k, zfit, irf_mode, u));
        vals[comptime!(2 + ns * (ns + 1) / 2 + u) as usize] += g[iu as usize];
        #[unroll]
        for v in u..ns {
            let iv = comptime!(shared_index(k, zfit, irf_mode, v));
            vals[comptime!(2 + packed(ns, u, v)) as usize] += hm[(iu * 8 + iv) as usize];
        }
    }
    let mut worst = vals[(nv - 1) as usize];
    #[unroll]
    for a in 0..nl {
        let ia = comptime!(local_index(k, a));
        let gu = g[ia as usize];
        let huu = hm[(ia * 9) as usize];
        let blocked = theta[ia as usize] <= 0.0f32 && gu > 0.0f32;
        if !blocked && huu > 0.0f32 {
            worst = f32::max(worst, f32::abs(gu) / f32::sqrt(huu));
        }
    }
    vals[(nv - 1) as usize] = worst;
}

/// A pixel's local system from its stored normal equations: the damped local curvature
/// `hll` (4 x 4, a blocked parameter's row and column replaced by the identity), the
/// coupling `hls[v * 4 + a]` of shared `v` and local `a`, and the local gradient `gl`
/// (blocked entries zeroed). Blocked: an amplitude or offset at 0 that the descent pushes
/// below. Damping: Marquardt's, `d + lambda max(d, 1e-12 (1 + d))`, as flim-core.
#[cube]
fn local_system(
    scratch: &Array<f32>,
    slot: u32,
    q: u32,
    pixels: u32,
    lambda: f32,
    hll: &mut Array<f32>,
    hls: &mut Array<f32>,
    gl: &mut Array<f32>,
    #[comptime] k: u32,
    #[comptime] zfit: bool,
    #[comptime] irf_mode: u32,
) {
    let np = comptime!(params(k, zfit, irf_mode));
    let ns = comptime!(shared_params(k, irf_mode));
    let nl = comptime!(local_params(k, zfit));
    let nf = comptime!(scratch_fields(np));
    let hbase = comptime!(np + 2);
    let gbase = comptime!(np + 2 + np * (np + 1) / 2);
    #[unroll]
    for a in 0..nl {
        let ia = comptime!(local_index(k, a));
        let ga = scratch[at(slot, q, pixels, comptime!(gbase + ia), nf)];
        let blocked = scratch[at(slot, q, pixels, ia, nf)] <= 0.0f32 && ga > 0.0f32;
        #[unroll]
        for b in a..nl {
            let ib = comptime!(local_index(k, b));
            hll[(a * 4 + b) as usize] =
                scratch[at(slot, q, pixels, comptime!(hbase + packed(np, ia, ib)), nf)];
        }
        #[unroll]
        for v in 0..ns {
            let iv = comptime!(shared_index(k, zfit, irf_mode, v));
            hls[(v * 4 + a) as usize] =
                scratch[at(slot, q, pixels, comptime!(hbase + packed(np, ia, iv)), nf)];
        }
        gl[a as usize] = ga;
        let d = hll[(a * 5) as usize];
        hll[(a * 5) as usize] = d + lambda * f32::max(d, 1e-12f32 * (1.0f32 + d));
        if blocked {
            #[unroll]
            for b in 0..nl {
                hll[(a * 4 + b) as usize] = 0.0f32;
                hll[(b * 4 + a) as usize] = 0.0f32;
            }
            hll[(a * 5) as usize] = 1.0f32;
            #[unroll]
            for v in 0..ns {
                hls[(v * 4 + a) as usize] = 0.0f32;
            }
            gl[a as usize] = 0.0f32;
        }
    }
}

/// Whether shared parameter `u` (value `v`, segment gradient `gu`) sits on a bound the
/// descent leaves: a lifetime on its bounds, the shift at half the window.
#[cube]
fn shared_blocked(
    v: f32,
    gu: f32,
    lo: f32,
    hi: f32,
    half: f32,
    #[comptime] u: u32,
    #[comptime] k: u32,
) -> bool {
    let mut b = (v <= -half && gu > 0.0f32) || (v >= half && gu < 0.0f32);
    if comptime!(u < k) {
        b = (v <= lo && gu > 0.0f32) || (v >= hi && gu < 0.0f32);
    }
    b
}

/// Add a pixel's eliminated block to `vals[base..]` (packed `H_sl Hll^-1 H_ls`, then
/// `H_sl Hll^-1 g_l`) for damping `lambda`, and flag `vals[fail]` when its local curvature
/// is not positive definite.
#[cube]
fn eliminate(
    scratch: &Array<f32>,
    slot: u32,
    q: u32,
    pixels: u32,
    lambda: f32,
    vals: &mut Array<f32>,
    #[comptime] base: u32,
    #[comptime] fail: u32,
    #[comptime] k: u32,
    #[comptime] zfit: bool,
    #[comptime] irf_mode: u32,
) {
    let ns = comptime!(shared_params(k, irf_mode));
    let nl = comptime!(local_params(k, zfit));
    let ps = comptime!(ns * (ns + 1) / 2);
    let mut w = Array::<f32>::new(16usize); // hll^-1 H_ls, by shared column
    let mut hll = Array::<f32>::new(16usize);
    let mut hls = Array::<f32>::new(16usize);
    let mut gl = Array::<f32>::new(4usize);
    let mut y = Array::<f32>::new(4usize);
    let mut b = Array::<f32>::new(4usize);
    let mut x = Array::<f32>::new(4usize);
    local_system(
        scratch, slot, q, pixels, lambda, &mut hll, &mut hls, &mut gl, k, zfit, irf_mode,
    );
    let mut ok = cholesky_solve::<f32>(&hll, &gl, &mut y, 4u32, nl);
    #[unroll]
    for v in 0..ns {
        #[unroll]
        for a in 0..nl {
            b[a as usize] = hls[(v * 4 + a) as usize];
        }
        let okv = cholesky_solve::<f32>(&hll, &b, &mut x, 4u32, nl);
        ok = ok && okv;
        #[unroll]
        for a in 0..nl {
            w[(v * 4 + a) as usize] = x[a as usize];
        }
    }
    #[unroll]
    for u in 0..ns {
        let mut r = 0.0f32;
        #[unroll]
        for a in 0..nl {
            r += hls[(u * 4 + a) as usize] * y[a as usize];
        }
        vals[comptime!(base + ps + u) as usize] += r;
        #[unroll]
        for v in u..ns {
            let mut e = 0.0f32;
            #[unroll]
            for a in 0..nl {
                e += hls[(u * 4 + a) as usize] * w[(v * 4 + a) as usize];
            }
            vals[comptime!(base + packed(ns, u, v)) as usize] += e;
        }
    }
    if !ok {
        vals[fail as usize] = 1.0f32;
    }
}

/// The reduced system of the shared parameters for damping `lambda` (`mm`, 4 x 4 upper,
/// and `rhs`): the damped segment curvature less the eliminated blocks `vals[base..]`, a
/// blocked parameter's row and column replaced by the identity (flim-core's
/// `fit_segment`).
#[cube]
fn reduced_system(
    sums: &Array<f32>,
    vals: &Array<f32>,
    shp: &Array<f32>,
    lambda: f32,
    lo: f32,
    hi: f32,
    half: f32,
    mm: &mut Array<f32>,
    rhs: &mut Array<f32>,
    #[comptime] base: u32,
    #[comptime] k: u32,
    #[comptime] ns: u32,
) {
    let ps = comptime!(ns * (ns + 1) / 2);
    #[unroll]
    for u in 0..ns {
        rhs[u as usize] =
            -sums[comptime!(2 + ps + u) as usize] + vals[comptime!(base + ps + u) as usize];
        #[unroll]
        for v in u..ns {
            let huv = sums[comptime!(2 + packed(ns, u, v)) as usize];
            let mut e = huv;
            if comptime!(u == v) {
                e = huv + lambda * f32::max(huv, 1e-12f32 * (1.0f32 + huv));
            }
            mm[(u * 4 + v) as usize] = e - vals[comptime!(base + packed(ns, u, v)) as usize];
        }
    }
    #[unroll]
    for u in 0..ns {
        let gu = sums[comptime!(2 + ps + u) as usize];
        if shared_blocked(shp[u as usize], gu, lo, hi, half, u, k) {
            #[unroll]
            for v in 0..ns {
                mm[(u * 4 + v) as usize] = 0.0f32;
                mm[(v * 4 + u) as usize] = 0.0f32;
            }
            mm[(u * 5) as usize] = 1.0f32;
            rhs[u as usize] = 0.0f32;
        }
    }
}

/// Largest remaining Newton step of the free shared parameters, in standard errors of the
/// whole segment's fit (`step_u / sqrt((S^-1)_uu)`, `S` the undamped reduced system in
/// `mm`, `rhs`, the locals' uncertainty included), with steps below
/// [`SHARED_RESOLUTION`] counted as 0; infinite when `S` is not positive definite.
#[cube]
fn shared_step(
    mm: &Array<f32>,
    rhs: &Array<f32>,
    step: &mut Array<f32>,
    e: &mut Array<f32>,
    x: &mut Array<f32>,
    #[comptime] ns: u32,
) -> f32 {
    let mut worst = 0.0f32;
    if !cholesky_solve::<f32>(mm, rhs, step, 4u32, ns) {
        worst = f32::new(3.0e38);
    }
    #[unroll]
    for u in 0..ns {
        #[unroll]
        for v in 0..ns {
            e[v as usize] = 0.0f32;
        }
        e[u as usize] = 1.0f32;
        let _ = cholesky_solve::<f32>(mm, e, x, 4u32, ns);
        let su = f32::abs(step[u as usize]);
        let var = x[u as usize];
        if su > SHARED_RESOLUTION {
            if var > 0.0f32 {
                worst = f32::max(worst, su / f32::sqrt(var));
            } else {
                worst = f32::new(3.0e38);
            }
        }
    }
    worst
}

/// Global analysis, one cube per segment (`ids[c]` for cube `c`). Pixel `i` of segment `s`
/// is compact pixel `offsets[s] + i`: its decay at `words` elements `(offsets[s] + i) *
/// stride..`, its outputs `out[q * pixels + offsets[s] + i]`, the `np` parameters then the
/// objective. `pooled[q * segments + s]` holds the fit of the segment's summed decay
/// (parameter `q`); `status[s]` the segment's status in the low byte, iterations above.
/// `scratch` holds `2 * scratch_fields(np) * pixels` values.
#[cube(launch_unchecked)]
pub fn global_kernel(
    words: &Array<u32>,
    irf: &Array<f32>,
    offsets: &Array<u32>,
    ids: &Array<u32>,
    pooled: &Array<f32>,
    scratch: &mut Array<f32>,
    out: &mut Array<f32>,
    status: &mut Array<u32>,
    cubes: u32,
    segments: u32,
    pixels: u32,
    stride: u32,
    first: u32,
    m: u32,
    h: f32,
    period_bins: f32,
    ln_tau_lo: f32,
    ln_tau_hi: f32,
    offset: f32,
    shift: f32,
    max_iterations: u32,
    tol: f32,
    #[comptime] kind: u32,
    #[comptime] k: u32,
    #[comptime] est: u32,
    #[comptime] zfit: bool,
    #[comptime] irf_mode: u32,
    #[comptime] units: u32,
) {
    let c = CUBE_POS_X + CUBE_POS_Y * CUBE_COUNT_X;
    // Uniform over the cube: every unit of a cube takes the same branches and loop trips,
    // so the barriers inside are reached by all.
    if c < cubes {
        let np = comptime!(params(k, zfit, irf_mode));
        let ns = comptime!(shared_params(k, irf_mode));
        let nl = comptime!(local_params(k, zfit));
        let nv = comptime!(reduced_values(ns));
        let nf = comptime!(scratch_fields(np));
        let t = UNIT_POS_X;
        let seg = ids[c as usize];
        let start = offsets[seg as usize];
        let n = offsets[(seg + 1) as usize] - start;
        let half = 0.5f32 * f32::cast_from(stride);
        let mut red = SharedMemory::<f32>::new(comptime!((nv * units) as usize));
        let mut vals = Array::<f32>::new(comptime!(nv as usize));
        let mut sums = Array::<f32>::new(comptime!(nv as usize));
        let mut tmp = Array::<f32>::new(2usize);
        let mut hm = Array::<f32>::new(64usize);
        let mut g = Array::<f32>::new(8usize);
        let mut st = Array::<f32>::new(48usize);
        let mut d = Array::<f32>::new(8usize);
        let mut tt = Array::<f32>::new(4usize);
        let mut acc = Array::<f32>::new(5usize);
        let mut theta = Array::<f32>::new(8usize);
        let mut shp = Array::<f32>::new(4usize);
        let mut tshp = Array::<f32>::new(4usize);
        let mut hll = Array::<f32>::new(16usize);
        let mut hls = Array::<f32>::new(16usize);
        let mut gl = Array::<f32>::new(4usize);
        let mut bb = Array::<f32>::new(4usize);
        let mut xx = Array::<f32>::new(4usize);
        let mut xv = Array::<f32>::new(4usize);
        let mut mm = Array::<f32>::new(16usize);
        let mut rhs = Array::<f32>::new(4usize);
        let mut ds = Array::<f32>::new(4usize);
        #[unroll]
        for u in 0..ns {
            let iu = comptime!(shared_index(k, zfit, irf_mode, u));
            shp[u as usize] = pooled[(iu * segments + seg) as usize];
        }
        // The per-pixel kernel's 1e-6 of one pixel's objective.
        let tol_seg = f32::max(tol, F32_TOLERANCE / f32::cast_from(n));
        // Every pixel's geometry but its first element (`base`, set per pixel).
        let geo0 = Geo {
            base: 0u32,
            first,
            m,
            bins: stride,
            h,
            period_bins,
            ln_tau_lo,
            ln_tau_hi,
            offset,
            shift,
        };

        // Start (flim-core's `initial_guess` at the pooled lifetimes, then the pooled shared
        // parameters): offset from the quietest 5 bins, amplitudes by weighted linear least
        // squares (at the start shift, as flim-core), into slot 0. The trial code below
        // evaluates it (one call site of the model: a smaller kernel).
        let mut i = t;
        while i < n {
            let q = start + i;
            let mut geo = geo0;
            geo.base = q * stride;
            let mut photons = 0.0f32;
            let mut win = 0.0f32;
            let mut low = f32::new(3.0e38);
            let w5 = u32::min(5u32, m);
            for j in 0..m {
                let cj = count(words, geo.base + first + j, kind);
                photons += cj;
                win += cj;
                if j >= w5 {
                    win -= count(words, geo.base + first + j - w5, kind);
                }
                if j + 1 >= w5 {
                    low = f32::min(low, win / f32::cast_from(w5));
                }
            }
            #[unroll]
            for u in 0..8u32 {
                theta[u as usize] = 0.0f32;
            }
            let mut z0 = offset;
            if comptime!(zfit) {
                z0 = 0.5f32 * f32::max(low, 0.0f32);
                theta[(2 * k) as usize] = z0;
            }
            if comptime!(irf_mode == IRF_FITTED) {
                theta[(np - 1) as usize] = shift;
            }
            #[unroll]
            for cc in 0..k {
                theta[(k + cc) as usize] = shp[cc as usize];
                theta[cc as usize] = 1.0f32;
            }
            evaluate(
                words, irf, geo, &theta, &mut hm, &mut g, &mut st, &mut d, &mut tt, &mut acc, kind,
                k, est, zfit, irf_mode, true, true,
            );
            let ok = cholesky_solve::<f32>(&hm, &g, &mut xx, 8u32, k);
            let signal = f32::max(photons - f32::cast_from(m) * z0, 1.0f32);
            #[unroll]
            for cc in 0..k {
                let mut a = 0.1f32 * signal / f32::max(acc[(1 + cc) as usize], 1e-30f32);
                if ok && xx[cc as usize] > 0.0f32 {
                    a = xx[cc as usize];
                }
                scratch[at(0u32, q, pixels, cc, nf)] = a;
            }
            #[unroll]
            for u in k..np {
                scratch[at(0u32, q, pixels, u, nf)] = theta[u as usize];
            }
            if comptime!(irf_mode == IRF_FITTED) {
                scratch[at(0u32, q, pixels, comptime!(np - 1), nf)] = shp[k as usize];
            }
            i += units;
        }

        // Levenberg-Marquardt on the joint parameters (flim-core's `fit_segment`). Every unit
        // runs the segment-level steps on the same totals, so all take the same branches.
        // The first round evaluates the start and takes it; each later round is an
        // iteration.
        let mut starting = true;
        let mut cur = 1u32;
        let mut lambda = 1e-3f32;
        let mut result = u32::new(FIT_FAILED as i64);
        let mut iterations = 0u32;
        let mut running = true;
        // Whether the current point's stopping rule has been evaluated, and its outcome
        // with the looser STUCK limit.
        let mut checked = false;
        let mut near = false;
        while running && (starting || iterations < max_iterations) {
            let mut step = starting;
            if !starting {
                iterations += 1u32;
                if !(sums[0] <= 3.0e38f32) {
                    running = false;
                }
                // 1. The reduced system, each pixel's amplitude block eliminated: undamped
                // once per new point (the stopping rule), then damped (the step). One call
                // site in a loop keeps the kernel small.
                let mut pass = u32::new(0);
                if checked {
                    pass = 1u32;
                }
                while running && pass < 2u32 {
                    let mut lam = lambda;
                    if pass == 0u32 {
                        lam = 0.0f32;
                    }
                    #[unroll]
                    for v in 0..nv {
                        vals[v as usize] = 0.0f32;
                    }
                    let mut i1 = t;
                    while i1 < n {
                        let q = start + i1;
                        eliminate(
                            scratch,
                            cur,
                            q,
                            pixels,
                            lam,
                            &mut vals,
                            0u32,
                            comptime!(nv - 1),
                            k,
                            zfit,
                            irf_mode,
                        );
                        i1 += units;
                    }
                    reduce(&mut red, &mut vals, &mut tmp, nv, units, false);
                    reduced_system(
                        &sums, &vals, &shp, lam, ln_tau_lo, ln_tau_hi, half, &mut mm, &mut rhs,
                        0u32, k, ns,
                    );
                    if pass == 0u32 {
                        // Stationary: every free parameter's remaining Newton step below
                        // STATIONARY standard errors (shared: of the segment's fit; local:
                        // per pixel, given the shared ones), or the shared ones' below the
                        // f32 model's resolution.
                        checked = true;
                        let mut shared = shared_step(&mm, &rhs, &mut ds, &mut bb, &mut xv, ns);
                        if vals[(nv - 1) as usize] > 0.0f32 {
                            shared = f32::new(3.0e38);
                        }
                        let local = sums[(nv - 1) as usize];
                        near = shared <= STUCK && local <= STUCK;
                        if shared <= STATIONARY && local <= STATIONARY {
                            result = FIT_CONVERGED;
                            running = false;
                        }
                    }
                    pass += 1u32;
                }
                if running {
                    let solved = cholesky_solve::<f32>(&mm, &rhs, &mut ds, 4u32, ns);
                    if !solved || vals[(nv - 1) as usize] > 0.0f32 {
                        lambda *= 10.0f32;
                        if lambda > 1e16f32 {
                            running = false;
                        }
                    } else {
                        step = true;
                    }
                }
            }
            if running && step {
                // 2. The trial point (or the start): shared step, each pixel's local step
                // for it, and the model, objective and normal equations there.
                #[unroll]
                for u in 0..ns {
                    let mut v = shp[u as usize];
                    if !starting {
                        v += ds[u as usize];
                    }
                    if comptime!(u < k) {
                        v = f32::clamp(v, ln_tau_lo, ln_tau_hi);
                    } else {
                        v = f32::clamp(v, -half, half);
                    }
                    tshp[u as usize] = v;
                }
                #[unroll]
                for v in 0..nv {
                    vals[v as usize] = 0.0f32;
                }
                let next = 1u32 - cur;
                let mut i2 = t;
                while i2 < n {
                    let q = start + i2;
                    let mut geo = geo0;
                    geo.base = q * stride;
                    if starting {
                        #[unroll]
                        for u in 0..np {
                            theta[u as usize] = scratch[at(next, q, pixels, u, nf)];
                        }
                    } else {
                        local_system(
                            scratch, cur, q, pixels, lambda, &mut hll, &mut hls, &mut gl, k, zfit,
                            irf_mode,
                        );
                        // dl = hll^-1 (-g_l - H_ls ds); blocked rows are zero on the right.
                        #[unroll]
                        for a in 0..nl {
                            let mut r = -gl[a as usize];
                            #[unroll]
                            for v in 0..ns {
                                r -= hls[(v * 4 + a) as usize] * ds[v as usize];
                            }
                            bb[a as usize] = r;
                        }
                        let _ = cholesky_solve::<f32>(&hll, &bb, &mut xx, 4u32, nl);
                        #[unroll]
                        for u in 0..np {
                            theta[u as usize] = scratch[at(cur, q, pixels, u, nf)];
                        }
                        #[unroll]
                        for a in 0..nl {
                            let ia = comptime!(local_index(k, a));
                            theta[ia as usize] += xx[a as usize];
                        }
                        #[unroll]
                        for u in 0..ns {
                            let iu = comptime!(shared_index(k, zfit, irf_mode, u));
                            theta[iu as usize] = tshp[u as usize];
                        }
                        project(geo, &mut theta, k, zfit, irf_mode);
                    }
                    evaluate(
                        words, irf, geo, &theta, &mut hm, &mut g, &mut st, &mut d, &mut tt,
                        &mut acc, kind, k, est, zfit, irf_mode, true, false,
                    );
                    store(scratch, next, q, pixels, &theta, &acc, &hm, &g, np);
                    add_point(
                        &mut vals, &mut tmp, &theta, &acc, &hm, &g, k, zfit, irf_mode,
                    );
                    i2 += units;
                }
                reduce(&mut red, &mut vals, &mut tmp, nv, units, true);
                let decrease = (sums[0] - vals[0]) + (sums[1] - vals[1]);
                let finite = vals[0] <= 3.0e38f32;
                if starting || (finite && decrease > 0.0f32) {
                    let small = !starting && decrease <= tol_seg * f32::abs(vals[0]);
                    if !starting {
                        lambda = f32::max(lambda * 0.1f32, 1e-12f32);
                    }
                    starting = false;
                    cur = next;
                    checked = false;
                    #[unroll]
                    for v in 0..nv {
                        sums[v as usize] = vals[v as usize];
                    }
                    #[unroll]
                    for u in 0..ns {
                        shp[u as usize] = tshp[u as usize];
                    }
                    if small {
                        result = FIT_CONVERGED;
                        running = false;
                    }
                } else {
                    lambda *= 10.0f32;
                    // No step lowers the objective: a minimum if the remaining steps are
                    // small (flim-core: the shared gradient; here every free parameter's
                    // step within STUCK standard errors). Damped steps that still fail
                    // there are the f32 objective's rounding, not a slope: stop then
                    // rather than damp on to 1e16 as flim-core does.
                    if near && lambda > STUCK_DAMPING {
                        result = FIT_CONVERGED;
                        running = false;
                    } else if lambda > 1e16f32 {
                        if near {
                            result = FIT_CONVERGED;
                        }
                        running = false;
                    }
                }
            }
        }
        // Outputs: each pixel's parameters and goodness of fit (its objective; for model
        // weights, which iterate on the deviance, Pearson's chi^2 at the fit, as the per-pixel
        // kernel reports it); the segment's status from its first pixel (flim-core: a
        // lifetime on its bound with a non-zero amplitude in the segment's first pixel, or an
        // objective that is not finite, fails).
        let mut i3 = t;
        while i3 < n {
            let q = start + i3;
            #[unroll]
            for u in 0..np {
                let v = scratch[at(cur, q, pixels, u, nf)];
                out[(u * pixels + q) as usize] = v;
                theta[u as usize] = v;
            }
            let mut obj = scratch[at(cur, q, pixels, np, nf)]
                + scratch[at(cur, q, pixels, comptime!(np + 1), nf)];
            if comptime!(est == EST_MODEL) {
                let mut geo = geo0;
                geo.base = q * stride;
                obj = evaluate(
                    words,
                    irf,
                    geo,
                    &theta,
                    &mut hm,
                    &mut g,
                    &mut st,
                    &mut d,
                    &mut tt,
                    &mut acc,
                    kind,
                    k,
                    EST_PEARSON,
                    zfit,
                    irf_mode,
                    false,
                    false,
                );
            }
            out[(np * pixels + q) as usize] = obj;
            i3 += units;
        }
        if t == 0u32 {
            let mut bad = !(f32::abs(sums[0]) <= 3.0e38f32);
            #[unroll]
            for cc in 0..k {
                let lt = shp[cc as usize];
                if scratch[at(cur, start, pixels, cc, nf)] > 0.0f32
                    && (lt <= ln_tau_lo + 1e-6f32 || lt >= ln_tau_hi - 1e-6f32)
                {
                    bad = true;
                }
            }
            if bad {
                result = FIT_FAILED;
            }
            status[seg as usize] = result | (iterations << 8u32);
        }
    }
}

/// Segment-size class of a segment of `n` pixels (index into [`UNIT_CLASSES`]), given the
/// number of classes the device allows (`classes`, >= 1).
pub fn unit_class(n: usize, classes: usize) -> usize {
    UNIT_CLASSES[..classes]
        .iter()
        .position(|&u| n <= u as usize)
        .unwrap_or(classes - 1)
}

/// Classes of [`UNIT_CLASSES`] a device runs: cubes within its units per cube, reductions
/// within its shared memory (`4 * reduced_values * units` bytes).
fn allowed_classes<R: Runtime>(gpu: &Gpu<R>, ns: u32) -> usize {
    let hw = &gpu.client().properties().hardware;
    UNIT_CLASSES
        .iter()
        .take_while(|&&u| {
            u <= hw.max_units_per_cube
                && (4 * reduced_values(ns) * u) as usize <= hw.max_shared_memory_size
        })
        .count()
}

/// Output planes per compact pixel: the parameters and the goodness of fit (the objective;
/// Pearson's chi^2 for model weights, `EST_MODEL`, which iterate on the deviance).
pub fn global_planes(p: &FitParams) -> usize {
    params(p.components, p.offset_fitted, p.irf_mode) as usize + 1
}

/// Run global analysis: the fit of each segment's summed decay (the per-pixel fit kernel on
/// `sums`, `segments x stride` f32 counts as words), then [`global_kernel()`] for each size
/// class. `words` holds the `p.pixels` compact decays (segment by segment, `p.kind`,
/// `p.stride` counts each), `offsets` the CSR offsets (`segments + 1`, strictly increasing
/// from 0 to at most `p.pixels`), `init` 3 start lifetimes (0 = from the data). Writes
/// `out[q * p.pixels + i]` ([`global_planes`] planes) and `status[s]` (status in the low
/// byte, iterations above). `p.pixels` counts compact pixels; `p.threshold`,
/// `p.mask_offset` and `p.use_mask` are not used (the caller picks the fitted pixels).
pub fn global_fit<R: Runtime>(
    gpu: &Gpu<R>,
    words: &GpuArray<u32>,
    sums: &GpuArray<u32>,
    irf: &GpuArray<f32>,
    init: &GpuArray<f32>,
    offsets: &[u32],
    p: &FitParams,
    out: &GpuArray<f32>,
    status: &GpuArray<u32>,
) -> Result<()> {
    let name = "flim_global";
    let pixels = p.pixels as usize;
    let segments = offsets.len().saturating_sub(1);
    if !(1..=3).contains(&p.components)
        || p.estimator > EST_MODEL
        || p.irf_mode > IRF_FITTED
        || p.kind > KIND_F32
        || p.first + p.m > p.stride
        || p.m < 4
    {
        return Err(Error::invalid_launch(
            name,
            format!(
                "components {}, estimator {}, irf mode {}, kind {}, bins {}..{} of {}",
                p.components,
                p.estimator,
                p.irf_mode,
                p.kind,
                p.first,
                p.first + p.m,
                p.stride
            ),
        ));
    }
    if offsets.first().is_some_and(|&o| o != 0)
        || offsets.windows(2).any(|w| w[1] <= w[0])
        || offsets.last().is_some_and(|&o| o as usize > pixels)
    {
        return Err(Error::invalid_launch(
            name,
            format!(
                "segment offsets must rise strictly from 0 to at most {pixels} pixels (no empty segment)"
            ),
        ));
    }
    let np = params(p.components, p.offset_fitted, p.irf_mode) as usize;
    let fields = scratch_fields(np as u32) as usize;
    if !holds_decays(words, p.kind, pixels, p.stride)
        || sums.len() < segments * p.stride as usize
        || (p.irf_mode != IRF_NONE && irf.len() < p.stride as usize)
        || irf.is_empty()
        || init.len() < 3
        || out.len() < global_planes(p) * pixels
        || status.len() < segments
    {
        return Err(Error::invalid_launch(
            name,
            format!(
                "buffers too short for {pixels} pixels x {} bins in {segments} segments",
                p.stride
            ),
        ));
    }
    if segments == 0 {
        return Ok(());
    }
    // Start: the fit of each segment's summed decay (no threshold, no mask).
    let pooled_p = FitParams {
        pixels: segments as u32,
        mask_offset: 0,
        threshold: 0.0,
        kind: KIND_F32,
        use_mask: false,
        ..*p
    };
    let pooled = gpu.empty::<f32>(pooled_p.planes() * segments)?;
    let pooled_status = gpu.empty::<u32>(segments)?;
    let no_mask = gpu.upload(&[0u32])?;
    fit::fit(
        gpu,
        sums,
        irf,
        &no_mask,
        init,
        &pooled_p,
        &pooled,
        &pooled_status,
    )?;
    let classes = allowed_classes(gpu, shared_params(p.components, p.irf_mode));
    if classes == 0 {
        return Err(Error::invalid_launch(
            name,
            format!(
                "the device's cubes are too small: {} units need {} bytes of shared memory",
                UNIT_CLASSES[0],
                4 * reduced_values(shared_params(p.components, p.irf_mode)) * UNIT_CLASSES[0]
            ),
        ));
    }
    let scratch = gpu.empty::<f32>(2 * fields * pixels)?;
    let offsets_dev = gpu.upload(offsets)?;
    let (lo, hi) = p.tau_bounds;
    for (class, &units) in UNIT_CLASSES[..classes].iter().enumerate() {
        let ids: Vec<u32> = (0..segments)
            .filter(|&s| unit_class((offsets[s + 1] - offsets[s]) as usize, classes) == class)
            .map(|s| s as u32)
            .collect();
        if ids.is_empty() {
            continue;
        }
        let ids_dev = gpu.upload(&ids)?;
        let cubes = ids.len();
        let count = gpu.cube_count_1d(name, cubes * units as usize, units)?;
        gpu.launch(name, count, |count| {
            // SAFETY: lengths checked above; cube c < cubes reads ids[c] (< segments, built
            // here), offsets[s..=s + 1] (checked: rising, <= pixels), pooled[q * segments
            // + s] (q < planes), counts of compact pixels < pixels (bins < stride), irf[q]
            // (q < stride), and writes scratch (2 * fields * pixels values), out[q * pixels
            // + i] (q <= np, i < pixels) and status[s].
            unsafe {
                global_kernel::launch_unchecked::<R>(
                    gpu.client(),
                    count,
                    CubeDim::new_1d(units),
                    words.arg(),
                    irf.arg(),
                    offsets_dev.arg(),
                    ids_dev.arg(),
                    pooled.arg(),
                    scratch.arg(),
                    out.arg(),
                    status.arg(),
                    cubes as u32,
                    segments as u32,
                    p.pixels,
                    p.stride,
                    p.first,
                    p.m,
                    p.h,
                    p.period_bins,
                    lo.ln(),
                    hi.ln(),
                    p.offset,
                    p.shift,
                    p.max_iterations,
                    p.tolerance.max(0.0),
                    p.kind,
                    p.components,
                    p.estimator,
                    p.offset_fitted,
                    p.irf_mode,
                    units,
                );
            };
        })?;
    }
    Ok(())
}

/// [`global_kernel`] configured as [`global_fit`] configures it, for u16 counts (`k`
/// components, estimator `est`, offset fitted when `zfit`, IRF mode `irf_mode`, `units` per
/// cube); the catalog's entries.
pub(crate) fn configured<R: Runtime>(
    client: &ComputeClient<R>,
    k: u32,
    est: u32,
    zfit: bool,
    irf_mode: u32,
    units: u32,
) -> global_kernel::GlobalKernel<R> {
    global_kernel::GlobalKernel::<R>::new(
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
        KIND_U16,
        k,
        est,
        zfit,
        irf_mode,
        units,
    )
}

/// This module's kernels, configured as [`global_fit`] configures them: the paper's GA-32
/// case (bi-exponential MLE tail fit on 32-unit cubes), a whole image (256 units), the
/// model weights (with their Pearson evaluation) and the largest shared system (fitted
/// shift and offset).
pub(crate) fn catalog<R: Runtime>(client: &ComputeClient<R>) -> Vec<CatalogEntry> {
    [
        ("global_bi_mle_tail_32", 2, EST_POISSON, false, IRF_NONE, 32),
        (
            "global_bi_mle_tail_256",
            2,
            EST_POISSON,
            false,
            IRF_NONE,
            256,
        ),
        (
            "global_mono_neyman_irf_32",
            1,
            super::fit::EST_NEYMAN,
            false,
            super::fit::IRF_FIXED,
            32,
        ),
        (
            "global_mono_model_irf_32",
            1,
            EST_MODEL,
            false,
            super::fit::IRF_FIXED,
            32,
        ),
        (
            "global_bi_mle_irf_shift_offset_32",
            2,
            EST_POISSON,
            true,
            IRF_FITTED,
            32,
        ),
        (
            "global_tri_pearson_irf_shift_offset_256",
            3,
            EST_PEARSON,
            true,
            IRF_FITTED,
            256,
        ),
    ]
    .into_iter()
    .map(|(name, k, est, zfit, irf_mode, units)| {
        let kern = configured(client, k, est, zfit, irf_mode, units);
        entry("flim", name, kern)
    })
    .collect()
}
