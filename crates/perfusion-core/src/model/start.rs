//! Where every fit starts: linear least squares on the integral form of the model, over a
//! grid of delays, so that the optimiser begins in the basin of the global minimum.
//!
//! Each model's curve obeys a linear integral equation once the delays are fixed. With the
//! running integrals of the delayed inputs `A(t) = ∫u(s - tau) ds`, the delayed input
//! `V(t) = u(t - tau)`, the tissue curve's own integral `Q(t) = ∫C` and, for the 2CXM,
//! the double integrals `AA = ∫A`, `QQ = ∫Q`:
//!
//! ```text
//! dual-input:  C = ka A_a + kp A_p - kl Q          (ka, kp, kl >= 0)
//! Tofts:       C = Ktrans A - kep Q                (kep = Ktrans / ve)
//! ext. Tofts:  C = vp V + (Ktrans + kep vp) A - kep Q
//! Patlak:      C = vp V + Ktrans A
//! 2CXM:        C = Fp A - c2 Q + c3 AA - c4 QQ     (Flouri et al. 2016, MRM 76:998)
//! ```
//!
//! (rates per second inside). For every delay on the grid the coefficients are solved by
//! non-negative least squares (every subset of active coefficients, at most 4 of them), and
//! the delays with the smallest residual win: a scan of each free delay at the grid's step
//! (the arterial delay, then the portal one, then the arterial one again), then a refinement
//! at a quarter of the step around the best. The integrals are trapezoid sums of the
//! samples, exact for the piecewise-linear inputs the models assume and within O(dt^2) for
//! the tissue curve: the result is a start, which the optimiser then polishes; the fit
//! keeps the model's default start instead where that has the smaller sum of squares.
//! `gpu_kernels::perfusion::start` runs the same search in the same order.

use super::kinetics::{MAX_PARAMS, Model};
use super::params::{Bounds, DelayGrid, NO_DELAY};
use super::problem::Problem;
use gpu_kernels::linalg::solve_spd;
use serde::Serialize;

/// How a fit finds its starting point.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum StartSearch {
    /// The given start values only.
    Off,
    /// Linear least squares over each free delay's bounds, one frame apart (refined to a
    /// quarter frame).
    #[default]
    Auto,
    /// Linear least squares over these delays (refined to a quarter step).
    Grid(DelayGrid),
}

/// Distinct minima of the dual-input coarse scan handed to the fit: it starts from the one
/// (or the given start) the model's own cost ranks best and, under Levenberg-Marquardt,
/// restarts from each other one (the arterial and portal terms trade off along shallow
/// valleys whose minima the integral form's residual does not rank reliably).
pub const CANDIDATES: usize = gpu_kernels::perfusion::CANDIDATES as usize;

/// A fitted delay within this many sampling intervals of a whole number of them sits on
/// a kink of the cost (the delayed input is linear between samples, so its slope jumps
/// there): Levenberg-Marquardt restarts from [`KINK_ESCAPE`] intervals either side.
pub const KINK_NEAR: f64 = gpu_kernels::perfusion::KINK_NEAR;
/// Offset of the restarts from a kink, in sampling intervals.
pub const KINK_ESCAPE: f64 = gpu_kernels::perfusion::KINK_ESCAPE;

/// Whether a free delay of `x` sits on a kink of the cost (as [`kink_escape`] finds them):
/// there a fit that no step improves is at a minimum of the piecewise-smooth cost although
/// the one-sided gradient is not zero.
pub(crate) fn on_kink(model: Model, x: &[f64; MAX_PARAMS], b: &Bounds, inv_dt: f64) -> bool {
    (0..2 * b.np).any(|e| kink_escape(model, x, b, inv_dt, e).is_some())
}

