//! The pieces every perfusion kernel shares: canonical coefficients of a parameter vector,
//! exponential-convolution weights, input sampling, the cost and the normal equations.
//! Each is a line-by-line port of perfusion-core (`model.rs`, `conv.rs`): same operations in
//! the same order, so that f64 results differ from the CPU only by fused multiply-adds and
//! the device's `exp`.

// CubeCL evaluates `if comptime!(..)` at expansion time; merging it with a runtime
// condition would turn it into a runtime branch.
#![allow(clippy::collapsible_if, clippy::collapsible_else_if)]
#![allow(clippy::neg_cmp_op_on_partial_ord)]
// Shared memory is a zero-sized handle on the host side; #[cube] functions take it by
// reference like the arrays.
#![allow(clippy::trivially_copy_pass_by_ref)]

use super::{MODEL_2CXM, MODEL_DUAL_INPUT, MODEL_EXTENDED_TOFTS, MODEL_PATLAK, MODEL_TOFTS};
use cubecl::prelude::*;

/// Comptime model word: the model id in the low byte, [`UNIFORM_GRID`] above it.
pub(crate) const fn model_id(model: u32) -> u32 {
    model & 0xFF
}

/// Set in the comptime model word when the time grid is uniform: samples are then indexed
/// directly (`floor((x - t0) / dt)`), with no search loop.
pub(crate) const UNIFORM_GRID: u32 = 0x100;

pub(crate) const fn uniform(model: u32) -> bool {
    model & UNIFORM_GRID != 0
}

/// Set in the comptime model word when each unit reads its voxel's curve from shared memory
/// (persistent units): `curve[i * cube + lane]`, `cube = 32 (model >> CUBE_SHIFT & 31)`.
pub(crate) const SHARED_CURVE: u32 = 0x200;
pub(crate) const CUBE_SHIFT: u32 = 12;

pub(crate) const fn shared_curve(model: u32) -> bool {
    model & SHARED_CURVE != 0
}

/// Units per cube recorded in the model word (persistent units).
pub(crate) const fn cube_of(model: u32) -> u32 {
    32 * ((model >> CUBE_SHIFT) & 31)
}

/// Sample `i` of the voxel's curve: from the unit's column of shared memory (persistent
/// units) or from the time-major curves (`data[i * voxels + voxel]`, coalesced in a warp).
#[cube]
pub(crate) fn datum<F: Float>(
    data: &Array<f32>,
    curve: &SharedMemory<f32>,
    ctx: Ctx<F>,
    i: u32,
    #[comptime] model: u32,
) -> F {
    let stride = comptime!(cube_of(model));
    datum_at::<F>(data, curve, ctx, i, i * stride + ctx.lane, model)
}

/// [`datum`] with the shared-memory index `c = i cube + lane` already computed.
#[cube]
pub(crate) fn datum_at<F: Float>(
    data: &Array<f32>,
    curve: &SharedMemory<f32>,
    ctx: Ctx<F>,
    i: u32,
    c: u32,
    #[comptime] model: u32,
) -> F {
    #[allow(unused_assignments)]
    let mut d = F::new(0.0);
    if comptime!(shared_curve(model)) {
        d = F::cast_from(curve[c as usize]);
    } else {
        d = F::cast_from(data[(i * ctx.stride + ctx.voxel) as usize]);
    }
    d
}

/// Where the uniform-grid walk finds sample `m` of padded value block `which` (0: arterial,
/// 2: portal): [`walk_base`] in `grid`, or, for persistent units, in the cube's shared copy
/// of the two blocks (`super::shared_inputs_len`: block 0 from 0, block 2 from `3 nt + 2`),
/// read by [`input_load`].
#[cube]
pub(crate) fn walk_index(nt: u32, which: u32, m: i32, #[comptime] model: u32) -> u32 {
    let mut k = walk_base(nt, which, m);
    if comptime!(shared_curve(model)) {
        // Blocks 0 and 2 start at 6 nt and 12 nt + 4 in `grid`.
        k -= 6 * nt;
        if which == 2 {
            k -= 3 * nt + 2;
        }
    }
    k
}

/// Input value `k` ([`walk_index`]).
#[cube]
pub(crate) fn input_load<F: Float>(
    grid: &Array<F>,
    inputs: &SharedMemory<F>,
    k: u32,
    #[comptime] model: u32,
) -> F {
    #[allow(unused_assignments)]
    let mut v = F::new(0.0);
    if comptime!(shared_curve(model)) {
        v = inputs[k as usize];
    } else {
        v = grid[k as usize];
    }
    v
}

/// Number of parameters of `model` (perfusion-core's `Model::n_params`).
pub(crate) const fn n_params(model: u32) -> u32 {
    match model_id(model) {
        MODEL_DUAL_INPUT | MODEL_2CXM => 5,
        MODEL_EXTENDED_TOFTS => 4,
        _ => 3,
    }
}

/// Canonical flags (second input, second exponential, vascular term).
pub(crate) const fn two_inputs(model: u32) -> bool {
    model_id(model) == MODEL_DUAL_INPUT
}
pub(crate) const fn two_exp(model: u32) -> bool {
    model_id(model) == MODEL_2CXM
}
pub(crate) const fn vascular(model: u32) -> bool {
    let m = model_id(model);
    m == MODEL_EXTENDED_TOFTS || m == MODEL_PATLAK
}

/// Series terms of the weights below `x = 1/2`: the next term is below 1e-19 there.
pub const SERIES_TERMS: usize = 17;

/// Coefficients of the weights' Taylor series in `-x` (`x = k dt < 1/2`), for Horner's
/// rule on the CPU and the GPU alike: `a = sum A[j] (-x)^j`, `b = sum B[j] (-x)^j`,
/// `a' = sum DA[j] (-x)^j`, `b' = sum DB[j] (-x)^j` with `A[j] = (j + 1) / (j + 2)!`,
/// `B[j] = 1 / (j + 2)!`, `DA[j] = -(j + 2)(j + 1) / (j + 3)!`, `DB[j] = -(j + 1) / (j + 3)!`.
/// A cost evaluation then takes 17 fused multiply-adds per series instead of a chain of 17
/// f64 divisions (the terms' ratios), which had been the longest dependent chain outside
/// the time loop.
pub const WEIGHT_SERIES: [[f64; SERIES_TERMS]; 4] = weight_series();

const fn weight_series() -> [[f64; SERIES_TERMS]; 4] {
    let mut out = [[0.0; SERIES_TERMS]; 4];
    // 1 / (j + 2)! and 1 / (j + 3)!, built up factor by factor.
    let mut inv2 = 0.5;
    let mut j = 0;
    while j < SERIES_TERMS {
        let inv3 = inv2 / (j as f64 + 3.0);
        out[0][j] = (j as f64 + 1.0) * inv2;
        out[1][j] = inv2;
        out[2][j] = -((j as f64 + 2.0) * (j as f64 + 1.0)) * inv3;
        out[3][j] = -(j as f64 + 1.0) * inv3;
        inv2 = inv3;
        j += 1;
    }
    out
}

