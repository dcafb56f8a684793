//! The forward models in O(Nt): exact convolution of a piecewise-linear input with an
//! exponential by recursion, fractional delays by linear interpolation, any time grid.
//!
//! For an input `f` linear between samples, `y = conv(k; f)` obeys exactly
//!
//! ```text
//! y[i+1] = E y[i] + dt (a(x) f[i] + b(x) f[i+1]),   x = k dt,  E = exp(-x)
//! a(x) = (1 - E - x E) / x^2,   b(x) = (x - 1 + E) / x^2
//! ```
//!
//! (series below x = 1/2, where the closed forms cancel). `gpu_kernels::perfusion` runs the
//! same recursions with the same operations in the same order, so f64 GPU and CPU results
//! differ only by fused multiply-adds and the device's `exp`.

use crate::error::Result;
use crate::model::weights::{Weights, weights, weights_d};
use crate::model::{CANON, Canonical, MAX_PARAMS, Model, Problem, canonical, full_vector};

/// Linear interpolation of an input at increasing abscissae on a non-uniform grid: a pointer
/// moves forward (O(Nt) per curve). Before the first sample the first value holds, after the
/// last the last one. Uniform grids use [`Shift`] instead.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Sampler {
    j: usize,
}

impl Sampler {
    /// (value, slope) at `x`.
    #[inline(always)]
    pub fn at(&mut self, t: &[f64], u: &[f64], s: &[f64], x: f64) -> (f64, f64) {
        let n = t.len();
        while self.j + 1 < n && t[self.j + 1] <= x {
            self.j += 1;
        }
        if x <= t[0] {
            (u[0], 0.0)
        } else if self.j + 1 >= n {
            (u[n - 1], 0.0)
        } else {
            (u[self.j] + (x - t[self.j]) * s[self.j], s[self.j])
        }
    }
}

/// A delayed input on a uniform grid. There `t_i - tau = t0 + (i + q) dt` with
/// `q = -tau / dt`, so every step of an evaluation reads the interval `i + m`, `m = floor(q)`,
/// at the same fraction `fr = q - m` (exact): the interval and the fraction are found once
/// per evaluation, and the input is walked with a sliding pair of samples (one new sample per
/// step). Samples are clamped to the grid (the first value before the start, the last after
/// the end), as [`Sampler`] does; `m` is clamped to `[-n, n]` (fraction 0 there), and a NaN
/// delay gives a NaN fraction, so a NaN curve. `gpu_kernels::perfusion` does the same.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Shift {
    /// Interval of step 0 (may lie outside the grid).
    pub m: isize,
    /// Fraction of the interval, in [0, 1) (NaN for a NaN delay).
    pub fr: f64,
}

impl Shift {
    #[inline(always)]
    pub fn new(tau: f64, inv_dt: f64, n: usize) -> Self {
        let q = -tau * inv_dt;
        let fl = q.floor();
        let lim = n as f64;
        if fl > lim {
            Shift {
                m: n as isize,
                fr: 0.0,
            }
        } else if fl >= -lim {
            Shift {
                m: fl as isize,
                fr: q - fl,
            }
        } else if fl < -lim {
            Shift {
                m: -(n as isize),
                fr: 0.0,
            }
        } else {
            Shift {
                m: -(n as isize),
                fr: f64::NAN,
            }
        }
    }
}

/// Sample `k` of input `u`, clamped to the grid.
#[inline(always)]
pub(crate) fn clamped(u: &[f64], k: isize) -> f64 {
    u[k.clamp(0, u.len() as isize - 1) as usize]
}

