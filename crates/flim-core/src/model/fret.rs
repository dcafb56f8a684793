//! Fast bi-exponential (FRET) analysis without fitting: the bi-exponential centre-of-mass
//! method (BCMM) and the phasor method (PM) of Wu et al. 2016, Table 1.
//!
//! The decay is `f(t) = A [f_D e^{-t/tau_F} + (1 - f_D) e^{-t/tau_D}]`: `tau_F` the quenched
//! (FRET) donor, `tau_D` the free donor, `f_D` the amplitude fraction of the quenched form
//! (the paper's naming). `tau_F < tau_D` by convention.
//!
//! **BCMM.** The paper matches four statistics of the decay, the first bin `K` and the
//! moments `N = sum N_j`, `X = sum j N_j`, `Y = sum j^2 N_j` (here plain sums; units of
//! bins), to their values for two exponentials, with integrals to infinity in place of the
//! sums: `tau_F = (tau_D N - X) / (tau_D K - N)` when `tau_D` is known (BCMM1), and the
//! roots of `tau^2 - G tau + P` when not (BCMM2). Those closed forms are biased when the
//! decay has not ended inside the window (12% on `tau_F` for `tau_D = 2.5` ns in a 12.8 ns
//! window). Here the same equations are solved exactly for the sampled decay in the actual
//! window: bin counts of a bin-integrated, periodic exponential are exactly geometric,
//! `N_j = c r^j`, `r = e^{-h/tau}`, whose window sums have closed forms (`s_k(a)`, `a = h/tau`,
//! computed without cancellation). BCMM1 solves one equation in `a_F` (bracketed Newton;
//! whether it has a root is known beforehand), BCMM2 two in `(a_F, a_D)`: Newton in `a_D`
//! along the curve where the S1 equation holds, from the paper's closed form, with an
//! analytic Jacobian and a fixed budget (at most 64 window-sum evaluations a pixel, 17 on
//! average on the paper's phantom). Same statistics, same noise as the paper's method, no
//! window bias.
//!
//! **PM** (donor lifetime known): with the calibrated phasor `(u, v)` at `omega`,
//! `tau_F = (1 - u - v tau_D omega) / (omega (v - u tau_D omega))` and the paper's `f_D`,
//! evaluated in an equivalent form that stays defined where the paper's is 0/0 (a segment
//! parallel to the s axis): the light fraction `x` of `tau_F` by projecting the phasor on
//! the segment between the single-exponential points `(1, omega tau)/(1 + omega^2 tau^2)`,
//! then `f_D = x tau_D / (x tau_D + (1 - x) tau_F)`. A `tau_F` outside `(0, tau_D)` is no
//! FRET solution: NaN. Exact for a window of one
//! laser period up to binning: the phasor of a bin-integrated exponential differs from
//! `1/(1 - i omega tau)` by about `(h/tau)^2/12 + (omega h)^2/24` relative.
//!
//! Amplitude fractions refer to the start of the fit range and are corrected for binning and
//! for pile-up of earlier pulses (`1 - e^{-T/tau}`, `T` the laser period); the mean lifetime
//! is the paper's `tau_avg = f_D tau_F + (1 - f_D) tau_D` (amplitude-weighted).

// `!(x > 0.0)` is meant: it is also true for NaN.
#![allow(clippy::neg_cmp_op_on_partial_ord)]

use crate::error::{Result, invalid};
use crate::model::lifetimes::{Analysis, STATUS_MASKED, STATUS_OK, Setup};
use crate::model::plane;
use ndarray::Array2;

/// Settings of [`analyse_fret`](crate::analyse_fret): the range, offset, threshold,
/// harmonic, phasor calibration and GPU tuning of `analysis` (its method set is ignored)
/// and what is known of the donor.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FretOptions {
    /// Range, offset, threshold, harmonic, calibration, tuning.
    pub analysis: Analysis,
    /// The free donor's lifetime, if known.
    pub donor: Donor,
}

impl FretOptions {
    /// Default analysis settings with `donor`.
    pub fn new(donor: Donor) -> Self {
        Self {
            analysis: Analysis::default(),
            donor,
        }
    }

    /// Use `analysis` for the range, offset, threshold, harmonic, calibration and tuning.
    pub fn with_analysis(mut self, analysis: Analysis) -> Self {
        self.analysis = analysis;
        self
    }
}

/// What is known of the free donor's lifetime.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Donor {
    /// Measured separately (ns): BCMM1 and PM.
    Known(f64),
    /// Estimated per pixel with the quenched lifetime: BCMM2 (PM needs the donor).
    Unknown,
}