/// `sum c[j] y^j` of series `which` of [`WEIGHT_SERIES`] by Horner's rule.
#[cube]
fn series<F: Float>(y: F, #[comptime] which: usize) -> F {
    let mut acc = series_coefficient::<F>(which, SERIES_TERMS - 1);
    #[unroll]
    for j in 1..SERIES_TERMS {
        acc = acc * y + series_coefficient::<F>(which, SERIES_TERMS - 1 - j);
    }
    acc
}

/// Coefficient `j` of series `which` as an f64 literal in f64 kernels (`F::new` takes an
/// f32) and an f32 literal otherwise (WGSL has no f64 to cast from).
#[cube]
#[allow(unused_assignments)] // CubeCL has no if-expressions: declared, then set per branch
fn series_coefficient<F: Float>(#[comptime] which: usize, #[comptime] j: usize) -> F {
    let c = comptime!(WEIGHT_SERIES[which][j]);
    let mut v = F::new(0.0);
    if comptime!(F::MANTISSA_DIGITS > 24) {
        v = F::cast_from(c);
    } else {
        v = F::new(comptime!(c as f32));
    }
    v
}

/// What a kernel needs to evaluate one voxel's model: the shared grid (times, intervals,
/// inputs and their slopes, `nt` values each, in that order) and where the voxel's data are.
#[derive(CubeType, Clone, Copy)]
pub(crate) struct Ctx<F: Float> {
    pub voxel: u32,
    /// The unit's position in its cube (its column of the shared curves).
    pub lane: u32,
    /// Values per time row of the curves (`data[i * stride + voxel]`).
    pub stride: u32,
    pub nt: u32,
    pub rate_scale: F,
    /// 1 / interval of a uniform grid.
    pub inv_dt: F,
}

/// Canonical coefficients (perfusion-core's `Canonical`).
#[derive(CubeType, Clone, Copy)]
pub(crate) struct Canon<F: Float> {
    pub k1: F,
    pub g1: F,
    pub h1: F,
    pub k2: F,
    pub g2: F,
    pub v: F,
    pub tau1: F,
    pub tau2: F,
}

/// Two-compartment exchange quantities (perfusion-core's `Exchange`).
#[derive(CubeType, Clone, Copy)]
pub(crate) struct Exchange<F: Float> {
    pub f: F,
    pub p: F,
    pub prod: F,
    pub d1: F,
    pub r: F,
    pub alpha: F,
    pub beta: F,
    pub a: F,
    pub b: F,
}

#[cube]
pub(crate) fn exchange<F: Float>(fp: F, ps: F, ve: F, vp: F, scale: F) -> Exchange<F> {
    let f = fp * scale;
    let p = ps * scale;
    let sum = (f + p) / vp + p / ve;
    let prod = f * p / (vp * ve);
    let d1 = (f + p) / vp - p / ve;
    let r = F::sqrt(d1 * d1 + F::new(4.0) * p * p / (vp * ve));
    let alpha = F::new(0.5) * (sum + r);
    let mut beta = F::new(0.0);
    if alpha > F::new(0.0) {
        beta = prod / alpha;
    }
    let mut a = f;
    let mut b = F::new(0.0);
    if r > F::new(0.0) {
        a = f * (f / vp - beta) / r;
        b = f * (alpha - f / vp) / r;
    }
    Exchange::<F> {
        f,
        p,
        prod,
        d1,
        r,
        alpha,
        beta,
        a,
        b,
    }
}

/// Canonical coefficients of `x` (user units) for `model`.
#[cube]
pub(crate) fn canonical<F: Float>(x: &Array<F>, scale: F, #[comptime] model: u32) -> Canon<F> {
    let zero = F::new(0.0);
    let mut c = Canon::<F> {
        k1: zero,
        g1: zero,
        h1: zero,
        k2: zero,
        g2: zero,
        v: zero,
        tau1: zero,
        tau2: zero,
    };
    if comptime!(model_id(model) == MODEL_DUAL_INPUT) {
        c.k1 = x[2] * scale;
        c.g1 = x[0] * scale;
        c.h1 = x[1] * scale;
        c.tau1 = x[3];
        c.tau2 = x[4];
    } else if comptime!(model_id(model) == MODEL_TOFTS || model_id(model) == MODEL_EXTENDED_TOFTS) {
        let k = x[0] * scale;
        c.k1 = k / x[1];
        c.g1 = k;
        if comptime!(model_id(model) == MODEL_EXTENDED_TOFTS) {
            c.v = x[2];
            c.tau1 = x[3];
        } else {
            c.tau1 = x[2];
        }
    } else if comptime!(model_id(model) == MODEL_PATLAK) {
        c.g1 = x[0] * scale;
        c.v = x[1];
        c.tau1 = x[2];
    } else {
        let e = exchange::<F>(x[0], x[1], x[2], x[3], scale);
        c.k1 = e.alpha;
        c.g1 = e.a;
        c.k2 = e.beta;
        c.g2 = e.b;
        c.tau1 = x[4];
    }
    c
}

/// The non-zero, non-unit entries of d(canonical)/d(theta) for the models whose chain is
/// nearly constant (perfusion-core's `chain`): `scale` (rate unit) everywhere, and for the
/// Tofts models d(k1)/d(Ktrans) = `d00`, d(k1)/d(ve) = `d01`. The Jacobian rows of these
/// models are written out per model (see [`normal`]); only the 2CXM needs the general matrix.
#[derive(CubeType, Clone, Copy)]
pub(crate) struct Chain<F: Float> {
    pub scale: F,
    pub d00: F,
    pub d01: F,
}

#[cube]
pub(crate) fn chain_small<F: Float>(x: &Array<F>, scale: F, #[comptime] model: u32) -> Chain<F> {
    let mut ch = Chain::<F> {
        scale,
        d00: F::new(0.0),
        d01: F::new(0.0),
    };
    if comptime!(model_id(model) == MODEL_TOFTS || model_id(model) == MODEL_EXTENDED_TOFTS) {
        let k = x[0] * scale;
        let ve = x[1];
        ch.d00 = scale / ve;
        ch.d01 = -(k / ve) / ve;
    }
    ch
}

/// Size of the general chain matrix a model needs (1 where [`Chain`] suffices).
pub(crate) const fn chain_len(model: u32) -> usize {
    if two_exp(model) { 40 } else { 1 }
}