/// Evaluate the model curve, handing `(i, C(t_i))` to `sink`. `TI`: second input, `TE`:
/// second exponential, `VA`: vascular term (see [`crate::model`]).
#[inline(always)]
pub(crate) fn evaluate<const TI: bool, const TE: bool, const VA: bool>(
    p: &Problem,
    c: &Canonical,
    mut sink: impl FnMut(usize, f64),
) {
    if p.inv_dt > 0.0 {
        return evaluate_uniform::<TI, TE, VA>(p, c, sink);
    }
    let (t, dt) = (&p.t[..], &p.dt[..]);
    let n = t.len();
    let (mut s1, mut s2) = (Sampler::default(), Sampler::default());
    let (u1, _) = s1.at(t, &p.u1, &p.s1, t[0] - c.tau1);
    let mut f1p = c.g1 * u1;
    if TI {
        let (u2, _) = s2.at(t, &p.u2, &p.s2, t[0] - c.tau2);
        f1p += c.h1 * u2;
    }
    let mut f2p = if TE { c.g2 * u1 } else { 0.0 };
    let (mut y1, mut y2) = (0.0, 0.0);
    let mut y = y1;
    if VA {
        y += c.v * u1;
    }
    sink(0, y);
    let mut dtp = -1.0;
    let (mut w1, mut w2) = (Weights::default(), Weights::default());
    for i in 1..n {
        let h = dt[i - 1];
        if h != dtp {
            w1 = weights(c.k1, h);
            if TE {
                w2 = weights(c.k2, h);
            }
            dtp = h;
        }
        let ti = t[i];
        let (u1, _) = s1.at(t, &p.u1, &p.s1, ti - c.tau1);
        let mut f1 = c.g1 * u1;
        if TI {
            let (u2, _) = s2.at(t, &p.u2, &p.s2, ti - c.tau2);
            f1 += c.h1 * u2;
        }
        y1 = w1.e * y1 + w1.wa * f1p + w1.wb * f1;
        f1p = f1;
        let mut y = y1;
        if TE {
            let f2 = c.g2 * u1;
            y2 = w2.e * y2 + w2.wa * f2p + w2.wb * f2;
            f2p = f2;
            y += y2;
        }
        if VA {
            y += c.v * u1;
        }
        sink(i, y);
    }
}

/// [`evaluate`] on a uniform grid: the weights once (one interval), the delayed inputs
/// through [`Shift`]s. Each use of an input (`g1 u1`, `h1 u2`, `g2 u1`, `v u1`) enters as
/// `A u[j] + B u[j+1]` with `A = coef (1 - fr)`, `B = coef fr` computed once, and the
/// recursion adds the input terms before the decay: `y = E y + (wa f[i-1] + wb f[i])`
/// (one dependent operation per step on the GPU). `gpu_kernels::perfusion::model::sse`
/// writes the same expressions in the same order.
#[inline(always)]
fn evaluate_uniform<const TI: bool, const TE: bool, const VA: bool>(
    p: &Problem,
    c: &Canonical,
    mut sink: impl FnMut(usize, f64),
) {
    let n = p.t.len();
    let h = p.dt[0];
    let w1 = weights(c.k1, h);
    let w2 = if TE { weights(c.k2, h) } else { w1 };
    let s1 = Shift::new(c.tau1, p.inv_dt, n);
    let s2 = if TI {
        Shift::new(c.tau2, p.inv_dt, n)
    } else {
        s1
    };
    // The inputs of each recursion enter times its weight `wb`, so that a step is
    // `y = E y + (rho f[i-1] + f[i])`, `rho = wa / wb` (one multiplication fewer per step;
    // `wb > 0` for every `k >= 0`); the GPU (`gpu_kernels::perfusion`) does the same.
    let (a1, b1) = (w1.wb * (c.g1 * (1.0 - s1.fr)), w1.wb * (c.g1 * s1.fr));
    let (a2, b2) = (w1.wb * (c.h1 * (1.0 - s2.fr)), w1.wb * (c.h1 * s2.fr));
    let (ae, be) = (w2.wb * (c.g2 * (1.0 - s1.fr)), w2.wb * (c.g2 * s1.fr));
    let (av, bv) = (c.v * (1.0 - s1.fr), c.v * s1.fr);
    let rho1 = w1.wa / w1.wb;
    let rho2 = if TE { w2.wa / w2.wb } else { 0.0 };
    let (u1, u2) = (&p.u1[..], &p.u2[..]);
    let (mut p1, mut q1) = (clamped(u1, s1.m), clamped(u1, s1.m + 1));
    let (mut p2, mut q2) = (clamped(u2, s2.m), clamped(u2, s2.m + 1));
    let mut f1p = a1 * p1 + b1 * q1;
    if TI {
        f1p = f1p + a2 * p2 + b2 * q2;
    }
    let mut f2p = if TE { ae * p1 + be * q1 } else { 0.0 };
    let (mut y1, mut y2) = (0.0, 0.0);
    let mut y = 0.0;
    if VA {
        y += av * p1 + bv * q1;
    }
    sink(0, y);
    for i in 1..n {
        let k = i as isize + 1;
        p1 = q1;
        q1 = clamped(u1, k + s1.m);
        let mut f1 = a1 * p1 + b1 * q1;
        if TI {
            p2 = q2;
            q2 = clamped(u2, k + s2.m);
            f1 = f1 + a2 * p2 + b2 * q2;
        }
        y1 = w1.e * y1 + (rho1 * f1p + f1);
        f1p = f1;
        let mut y = y1;
        if TE {
            let f2 = ae * p1 + be * q1;
            y2 = w2.e * y2 + (rho2 * f2p + f2);
            f2p = f2;
            y += y2;
        }
        if VA {
            y += av * p1 + bv * q1;
        }
        sink(i, y);
    }
}