/// Maps of [`analyse_fret`](crate::analyse_fret); NaN where a method does not apply or has no solution.
#[derive(Debug, Clone, PartialEq)]
pub struct FretMaps {
    /// Photons in the fit range after the offset.
    pub intensity: Array2<f32>,
    /// BCMM quenched lifetime tau_F (ns).
    pub tau_f_bcmm: Array2<f32>,
    /// BCMM donor lifetime tau_D (ns): the known one, or BCMM2's estimate.
    pub tau_d_bcmm: Array2<f32>,
    /// BCMM amplitude fraction of tau_F.
    pub f_d_bcmm: Array2<f32>,
    /// BCMM mean lifetime f_D tau_F + (1 - f_D) tau_D (ns).
    pub tau_avg_bcmm: Array2<f32>,
    /// PM quenched lifetime (ns).
    pub tau_f_pm: Array2<f32>,
    /// PM amplitude fraction of tau_F.
    pub f_d_pm: Array2<f32>,
    /// PM mean lifetime (ns).
    pub tau_avg_pm: Array2<f32>,
    /// [`STATUS_OK`] or [`STATUS_MASKED`].
    pub status: Array2<u8>,
}

/// Names of [`FretMaps::planes`], as written to files.
pub const FRET_PLANES: [&str; 8] = [
    "intensity",
    "tau_f_bcmm_ns",
    "tau_d_bcmm_ns",
    "f_d_bcmm",
    "tau_avg_bcmm_ns",
    "tau_f_pm_ns",
    "f_d_pm",
    "tau_avg_pm_ns",
];

impl FretMaps {
    pub(crate) fn nan(h: usize, w: usize) -> Self {
        let mut planes = plane::filled(8, h, w, f32::NAN).into_iter();
        let mut z = || planes.next().expect("eight planes");
        Self {
            intensity: z(),
            tau_f_bcmm: z(),
            tau_d_bcmm: z(),
            f_d_bcmm: z(),
            tau_avg_bcmm: z(),
            tau_f_pm: z(),
            f_d_pm: z(),
            tau_avg_pm: z(),
            status: Array2::zeros((h, w)),
        }
    }

    /// The eight float maps in the order of [`FRET_PLANES`].
    pub fn planes(&self) -> [&Array2<f32>; 8] {
        [
            &self.intensity,
            &self.tau_f_bcmm,
            &self.tau_d_bcmm,
            &self.f_d_bcmm,
            &self.tau_avg_bcmm,
            &self.tau_f_pm,
            &self.f_d_pm,
            &self.tau_avg_pm,
        ]
    }

    pub(crate) fn planes_mut(&mut self) -> [&mut Array2<f32>; 8] {
        [
            &mut self.intensity,
            &mut self.tau_f_bcmm,
            &mut self.tau_d_bcmm,
            &mut self.f_d_bcmm,
            &mut self.tau_avg_bcmm,
            &mut self.tau_f_pm,
            &mut self.f_d_pm,
            &mut self.tau_avg_pm,
        ]
    }
}

/// The values of [`FretMaps`] for one decay, in f64, in the order of [`FRET_PLANES`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FretDecay {
    pub intensity: f64,
    pub tau_f_bcmm: f64,
    pub tau_d_bcmm: f64,
    pub f_d_bcmm: f64,
    pub tau_avg_bcmm: f64,
    pub tau_f_pm: f64,
    pub f_d_pm: f64,
    pub tau_avg_pm: f64,
    /// Below the photon threshold: everything but the intensity NaN.
    pub masked: bool,
}

/// The checked per-pixel settings.
#[derive(Debug, Clone)]
pub(crate) struct FretSetup {
    pub base: Setup,
    /// Known donor rate `h / tau_D`, or NaN.
    pub a_d: f64,
    /// Laser period (ns), for the pile-up correction.
    pub period: f64,
}

impl FretSetup {
    pub(crate) fn new(
        opts: &Analysis,
        donor: Donor,
        bins: usize,
        bin_ns: f64,
        period_ns: f64,
    ) -> Result<Self> {
        let base = opts.setup(bins, bin_ns, period_ns)?;
        let a_d = match donor {
            Donor::Known(tau) => {
                if !(tau.is_finite() && tau > 0.0) {
                    return Err(invalid("donor lifetime", tau, "must be finite and > 0 ns"));
                }
                bin_ns / tau
            }
            Donor::Unknown => f64::NAN,
        };
        Ok(Self {
            base,
            a_d,
            period: period_ns,
        })
    }
}

/// Sums of one decay (offset removed): photons `S0`, first bin `K`, `S1 = sum j N_j`,
/// `S2 = sum j^2 N_j`, and the uncalibrated phasor numerators.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct FretSums {
    pub s0: f64,
    pub k: f64,
    pub s1: f64,
    pub s2: f64,
    pub gc: f64,
    pub gs: f64,
}