/// d(canonical)/d(theta) into `d[c * 5 + p]` (perfusion-core's `chain`), 2CXM only (the
/// other models use [`Chain`]).
#[cube]
pub(crate) fn chain<F: Float>(x: &Array<F>, scale: F, d: &mut Array<F>, #[comptime] model: u32) {
    if comptime!(two_exp(model)) {
        #[unroll]
        for i in 0..40u32 {
            d[i as usize] = F::new(0.0);
        }
        let ve = x[2];
        let vp = x[3];
        let e = exchange::<F>(x[0], x[1], ve, vp, scale);
        if e.r > F::new(0.0) && e.alpha > F::new(0.0) {
            #[unroll]
            for q in 0..4u32 {
                let mut df = F::new(0.0);
                let mut dp = F::new(0.0);
                let mut dve = F::new(0.0);
                let mut dvp = F::new(0.0);
                if q == 0 {
                    df = scale;
                } else if q == 1 {
                    dp = scale;
                } else if q == 2 {
                    dve = F::new(1.0);
                } else {
                    dvp = F::new(1.0);
                }
                let fp_sum = e.f + e.p;
                let dsum =
                    (df + dp) / vp - fp_sum * dvp / (vp * vp) + dp / ve - e.p * dve / (ve * ve);
                let dprod = (df * e.p + e.f * dp) / (vp * ve) - e.prod * (dvp / vp + dve / ve);
                let dd1 =
                    (df + dp) / vp - fp_sum * dvp / (vp * vp) - dp / ve + e.p * dve / (ve * ve);
                let q4 = F::new(4.0) * e.p * e.p / (vp * ve);
                let ddisc = F::new(2.0) * e.d1 * dd1 + F::new(8.0) * e.p * dp / (vp * ve)
                    - q4 * (dvp / vp + dve / ve);
                let dr = ddisc / (F::new(2.0) * e.r);
                let dalpha = F::new(0.5) * (dsum + dr);
                let dbeta = (dprod - e.beta * dalpha) / e.alpha;
                let qq = e.f / vp - e.beta;
                let dq = df / vp - e.f * dvp / (vp * vp) - dbeta;
                let da = (df * qq + e.f * dq) / e.r - e.a * dr / e.r;
                let w = e.alpha - e.f / vp;
                let dw = dalpha - df / vp + e.f * dvp / (vp * vp);
                let db = (df * w + e.f * dw) / e.r - e.b * dr / e.r;
                d[q as usize] = dalpha;
                d[(5 + q) as usize] = da;
                d[(3 * 5 + q) as usize] = dbeta;
                d[(4 * 5 + q) as usize] = db;
            }
        }
        d[6 * 5 + 4] = F::new(1.0);
    }
}

/// Weights of nothing (initial value before the first interval).
#[cube]
pub(crate) fn weights_zero<F: Float>() -> Weights<F> {
    let z = F::new(0.0);
    Weights::<F> {
        e: z,
        wa: z,
        wb: z,
        de: z,
        dwa: z,
        dwb: z,
    }
}

/// Weights of one interval (perfusion-core's `Weights`).
#[derive(CubeType, Clone, Copy)]
pub(crate) struct Weights<F: Float> {
    pub e: F,
    pub wa: F,
    pub wb: F,
    pub de: F,
    pub dwa: F,
    pub dwb: F,
}

/// `(E, dt a, dt b)` and, with `deriv`, their k-derivatives (perfusion-core's `weights`,
/// `weights_d`).
#[cube]
pub(crate) fn weights<F: Float>(k: F, dt: F, #[comptime] deriv: bool) -> Weights<F> {
    let x = k * dt;
    let e = F::exp(-x);
    let zero = F::new(0.0);
    #[allow(unused_assignments)]
    let mut a = zero;
    #[allow(unused_assignments)]
    let mut b = zero;
    let half = F::new(0.5);
    if x < half {
        a = series::<F>(-x, 0usize);
        b = series::<F>(-x, 1usize);
    } else {
        let xx = x * x;
        let em = F::new(1.0) - e;
        a = (em - x * e) / xx;
        b = (x - em) / xx;
    }
    let mut w = Weights::<F> {
        e,
        wa: dt * a,
        wb: dt * b,
        de: zero,
        dwa: zero,
        dwb: zero,
    };
    if comptime!(deriv) {
        #[allow(unused_assignments)]
        let mut da = zero;
        #[allow(unused_assignments)]
        let mut db = zero;
        if x < half {
            da = series::<F>(-x, 2usize);
            db = series::<F>(-x, 3usize);
        } else {
            let em = F::new(1.0) - e;
            let xxx = x * x * x;
            da = (x * x * e - F::new(2.0) * (em - x * e)) / xxx;
            db = (x * em - F::new(2.0) * (x - em)) / xxx;
        }
        w.de = -dt * e;
        w.dwa = dt * dt * da;
        w.dwb = dt * dt * db;
    }
    w
}

/// An input sampled at one abscissa, and the moved pointer.
#[derive(CubeType, Clone, Copy)]
pub(crate) struct Sample<F: Float> {
    pub value: F,
    pub slope: F,
    pub j: u32,
}

/// Linear interpolation of input `which` (0: arterial, 1: portal) at `x`, from pointer `j0`
/// (perfusion-core's `Sampler::at`), on a non-uniform grid: uniform grids use [`Shift`].
#[cube]
pub(crate) fn sample<F: Float>(
    grid: &Array<F>,
    ctx: Ctx<F>,
    which: u32,
    j0: u32,
    x: F,
) -> Sample<F> {
    let nt = ctx.nt;
    let mut j = j0;
    // lavapipe counts every loop iteration of an invocation, and every loop entered,
    // against a budget of 65,535.
    // (`grid[nt]`, read when j + 1 = nt, is the first interval: in bounds, unused.)
    let mut go = j + 1 < nt && grid[(j + 1) as usize] <= x;
    while go {
        j += 1;
        go = j + 1 < nt && grid[(j + 1) as usize] <= x;
    }
    let u = (2 + 2 * which) * nt;
    let s = u + nt;
    let mut out = Sample::<F> {
        value: grid[u as usize],
        slope: F::new(0.0),
        j,
    };
    if x <= grid[0] {
        out.value = grid[u as usize];
    } else if j + 1 >= nt {
        out.value = grid[(u + nt - 1) as usize];
    } else {
        let sl = grid[(s + j) as usize];
        out.value = grid[(u + j) as usize] + (x - grid[j as usize]) * sl;
        out.slope = sl;
    }
    out
}

/// A delayed input on a uniform grid (perfusion-core's `Shift`): step `i` reads the interval
/// `i + m` at the fraction `fr`, the same for every step, so an evaluation walks each input
/// with a sliding pair of samples (one load per step) instead of locating every sample.
#[derive(CubeType, Clone, Copy)]
pub(crate) struct Shift<F: Float> {
    pub m: i32,
    pub fr: F,
}

/// `m = floor(-tau / dt)` clamped to `[-nt, nt]` (fraction 0 there), `fr = q - m` (exact;
/// NaN for a NaN delay), as perfusion-core's `Shift::new`.
#[cube]
pub(crate) fn shift<F: Float>(tau: F, inv_dt: F, nt: u32) -> Shift<F> {
    let q = -tau * inv_dt;
    let fl = F::floor(q);
    let lim = F::cast_from(nt);
    let n = i32::cast_from(nt);
    let mut out = Shift::<F> {
        m: -n,
        fr: F::new(0.0),
    };
    if fl > lim {
        out.m = n;
    } else if fl >= -lim {
        out.m = i32::cast_from(fl);
        out.fr = q - fl;
    } else if !(fl < -lim) {
        // NaN delay: a NaN curve.
        out.fr = q - fl;
    }
    out
}