/// Restart `e` (of `2 np`) from a kink of `x`'s delays: parameter `e / 2` moved to the
/// earlier (`e` even) or later side of the kink it sits on, projected into `b`; `None` where
/// it is not a free delay, sits on no kink, or the sampling is not uniform (`inv_dt`, the
/// reciprocal sampling interval, 0). The kernel's restarts enumerate the same.
pub(crate) fn kink_escape(
    model: Model,
    x: &[f64; MAX_PARAMS],
    b: &Bounds,
    inv_dt: f64,
    e: usize,
) -> Option<[f64; MAX_PARAMS]> {
    let u = e / 2;
    let frames = x[u] * inv_dt;
    let kink = (frames + 0.5).floor();
    let delay = model.params().get(u).is_some_and(|p| p.delay);
    if !(delay && b.free[u] && inv_dt > 0.0 && (frames - kink).abs() < KINK_NEAR) {
        return None;
    }
    let side = if e.is_multiple_of(2) {
        -KINK_ESCAPE
    } else {
        KINK_ESCAPE
    };
    let mut y = *x;
    y[u] = (kink + side) / inv_dt;
    b.project(&mut y);
    Some(y)
}

/// Fine grid points per coarse step: the refinement's resolution.
pub(crate) const REFINE: usize = 4;
/// Most coarse points per delay axis under [`StartSearch::Auto`] (a coarser step beyond).
const AUTO_POINTS: f64 = 128.0;

/// One delay axis of the search, on the fine grid: `start + k step`, `k < count`; scanned
/// every `stride` points from `first`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct DelayAxis {
    pub start: f64,
    pub step: f64,
    pub count: usize,
    pub stride: usize,
    pub first: usize,
    /// The parameter it sets, [`NO_DELAY`] where the model has no such delay.
    pub param: usize,
    /// Whether it is searched (a free delay).
    pub free: bool,
}

impl DelayAxis {
    pub fn delay(&self, k: usize) -> f64 {
        self.start + self.step * k as f64
    }

    fn fixed(value: f64, param: usize) -> Self {
        DelayAxis {
            start: value,
            step: 0.0,
            count: 1,
            stride: 1,
            first: 0,
            param,
            free: false,
        }
    }
}

/// Offsets of the basis tables (each `count x nt`, row k for delay k) in
/// [`StartPlan::tables`], [`NO_TABLE`] where the model does not use them: the integral
/// of the delayed arterial input, the delayed arterial input, its double integral, and the
/// integral of the delayed portal input.
pub(crate) const NO_TABLE: usize = usize::MAX;

/// The search, resolved for one problem: axes and basis tables (voxel-independent).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct StartPlan {
    pub model: Model,
    pub axes: [DelayAxis; 2],
    /// Sampling intervals (`nt`, the last 0), then the basis tables.
    pub tables: Vec<f64>,
    pub a1: usize,
    pub v1: usize,
    pub aa1: usize,
    pub a2: usize,
    /// Dual-input model: coarse points per axis, the products of the arterial and portal
    /// basis rows at coarse points (`coarse[0] x coarse[1]`, arterial outer) and their
    /// norms (arterial, then portal), else [`NO_TABLE`].
    pub coarse: [usize; 2],
    pub cross: usize,
    pub norms: usize,
    pub nt: usize,
}

/// Number of coefficients solved for `model`.
pub(crate) const fn n_coefficients(model: Model) -> usize {
    match model {
        Model::Tofts | Model::Patlak => 2,
        Model::DualInput | Model::ExtendedTofts => 3,
        Model::TwoCompartmentExchange => 4,
    }
}

/// The delay parameters of `model`: the arterial (or only) one and the portal one.
fn delay_params(model: Model) -> [usize; 2] {
    match model {
        Model::DualInput => [3, 4],
        _ => [model.n_params() - 1, NO_DELAY],
    }
}