pub(crate) fn fret_sums(v: &[f64], su: &FretSetup) -> FretSums {
    let b = &su.base;
    let (m, o) = (b.m as f64, b.offset);
    let (mut s0, mut s1, mut s2, mut gc, mut gs) = (0.0, 0.0, 0.0, 0.0, 0.0);
    for (j, &c) in v.iter().enumerate() {
        let jf = j as f64;
        s0 += c;
        s1 += jf * c;
        s2 += jf * jf * c;
    }
    // The phasor is for PM, which needs the donor's lifetime.
    if !su.a_d.is_nan() {
        for ((&c, &cos), &sin) in v.iter().zip(&b.cos_t).zip(&b.sin_t) {
            gc += cos * c;
            gs += sin * c;
        }
    }
    FretSums {
        s0: s0 - m * o,
        k: v[0] - o,
        s1: s1 - o * m * (m - 1.0) / 2.0,
        s2: s2 - o * (m - 1.0) * m * (2.0 * m - 1.0) / 6.0,
        gc: gc - o * b.sum_cos,
        gs: gs - o * b.sum_sin,
    }
}

/// `[B(x), B'(x), B''(x), 1 - e^{-x}]` for `B(x) = 1/(e^x - 1) - 1/x`: Bernoulli series
/// below 0.1, else all four from one exponential `u = e^{-x}`
/// (`B = u/(1-u) - 1/x`, `B' = 1/x^2 - u/(1-u)^2`, `B'' = u(1+u)/(1-u)^3 - 2/x^3`).
fn b_terms(x: f64) -> [f64; 4] {
    if x < 0.1 {
        let x2 = x * x;
        [
            -0.5 + x * (1.0 / 12.0 - x2 * (1.0 / 720.0 - x2 * (1.0 / 30240.0 - x2 / 1_209_600.0))),
            1.0 / 12.0 - x2 * (1.0 / 240.0 - x2 * (1.0 / 6048.0 - x2 / 172_800.0)),
            -x * (1.0 / 120.0 - x2 * (1.0 / 1512.0 - x2 * (1.0 / 28800.0 - x2 / 665_280.0))),
            -(-x).exp_m1(),
        ]
    } else {
        let u = (-x).exp();
        let q = 1.0 - u;
        let (r, w) = (1.0 / x, u / q);
        [
            w - r,
            r * r - w / q,
            w * (1.0 + u) / (q * q) - 2.0 * r * r * r,
            q,
        ]
    }
}

/// Window sums `s_k = sum_{j<m} j^k e^{-a j}`, k = 0..3, of a unit geometric decay: the
/// count `(1 - e^{-am}) / (1 - e^{-a})` times the raw moments from the cumulants of the
/// truncated geometric distribution, `k1 = B(a) - m B(am)`, `k2 = m^2 B'(am) - B'(a)`,
/// `k3 = B''(a) - m^3 B''(am)` (no cancellation as a -> 0). Two exponentials. `s_3` enters
/// only the derivatives `d s_k / d ln a = -a s_{k+1}`.
pub(crate) fn unit_moments(a: f64, m: f64) -> [f64; 4] {
    let [ba, da, ea, qa] = b_terms(a);
    let [bm, dm, em, qm] = b_terms(a * m);
    let k1 = ba - m * bm;
    let k2 = m * m * dm - da;
    let k3 = ea - m * m * m * em;
    let s0 = qm / qa;
    [
        s0,
        s0 * k1,
        s0 * (k2 + k1 * k1),
        s0 * (k3 + k1 * (3.0 * k2 + k1 * k1)),
    ]
}

/// Largest rate `a = h / tau` searched (as in CMM); the smallest is [`ln_a_min`].
const LN_A_MAX: f64 = 4.094_344_562_222_1; // ln 60

/// `ln` of the smallest rate BCMM2 searches: lifetimes up to ten windows (longer ones are
/// not resolved by the window and would fit a flat background as a "component").
fn ln_a_min(m: f64) -> f64 {
    (0.1 / m).ln()
}

/// The S1 equation for a donor with window sums `d` (BCMM1's equation; BCMM2's inner one).
/// With the amplitudes fixed by K and S0 it reads `rho(a_F) = rho*`,
/// `rho(a_F) = (s1(a_F) - d1) / (s0(a_F) - d0)`, `rho* = (S1 - K d1) / (S0 - K d0)`. `rho`
/// is the slope of a chord of the convex curve `(s0(a), s1(a))`, monotone in `a_F`, from
/// `d2 / d1` (`a_F -> a_D`) to `d1 / (d0 - 1)` (`a_F -> inf`): a root `a_F > a_D` exists
/// iff `rho*` lies strictly between, with no search. `Some((rho*, d2/d1 - rho*))`, the
/// second giving the sign of `rho - rho*` next to `a_D`.
fn s1_equation(s: &FretSums, d: &[f64; 4]) -> Option<(f64, f64)> {
    let target = (s.s1 - s.k * d[1]) / (s.s0 - s.k * d[0]);
    let near = d[2] / d[1] - target;
    let far = d[1] / (d[0] - 1.0) - target;
    // False for NaN.
    (near * far < 0.0).then_some((target, near))
}