/// Index in the grid array of sample `m` of padded block `which` (0: arterial input,
/// 1: its slopes, 2: portal input, 3: its slopes; see `super::grid_values`): the blocks
/// hold every sample index from `-nt - 1` to `2 nt`, clamped to the grid as
/// perfusion-core's `clamped` (slopes: 0 before the grid), so that the uniform-grid walk
/// reads `grid[base + i]` at step `i` with no clamping or index arithmetic per step.
#[cube]
pub(crate) fn walk_base(nt: u32, which: u32, m: i32) -> u32 {
    let origin = 6 * nt + which * (3 * nt + 2) + nt + 1;
    u32::cast_from(i32::cast_from(origin) + m)
}

/// Where step `i` of a uniform-grid evaluation reads its slopes: `grid[s + i]` with
/// `s = walk_base(.., m)` for the slope of interval `i + m`, or of interval `i + m - 1` on a
/// sample itself (`fr = 0`), where the interpolant has a kink: the derivative for an
/// increasing delay (perfusion-core's `normal`).
#[cube]
pub(crate) fn slope_base<F: Float>(nt: u32, which: u32, sh: Shift<F>) -> u32 {
    walk_base(nt, which, sh.m) - select(sh.fr == F::new(0.0), 1u32, 0u32)
}

/// Per-evaluation coefficients of the inputs on a uniform grid: each use of an input enters
/// as `A u[j] + B u[j+1]`, `A = coef (1 - fr)`, `B = coef fr`, and the inputs of a
/// recursion already times its weight `wb`, so that a step is `y = E y + (rho f[i-1] + f[i])`
/// with `rho = wa / wb` (perfusion-core's `evaluate_uniform`). The mix, not each step, pays
/// for `wb`. `av`, `bv` are not weighted (the vascular term enters `y` directly); `e1`, `e2`
/// are the recursions' decays `E`.
#[derive(CubeType, Clone, Copy)]
pub(crate) struct Mix<F: Float> {
    pub a1: F,
    pub b1: F,
    pub a2: F,
    pub b2: F,
    pub ae: F,
    pub be: F,
    pub av: F,
    pub bv: F,
    pub rho1: F,
    pub rho2: F,
    pub e1: F,
    pub e2: F,
}

/// The running state of [`sse_uniform`]: the sample pairs of both inputs, the recursions,
/// the previous inputs and the cost.
#[derive(CubeType, Clone, Copy)]
pub(crate) struct UniState<F: Float> {
    p1: F,
    q1: F,
    p2: F,
    q2: F,
    y1: F,
    y2: F,
    f1p: F,
    f2p: F,
    total: F,
}

/// Where step `i` of [`sse_uniform`] reads: the inputs' new samples at `k1 = o1 + i`,
/// `k2 = o2 + i` ([`walk_index`]) and the datum at `c = i cube + lane` in shared memory
/// (persistent units) or at `i voxels + voxel`. A turn of the time loop computes them once
/// and its steps add constants, which the compiler can fold into the loads' offsets.
#[derive(CubeType, Clone, Copy)]
pub(crate) struct WalkStep {
    k1: u32,
    k2: u32,
    i: u32,
    c: u32,
}

/// Time step `i >= 1` of [`sse_uniform`], reading at `at`.
#[cube]
fn uni_step<F: Float>(
    st: &mut UniState<F>,
    mx: Mix<F>,
    data: &Array<f32>,
    curve: &SharedMemory<f32>,
    inputs: &SharedMemory<F>,
    grid: &Array<F>,
    ctx: Ctx<F>,
    at: WalkStep,
    #[comptime] model: u32,
) {
    st.p1 = st.q1;
    st.q1 = input_load::<F>(grid, inputs, at.k1, model);
    let mut f1 = mx.a1 * st.p1 + mx.b1 * st.q1;
    if comptime!(two_inputs(model)) {
        st.p2 = st.q2;
        st.q2 = input_load::<F>(grid, inputs, at.k2, model);
        f1 = f1 + mx.a2 * st.p2 + mx.b2 * st.q2;
    }
    st.y1 = mx.e1 * st.y1 + (mx.rho1 * st.f1p + f1);
    st.f1p = f1;
    let mut y = st.y1;
    if comptime!(two_exp(model)) {
        let f2 = mx.ae * st.p1 + mx.be * st.q1;
        st.y2 = mx.e2 * st.y2 + (mx.rho2 * st.f2p + f2);
        st.f2p = f2;
        y += st.y2;
    }
    if comptime!(vascular(model)) {
        y += mx.av * st.p1 + mx.bv * st.q1;
    }
    let r = y - datum_at::<F>(data, curve, ctx, at.i, at.c, model);
    st.total += r * r;
}

/// `steps` time steps of [`sse_uniform`] from step `i0`: the indices once, each step at a
/// constant offset from them.
#[cube]
#[allow(clippy::too_many_arguments)]
fn uni_steps<F: Float>(
    st: &mut UniState<F>,
    mx: Mix<F>,
    data: &Array<f32>,
    curve: &SharedMemory<f32>,
    inputs: &SharedMemory<F>,
    grid: &Array<F>,
    ctx: Ctx<F>,
    o1: u32,
    o2: u32,
    i0: u32,
    #[comptime] steps: u32,
    #[comptime] model: u32,
) {
    let stride = comptime!(cube_of(model));
    let base = WalkStep {
        k1: o1 + i0,
        k2: o2 + i0,
        i: i0,
        c: i0 * stride + ctx.lane,
    };
    #[unroll]
    for k in 0..steps {
        let at = WalkStep {
            k1: base.k1 + k,
            k2: base.k2 + k,
            i: base.i + k,
            c: base.c + k * stride,
        };
        uni_step::<F>(st, mx, data, curve, inputs, grid, ctx, at, model);
    }
}