/// The search `how` for `model` on `problem` with bounds `b`, or `None` when off.
pub(crate) fn plan(
    how: StartSearch,
    model: Model,
    problem: &Problem,
    b: &Bounds,
    start: &[f64; MAX_PARAMS],
) -> Option<StartPlan> {
    let grid = match how {
        StartSearch::Off => return None,
        StartSearch::Auto => None,
        StartSearch::Grid(g) => Some(g),
    };
    let params = delay_params(model);
    let axes = params.map(|p| {
        if p == NO_DELAY {
            DelayAxis::fixed(0.0, NO_DELAY)
        } else if !b.free[p] {
            DelayAxis::fixed(b.fixed[p], p)
        } else {
            free_axis(
                grid,
                coarse_step(model, problem),
                b.lo[p],
                b.hi[p],
                start[p],
                p,
            )
        }
    });
    let nt = problem.len();
    let mut tables = problem.dt.clone();
    let push = |tables: &mut Vec<f64>, rows: Vec<Vec<f64>>| {
        let at = tables.len();
        for r in &rows {
            tables.extend_from_slice(r);
        }
        at
    };
    let delayed = |u: &[f64], s: &[f64], axis: &DelayAxis| -> Vec<Vec<f64>> {
        (0..axis.count)
            .map(|k| delayed_input(problem, u, s, axis.delay(k)))
            .collect()
    };
    let arterial = delayed(&problem.u1, &problem.s1, &axes[0]);
    let a1 = push(
        &mut tables,
        arterial
            .iter()
            .map(|f| running_integral(&problem.dt, f))
            .collect(),
    );
    let (v1, aa1, a2) = match model {
        Model::ExtendedTofts | Model::Patlak => (push(&mut tables, arterial), NO_TABLE, NO_TABLE),
        Model::TwoCompartmentExchange => {
            let aa = arterial
                .iter()
                .map(|f| running_integral(&problem.dt, &running_integral(&problem.dt, f)))
                .collect();
            (NO_TABLE, push(&mut tables, aa), NO_TABLE)
        }
        Model::DualInput => {
            let portal = delayed(&problem.u2, &problem.s2, &axes[1]);
            let a2 = push(
                &mut tables,
                portal
                    .iter()
                    .map(|f| running_integral(&problem.dt, f))
                    .collect(),
            );
            (NO_TABLE, NO_TABLE, a2)
        }
        Model::Tofts => (NO_TABLE, NO_TABLE, NO_TABLE),
    };
    let coarse = axes.map(|a| (a.count - 1) / a.stride + 1);
    let (cross, norms) = if model == Model::DualInput {
        let view = &tables;
        let row = |table: usize, axis: usize, k: usize| {
            let at = table + k * axes[axis].stride * nt;
            &view[at..at + nt]
        };
        let dot = |x: &[f64], y: &[f64]| x.iter().zip(y).map(|(x, y)| x * y).sum::<f64>();
        let mut cross = Vec::with_capacity(coarse[0] * coarse[1]);
        for a in 0..coarse[0] {
            for p in 0..coarse[1] {
                cross.push(dot(row(a1, 0, a), row(a2, 1, p)));
            }
        }
        let norms: Vec<f64> = (0..coarse[0])
            .map(|a| dot(row(a1, 0, a), row(a1, 0, a)))
            .chain((0..coarse[1]).map(|p| dot(row(a2, 1, p), row(a2, 1, p))))
            .collect();
        let cross_at = push(&mut tables, vec![cross]);
        (cross_at, push(&mut tables, vec![norms]))
    } else {
        (NO_TABLE, NO_TABLE)
    };
    Some(StartPlan {
        model,
        axes,
        tables,
        a1,
        v1,
        aa1,
        a2,
        coarse,
        cross,
        norms,
        nt,
    })
}

/// The auto grid's step: one frame; two for the dual-input model, whose search takes every
/// pair of delays (a quarter of the pairs; the refinement still reaches half a frame).
fn coarse_step(model: Model, problem: &Problem) -> f64 {
    let frames = if model == Model::DualInput { 2.0 } else { 1.0 };
    frames * problem.mean_interval()
}