/// One bracketed Newton step on `rho(y) = rho*`, `y = ln a_F`, from the sums `f` at `y`:
/// shrinks the bracket `[lo, hi]` (`near` from [`s1_equation`]) and returns the next point
/// and the Newton step's length (`d s_k / dy = -a s_{k+1}`).
fn s1_step(
    y: f64,
    f: &[f64; 4],
    d: &[f64; 4],
    target: f64,
    near: f64,
    lo: &mut f64,
    hi: &mut f64,
) -> (f64, f64) {
    let a = y.exp();
    let den = f[0] - d[0];
    let h = (f[1] - d[1]) / den - target;
    let slope = a * (f[1] * (f[1] - d[1]) - f[2] * den) / (den * den);
    if (h > 0.0) == (near > 0.0) {
        *lo = y;
    } else {
        *hi = y;
    }
    let step = -h / slope;
    let mut next = y + step;
    if !(next > *lo && next < *hi) {
        next = 0.5 * (*lo + *hi);
    }
    (next, if h == 0.0 { 0.0 } else { step.abs() })
}

/// BCMM1: rate `a_F > a_D` and amplitudes `(alpha, beta)` of the geometric decay
/// `alpha r_F^j + beta r_D^j` with the sums `s`, `a_D` known: [`s1_equation`] by bracketed
/// Newton in `ln a_F` from the paper's closed form. A root on the search bound
/// (`a_F = 60`) is the bound, not a solution.
pub(crate) fn bcmm_known(s: &FretSums, a_d: f64, m: f64) -> Option<(f64, f64, f64)> {
    let d = unit_moments(a_d, m);
    let (target, near) = s1_equation(s, &d)?;
    let (mut lo, mut hi) = (a_d.ln(), LN_A_MAX);
    // The paper's tau_F = (tau_D N - X) / (tau_D K - N) (bins; N by the trapezoid).
    let n = s.s0 - 0.5 * s.k;
    let mut y = ((s.k / a_d - n) / (n / a_d - s.s1)).ln();
    if !(y > lo && y < hi) {
        y = 0.5 * (lo + hi);
    }
    let mut f = unit_moments(y.exp(), m);
    for _ in 0..BCMM1_ITERATIONS {
        let (next, step) = s1_step(y, &f, &d, target, near, &mut lo, &mut hi);
        if step <= TOL_LN_A * (1.0 + y.abs()) || hi - lo <= TOL_LN_A * (1.0 + y.abs()) {
            break;
        }
        y = next;
        f = unit_moments(y.exp(), m);
    }
    if !(y < LN_A_MAX - 1e-9) {
        return None;
    }
    let alpha = (s.s0 - s.k * d[0]) / (f[0] - d[0]);
    Some((y.exp(), alpha, s.k - alpha))
}

/// Newton steps of BCMM1 at most (bracketed: bisection where Newton leaves the bracket).
const BCMM1_ITERATIONS: usize = 60;
/// Convergence of a Newton step in `ln a`, relative to `1 + |ln a|`.
const TOL_LN_A: f64 = 1e-12;

/// The paper's BCMM2 closed form on sums in bins (integrals to infinity): rates
/// `(a_F, a_D)`, `a_F > a_D`, if real and positive.
pub(crate) fn bcmm_closed_form(s: &FretSums) -> Option<(f64, f64)> {
    // Trapezoid: the integral of the sampled decay is S0 - K / 2 (tail ignored).
    let (k, n, x, y) = (s.k, s.s0 - 0.5 * s.k, s.s1, 0.5 * s.s2);
    let g = (k * y - n * x) / (k * x - n * n);
    let p = (n * g - x) / k;
    let disc = g * g - 4.0 * p;
    if !(disc >= 0.0 && p > 0.0 && g > 0.0) {
        return None;
    }
    let root = disc.sqrt();
    let (tf, td) = (0.5 * (g - root), 0.5 * (g + root));
    (tf > 0.0).then(|| (1.0 / tf, 1.0 / td))
}

/// Residuals of the S1 and S2 equations (relative, model minus data) at `(ln a_F, ln a_D)`
/// with the amplitudes fixed by K and S0, their Jacobian in `(ln a_F, ln a_D)` (analytic:
/// `d s_k / d ln a = -a s_{k+1}`), and the amplitudes.
struct Bcmm2Point {
    r: [f64; 2],
    j: [[f64; 2]; 2],
    alpha: f64,
    beta: f64,
}