/// [`sse`] on a uniform grid (perfusion-core's `evaluate_uniform`): weights once, inputs
/// through [`Shift`]s, per step two loads (one per input), the input mix, one recursion
/// step and the residual.
#[cube]
fn sse_uniform<F: Float>(
    data: &Array<f32>,
    curve: &SharedMemory<f32>,
    inputs: &SharedMemory<F>,
    grid: &Array<F>,
    ctx: Ctx<F>,
    c: Canon<F>,
    #[comptime] model: u32,
) -> F {
    let nt = ctx.nt;
    let zero = F::new(0.0);
    let one = F::new(1.0);
    let h = grid[nt as usize];
    let w1 = weights::<F>(c.k1, h, false);
    let mut w2 = w1;
    if comptime!(two_exp(model)) {
        let b = weights::<F>(c.k2, h, false);
        set_weights::<F>(&mut w2, b);
    }
    let s1 = shift::<F>(c.tau1, ctx.inv_dt, nt);
    let mut s2 = s1;
    if comptime!(two_inputs(model)) {
        let x = shift::<F>(c.tau2, ctx.inv_dt, nt);
        s2.m = x.m;
        s2.fr = x.fr;
    }
    let mx = Mix::<F> {
        a1: w1.wb * (c.g1 * (one - s1.fr)),
        b1: w1.wb * (c.g1 * s1.fr),
        a2: w1.wb * (c.h1 * (one - s2.fr)),
        b2: w1.wb * (c.h1 * s2.fr),
        ae: w2.wb * (c.g2 * (one - s1.fr)),
        be: w2.wb * (c.g2 * s1.fr),
        av: c.v * (one - s1.fr),
        bv: c.v * s1.fr,
        rho1: w1.wa / w1.wb,
        // Read by the 2CXM only: other models compile no use of it.
        rho2: w2.wa / w2.wb,
        e1: w1.e,
        e2: w2.e,
    };
    let u1 = walk_index(nt, 0u32, s1.m, model);
    let mut u2 = u1;
    if comptime!(two_inputs(model)) {
        u2 = walk_index(nt, 2u32, s2.m, model);
    }
    let mut st = UniState::<F> {
        p1: input_load::<F>(grid, inputs, u1, model),
        q1: input_load::<F>(grid, inputs, u1 + 1, model),
        p2: zero,
        q2: zero,
        y1: zero,
        y2: zero,
        f1p: zero,
        f2p: zero,
        total: zero,
    };
    st.f1p = mx.a1 * st.p1 + mx.b1 * st.q1;
    if comptime!(two_inputs(model)) {
        st.p2 = input_load::<F>(grid, inputs, u2, model);
        st.q2 = input_load::<F>(grid, inputs, u2 + 1, model);
        st.f1p = st.f1p + mx.a2 * st.p2 + mx.b2 * st.q2;
    }
    if comptime!(two_exp(model)) {
        st.f2p = mx.ae * st.p1 + mx.be * st.q1;
    }
    let mut y = zero;
    if comptime!(vascular(model)) {
        y += mx.av * st.p1 + mx.bv * st.q1;
    }
    let r0 = y - datum::<F>(data, curve, ctx, 0u32, model);
    st.total = r0 * r0;
    let o1 = u1 + 1;
    let o2 = u2 + 1;
    let blocks = (nt - 1) / UNI_UNROLL;
    for b in 0..blocks {
        uni_steps::<F>(
            &mut st,
            mx,
            data,
            curve,
            inputs,
            grid,
            ctx,
            o1,
            o2,
            1 + b * UNI_UNROLL,
            UNI_UNROLL,
            model,
        );
    }
    // The rest: four steps at once if as many are left, then one by one.
    let mut i = 1 + blocks * UNI_UNROLL;
    if i + 4 <= nt {
        uni_steps::<F>(
            &mut st, mx, data, curve, inputs, grid, ctx, o1, o2, i, 4u32, model,
        );
        i += 4;
    }
    while i < nt {
        uni_steps::<F>(
            &mut st, mx, data, curve, inputs, grid, ctx, o1, o2, i, 1u32, model,
        );
        i += 1;
    }
    st.total
}

/// Time steps per turn of the time loops: lavapipe ends an invocation's loops after 65,535
/// iterations in all (gallivm's loop limiter), which a Nelder-Mead fit of 600 simplex
/// updates over 64 time points would reach; four steps per turn keep it far away.
const UNROLL: u32 = 4;

/// Time steps per turn of the uniform-grid cost loop ([`sse_uniform`], Nelder-Mead's and the
/// delay grid's), whose steps are lighter than the Jacobian's: eight timed no slower than four
/// in f64 and faster in f32 (NM kernel, docs/benchmarks.md), with half the loop turns for
/// lavapipe.
const UNI_UNROLL: u32 = 8;

/// The running state of [`sse`].
#[derive(CubeType, Clone, Copy)]
pub(crate) struct SseState<F: Float> {
    j1: u32,
    j2: u32,
    y1: F,
    y2: F,
    f1p: F,
    f2p: F,
    dtp: F,
    total: F,
}

/// Time step `i >= 1` of [`sse`].
#[cube]
fn sse_step<F: Float>(
    st: &mut SseState<F>,
    w1: &mut Weights<F>,
    w2: &mut Weights<F>,
    data: &Array<f32>,
    curve: &SharedMemory<f32>,
    grid: &Array<F>,
    ctx: Ctx<F>,
    c: Canon<F>,
    i: u32,
    #[comptime] model: u32,
) {
    let nt = ctx.nt;
    let h = grid[(nt + i - 1) as usize];
    if h != st.dtp {
        let a = weights::<F>(c.k1, h, false);
        set_weights::<F>(w1, a);
        if comptime!(two_exp(model)) {
            let b = weights::<F>(c.k2, h, false);
            set_weights::<F>(w2, b);
        }
        st.dtp = h;
    }
    let ti = grid[i as usize];
    let s = sample::<F>(grid, ctx, 0, st.j1, ti - c.tau1);
    st.j1 = s.j;
    let mut f1 = c.g1 * s.value;
    if comptime!(two_inputs(model)) {
        let s2 = sample::<F>(grid, ctx, 1, st.j2, ti - c.tau2);
        st.j2 = s2.j;
        f1 += c.h1 * s2.value;
    }
    st.y1 = w1.e * st.y1 + w1.wa * st.f1p + w1.wb * f1;
    st.f1p = f1;
    let mut y = st.y1;
    if comptime!(two_exp(model)) {
        let f2 = c.g2 * s.value;
        st.y2 = w2.e * st.y2 + w2.wa * st.f2p + w2.wb * f2;
        st.f2p = f2;
        y += st.y2;
    }
    if comptime!(vascular(model)) {
        y += c.v * s.value;
    }
    let r = y - datum::<F>(data, curve, ctx, i, model);
    st.total += r * r;
}

/// Sum of squared residuals of `c` against the voxel's data (perfusion-core's `sse`).
#[cube]
pub(crate) fn sse<F: Float>(
    data: &Array<f32>,
    curve: &SharedMemory<f32>,
    inputs: &SharedMemory<F>,
    grid: &Array<F>,
    ctx: Ctx<F>,
    c: Canon<F>,
    #[comptime] model: u32,
) -> F {
    #[allow(unused_assignments)]
    let mut total = F::new(0.0);
    if comptime!(uniform(model)) {
        total = sse_uniform::<F>(data, curve, inputs, grid, ctx, c, model);
    } else {
        total = sse_grid::<F>(data, curve, grid, ctx, c, model);
    }
    total
}

