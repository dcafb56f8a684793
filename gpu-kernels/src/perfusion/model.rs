//! The pieces every perfusion kernel shares: canonical coefficients of a parameter vector,
//! exponential-convolution weights, input sampling, the cost and the normal equations.
//! Each is a line-by-line port of perfusion-core (`model.rs`, `conv.rs`): same operations in
//! the same order, so that f64 results differ from the CPU only by fused multiply-adds and
//! the device's `exp`.

// CubeCL evaluates `if comptime!(..)` at expansion time; merging it with a runtime
// condition would turn it into a runtime branch.
#![allow(clippy::collapsible_if, clippy::collapsible_else_if)]
#![allow(clippy::neg_cmp_op_on_partial_ord)]

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

/// Series terms of the weights below `x = 1/2` (perfusion-core's `SERIES_TERMS`).
const SERIES_TERMS: u32 = 17;

/// What a kernel needs to evaluate one voxel's model: the shared grid (times, intervals,
/// inputs and their slopes, `nt` values each, in that order) and where the voxel's data are.
#[derive(CubeType, Clone, Copy)]
pub(crate) struct Ctx<F: Float> {
    pub voxel: u32,
    pub nvox: u32,
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

/// d(canonical)/d(theta) into `d[c * 5 + p]` (perfusion-core's `chain`).
#[cube]
pub(crate) fn chain<F: Float>(x: &Array<F>, scale: F, d: &mut Array<F>, #[comptime] model: u32) {
    #[unroll]
    for i in 0..40u32 {
        d[i as usize] = F::new(0.0);
    }
    if comptime!(model_id(model) == MODEL_DUAL_INPUT) {
        d[2] = scale;
        d[5] = scale;
        d[5 + 5 + 1] = scale;
        d[6 * 5 + 3] = F::new(1.0);
        d[7 * 5 + 4] = F::new(1.0);
    } else if comptime!(model_id(model) == MODEL_TOFTS || model_id(model) == MODEL_EXTENDED_TOFTS) {
        let k = x[0] * scale;
        let ve = x[1];
        d[0] = scale / ve;
        d[1] = -(k / ve) / ve;
        d[5] = scale;
        if comptime!(model_id(model) == MODEL_EXTENDED_TOFTS) {
            d[5 * 5 + 2] = F::new(1.0);
            d[6 * 5 + 3] = F::new(1.0);
        } else {
            d[6 * 5 + 2] = F::new(1.0);
        }
    } else if comptime!(model_id(model) == MODEL_PATLAK) {
        d[5] = scale;
        d[5 * 5 + 1] = F::new(1.0);
        d[6 * 5 + 2] = F::new(1.0);
    } else {
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
    let mut a = zero;
    let mut b = zero;
    let half = F::new(0.5);
    if x < half {
        let mut p = half;
        #[unroll]
        for m in 2..2 + SERIES_TERMS {
            a += p * F::cast_from(m - 1);
            b += p;
            p = p * -x / F::cast_from(m + 1);
        }
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
        let mut da = zero;
        let mut db = zero;
        if x < half {
            let mut q = F::new(1.0) / F::cast_from(6u32);
            #[unroll]
            for m in 3..3 + SERIES_TERMS {
                da -= q * F::cast_from((m - 1) * (m - 2));
                db -= q * F::cast_from(m - 2);
                q = q * -x / F::cast_from(m + 1);
            }
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
/// (perfusion-core's `Sampler::at`). On a uniform grid the interval is found directly.
#[cube]
pub(crate) fn sample<F: Float>(
    grid: &Array<F>,
    ctx: Ctx<F>,
    which: u32,
    j0: u32,
    x: F,
    #[comptime] model: u32,
) -> Sample<F> {
    let nt = ctx.nt;
    let mut j = j0;
    if comptime!(uniform(model)) {
        let q = (x - grid[0]) * ctx.inv_dt;
        j = 0u32;
        if q >= F::cast_from(nt - 1) {
            j = nt - 1;
        } else if q > F::new(0.0) {
            j = u32::cast_from(q);
        }
    } else {
        // lavapipe counts every loop iteration of an invocation, and every loop entered,
        // against a budget of 65,535; uniform grids never come here.
        // (`grid[nt]`, read when j + 1 = nt, is the first interval: in bounds, unused.)
        let mut go = j + 1 < nt && grid[(j + 1) as usize] <= x;
        while go {
            j += 1;
            go = j + 1 < nt && grid[(j + 1) as usize] <= x;
        }
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

/// Time steps per turn of the time loops: lavapipe ends an invocation's loops after 65,535
/// iterations in all (gallivm's loop limiter), which a Nelder-Mead fit of 600 simplex
/// updates over 64 time points would reach; four steps per turn keep it far away.
const UNROLL: u32 = 4;

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
    let s = sample::<F>(grid, ctx, 0, st.j1, ti - c.tau1, model);
    st.j1 = s.j;
    let mut f1 = c.g1 * s.value;
    if comptime!(two_inputs(model)) {
        let s2 = sample::<F>(grid, ctx, 1, st.j2, ti - c.tau2, model);
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
    let r = y - F::cast_from(data[(i * ctx.nvox + ctx.voxel) as usize]);
    st.total += r * r;
}

/// Sum of squared residuals of `c` against the voxel's data (perfusion-core's `sse`).
#[cube]
pub(crate) fn sse<F: Float>(
    data: &Array<f32>,
    grid: &Array<F>,
    ctx: Ctx<F>,
    c: Canon<F>,
    #[comptime] model: u32,
) -> F {
    let nt = ctx.nt;
    let t0 = grid[0];
    let zero = F::new(0.0);
    let s = sample::<F>(grid, ctx, 0, 0u32, t0 - c.tau1, model);
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
        let s2 = sample::<F>(grid, ctx, 1, 0u32, t0 - c.tau2, model);
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
    let r0 = y - F::cast_from(data[ctx.voxel as usize]);
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
                grid,
                ctx,
                c,
                1 + b * UNROLL + k,
                model,
            );
        }
    }
    for i in 1 + blocks * UNROLL..nt {
        sse_step::<F>(&mut st, &mut w1, &mut w2, data, grid, ctx, c, i, model);
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

/// The running state of [`normal`].
#[derive(CubeType, Clone, Copy)]
pub(crate) struct NormalState<F: Float> {
    j1: u32,
    j2: u32,
    f1p: F,
    f2p: F,
    dtp: F,
    cost: F,
}

/// Time step `i` of [`normal`]: advance the convolutions (for i >= 1), then accumulate the
/// residual and its Jacobian row.
#[cube]
fn normal_step<F: Float>(
    st: &mut NormalState<F>,
    sp: &mut Samples<F>,
    b1: &mut Branch<F>,
    b2: &mut Branch<F>,
    w1: &mut Weights<F>,
    w2: &mut Weights<F>,
    data: &Array<f32>,
    grid: &Array<F>,
    ctx: Ctx<F>,
    c: Canon<F>,
    d: &Array<F>,
    jtj: &mut Array<F>,
    jtr: &mut Array<F>,
    jac: &mut Array<F>,
    i: u32,
    #[comptime] model: u32,
) {
    let np = comptime!(n_params(model));
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
        let a = sample::<F>(grid, ctx, 0, st.j1, ti - c.tau1, model);
        st.j1 = a.j;
        s.u1 = a.value;
        s.du1 = -a.slope;
        if comptime!(two_inputs(model)) {
            let a2 = sample::<F>(grid, ctx, 1, st.j2, ti - c.tau2, model);
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
    let mut y = b1.y;
    if comptime!(two_exp(model)) {
        y += b2.y;
    }
    if comptime!(vascular(model)) {
        y += c.v * s.u1;
    }
    let r = y - F::cast_from(data[(i * ctx.nvox + ctx.voxel) as usize]);
    let mut pt = c.g1 * b1.d1;
    if comptime!(two_exp(model)) {
        pt += c.g2 * b2.d1;
    }
    if comptime!(vascular(model)) {
        pt += c.v * s.du1;
    }
    #[unroll]
    for q in 0..np {
        let mut v = b1.dk * d[q as usize] + b1.c1 * d[(5 + q) as usize];
        if comptime!(two_inputs(model)) {
            v += b1.c2 * d[(2 * 5 + q) as usize];
        }
        if comptime!(two_exp(model)) {
            v += b2.dk * d[(3 * 5 + q) as usize] + b2.c1 * d[(4 * 5 + q) as usize];
        }
        if comptime!(vascular(model)) {
            v += s.u1 * d[(5 * 5 + q) as usize];
        }
        v += pt * d[(6 * 5 + q) as usize];
        if comptime!(two_inputs(model)) {
            v += c.h1 * b1.d2 * d[(7 * 5 + q) as usize];
        }
        jac[q as usize] = v;
    }
    st.cost += r * r;
    #[unroll]
    for q in 0..np {
        jtr[q as usize] += jac[q as usize] * r;
        #[unroll]
        for w in q..np {
            jtj[(q * 5 + w) as usize] += jac[q as usize] * jac[w as usize];
        }
    }
}

/// Cost, J^T J (row-major 5x5, upper triangle) and J^T r (perfusion-core's `normal`);
/// returns the cost. `d` holds the chain matrix, `jac` is scratch.
#[cube]
pub(crate) fn normal<F: Float>(
    data: &Array<f32>,
    grid: &Array<F>,
    ctx: Ctx<F>,
    c: Canon<F>,
    d: &Array<F>,
    jtj: &mut Array<F>,
    jtr: &mut Array<F>,
    jac: &mut Array<F>,
    #[comptime] model: u32,
) -> F {
    let nt = ctx.nt;
    let zero = F::new(0.0);
    #[unroll]
    for q in 0..5u32 {
        jtr[q as usize] = zero;
        #[unroll]
        for w in 0..5u32 {
            jtj[(q * 5 + w) as usize] = zero;
        }
    }
    let mut b1 = branch_zero::<F>();
    let mut b2 = branch_zero::<F>();
    let t0 = grid[0];
    let s0 = sample::<F>(grid, ctx, 0, 0u32, t0 - c.tau1, model);
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
        let s2 = sample::<F>(grid, ctx, 1, 0u32, t0 - c.tau2, model);
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
                grid,
                ctx,
                c,
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
            &mut st, &mut sp, &mut b1, &mut b2, &mut w1, &mut w2, data, grid, ctx, c, d, jtj, jtr,
            jac, i, model,
        );
    }
    st.cost
}