/// A free delay's axis: the grid given, else the bounds one frame apart (at most
/// [`AUTO_POINTS`] + 1 points), refined [`REFINE`] times; scanned from the coarse point
/// nearest the start.
fn free_axis(
    grid: Option<DelayGrid>,
    frame: f64,
    lo: f64,
    hi: f64,
    start: f64,
    param: usize,
) -> DelayAxis {
    let (first, step, count) = if let Some(g) = grid {
        (g.start, g.step, g.count as usize)
    } else {
        let step = frame.max((hi - lo) / AUTO_POINTS);
        (lo, step, ((hi - lo) / step + 1e-9).floor() as usize + 1)
    };
    let nearest = ((start - first) / step)
        .round()
        .clamp(0.0, (count - 1) as f64) as usize;
    DelayAxis {
        start: first,
        step: step / REFINE as f64,
        count: (count - 1) * REFINE + 1,
        stride: REFINE,
        first: nearest * REFINE,
        param,
        free: true,
    }
}

/// Input `u` (slopes `s`) at `t_i - tau`, sampled as the models sample it (linear
/// between samples, the first value before the start, the last after the end).
fn delayed_input(p: &Problem, u: &[f64], s: &[f64], tau: f64) -> Vec<f64> {
    let mut sampler = crate::cpu::Sampler::default();
    p.t.iter()
        .map(|&t| sampler.at(&p.t, u, s, t - tau).0)
        .collect()
}

/// Trapezoid running integral of samples `f` from `t_0` (0 at `t_0`), intervals `dt`.
pub(crate) fn running_integral(dt: &[f64], f: &[f64]) -> Vec<f64> {
    let mut acc = 0.0;
    let mut out = Vec::with_capacity(f.len());
    out.push(0.0);
    for i in 1..f.len() {
        acc += 0.5 * dt[i - 1] * (f[i - 1] + f[i]);
        out.push(acc);
    }
    out
}

/// Non-negative least squares of up to 4 coefficients from the normal equations: Gram
/// matrix `g` (upper triangle used), right-hand side `b`, data norm `dd`. Every subset of
/// active coefficients is solved (columns scaled to unit norm, the kernels' Cholesky), the
/// full set first (feasible, it is the optimum: the others are skipped); the feasible
/// solution (all active coefficients > 0) with the smallest residual `dd - theta.b` wins,
/// the empty one (residual `dd`) if none.
/// `gpu_kernels::perfusion::start` does the same.
pub(crate) fn nnls(g: &[[f64; 4]; 4], b: &[f64; 4], dd: f64, l: usize) -> ([f64; 4], f64) {
    let mut best = ([0.0; 4], dd);
    let mut scale = [0.0; 4];
    for j in 0..l {
        if g[j][j] > 0.0 {
            scale[j] = 1.0 / g[j][j].sqrt();
        }
    }
    // The full set first: where all its coefficients are positive it is the optimum.
    for set in (1..(1usize << l)).rev() {
        let on = |j: usize| set >> j & 1 == 1 && scale[j] > 0.0;
        let mut m = [[0.0; 4]; 4];
        let mut r = [0.0; 4];
        for j in 0..l {
            for k in j..l {
                m[j][k] = if on(j) && on(k) {
                    g[j][k] * scale[j] * scale[k]
                } else if j == k {
                    1.0
                } else {
                    0.0
                };
            }
            if on(j) {
                r[j] = b[j] * scale[j];
            }
        }
        let mut y = [0.0; 4];
        if !solve_spd(&m, &r, &mut y, l) {
            continue;
        }
        let mut theta = [0.0; 4];
        let mut feasible = true;
        let mut fit = 0.0;
        for j in 0..l {
            if on(j) {
                theta[j] = y[j] * scale[j];
                feasible &= theta[j] > 0.0;
                fit += theta[j] * b[j];
            }
        }
        if feasible && dd - fit < best.1 {
            best = (theta, dd - fit);
        }
        if feasible && set + 1 == 1 << l {
            break;
        }
    }
    best
}