/// [`sse`] on a non-uniform grid: samples located by pointers, weights per interval.
#[cube]
fn sse_grid<F: Float>(
    data: &Array<f32>,
    curve: &SharedMemory<f32>,
    grid: &Array<F>,
    ctx: Ctx<F>,
    c: Canon<F>,
    #[comptime] model: u32,
) -> F {
    let nt = ctx.nt;
    let t0 = grid[0];
    let zero = F::new(0.0);
    let s = sample::<F>(grid, ctx, 0, 0u32, t0 - c.tau1);
    let mut st = SseState::<F> {
        j1: s.j,
        j2: 0u32,
        y1: zero,
        y2: zero,
        f1p: c.g1 * s.value,
        f2p: zero,
        dtp: F::new(-1.0),
        total: zero,
    };
    if comptime!(two_inputs(model)) {
        let s2 = sample::<F>(grid, ctx, 1, 0u32, t0 - c.tau2);
        st.j2 = s2.j;
        st.f1p += c.h1 * s2.value;
    }
    if comptime!(two_exp(model)) {
        st.f2p = c.g2 * s.value;
    }
    let mut y = zero;
    if comptime!(vascular(model)) {
        y += c.v * s.value;
    }
    let r0 = y - datum::<F>(data, curve, ctx, 0u32, model);
    st.total = r0 * r0;
    let mut w1 = weights_zero::<F>();
    let mut w2 = weights_zero::<F>();
    let blocks = (nt - 1) / UNROLL;
    for b in 0..blocks {
        #[unroll]
        for k in 0..UNROLL {
            sse_step::<F>(
                &mut st,
                &mut w1,
                &mut w2,
                data,
                curve,
                grid,
                ctx,
                c,
                1 + b * UNROLL + k,
                model,
            );
        }
    }
    for i in 1 + blocks * UNROLL..nt {
        sse_step::<F>(
            &mut st, &mut w1, &mut w2, data, curve, grid, ctx, c, i, model,
        );
    }
    st.total
}

/// Running convolutions of one exponential for the Jacobian (perfusion-core's `Branch`).
#[derive(CubeType, Clone, Copy)]
pub(crate) struct Branch<F: Float> {
    pub y: F,
    pub dk: F,
    pub c1: F,
    pub c2: F,
    pub d1: F,
    pub d2: F,
}

#[cube]
fn branch_zero<F: Float>() -> Branch<F> {
    let z = F::new(0.0);
    Branch::<F> {
        y: z,
        dk: z,
        c1: z,
        c2: z,
        d1: z,
        d2: z,
    }
}

/// Samples of the inputs at one time (value and d/dtau = -slope).
#[derive(CubeType, Clone, Copy)]
pub(crate) struct Samples<F: Float> {
    pub u1: F,
    pub u2: F,
    pub du1: F,
    pub du2: F,
}

/// One interval of every running convolution (the derivative uses the old `y`).
#[cube]
fn step_branch<F: Float>(
    b: &mut Branch<F>,
    w: Weights<F>,
    fp: F,
    f: F,
    sp: Samples<F>,
    s: Samples<F>,
    #[comptime] ti: bool,
) {
    b.dk = w.e * b.dk + w.de * b.y + w.dwa * fp + w.dwb * f;
    b.y = w.e * b.y + w.wa * fp + w.wb * f;
    b.c1 = w.e * b.c1 + w.wa * sp.u1 + w.wb * s.u1;
    b.d1 = w.e * b.d1 + w.wa * sp.du1 + w.wb * s.du1;
    if comptime!(ti) {
        b.c2 = w.e * b.c2 + w.wa * sp.u2 + w.wb * s.u2;
        b.d2 = w.e * b.d2 + w.wa * sp.du2 + w.wb * s.du2;
    }
}

#[cube]
fn set_weights<F: Float>(dst: &mut Weights<F>, src: Weights<F>) {
    dst.e = src.e;
    dst.wa = src.wa;
    dst.wb = src.wb;
    dst.de = src.de;
    dst.dwa = src.dwa;
    dst.dwb = src.dwb;
}

/// Index of `(q, w)`, `q <= w < 5`, in the packed upper triangle of J^T J (15 values).
pub(crate) const fn tri(q: u32, w: u32) -> usize {
    (q * (9 - q) / 2 + w) as usize
}

/// One row of the Jacobian in the model's parameters (perfusion-core's `normal`, whose
/// general product with the chain matrix reduces to these terms: its other entries are
/// zero, and its unit entries give the term itself). Only the 2CXM needs the matrix `d`.
#[cube]
#[allow(clippy::too_many_arguments)]
fn jac_row<F: Float>(
    b1: Branch<F>,
    b2: Branch<F>,
    s: Samples<F>,
    c: Canon<F>,
    ch: Chain<F>,
    d: &Array<F>,
    jac: &mut Array<F>,
    #[comptime] model: u32,
) {
    let np = comptime!(n_params(model));
    let mut pt = c.g1 * b1.d1;
    if comptime!(two_exp(model)) {
        pt += c.g2 * b2.d1;
    }
    if comptime!(vascular(model)) {
        pt += c.v * s.du1;
    }
    if comptime!(model_id(model) == MODEL_DUAL_INPUT) {
        jac[0] = b1.c1 * ch.scale;
        jac[1] = b1.c2 * ch.scale;
        jac[2] = b1.dk * ch.scale;
        jac[3] = pt;
        jac[4] = c.h1 * b1.d2;
    } else if comptime!(model_id(model) == MODEL_TOFTS || model_id(model) == MODEL_EXTENDED_TOFTS) {
        jac[0] = b1.dk * ch.d00 + b1.c1 * ch.scale;
        jac[1] = b1.dk * ch.d01;
        if comptime!(model_id(model) == MODEL_EXTENDED_TOFTS) {
            jac[2] = s.u1;
            jac[3] = pt;
        } else {
            jac[2] = pt;
        }
    } else if comptime!(model_id(model) == MODEL_PATLAK) {
        jac[0] = b1.c1 * ch.scale;
        jac[1] = s.u1;
        jac[2] = pt;
    } else {
        #[unroll]
        for q in 0..np {
            let mut v = b1.dk * d[q as usize] + b1.c1 * d[(5 + q) as usize];
            v += b2.dk * d[(3 * 5 + q) as usize] + b2.c1 * d[(4 * 5 + q) as usize];
            v += pt * d[(6 * 5 + q) as usize];
            jac[q as usize] = v;
        }
    }
}

/// The residual of step `i` (returned) and its Jacobian row added to J^T J (packed upper
/// triangle) and J^T r.
#[cube]
#[allow(clippy::too_many_arguments)]
fn accumulate<F: Float>(
    b1: Branch<F>,
    b2: Branch<F>,
    s: Samples<F>,
    c: Canon<F>,
    ch: Chain<F>,
    d: &Array<F>,
    jtj: &mut Array<F>,
    jtr: &mut Array<F>,
    jac: &mut Array<F>,
    datum: F,
    #[comptime] model: u32,
) -> F {
    let np = comptime!(n_params(model));
    let mut y = b1.y;
    if comptime!(two_exp(model)) {
        y += b2.y;
    }
    if comptime!(vascular(model)) {
        y += c.v * s.u1;
    }
    let r = y - datum;
    jac_row::<F>(b1, b2, s, c, ch, d, jac, model);
    #[unroll]
    for q in 0..np {
        jtr[q as usize] += jac[q as usize] * r;
        #[unroll]
        for w in q..np {
            jtj[comptime!(tri(q, w))] += jac[q as usize] * jac[w as usize];
        }
    }
    r
}