fn bcmm2_point(s: &FretSums, yf: f64, yd: f64, f: &[f64; 4], d: &[f64; 4]) -> Bcmm2Point {
    let (af, ad) = (yf.exp(), yd.exp());
    let den = f[0] - d[0];
    let alpha = (s.s0 - s.k * d[0]) / den;
    let beta = s.k - alpha;
    // d alpha / d ln a_F and d alpha / d ln a_D (beta = K - alpha).
    let alpha_f = alpha * af * f[1] / den;
    let alpha_d = beta * ad * d[1] / den;
    let (u1, u2) = (1.0 / s.s1, 1.0 / s.s2);
    Bcmm2Point {
        r: [
            (alpha * f[1] + beta * d[1] - s.s1) * u1,
            (alpha * f[2] + beta * d[2] - s.s2) * u2,
        ],
        j: [
            [
                (alpha_f * (f[1] - d[1]) - alpha * af * f[2]) * u1,
                (alpha_d * (f[1] - d[1]) - beta * ad * d[2]) * u1,
            ],
            [
                (alpha_f * (f[2] - d[2]) - alpha * af * f[3]) * u2,
                (alpha_d * (f[2] - d[2]) - beta * ad * d[3]) * u2,
            ],
        ],
        alpha,
        beta,
    }
}

/// BCMM2's budget: window-sum evaluations (one rate each) per pixel.
pub(crate) const BCMM2_EVALUATIONS: usize = 64;
/// Steps out of the domain of the donor rate (where the S1 equation has no root) that
/// BCMM2 takes back before giving up: the end of the curve is no solution.
const BCMM2_EXITS: u32 = 4;
/// BCMM2's inner (S1) solve stops at this Newton step in `ln a_F`: the outer step corrects
/// for the remaining S1 residual to first order.
const BCMM2_INNER_TOL: f64 = 1e-3;