/// Sum of squared residuals against `data`.
#[inline(always)]
pub(crate) fn sse<const TI: bool, const TE: bool, const VA: bool>(
    p: &Problem,
    c: &Canonical,
    data: &[f64],
) -> f64 {
    let mut sse = 0.0;
    evaluate::<TI, TE, VA>(p, c, |i, y| {
        let r = y - data[i];
        sse += r * r;
    });
    sse
}

/// Cost, J^T J (upper triangle used) and J^T r of the residuals `C - data` in the
/// parameters, through the canonical partials and `chain` = d(canonical)/d(theta).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Normal {
    pub cost: f64,
    pub jtj: [[f64; MAX_PARAMS]; MAX_PARAMS],
    pub jtr: [f64; MAX_PARAMS],
}

/// The running convolutions the Jacobian needs for one exponential.
#[derive(Debug, Clone, Copy, Default)]
struct Branch {
    /// conv(k; f) and its derivative in k.
    y: f64,
    dk: f64,
    /// conv(k; u1), conv(k; u2), conv(k; du1/dtau), conv(k; du2/dtau).
    c1: f64,
    c2: f64,
    d1: f64,
    d2: f64,
}

/// Previous samples of the inputs.
#[derive(Debug, Clone, Copy, Default)]
struct Samples {
    u1: f64,
    u2: f64,
    du1: f64,
    du2: f64,
}

#[inline(always)]
fn step_branch<const TI: bool>(
    b: &mut Branch,
    w: &Weights,
    fp: f64,
    f: f64,
    sp: &Samples,
    s: &Samples,
) {
    b.dk = w.e * b.dk + w.de * b.y + w.dwa * fp + w.dwb * f;
    b.y = w.e * b.y + w.wa * fp + w.wb * f;
    b.c1 = w.e * b.c1 + w.wa * sp.u1 + w.wb * s.u1;
    b.d1 = w.e * b.d1 + w.wa * sp.du1 + w.wb * s.du1;
    if TI {
        b.c2 = w.e * b.c2 + w.wa * sp.u2 + w.wb * s.u2;
        b.d2 = w.e * b.d2 + w.wa * sp.du2 + w.wb * s.du2;
    }
}