/// The running state of [`normal`] on a non-uniform grid.
#[derive(CubeType, Clone, Copy)]
pub(crate) struct NormalState<F: Float> {
    j1: u32,
    j2: u32,
    f1p: F,
    f2p: F,
    dtp: F,
    cost: F,
}

/// Time step `i` of [`normal`] on a non-uniform grid: advance the convolutions (for
/// i >= 1), then accumulate the residual and its Jacobian row.
#[cube]
#[allow(clippy::too_many_arguments)]
fn normal_step<F: Float>(
    st: &mut NormalState<F>,
    sp: &mut Samples<F>,
    b1: &mut Branch<F>,
    b2: &mut Branch<F>,
    w1: &mut Weights<F>,
    w2: &mut Weights<F>,
    data: &Array<f32>,
    curve: &SharedMemory<f32>,
    grid: &Array<F>,
    ctx: Ctx<F>,
    c: Canon<F>,
    ch: Chain<F>,
    d: &Array<F>,
    jtj: &mut Array<F>,
    jtr: &mut Array<F>,
    jac: &mut Array<F>,
    i: u32,
    #[comptime] model: u32,
) {
    let nt = ctx.nt;
    let mut s = Samples::<F> {
        u1: sp.u1,
        u2: sp.u2,
        du1: sp.du1,
        du2: sp.du2,
    };
    if i > 0 {
        let h = grid[(nt + i - 1) as usize];
        if h != st.dtp {
            let a = weights::<F>(c.k1, h, true);
            set_weights::<F>(w1, a);
            if comptime!(two_exp(model)) {
                let b = weights::<F>(c.k2, h, true);
                set_weights::<F>(w2, b);
            }
            st.dtp = h;
        }
        let ti = grid[i as usize];
        let a = sample::<F>(grid, ctx, 0, st.j1, ti - c.tau1);
        st.j1 = a.j;
        s.u1 = a.value;
        s.du1 = -a.slope;
        if comptime!(two_inputs(model)) {
            let a2 = sample::<F>(grid, ctx, 1, st.j2, ti - c.tau2);
            st.j2 = a2.j;
            s.u2 = a2.value;
            s.du2 = -a2.slope;
        }
        let mut f1 = c.g1 * s.u1;
        if comptime!(two_inputs(model)) {
            f1 += c.h1 * s.u2;
        }
        step_branch::<F>(b1, *w1, st.f1p, f1, *sp, s, comptime!(two_inputs(model)));
        st.f1p = f1;
        if comptime!(two_exp(model)) {
            let f2 = c.g2 * s.u1;
            step_branch::<F>(b2, *w2, st.f2p, f2, *sp, s, false);
            st.f2p = f2;
        }
        sp.u1 = s.u1;
        sp.u2 = s.u2;
        sp.du1 = s.du1;
        sp.du2 = s.du2;
    }
    let datum = datum::<F>(data, curve, ctx, i, model);
    let r = accumulate::<F>(*b1, *b2, s, c, ch, d, jtj, jtr, jac, datum, model);
    st.cost += r * r;
}

/// The running state of [`normal`] on a uniform grid: sample pairs, previous inputs, cost.
#[derive(CubeType, Clone, Copy)]
pub(crate) struct NormalUni<F: Float> {
    p1: F,
    q1: F,
    p2: F,
    q2: F,
    f1p: F,
    f2p: F,
    cost: F,
}

/// Where a uniform-grid evaluation of [`normal`] reads its inputs: step `i` takes the new
/// samples at `u1 + i + 1`, `u2 + i + 1` and the slopes at `s1 + i`, `s2 + i` (padded
/// blocks, [`walk_base`], [`slope_base`]), at the fractions `fr1`, `fr2`.
#[derive(CubeType, Clone, Copy)]
pub(crate) struct Walk<F: Float> {
    u1: u32,
    s1: u32,
    u2: u32,
    s2: u32,
    fr1: F,
    fr2: F,
}

/// The inputs of step `i` (intervals `i + m`) on a uniform grid from the sliding pairs
/// (perfusion-core's `normal`: value `u[j] + fr (u[j+1] - u[j])`, d/dtau minus the stored
/// slope of interval j, 0 before the grid: differences of rounded samples would lose the
/// slope's digits in f32).
#[cube]
fn uni_samples<F: Float>(
    st: NormalUni<F>,
    grid: &Array<F>,
    wk: Walk<F>,
    i: u32,
    #[comptime] model: u32,
) -> Samples<F> {
    let mut s = Samples::<F> {
        u1: st.p1 + wk.fr1 * (st.q1 - st.p1),
        u2: F::new(0.0),
        du1: -grid[(wk.s1 + i) as usize],
        du2: F::new(0.0),
    };
    if comptime!(two_inputs(model)) {
        s.u2 = st.p2 + wk.fr2 * (st.q2 - st.p2);
        s.du2 = -grid[(wk.s2 + i) as usize];
    }
    s
}

/// Time step `i >= 1` of [`normal`] on a uniform grid.
#[cube]
#[allow(clippy::too_many_arguments)]
fn normal_uni_step<F: Float>(
    st: &mut NormalUni<F>,
    sp: &mut Samples<F>,
    b1: &mut Branch<F>,
    b2: &mut Branch<F>,
    w1: Weights<F>,
    w2: Weights<F>,
    data: &Array<f32>,
    curve: &SharedMemory<f32>,
    grid: &Array<F>,
    ctx: Ctx<F>,
    c: Canon<F>,
    ch: Chain<F>,
    d: &Array<F>,
    jtj: &mut Array<F>,
    jtr: &mut Array<F>,
    jac: &mut Array<F>,
    wk: Walk<F>,
    i: u32,
    #[comptime] model: u32,
) {
    st.p1 = st.q1;
    st.q1 = grid[(wk.u1 + i + 1) as usize];
    if comptime!(two_inputs(model)) {
        st.p2 = st.q2;
        st.q2 = grid[(wk.u2 + i + 1) as usize];
    }
    let s = uni_samples::<F>(*st, grid, wk, i, model);
    let mut f1 = c.g1 * s.u1;
    if comptime!(two_inputs(model)) {
        f1 += c.h1 * s.u2;
    }
    step_branch::<F>(b1, w1, st.f1p, f1, *sp, s, comptime!(two_inputs(model)));
    st.f1p = f1;
    if comptime!(two_exp(model)) {
        let f2 = c.g2 * s.u1;
        step_branch::<F>(b2, w2, st.f2p, f2, *sp, s, false);
        st.f2p = f2;
    }
    sp.u1 = s.u1;
    sp.u2 = s.u2;
    sp.du1 = s.du1;
    sp.du2 = s.du2;
    let datum = datum::<F>(data, curve, ctx, i, model);
    let r = accumulate::<F>(*b1, *b2, s, c, ch, d, jtj, jtr, jac, datum, model);
    st.cost += r * r;
}