/// BCMM2: rates `a_F > a_D` and amplitudes solving the K, S0, S1, S2 equations exactly.
///
/// Along the curve where the S1 equation holds ([`s1_equation`], solved for `a_F` given
/// `a_D`), the S2 residual `g(ln a_D)` is a function of one variable: Newton on it, with
/// the derivative `det J / J_11` from the analytic Jacobian, from the paper's closed form
/// (else from the mono-exponential rate spread by e^{+-0.4}). The inner solve is loose
/// (Newton steps to 1e-3): `g` is taken on the curve to first order,
/// `r2 - (J_21 / J_11) r1`, which makes the outer step the full 2D Newton step; converged
/// when that step is below 1e-10 in both log-rates. Safeguards: steps of at most 1 in
/// `ln a_D`; a sign change of `g` brackets the root (bisection where Newton leaves the
/// bracket by more than the tolerance); a donor rate where the S1 equation has no root is
/// stepped back from, halfway to the last good point, at most [`BCMM2_EXITS`] times.
/// Verdicts (no solution, NaN): the Newton step points below the smallest rate from the
/// smallest rate; the step changes direction with no sign change of `g` (an extremum of `g`
/// short of zero); the curve ends before a root; [`BCMM2_EVALUATIONS`] window-sum
/// evaluations spent.
pub(crate) fn bcmm_unknown(s: &FretSums, m: f64) -> Option<(f64, f64, f64, f64)> {
    let xmin = ln_a_min(m);
    // The paper's closed form, else the mono-exponential rate of the mean bin (untruncated,
    // `ln(1 + 1/mean)`; no iterations) spread by e^{+-0.4}.
    let (x0, y0) = if let Some((af, ad)) = bcmm_closed_form(s) {
        (ad.ln(), af.ln())
    } else {
        let mean = s.s1 / s.s0;
        if !(mean > 0.0 && mean < 0.5 * (m - 1.0)) {
            return None;
        }
        let ym = (1.0 / mean).ln_1p().ln();
        (ym - 0.4, ym + 0.4)
    };
    // x = ln a_D (outer), y = ln a_F (inner).
    let (mut x, mut y) = (x0.clamp(xmin, LN_A_MAX - 1.0), y0);
    let mut d = [0.0; 4];
    let (mut target, mut near, mut lo, mut hi) = (0.0, 0.0, 0.0, 0.0);
    // The donor's sums are due at x (else an inner step at y).
    let mut at_x = true;
    // The last point of the curve: x, the S1 slope dy/dx and first-order S1 correction of y.
    let (mut has_good, mut good, mut slope, mut correction) = (false, 0.0, 0.0, 0.0);
    // Steps out of the domain, the last point found outside.
    let (mut exits, mut has_out, mut outside) = (0, false, 0.0);
    // A root bracket (a, b) with g(a) = ga; the previous point, its g and step.
    let (mut bracket, mut ra, mut ga, mut rb) = (false, 0.0, 0.0, 0.0);
    let (mut has_prev, mut px, mut pg, mut pstep) = (false, 0.0, 0.0, 0.0);
    for _ in 0..BCMM2_EVALUATIONS {
        if at_x {
            d = unit_moments(x.exp(), m);
            if let Some((t, n)) = s1_equation(s, &d) {
                (target, near, lo, hi) = (t, n, x, LN_A_MAX);
                if has_good {
                    y += slope * (x - good) + correction;
                }
                if !(y > lo && y < hi) {
                    y = (x + 1.0).min(0.5 * (x + LN_A_MAX));
                }
                at_x = false;
            } else if !has_good {
                // The start lies outside the domain: try the smallest rate once.
                if x <= xmin {
                    return None;
                }
                x = xmin;
            } else {
                exits += 1;
                if exits > BCMM2_EXITS {
                    return None; // the curve ends short of a root
                }
                // A bracket with a point outside the domain inside spans a gap.
                if bracket && (x - ra) * (x - rb) < 0.0 {
                    (bracket, has_prev) = (false, false);
                }
                (has_out, outside) = (true, x);
                x = 0.5 * (x + good);
            }
            continue;
        }
        let f = unit_moments(y.exp(), m);
        let (next, step) = s1_step(y, &f, &d, target, near, &mut lo, &mut hi);
        let tol = BCMM2_INNER_TOL * (1.0 + y.abs());
        if !(step <= tol || hi - lo <= tol) {
            y = next;
            continue;
        }
        // A point of the curve (to first order in the S1 residual).
        let p = bcmm2_point(s, y, x, &f, &d);
        let j = p.j;
        let det = j[0][0] * j[1][1] - j[0][1] * j[1][0];
        let g = p.r[1] - j[1][0] / j[0][0] * p.r[0];
        let dx = -g * j[0][0] / det;
        let dy = -(j[1][1] * p.r[0] - j[0][1] * p.r[1]) / det;
        if !(dx.is_finite() && dy.is_finite()) {
            return None;
        }
        let norm = p.r[0].hypot(p.r[1]);
        if norm <= 1e-13
            || (dx.abs() <= TOL_STEP * (1.0 + x.abs()) && dy.abs() <= TOL_STEP * (1.0 + y.abs()))
        {
            // A solution on the search bound is the bound, not a solution.
            return (norm < 1e-9 && x > xmin + 1e-9).then(|| (y.exp(), x.exp(), p.alpha, p.beta));
        }
        (has_good, good, slope, correction) = (true, x, -j[0][1] / j[0][0], -p.r[0] / j[0][0]);
        let mut next = x + dx.clamp(-1.0, 1.0);
        if bracket || (has_prev && (g > 0.0) != (pg > 0.0)) {
            if !bracket {
                (bracket, ra, ga, rb) = (true, px, pg, x);
            } else if (g > 0.0) == (ga > 0.0) {
                (ra, ga) = (x, g);
            } else {
                rb = x;
            }
            // Bisect where Newton leaves the bracket, unless its step is below the
            // tolerance: x + dx can round onto the end x itself, and bisecting there would
            // throw away a converged donor rate.
            if !(next > ra.min(rb) && next < ra.max(rb)) && dx.abs() > TOL_STEP * (1.0 + x.abs()) {
                next = 0.5 * (ra + rb);
            }
        } else {
            if has_prev && (next - x) * pstep < 0.0 {
                return None; // turned back with no sign change: an extremum of g short of 0
            }
            if x <= xmin && next <= xmin {
                return None; // the root would lie below the smallest rate
            }
            next = next.max(xmin);
        }
        // Not past a point known to lie outside the domain.
        if has_out && (next - outside) * (x - outside) <= 0.0 {
            next = 0.5 * (x + outside);
        }
        (has_prev, px, pg, pstep) = (true, x, g, next - x);
        x = next;
        at_x = true;
    }
    None
}

/// BCMM2's convergence: the Newton step in both log-rates, relative to `1 + |ln a|`.
const TOL_STEP: f64 = 1e-10;

/// Amplitude fraction of the first component at the start of the range from the sample
/// amplitudes of `alpha r_F^j + beta r_D^j`: undo binning (`tau (1 - e^{-h/tau})`) and
/// pile-up (`1 / (1 - e^{-T/tau})`).
fn amplitude_fraction(alpha: f64, beta: f64, a_f: f64, a_d: f64, h: f64, period: f64) -> f64 {
    let scale = |a: f64| {
        let tau = h / a;
        tau * -(-a).exp_m1() / -(-period / tau).exp_m1()
    };
    let (x, y) = (alpha / scale(a_f), beta / scale(a_d));
    x / (x + y)
}

