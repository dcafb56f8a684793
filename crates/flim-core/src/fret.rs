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
//! computed without cancellation). BCMM1 solves one equation in `a_F` (bracketed secant),
//! BCMM2 two in `(a_F, a_D)` (Newton from the paper's closed form). Same statistics, same
//! noise as the paper's method, no window bias.
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

use crate::cube::{Count, Cube};
use crate::error::{Result, invalid};
use crate::methods::{Analysis, STATUS_MASKED, STATUS_OK, Setup, b_deriv, mean_bin};
use ndarray::Array2;
use rayon::prelude::*;

/// What is known of the free donor's lifetime.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Donor {
    /// Measured separately (ns): BCMM1 and PM.
    Known(f64),
    /// Estimated per pixel with the quenched lifetime: BCMM2 (PM needs the donor).
    Unknown,
}

/// Maps of [`analyse_fret`]; NaN where a method does not apply or has no solution.
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
    fn nan(h: usize, w: usize) -> Self {
        let z = || Array2::from_elem((h, w), f32::NAN);
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

    /// Maps from plane-major values (`planes * pixels`), status zero.
    pub(crate) fn from_planes(h: usize, w: usize, vals: &[f32], pixels: usize) -> Self {
        let mut maps = Self::nan(h, w);
        for (q, plane) in maps.planes_mut().into_iter().enumerate() {
            plane
                .as_slice_mut()
                .expect("standard layout")
                .copy_from_slice(&vals[q * pixels..(q + 1) * pixels]);
        }
        maps
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
        gc += b.cos_t[j] * c;
        gs += b.sin_t[j] * c;
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

/// Window sums `(s0, s1, s2) = sum_{j<m} j^k e^{-a j}` of a unit geometric decay, from
/// its count, mean and variance (no cancellation as a -> 0).
pub(crate) fn unit_moments(a: f64, m: f64) -> [f64; 3] {
    let s0 = if a * m < 1e-300 {
        m
    } else {
        (-a * m).exp_m1() / (-a).exp_m1()
    };
    let mean = mean_bin(a, m);
    let var = m * m * b_deriv(a * m) - b_deriv(a);
    [s0, s0 * mean, s0 * (var + mean * mean)]
}

/// Largest rate `a = h / tau` searched (as in CMM); the smallest is [`ln_a_min`].
const LN_A_MAX: f64 = 4.094_344_562_222_1; // ln 60

/// `ln` of the smallest rate BCMM2 searches: lifetimes up to ten windows (longer ones are
/// not resolved by the window and would fit a flat background as a "component").
fn ln_a_min(m: f64) -> f64 {
    (0.1 / m).ln()
}

/// Root of `f` on `[lo, hi]` (`f(lo)`, `f(hi)` of opposite signs given), by the Illinois
/// variant of regula falsi; `None` without a sign change.
fn bracketed_root(mut lo: f64, mut hi: f64, f: impl Fn(f64) -> f64, tol: f64) -> Option<f64> {
    let (mut flo, mut fhi) = (f(lo), f(hi));
    if !(flo * fhi <= 0.0) {
        return None;
    }
    let mut side = 0i8;
    for _ in 0..200 {
        let mut x = (lo * fhi - hi * flo) / (fhi - flo);
        if !(x > lo && x < hi) {
            x = 0.5 * (lo + hi);
        }
        let fx = f(x);
        if fx == 0.0 || hi - lo <= tol * (1.0 + x.abs()) {
            return Some(x);
        }
        if (fx > 0.0) == (fhi > 0.0) {
            hi = x;
            fhi = fx;
            if side == 1 {
                flo *= 0.5;
            }
            side = 1;
        } else {
            lo = x;
            flo = fx;
            if side == -1 {
                fhi *= 0.5;
            }
            side = -1;
        }
    }
    Some(0.5 * (lo + hi))
}

/// BCMM1: rate `a_F > a_D` and amplitudes `(alpha, beta)` of the geometric decay
/// `alpha r_F^j + beta r_D^j` with the sums `s`, `a_D` known.
pub(crate) fn bcmm_known(s: &FretSums, a_d: f64, m: f64) -> Option<(f64, f64, f64)> {
    let d = unit_moments(a_d, m);
    let mean_d = d[1] / d[0];
    // Combinations free of the donor: L0 = alpha (s0F - s0D), L1 = alpha s0F (mF - mD).
    let l0 = s.s0 - s.k * d[0];
    let l1 = s.s1 - mean_d * s.s0;
    let target = l1 / l0;
    if !target.is_finite() {
        return None;
    }
    // psi(a_F) = s0F (mF - mD) / (s0F - s0D) falls from var_D / m_D (a_F -> a_D) to
    // m_D / (s0D - 1) (a_F -> infinity).
    let psi = |y: f64| {
        let f = unit_moments(y.exp(), m);
        f[0] * (f[1] / f[0] - mean_d) / (f[0] - d[0]) - target
    };
    let lo = a_d.ln() + 1e-7;
    let y = bracketed_root(lo, LN_A_MAX, psi, 1e-14)?;
    let a_f = y.exp();
    let f = unit_moments(a_f, m);
    let alpha = l0 / (f[0] - d[0]);
    Some((a_f, alpha, s.k - alpha))
}

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

/// Residuals of the S1 and S2 equations (relative) at log-rates `(yf, yd)`, with the
/// amplitudes fixed by K and S0; and the amplitudes.
fn bcmm_residuals(s: &FretSums, yf: f64, yd: f64, m: f64) -> ([f64; 2], f64, f64) {
    let f = unit_moments(yf.exp(), m);
    let d = unit_moments(yd.exp(), m);
    let alpha = (s.s0 - s.k * d[0]) / (f[0] - d[0]);
    let beta = s.k - alpha;
    (
        [
            (alpha * f[1] + beta * d[1] - s.s1) / s.s1,
            (alpha * f[2] + beta * d[2] - s.s2) / s.s2,
        ],
        alpha,
        beta,
    )
}

/// BCMM2: rates `a_F > a_D` and amplitudes solving the K, S0, S1, S2 equations exactly
/// (damped Newton on the log-rates from the paper's closed form).
pub(crate) fn bcmm_unknown(s: &FretSums, m: f64) -> Option<(f64, f64, f64, f64)> {
    // The paper's closed form first; where the window makes it fail, spreads around the
    // mono-exponential rate (which lies between the two): factors e^{0.4 i}, i = 1..4.
    let mono = crate::methods::cmm_rate(s.s1 / s.s0, m);
    let starts = bcmm_closed_form(s)
        .into_iter()
        .chain([0.4f64, 0.8, 1.2, 1.6].map(|k| (mono * k.exp(), mono / k.exp())));
    for (af, ad) in starts {
        if let Some(found) = bcmm_newton(s, af, ad, m) {
            return Some(found);
        }
    }
    None
}

/// Damped Newton for BCMM2 from the rates `(af, ad)`.
fn bcmm_newton(s: &FretSums, af: f64, ad: f64, m: f64) -> Option<(f64, f64, f64, f64)> {
    if !(af > ad && ad > 0.0) {
        return None;
    }
    let (mut yf, mut yd) = (
        af.ln().clamp(ln_a_min(m), LN_A_MAX),
        ad.ln().clamp(ln_a_min(m), LN_A_MAX),
    );
    let norm = |r: [f64; 2]| r[0].hypot(r[1]);
    let (mut r, _, _) = bcmm_residuals(s, yf, yd, m);
    for _ in 0..60 {
        if !(norm(r) > 1e-13) {
            break;
        }
        let e = 1e-6;
        let (rf, _, _) = bcmm_residuals(s, yf + e, yd, m);
        let (rd, _, _) = bcmm_residuals(s, yf, yd + e, m);
        let j = [
            [(rf[0] - r[0]) / e, (rd[0] - r[0]) / e],
            [(rf[1] - r[1]) / e, (rd[1] - r[1]) / e],
        ];
        let det = j[0][0] * j[1][1] - j[0][1] * j[1][0];
        if !(det.abs() > 0.0) || !det.is_finite() {
            return None;
        }
        let df = -(j[1][1] * r[0] - j[0][1] * r[1]) / det;
        let dd = -(-j[1][0] * r[0] + j[0][0] * r[1]) / det;
        // Halve the step until the residual falls (and the order a_F > a_D holds).
        let mut t = 1.0;
        let mut accepted = false;
        for _ in 0..30 {
            let (nf, nd) = (
                (yf + t * df).clamp(ln_a_min(m), LN_A_MAX),
                (yd + t * dd).clamp(ln_a_min(m), LN_A_MAX),
            );
            let (nr, _, _) = bcmm_residuals(s, nf, nd, m);
            if nf > nd && norm(nr) < norm(r) {
                yf = nf;
                yd = nd;
                r = nr;
                accepted = true;
                break;
            }
            t *= 0.5;
        }
        if !accepted {
            break;
        }
    }
    // A solution on the search bound is the bound, not a solution.
    if !(norm(r) < 1e-9) || yd <= ln_a_min(m) + 1e-9 {
        return None;
    }
    let (_, alpha, beta) = bcmm_residuals(s, yf, yd, m);
    Some((yf.exp(), yd.exp(), alpha, beta))
}

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
/// `j`; the formulas of [`analyse_fret`].
///
/// ```
/// use flim_core::{Analysis, fret::{Donor, analyse_fret_decay}, sim::DecaySim};
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

/// BCMM and PM maps of every pixel on the CPU (f64, pixels in parallel). `opts` sets the
/// range, offset, threshold, harmonic and phasor calibration (its method set is ignored).
///
/// ```
/// use flim_core::{Analysis, fret::{Donor, analyse_fret}, sim::{DecaySim, bi_exponential}};
/// let sim = DecaySim::new(256, 0.05, 200_000.0)?;
/// let cube = bi_exponential(0.8, 2.5, 2, 4, &sim)?;
/// let maps = analyse_fret(&cube, &Analysis::default(), Donor::Known(2.5))?;
/// // f_D falls from 0.8 (left) to 0.2 (right).
/// assert!((maps.f_d_pm[[0, 0]] - 0.8).abs() < 0.02);
/// assert!((maps.f_d_bcmm[[1, 3]] - 0.2).abs() < 0.05);
/// # Ok::<(), flim_core::Error>(())
/// ```
pub fn analyse_fret<T: Count>(cube: &Cube<T>, opts: &Analysis, donor: Donor) -> Result<FretMaps> {
    let su = FretSetup::new(opts, donor, cube.bins(), cube.bin_ns(), cube.period_ns())?;
    let (h, w) = cube.shape();
    let bins = cube.bins();
    let data = cube.as_slice();
    let (first, m) = (su.base.first, su.base.m);
    let mut values = vec![[0.0f32; 8]; h * w];
    let mut status = vec![0u8; h * w];
    values
        .par_chunks_mut(256)
        .zip(status.par_chunks_mut(256))
        .enumerate()
        .for_each(|(t, (vals, st))| {
            let mut v = vec![0.0f64; m];
            for (i, (out, status)) in vals.iter_mut().zip(st.iter_mut()).enumerate() {
                let p = t * 256 + i;
                for (d, &c) in v
                    .iter_mut()
                    .zip(&data[p * bins + first..p * bins + first + m])
                {
                    *d = c.into();
                }
                let (x, s) = fret_finish(&fret_sums(&v, &su), &su);
                for (o, x) in out.iter_mut().zip(x) {
                    *o = x as f32;
                }
                *status = s;
            }
        });
    let mut maps = FretMaps::nan(h, w);
    for (q, plane) in maps.planes_mut().into_iter().enumerate() {
        for (dst, v) in plane.iter_mut().zip(&values) {
            *dst = v[q];
        }
    }
    maps.status = Array2::from_shape_vec((h, w), status).expect("h * w statuses");
    Ok(maps)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unit_moments_match_direct_sums() {
        for &a in &[1e-5, 0.01, 0.3, 2.0, 30.0] {
            for &m in &[4usize, 33, 256] {
                let (mut s0, mut s1, mut s2) = (0.0, 0.0, 0.0);
                for j in 0..m {
                    let e = (-a * j as f64).exp();
                    s0 += e;
                    s1 += j as f64 * e;
                    s2 += (j * j) as f64 * e;
                }
                let u = unit_moments(a, m as f64);
                for (got, want) in u.iter().zip([s0, s1, s2]) {
                    assert!(
                        (got - want).abs() <= 1e-9 * want.abs() + 1e-12,
                        "a {a} m {m}: {got} vs {want}"
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
    use crate::methods::Analysis;

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