/// Cost, J^T J (packed upper triangle, [`tri`]) and J^T r (perfusion-core's `normal`);
/// returns the cost. `ch` and, for the 2CXM, `d` hold the chain; `jac` is scratch.
#[cube]
#[allow(clippy::too_many_arguments)]
pub(crate) fn normal<F: Float>(
    data: &Array<f32>,
    curve: &SharedMemory<f32>,
    grid: &Array<F>,
    ctx: Ctx<F>,
    c: Canon<F>,
    ch: Chain<F>,
    d: &Array<F>,
    jtj: &mut Array<F>,
    jtr: &mut Array<F>,
    jac: &mut Array<F>,
    #[comptime] model: u32,
) -> F {
    let zero = F::new(0.0);
    #[unroll]
    for q in 0..5u32 {
        jtr[q as usize] = zero;
    }
    #[unroll]
    for q in 0..15u32 {
        jtj[q as usize] = zero;
    }
    #[allow(unused_assignments)]
    let mut cost = zero;
    if comptime!(uniform(model)) {
        cost = normal_uniform::<F>(data, curve, grid, ctx, c, ch, d, jtj, jtr, jac, model);
    } else {
        cost = normal_grid::<F>(data, curve, grid, ctx, c, ch, d, jtj, jtr, jac, model);
    }
    cost
}

/// [`normal`] on a uniform grid: weights once, inputs through [`Shift`]s.
#[cube]
#[allow(clippy::too_many_arguments)]
fn normal_uniform<F: Float>(
    data: &Array<f32>,
    curve: &SharedMemory<f32>,
    grid: &Array<F>,
    ctx: Ctx<F>,
    c: Canon<F>,
    ch: Chain<F>,
    d: &Array<F>,
    jtj: &mut Array<F>,
    jtr: &mut Array<F>,
    jac: &mut Array<F>,
    #[comptime] model: u32,
) -> F {
    let nt = ctx.nt;
    let zero = F::new(0.0);
    let h = grid[nt as usize];
    let w1 = weights::<F>(c.k1, h, true);
    let mut w2 = w1;
    if comptime!(two_exp(model)) {
        let b = weights::<F>(c.k2, h, true);
        set_weights::<F>(&mut w2, b);
    }
    let sh1 = shift::<F>(c.tau1, ctx.inv_dt, nt);
    let u1 = walk_base(nt, 0u32, sh1.m);
    let mut wk = Walk::<F> {
        u1,
        s1: slope_base::<F>(nt, 1u32, sh1),
        u2: u1,
        s2: u1,
        fr1: sh1.fr,
        fr2: sh1.fr,
    };
    if comptime!(two_inputs(model)) {
        let sh2 = shift::<F>(c.tau2, ctx.inv_dt, nt);
        wk.u2 = walk_base(nt, 2u32, sh2.m);
        wk.s2 = slope_base::<F>(nt, 3u32, sh2);
        wk.fr2 = sh2.fr;
    }
    let mut st = NormalUni::<F> {
        p1: grid[wk.u1 as usize],
        q1: grid[(wk.u1 + 1) as usize],
        p2: zero,
        q2: zero,
        f1p: zero,
        f2p: zero,
        cost: zero,
    };
    if comptime!(two_inputs(model)) {
        st.p2 = grid[wk.u2 as usize];
        st.q2 = grid[(wk.u2 + 1) as usize];
    }
    let mut sp = uni_samples::<F>(st, grid, wk, 0u32, model);
    st.f1p = c.g1 * sp.u1;
    if comptime!(two_inputs(model)) {
        st.f1p += c.h1 * sp.u2;
    }
    st.f2p = c.g2 * sp.u1;
    let mut b1 = branch_zero::<F>();
    let mut b2 = branch_zero::<F>();
    let datum = datum::<F>(data, curve, ctx, 0u32, model);
    let r0 = accumulate::<F>(b1, b2, sp, c, ch, d, jtj, jtr, jac, datum, model);
    st.cost += r0 * r0;
    let blocks = (nt - 1) / UNROLL;
    for b in 0..blocks {
        #[unroll]
        for k in 0..UNROLL {
            normal_uni_step::<F>(
                &mut st,
                &mut sp,
                &mut b1,
                &mut b2,
                w1,
                w2,
                data,
                curve,
                grid,
                ctx,
                c,
                ch,
                d,
                jtj,
                jtr,
                jac,
                wk,
                1 + b * UNROLL + k,
                model,
            );
        }
    }
    for i in 1 + blocks * UNROLL..nt {
        normal_uni_step::<F>(
            &mut st, &mut sp, &mut b1, &mut b2, w1, w2, data, curve, grid, ctx, c, ch, d, jtj, jtr,
            jac, wk, i, model,
        );
    }
    st.cost
}

/// [`normal`] on a non-uniform grid.
#[cube]
#[allow(clippy::too_many_arguments)]
fn normal_grid<F: Float>(
    data: &Array<f32>,
    curve: &SharedMemory<f32>,
    grid: &Array<F>,
    ctx: Ctx<F>,
    c: Canon<F>,
    ch: Chain<F>,
    d: &Array<F>,
    jtj: &mut Array<F>,
    jtr: &mut Array<F>,
    jac: &mut Array<F>,
    #[comptime] model: u32,
) -> F {
    let nt = ctx.nt;
    let zero = F::new(0.0);
    let mut b1 = branch_zero::<F>();
    let mut b2 = branch_zero::<F>();
    let t0 = grid[0];
    let s0 = sample::<F>(grid, ctx, 0, 0u32, t0 - c.tau1);
    let mut sp = Samples::<F> {
        u1: s0.value,
        u2: zero,
        du1: -s0.slope,
        du2: zero,
    };
    let mut st = NormalState::<F> {
        j1: s0.j,
        j2: 0u32,
        f1p: zero,
        f2p: zero,
        dtp: F::new(-1.0),
        cost: zero,
    };
    if comptime!(two_inputs(model)) {
        let s2 = sample::<F>(grid, ctx, 1, 0u32, t0 - c.tau2);
        st.j2 = s2.j;
        sp.u2 = s2.value;
        sp.du2 = -s2.slope;
    }
    st.f1p = c.g1 * sp.u1;
    if comptime!(two_inputs(model)) {
        st.f1p += c.h1 * sp.u2;
    }
    st.f2p = c.g2 * sp.u1;
    let mut w1 = weights_zero::<F>();
    let mut w2 = weights_zero::<F>();
    let blocks = nt / UNROLL;
    for b in 0..blocks {
        #[unroll]
        for k in 0..UNROLL {
            normal_step::<F>(
                &mut st,
                &mut sp,
                &mut b1,
                &mut b2,
                &mut w1,
                &mut w2,
                data,
                curve,
                grid,
                ctx,
                c,
                ch,
                d,
                jtj,
                jtr,
                jac,
                b * UNROLL + k,
                model,
            );
        }
    }
    for i in blocks * UNROLL..nt {
        normal_step::<F>(
            &mut st, &mut sp, &mut b1, &mut b2, &mut w1, &mut w2, data, curve, grid, ctx, c, ch, d,
            jtj, jtr, jac, i, model,
        );
    }
    st.cost
}