/// The model parameters of solved coefficients `theta` (per second) with delays `delays`
/// (axis 0, axis 1), projected into the bounds; parameters the coefficients leave
/// undetermined keep `start`.
pub(crate) fn parameters(
    plan: &StartPlan,
    theta: &[f64; 4],
    delays: [f64; 2],
    b: &Bounds,
    start: &[f64; MAX_PARAMS],
) -> [f64; MAX_PARAMS] {
    let model = plan.model;
    let s = model.rate_scale();
    let mut x = *start;
    let ve_from = |g1: f64, k1: f64, x: &mut [f64; MAX_PARAMS]| {
        if k1 > 0.0 && g1 > 0.0 {
            x[1] = g1 / k1;
        }
    };
    match model {
        Model::DualInput => {
            x[0] = theta[0] / s;
            x[1] = theta[1] / s;
            x[2] = theta[2] / s;
        }
        Model::Tofts => {
            x[0] = theta[0] / s;
            ve_from(theta[0], theta[1], &mut x);
        }
        Model::ExtendedTofts => {
            let g1 = (theta[1] - theta[2] * theta[0]).max(0.0);
            x[0] = g1 / s;
            ve_from(g1, theta[2], &mut x);
            x[2] = theta[0];
        }
        Model::Patlak => {
            x[0] = theta[1] / s;
            x[1] = theta[0];
        }
        Model::TwoCompartmentExchange => exchange(theta, s, &mut x),
    }
    for (axis, &tau) in plan.axes.iter().zip(&delays) {
        if axis.param != NO_DELAY {
            x[axis.param] = tau;
        }
    }
    b.project(&mut x);
    x
}

/// 2CXM parameters (Fp, PS, ve, vp) from the integral-form coefficients (Flouri et al.
/// 2016): `Fp = c1`, `ve + vp = c3 / c4`, `vp = Fp / (c2 - c4 (ve + vp) / Fp)`,
/// `PS = c4 vp ve / Fp`; without exchange (`c4 = 0`) a one-compartment `vp = Fp / c2`.
fn exchange(theta: &[f64; 4], s: f64, x: &mut [f64; MAX_PARAMS]) {
    let [c1, c2, c3, c4] = *theta;
    if !(c1 > 0.0) {
        return;
    }
    x[0] = c1 / s;
    if c4 > 0.0 && c3 > 0.0 {
        let v = c3 / c4;
        let den = c2 - c4 * v / c1;
        if den > 0.0 {
            let vp = c1 / den;
            if vp < v {
                let ve = v - vp;
                x[1] = c4 * vp * ve / c1 / s;
                x[2] = ve;
                x[3] = vp;
            }
        }
    } else if c2 > 0.0 {
        x[1] = 0.0;
        x[3] = c1 / c2;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nnls_finds_the_exact_and_the_constrained_solutions() {
        // Columns (1,0), (1,1) and data (3, 1): unconstrained (2, 1); data (-1, 1) gives
        // a negative first coefficient, so the constrained optimum uses column 2 only.
        let cols = [[1.0, 0.0], [1.0, 1.0]];
        let gram = |d: [f64; 2]| {
            let mut g = [[0.0; 4]; 4];
            let mut b = [0.0; 4];
            for j in 0..2 {
                for k in 0..2 {
                    g[j][k] = cols[j][0] * cols[k][0] + cols[j][1] * cols[k][1];
                }
                b[j] = cols[j][0] * d[0] + cols[j][1] * d[1];
            }
            (g, b, d[0] * d[0] + d[1] * d[1])
        };
        let (g, b, dd) = gram([3.0, 1.0]);
        let (x, r) = nnls(&g, &b, dd, 2);
        assert!((x[0] - 2.0).abs() < 1e-12 && (x[1] - 1.0).abs() < 1e-12 && r.abs() < 1e-12);
        let (g, b, dd) = gram([-1.0, 1.0]);
        let (x, r) = nnls(&g, &b, dd, 2);
        assert_eq!(x[0], 0.0);
        assert!((x[1] - 0.0).abs() < 1e-12 || x[1] > 0.0);
        assert!(r >= 0.0 && r <= dd);
        // All-negative data: nothing feasible beats the empty solution.
        let (g, b, dd) = gram([-1.0, -1.0]);
        assert_eq!(nnls(&g, &b, dd, 2), ([0.0; 4], dd));
    }
}