#[inline(always)]
pub(crate) fn normal<const TI: bool, const TE: bool, const VA: bool>(
    p: &Problem,
    c: &Canonical,
    chain: &[[f64; MAX_PARAMS]; CANON],
    np: usize,
    data: &[f64],
) -> Normal {
    let (t, dt) = (&p.t[..], &p.dt[..]);
    let n = t.len();
    let (mut s1, mut s2) = (Sampler::default(), Sampler::default());
    // Uniform grid: value `u[j] + fr (u[j+1] - u[j])`, d/dtau minus the slope of interval j
    // (0 outside the grid); on a sample itself (`fr = 0`, e.g. a delay of 0 from the delay
    // grid), where the interpolant has a kink, the derivative for an increasing delay: minus
    // the slope of interval j - 1 (0 at the first sample, as before the grid). As the GPU's
    // `normal`. The slopes come from the problem (exact in f64, rounded once for f32).
    let uniform = p.inv_dt > 0.0;
    let sh1 = Shift::new(c.tau1, p.inv_dt, n);
    let sh2 = Shift::new(c.tau2, p.inv_dt, n);
    let slope_at = |sl: &[f64], k: isize| if k < 0 { 0.0 } else { clamped(sl, k) };
    let shifted = |u: &[f64], sl: &[f64], sh: &Shift, i: usize| {
        let k = i as isize + sh.m;
        let (a, b) = (clamped(u, k), clamped(u, k + 1));
        let right = slope_at(sl, k);
        let slope = if sh.fr == 0.0 {
            slope_at(sl, k - 1)
        } else {
            right
        };
        (a + sh.fr * (b - a), -slope)
    };
    let sample = |s1: &mut Sampler, s2: &mut Sampler, i: usize| {
        let (u1, du1) = if uniform {
            shifted(&p.u1, &p.s1, &sh1, i)
        } else {
            let (u, sl) = s1.at(t, &p.u1, &p.s1, t[i] - c.tau1);
            (u, -sl)
        };
        let mut s = Samples {
            u1,
            du1,
            ..Samples::default()
        };
        if TI {
            let (u2, du2) = if uniform {
                shifted(&p.u2, &p.s2, &sh2, i)
            } else {
                let (u, sl) = s2.at(t, &p.u2, &p.s2, t[i] - c.tau2);
                (u, -sl)
            };
            s.u2 = u2;
            s.du2 = du2;
        }
        s
    };
    let mut out = Normal::default();
    let (mut b1, mut b2) = (Branch::default(), Branch::default());
    let mut sp = sample(&mut s1, &mut s2, 0);
    let mut f1p = c.g1 * sp.u1;
    if TI {
        f1p += c.h1 * sp.u2;
    }
    let mut f2p = c.g2 * sp.u1;
    let mut dtp = -1.0;
    let (mut w1, mut w2) = (Weights::default(), Weights::default());
    for i in 0..n {
        let s = if i == 0 {
            sp
        } else {
            let h = dt[i - 1];
            if h != dtp {
                w1 = weights_d(c.k1, h);
                if TE {
                    w2 = weights_d(c.k2, h);
                }
                dtp = h;
            }
            let s = sample(&mut s1, &mut s2, i);
            let mut f1 = c.g1 * s.u1;
            if TI {
                f1 += c.h1 * s.u2;
            }
            step_branch::<TI>(&mut b1, &w1, f1p, f1, &sp, &s);
            f1p = f1;
            if TE {
                let f2 = c.g2 * s.u1;
                step_branch::<false>(&mut b2, &w2, f2p, f2, &sp, &s);
                f2p = f2;
            }
            sp = s;
            s
        };
        let mut y = b1.y;
        if TE {
            y += b2.y;
        }
        if VA {
            y += c.v * s.u1;
        }
        let r = y - data[i];
        // Canonical partials, in canonical order; absent terms are skipped on both paths.
        let mut pt = c.g1 * b1.d1;
        if TE {
            pt += c.g2 * b2.d1;
        }
        if VA {
            pt += c.v * s.du1;
        }
        let mut jac = [0.0; MAX_PARAMS];
        for (q, jq) in jac.iter_mut().enumerate().take(np) {
            let mut v = b1.dk * chain[0][q] + b1.c1 * chain[1][q];
            if TI {
                v += b1.c2 * chain[2][q];
            }
            if TE {
                v += b2.dk * chain[3][q] + b2.c1 * chain[4][q];
            }
            if VA {
                v += s.u1 * chain[5][q];
            }
            v += pt * chain[6][q];
            if TI {
                v += c.h1 * b1.d2 * chain[7][q];
            }
            *jq = v;
        }
        out.cost += r * r;
        for q in 0..np {
            out.jtr[q] += jac[q] * r;
            for w in q..np {
                out.jtj[q][w] += jac[q] * jac[w];
            }
        }
    }
    out
}