/// The eight values of one pixel (order of [`FRET_PLANES`]) and its status.
pub(crate) fn fret_finish(s: &FretSums, su: &FretSetup) -> ([f64; 8], u8) {
    let b = &su.base;
    let nan = f64::NAN;
    let mut out = [s.s0, nan, nan, nan, nan, nan, nan, nan];
    if !(s.s0 >= b.threshold && s.s0 > 0.0) {
        return (out, STATUS_MASKED);
    }
    let (h, m) = (b.h, b.m as f64);
    let bcmm = if su.a_d.is_nan() {
        bcmm_unknown(s, m)
    } else {
        bcmm_known(s, su.a_d, m).map(|(af, al, be)| (af, su.a_d, al, be))
    };
    if let Some((af, ad, alpha, beta)) = bcmm {
        let fd = amplitude_fraction(alpha, beta, af, ad, h, su.period);
        let (tf, td) = (h / af, h / ad);
        out[1] = tf;
        out[2] = td;
        out[3] = fd;
        out[4] = fd * tf + (1.0 - fd) * td;
    }
    if !su.a_d.is_nan() {
        let td = h / su.a_d;
        let (g0, s0) = (s.gc / s.s0, s.gs / s.s0);
        let u = b.cal_cos * g0 - b.cal_sin * s0;
        let v = b.cal_sin * g0 + b.cal_cos * s0;
        let w = b.omega;
        let tf = (1.0 - u - v * td * w) / (w * (v - u * td * w));
        // The paper's f_D, rearranged (the same value for a phasor on the segment, and
        // defined where the paper's form is 0/0): the light fraction of tau_F by projecting
        // the phasor onto the segment between the single-exponential points.
        let point = |t: f64| {
            let wt = w * t;
            (1.0 / (1.0 + wt * wt), wt / (1.0 + wt * wt))
        };
        let ((ud, vd), (uf, vf)) = (point(td), point(tf));
        let (du, dv) = (uf - ud, vf - vd);
        let light = ((u - ud) * du + (v - vd) * dv) / (du * du + dv * dv);
        // Amplitudes go as light / tau: f_D = x tau_D / den and the amplitude-weighted mean
        // f_D tau_F + (1 - f_D) tau_D = tau_F tau_D / den, den = x tau_D + (1 - x) tau_F.
        let den = light * td + (1.0 - light) * tf;
        let fd = light * td / den;
        // Only a quenched lifetime between 0 and the donor's is a FRET solution.
        if tf > 0.0 && tf < td {
            out[5] = tf;
            out[6] = fd;
            out[7] = tf * td / den;
        }
    }
    (out, STATUS_OK)
}