/// Dispatch on the model's flags.
macro_rules! by_flags {
    ($model:expr, $f:ident, ($($arg:expr),*)) => {
        match $model.flags() {
            (true, _, _) => $f::<true, false, false>($($arg),*),
            (false, true, _) => $f::<false, true, false>($($arg),*),
            (false, false, true) => $f::<false, false, true>($($arg),*),
            (false, false, false) => $f::<false, false, false>($($arg),*),
        }
    };
}
pub(crate) use by_flags;

/// The model curve of `theta` (user units) on the problem's grid.
pub(crate) fn predict(problem: &Problem, model: Model, theta: &[f64]) -> Result<Vec<f64>> {
    problem.check_model(model)?;
    let th = full_vector(model, theta, "theta")?;
    let c = canonical(model, &th);
    let mut out = vec![0.0; problem.len()];
    let sink = |i: usize, y: f64| out[i] = y;
    match model.flags() {
        (true, _, _) => evaluate::<true, false, false>(problem, &c, sink),
        (false, true, _) => evaluate::<false, true, false>(problem, &c, sink),
        (false, false, true) => evaluate::<false, false, true>(problem, &c, sink),
        (false, false, false) => evaluate::<false, false, false>(problem, &c, sink),
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::chain;
    use crate::model::weights::SERIES_BELOW;

    #[test]
    fn series_and_closed_forms_agree_at_the_switch() {
        let k = SERIES_BELOW;
        let below = weights_d(f64::from_bits(k.to_bits() - 1), 1.0);
        let above = weights_d(k, 1.0);
        // The closed forms cancel near the switch: ~1e-15 for the weights, ~1e-13 for their
        // derivatives (Jacobian only).
        for (x, y, tol) in [
            (below.wa, above.wa, 1e-14),
            (below.wb, above.wb, 1e-14),
            (below.dwa, above.dwa, 1e-12),
            (below.dwb, above.dwb, 1e-12),
        ] {
            assert!((x - y).abs() <= tol * y.abs(), "{x} vs {y}");
        }
        let w = weights(0.0, 2.0);
        assert_eq!(
            (w.e, w.wa, w.wb),
            (1.0, 1.0, 1.0),
            "k = 0 is the trapezoid rule"
        );
    }

    #[test]
    fn weight_derivatives_match_finite_differences() {
        for &(k, dt) in &[(0.01, 1.0), (0.2, 2.0), (3.0, 1.5), (0.05, 0.5)] {
            let w = weights_d(k, dt);
            let h = 1e-6 * k;
            let (u, d) = (weights(k + h, dt), weights(k - h, dt));
            for (an, fd) in [
                (w.de, (u.e - d.e) / (2.0 * h)),
                (w.dwa, (u.wa - d.wa) / (2.0 * h)),
                (w.dwb, (u.wb - d.wb) / (2.0 * h)),
            ] {
                assert!(
                    (an - fd).abs() <= 1e-6 * an.abs() + 1e-12,
                    "k {k} dt {dt}: {an} vs {fd}"
                );
            }
        }
    }

    fn problem(dual: bool, uniform: bool) -> Problem {
        let t: Vec<f64> = (0..40)
            .map(|i| {
                let i = i as f64;
                if uniform {
                    1.5 * i
                } else {
                    1.5 * i + 0.4 * (i * 0.7).sin()
                }
            })
            .collect();
        let gamma = |s: f64, t0: f64| {
            if s > t0 {
                (s - t0).powi(2) * (-(s - t0) / 4.0).exp()
            } else {
                0.0
            }
        };
        let a: Vec<f64> = t.iter().map(|&s| gamma(s, 6.0) + 0.2).collect();
        let v: Vec<f64> = t.iter().map(|&s| 0.6 * gamma(s, 11.0)).collect();
        Problem::new(&t, &a, dual.then_some(&v[..])).unwrap()
    }

    #[test]
    fn uniform_shifts_match_the_pointer_sampler_at_any_delay() {
        // The shift walk (uniform grids) against the forward pointer (any grid) on the same
        // uniform grid: delays before, on and between samples, and past either end.
        let p = problem(true, true);
        let mut pointer = p.clone();
        pointer.inv_dt = 0.0;
        let curve = |p: &Problem, th: &[f64; MAX_PARAMS]| {
            let mut out = vec![0.0; p.len()];
            let c = canonical(Model::DualInput, th);
            evaluate::<true, false, false>(p, &c, |i, y| out[i] = y);
            out
        };
        for tau in [
            -1e6, -70.0, -3.0, -1.5, -0.7, 0.0, 0.4, 1.5, 2.25, 58.5, 70.0, 1e6,
        ] {
            let th = [20.0, 100.0, 400.0, tau, 0.5 * tau];
            let (a, b) = (curve(&p, &th), curve(&pointer, &th));
            let peak = b.iter().fold(0.0f64, |m, v| m.max(v.abs()));
            for (i, (x, y)) in a.iter().zip(&b).enumerate() {
                assert!(
                    (x - y).abs() <= 1e-12 * peak,
                    "tau {tau} step {i}: shift {x} vs pointer {y}"
                );
            }
        }
        // A NaN delay gives a NaN curve (after the first step, which has no input term).
        let th = [20.0, 100.0, 400.0, f64::NAN, 1.0];
        assert!(curve(&p, &th)[1..].iter().all(|v| v.is_nan()));
        let sh = Shift::new(-3.0 * 1.5, 1.0 / 1.5, 40);
        assert_eq!(
            (sh.m, sh.fr),
            (3, 0.0),
            "a delay of whole samples lands on a sample"
        );
    }

    #[test]
    fn jacobian_matches_finite_differences_of_the_cost_for_every_model() {
        let points = crate::cpu::TEST_POINTS;
        for uniform in [true, false] {
            for (model, v) in points {
                let p = problem(model.dual_input(), uniform);
                let mut th = [0.0; MAX_PARAMS];
                th[..v.len()].copy_from_slice(v);
                let data: Vec<f64> = (0..p.len()).map(|i| 0.3 + 0.01 * i as f64).collect();
                let np = model.n_params();
                let nrm = by_flags!(
                    model,
                    normal,
                    (&p, &canonical(model, &th), &chain(model, &th), np, &data)
                );
                let cost = |th: &[f64; MAX_PARAMS]| {
                    by_flags!(model, sse, (&p, &canonical(model, th), &data))
                };
                assert!((nrm.cost - cost(&th)).abs() <= 1e-12 * nrm.cost);
                for q in 0..np {
                    let h = 1e-6 * th[q].abs().max(1e-2);
                    let (mut up, mut dn) = (th, th);
                    up[q] += h;
                    dn[q] -= h;
                    let fd = (cost(&up) - cost(&dn)) / (2.0 * h);
                    let an = 2.0 * nrm.jtr[q];
                    assert!(
                        (an - fd).abs() <= 1e-5 * an.abs().max(fd.abs()) + 1e-9,
                        "{model} uniform {uniform} d cost / d {}: analytic {an} vs numeric {fd}",
                        model.params()[q].name
                    );
                }
            }
        }
    }
}