/// BCMM and PM for one decay (e.g. a region's summed decay), `decay[j]` the counts of bin
/// `j`; the formulas of [`analyse_fret`](crate::analyse_fret).
///
/// ```
/// use flim_core::{Analysis, Donor, analyse_fret_decay, sim::DecaySim};
/// // 30% of a 0.8 ns quenched donor, 70% of a 2.5 ns free donor, no noise, a 12.8 ns window.
/// let decay = DecaySim::new(256, 0.05, 1e5)?.expected(&[(0.3, 0.8), (0.7, 2.5)]);
/// let d = analyse_fret_decay(&decay, 0.05, 12.8, &Analysis::default(), Donor::Unknown)?;
/// assert!((d.tau_f_bcmm - 0.8).abs() < 1e-6 && (d.tau_d_bcmm - 2.5).abs() < 1e-6);
/// assert!((d.f_d_bcmm - 0.3).abs() < 1e-6);
/// # Ok::<(), flim_core::Error>(())
/// ```
pub fn analyse_fret_decay(
    decay: &[f64],
    bin_ns: f64,
    period_ns: f64,
    opts: &Analysis,
    donor: Donor,
) -> Result<FretDecay> {
    let su = FretSetup::new(opts, donor, decay.len(), bin_ns, period_ns)?;
    let b = &su.base;
    let (x, st) = fret_finish(&fret_sums(&decay[b.first..b.first + b.m], &su), &su);
    Ok(FretDecay {
        intensity: x[0],
        tau_f_bcmm: x[1],
        tau_d_bcmm: x[2],
        f_d_bcmm: x[3],
        tau_avg_bcmm: x[4],
        tau_f_pm: x[5],
        f_d_pm: x[6],
        tau_avg_pm: x[7],
        masked: st == STATUS_MASKED,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unit_moments_match_direct_sums() {
        for &a in &[1e-5, 0.01, 0.099, 0.101, 0.3, 2.0, 30.0] {
            for &m in &[4usize, 33, 256] {
                let mut want = [0.0f64; 4];
                for j in 0..m {
                    let (e, jf) = ((-a * j as f64).exp(), j as f64);
                    for (k, w) in want.iter_mut().enumerate() {
                        *w += jf.powi(k as i32) * e;
                    }
                }
                let u = unit_moments(a, m as f64);
                for (got, want) in u.iter().zip(want) {
                    assert!(
                        (got - want).abs() <= 1e-9 * want.abs() + 1e-12,
                        "a {a} m {m}: {got} vs {want}"
                    );
                }
            }
        }
    }

    /// BCMM2's analytic Jacobian (from `d s_k / d ln a = -a s_{k+1}`) against central
    /// differences of its residuals, for rates across the search range.
    #[test]
    fn bcmm2_jacobian_matches_differences() {
        let m = 200.0;
        let s = FretSums {
            s0: 5e4,
            k: 900.0,
            s1: 1.1e6,
            s2: 5.2e7,
            ..FretSums::default()
        };
        for (yf, yd) in [
            (-1.0, -3.5),
            (-2.5, -4.0),
            (0.5, -6.0),
            (-3.9, -4.0),
            (3.0, 1.0),
        ] {
            let at = |yf: f64, yd: f64| {
                let f = unit_moments(yf.exp(), m);
                let d = unit_moments(yd.exp(), m);
                bcmm2_point(&s, yf, yd, &f, &d)
            };
            let p = at(yf, yd);
            let e = 1e-6;
            for (c, (df, dd)) in [(e, 0.0), (0.0, e)].into_iter().enumerate() {
                let (hi, lo) = (at(yf + df, yd + dd), at(yf - df, yd - dd));
                for r in 0..2 {
                    let numeric = (hi.r[r] - lo.r[r]) / (2.0 * e);
                    let scale = p.j[r][0].abs().max(p.j[r][1].abs());
                    assert!(
                        (numeric - p.j[r][c]).abs() <= 1e-6 * scale,
                        "({yf}, {yd}) J[{r}][{c}]: {} vs {numeric}",
                        p.j[r][c]
                    );
                }
            }
        }
    }
}

/// Internals exposed for the GPU-vs-CPU tests (error propagation through the solvers).
#[doc(hidden)]
pub mod testing {
    use super::{Donor, FretSetup, FretSums, fret_finish};
    use crate::error::Result;
    use crate::model::lifetimes::Analysis;

    /// The eight values of [`super::FRET_PLANES`] from the sums
    /// `[S0, K, S1, S2, gc, gs]` (offset removed, phasor uncalibrated).
    pub fn finish_from_sums(
        sums: [f64; 6],
        opts: &Analysis,
        donor: Donor,
        bins: usize,
        bin_ns: f64,
        period_ns: f64,
    ) -> Result<[f64; 8]> {
        let su = FretSetup::new(opts, donor, bins, bin_ns, period_ns)?;
        let s = FretSums {
            s0: sums[0],
            k: sums[1],
            s1: sums[2],
            s2: sums[3],
            gc: sums[4],
            gs: sums[5],
        };
        Ok(fret_finish(&s, &su).0)
    }

    /// Residuals of BCMM's S1 and S2 equations for the lifetimes `(tau_f, tau_d)`
    /// (amplitudes from K and S0), `m` bins of `bin_ns`: `[S1, S2]` model minus data, and
    /// first-order bounds of their f32 evaluation error (unit roundoff 2^-24, 16 ulp per
    /// moment), including the cancellations in the amplitudes `alpha = (S0 - K s0D) /
    /// (s0F - s0D)` and `beta = K - alpha`.
    pub fn residuals(
        sums: [f64; 6],
        tau_f: f64,
        tau_d: f64,
        bin_ns: f64,
        m: usize,
    ) -> ([f64; 2], [f64; 2]) {
        let u = 1.0 / 16_777_216.0;
        let m = m as f64;
        let f = super::unit_moments(bin_ns / tau_f, m);
        let d = super::unit_moments(bin_ns / tau_d, m);
        let (s0, k) = (sums[0], sums[1]);
        let num = s0 - k * d[0];
        let den = f[0] - d[0];
        let alpha = num / den;
        let beta = k - alpha;
        let d_alpha = 16.0
            * u
            * alpha.abs()
            * ((s0.abs() + (k * d[0]).abs()) / num.abs() + (f[0].abs() + d[0].abs()) / den.abs());
        let d_beta = d_alpha + u * (k.abs() + alpha.abs());
        let err = |i: usize| {
            16.0 * u * ((alpha * f[i]).abs() + (beta * d[i]).abs())
                + d_alpha * f[i].abs()
                + d_beta * d[i].abs()
        };
        (
            [
                alpha * f[1] + beta * d[1] - sums[2],
                alpha * f[2] + beta * d[2] - sums[3],
            ],
            [err(1), err(2)],
        )
    }
}
