//! Flow from speckle contrast: SFI, 1/K^2 and the decorrelation time tau_c.
//!
//! # Models
//! With exposure T, decorrelation time tau_c and `x = T / tau_c`, the contrast of a speckle
//! pattern whose field autocorrelation is `g1(tau)` is
//! `K^2 = (2 beta / T) integral_0^T (1 - tau / T) |g1(tau)|^2 dtau`
//! (Bandyopadhyay et al., Rev. Sci. Instrum. 76, 093110 (2005), Eq. 8; Boas & Dunn,
//! J. Biomed. Opt. 15, 011109 (2010), Eq. 7). `beta <= 1` accounts for speckle averaging
//! over a pixel and for polarisation. For the two usual correlation shapes:
//!
//! - [`FlowModel::Lorentzian`], `g1 = exp(-tau / tau_c)` (unordered motion, Brownian-like):
//!   `K^2 = beta [exp(-2x) - 1 + 2x] / (2 x^2)`;
//! - [`FlowModel::Gaussian`], `g1 = exp(-(tau / tau_c)^2)` (ordered flow):
//!   `K^2 = beta [exp(-2x^2) - 1 + sqrt(2 pi) x erf(sqrt(2) x)] / (2 x^2)`.
//!
//! Both fall from `beta` (x -> 0, static) to `beta / x` (Lorentzian) or
//! `beta sqrt(pi / 2) / x` (Gaussian) for x -> inf, monotonically, so K^2 fixes x uniquely.
//!
//! # SFI
//! `SFI = 1 / (2 T K^2)` in 1/s, the simplified large-x approximation used by Yang et al.
//! 2011 (Eq. 3, after Ramirez-San-Juan et al.): proportional to 1/tau_c only when x >> 1.
//!
//! # Inversion
//! [`x_from_k2`] solves the model for x by safeguarded Newton iterations in `y = ln x`
//! (bisection on a bracket whenever a Newton step leaves it), on `ln(K^2 / beta)` when
//! `K^2 / beta < 1/2` and on `ln(1 - K^2 / beta)` otherwise, with power series near x = 0, so
//! neither branch suffers cancellation: accurate to ~1e-13 relative for x from 1e-12 to
//! 1e12. It is a pure scalar function with a fixed iteration cap, for the GPU port.
//!
//! # Flags
//! Per-pixel flags use the bits of [`crate::model::flags`]: `UNDEFINED` (NaN or negative
//! K: tau_c NaN), `NO_MOTION` (K^2 >= beta: tau_c = +inf), `NO_CONTRAST` (K = 0: tau_c = 0).

// ndarray views are cheap handles, taken by value as ndarray's own APIs do.
#![allow(clippy::needless_pass_by_value)]

use ndarray::{Array2, ArrayView2};

use crate::error::{Error, Result};
use crate::model::flags;
use crate::model::types::Map;

/// Validate an exposure time in seconds: finite and > 0.
pub fn check_exposure(exposure_s: f64) -> Result<f64> {
    if exposure_s.is_finite() && exposure_s > 0.0 {
        Ok(exposure_s)
    } else {
        Err(Error::InvalidExposure { value: exposure_s })
    }
}

pub fn check_beta(beta: f64) -> Result<f64> {
    if beta.is_finite() && beta > 0.0 {
        Ok(beta)
    } else {
        Err(Error::InvalidParameter {
            name: "beta",
            value: beta.to_string(),
            why: "the coherence factor must be finite and > 0 (typically 0.1..1); calibrate it with calibrate_beta".into(),
        })
    }
}

/// Speckle flow index `1 / (2 T K^2)` in 1/s (Yang et al. 2011, Eq. 3). K = 0 gives +inf,
/// NaN gives NaN.
///
/// ```
/// use speckle_core::model::flow::sfi;
/// assert!((sfi(0.1, 5e-3) - 10_000.0).abs() < 1e-9);
/// ```
#[inline]
pub fn sfi(k: f64, exposure_s: f64) -> f64 {
    1.0 / (2.0 * exposure_s * k * k)
}

/// `1 / K^2`, a flow index that needs no exposure time.
#[inline]
pub fn inverse_k2(k: f64) -> f64 {
    1.0 / (k * k)
}

/// Shape of the field autocorrelation g1, which fixes the K(T / tau_c) relation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum FlowModel {
    /// `g1 = exp(-tau / tau_c)`: unordered (diffusive) motion, the usual LSCI assumption.
    #[default]
    Lorentzian,
    /// `g1 = exp(-(tau / tau_c)^2)`: ordered (directed) flow.
    Gaussian,
}

/// The normalised model `f = K^2 / beta` at `x = T / tau_c`, with `g = 1 - f` and
/// `s = x df/dx` each computed without cancellation (series for small x).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ModelTerms {
    /// K^2 / beta, in (0, 1].
    pub f: f64,
    /// 1 - K^2 / beta.
    pub g: f64,
    /// x d(K^2 / beta)/dx (<= 0).
    pub s: f64,
}

/// Lorentzian terms at `x >= 0` (see [`ModelTerms`]).
#[inline]
pub fn lorentzian_terms(x: f64) -> ModelTerms {
    lorentzian_branch(x, 2.0 * x < 0.5)
}

/// Series coefficients: `LORENTZ_G[j - 1] = 2 / (j + 2)!` and `LORENTZ_S[j - 1] = j 2 / (j + 2)!`
/// for j = 1..=16 (16 terms reach 1e-18 at v = 0.5), evaluated by Horner's rule.
const LORENTZ_G: [f64; 16] = lorentz_coeffs(false);
const LORENTZ_S: [f64; 16] = lorentz_coeffs(true);

const fn lorentz_coeffs(times_j: bool) -> [f64; 16] {
    let mut c = [0.0; 16];
    let mut fact = 6.0; // (j + 2)! at j = 1
    let mut j = 1;
    while j <= 16 {
        c[j - 1] = if times_j {
            2.0 * j as f64 / fact
        } else {
            2.0 / fact
        };
        fact *= (j + 3) as f64;
        j += 1;
    }
    c
}

/// Horner evaluation of `sum c[i] w^i`.
#[inline]
fn horner(c: &[f64], w: f64) -> f64 {
    c.iter().rev().fold(0.0, |acc, &k| acc * w + k)
}

fn lorentzian_branch(x: f64, series: bool) -> ModelTerms {
    let v = 2.0 * x;
    if series {
        // f = sum_{j>=0} 2 (-v)^j / (j + 2)! = 1 - g, g = v sum_{j>=1} c_j (-v)^(j-1).
        let g = v * horner(&LORENTZ_G, -v);
        ModelTerms {
            f: 1.0 - g,
            g,
            s: -v * horner(&LORENTZ_S, -v),
        }
    } else {
        let em1 = -(-v).exp_m1(); // 1 - exp(-v)
        let f = 2.0 * (v - em1) / (v * v);
        ModelTerms {
            f,
            g: 1.0 - f,
            s: 2.0 * em1 / v - 2.0 * f,
        }
    }
}

/// Gaussian terms at `x >= 0` (see [`ModelTerms`]).
pub fn gaussian_terms(x: f64) -> ModelTerms {
    gaussian_branch(x, 2.0 * x * x < 0.5)
}

/// Series coefficients: `GAUSS_G[m - 2] = 1 / (m! (2m - 1))` and
/// `GAUSS_S[m - 2] = 2 (m - 1) / (m! (2m - 1))` for m = 2..=16 (1e-18 at u = 0.5).
const GAUSS_G: [f64; 15] = gauss_coeffs(false);
const GAUSS_S: [f64; 15] = gauss_coeffs(true);

const fn gauss_coeffs(times_m: bool) -> [f64; 15] {
    let mut c = [0.0; 15];
    let mut fact = 2.0; // m! at m = 2
    let mut m = 2;
    while m <= 16 {
        let d = 1.0 / (fact * (2 * m - 1) as f64);
        c[m - 2] = if times_m { 2.0 * (m - 1) as f64 * d } else { d };
        fact *= (m + 1) as f64;
        m += 1;
    }
    c
}

fn gaussian_branch(x: f64, series: bool) -> ModelTerms {
    let u = 2.0 * x * x;
    if series {
        // f = sum_{m>=1} (-u)^(m-1) / (m! (2m - 1)) = 1 - g, g = u sum_{m>=2} d_m (-u)^(m-2).
        let g = u * horner(&GAUSS_G, -u);
        ModelTerms {
            f: 1.0 - g,
            g,
            s: -u * horner(&GAUSS_S, -u),
        }
    } else {
        let e = erf(std::f64::consts::SQRT_2 * x);
        let c = (2.0 * std::f64::consts::PI).sqrt();
        let f = ((-u).exp_m1() + c * x * e) / u;
        ModelTerms {
            f,
            g: 1.0 - f,
            s: c * e / (2.0 * x) - 2.0 * f,
        }
    }
}

/// [`ModelTerms`] of either model.
pub fn model_terms(model: FlowModel, x: f64) -> ModelTerms {
    match model {
        FlowModel::Lorentzian => lorentzian_terms(x),
        FlowModel::Gaussian => gaussian_terms(x),
    }
}

/// `K^2 / beta` of the model at `x = T / tau_c` (1 at x = 0).
///
/// ```
/// use speckle_core::model::flow::{FlowModel, k2_model};
/// assert_eq!(k2_model(FlowModel::Lorentzian, 0.0), 1.0);
/// let big = k2_model(FlowModel::Lorentzian, 1e6);
/// assert!((big * 1e6 - 1.0).abs() < 1e-5); // -> 1 / x
/// ```
pub fn k2_model(model: FlowModel, x: f64) -> f64 {
    model_terms(model, x).f
}

/// Maximum iterations of [`x_from_k2`] (Newton converges in 4-8; bisection needs at most
/// about 60 on the full bracket).
pub const MAX_INVERSION_ITERATIONS: u32 = 100;

/// Invert the model: the `x = T / tau_c` at which `K^2 / beta = q`, given `q` and `d = 1 - q`
/// (pass `d` computed directly, e.g. `(beta - K^2) / beta`, to keep its precision near
/// `q = 1`, where `d` alone decides). `d <= 0` gives 0 (static), `q <= 0` gives +inf, NaN
/// gives NaN.
///
/// ```
/// use speckle_core::model::flow::{FlowModel, k2_model, x_from_k2};
/// let q = k2_model(FlowModel::Gaussian, 3.0);
/// let x = x_from_k2(FlowModel::Gaussian, q, 1.0 - q);
/// assert!((x - 3.0).abs() < 1e-12);
/// ```
pub fn x_from_k2(model: FlowModel, q: f64, d: f64) -> f64 {
    if q.is_nan() || d.is_nan() {
        return f64::NAN;
    }
    if d <= 0.0 {
        return 0.0;
    }
    if q <= 0.0 {
        return f64::INFINITY;
    }
    let upper = q >= 0.5; // solve on ln(1 - f) near the static end, on ln f elsewhere
    let c = match model {
        FlowModel::Lorentzian => 1.0,
        FlowModel::Gaussian => (std::f64::consts::PI / 2.0).sqrt(),
    };
    // Asymptotic first guesses: 1 - f ~ 2x/3 or x^2/3; f ~ c/x - 1/(2 x^2).
    let x0 = if upper {
        match model {
            FlowModel::Lorentzian => 1.5 * d,
            FlowModel::Gaussian => (3.0 * d).sqrt(),
        }
    } else {
        (c + (c * c - 2.0 * q).max(0.0).sqrt()) / (2.0 * q)
    };
    let target = if upper { d.ln() } else { q.ln() };
    let (mut lo, mut hi) = (-740.0f64, 709.0f64);
    let mut y = x0.ln().clamp(lo, hi);
    for _ in 0..MAX_INVERSION_ITERATIONS {
        let t = model_terms(model, y.exp());
        // r(y) increases with y in both branches.
        let (r, dr) = if upper {
            (t.g.ln() - target, -t.s / t.g)
        } else {
            (target - t.f.ln(), -t.s / t.f)
        };
        if r == 0.0 {
            break;
        }
        if r > 0.0 {
            hi = y;
        } else {
            lo = y;
        }
        let newton = y - r / dr;
        let next = if newton.is_finite() && newton >= lo && newton <= hi {
            newton
        } else {
            0.5 * (lo + hi)
        };
        let step = (next - y).abs();
        y = next;
        if step <= 1e-14 * y.abs().max(1.0) {
            break;
        }
    }
    y.exp()
}

/// Decorrelation time tau_c (s) of one pixel from K, exposure T (s) and beta, with the flag
/// bits of the module docs. Pure scalar function (GPU-portable); inputs are assumed valid
/// (the map version checks them).
///
/// ```
/// use speckle_core::model::flow::{FlowModel, k2_model, tau_c};
/// let (t, beta, tau) = (5e-3, 0.6, 1e-3);
/// let k = (beta * k2_model(FlowModel::Lorentzian, t / tau)).sqrt();
/// let (got, flag) = tau_c(k, t, beta, FlowModel::Lorentzian);
/// assert_eq!(flag, 0);
/// assert!((got / tau - 1.0).abs() < 1e-9);
/// ```
pub fn tau_c(k: f64, exposure_s: f64, beta: f64, model: FlowModel) -> (f64, u8) {
    if k.is_nan() || k < 0.0 {
        return (f64::NAN, flags::UNDEFINED);
    }
    let k2 = k * k;
    if k2 >= beta {
        return (f64::INFINITY, flags::NO_MOTION);
    }
    if k2 == 0.0 {
        return (0.0, flags::NO_CONTRAST);
    }
    let x = x_from_k2(model, k2 / beta, (beta - k2) / beta);
    (exposure_s / x, 0)
}

/// A tau_c map with its flags.
#[derive(Debug, Clone, PartialEq)]
pub struct TauMap {
    /// Decorrelation time in seconds (+inf: no motion, 0: no contrast, NaN: undefined).
    pub tau_c: Map,
    /// Flag bits from [`crate::model::flags`].
    pub flags: Array2<u8>,
}

/// Where beta comes from (see [`calibrate_beta`](crate::cpu::calibrate::calibrate_beta)).
#[derive(Debug, Clone, Copy)]
pub enum BetaSource<'a> {
    /// Pixels of a static scatterer (a block of paper, bone, a fixed phantom), where
    /// x -> 0 and so K^2 -> beta: beta is the mean K^2 over the `true` pixels.
    Static(ArrayView2<'a, bool>),
    /// The given percentile (0..=100] of K^2 over the map, e.g. 99: a robust "maximum K"
    /// for images that hold some static tissue. Biased low if nothing in view is static.
    Percentile(f64),
}

/// The error function, to ~1 ulp: a positive-term series (no cancellation) below 2.5,
/// a continued fraction for erfc from 2.5 to 6, and 1 beyond (erfc(6) < 2^-54).
///
/// ```
/// use speckle_core::model::flow::erf;
/// assert!((erf(1.0) - 0.8427007929497149).abs() < 1e-15);
/// ```
pub fn erf(x: f64) -> f64 {
    const FRAC_2_SQRT_PI: f64 = std::f64::consts::FRAC_2_SQRT_PI;
    if x.is_nan() {
        return f64::NAN;
    }
    if x < 0.0 {
        return -erf(-x);
    }
    let x2 = x * x;
    if x < 2.5 {
        // erf x = 2/sqrt(pi) exp(-x^2) sum_n (2x^2)^n x / (1 3 5 ... (2n + 1))
        let (mut term, mut sum) = (x, x);
        for n in 1..=120 {
            term *= 2.0 * x2 / (2.0 * f64::from(n) + 1.0);
            sum += term;
            if term < 1e-17 * sum {
                break;
            }
        }
        FRAC_2_SQRT_PI * (-x2).exp() * sum
    } else if x < 6.0 {
        // erfc x = exp(-x^2) / sqrt(pi) / (x + (1/2) / (x + (2/2) / (x + (3/2) / ...)))
        let mut t = x;
        for k in (1..=60).rev() {
            t = x + 0.5 * f64::from(k) / t;
        }
        1.0 - FRAC_2_SQRT_PI * 0.5 * (-x2).exp() / t
    } else {
        1.0
    }
}

/// Parameters of [`crate::api::flow`]: tau_c of every pixel of a K map.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FlowParams {
    /// Exposure T in seconds (finite, > 0).
    pub exposure_s: f64,
    /// Coherence factor beta (finite, > 0; see [`crate::cpu::calibrate_beta`]).
    pub beta: f64,
    /// Shape of the field autocorrelation.
    pub model: FlowModel,
}

impl FlowParams {
    /// Lorentzian model with exposure `exposure_s` and coherence factor `beta`.
    pub fn new(exposure_s: f64, beta: f64) -> Self {
        Self {
            exposure_s,
            beta,
            model: FlowModel::Lorentzian,
        }
    }

    pub fn with_model(mut self, model: FlowModel) -> Self {
        self.model = model;
        self
    }
}

/// How a tau_c map was computed, and how many pixels carry each flag.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlowInfo {
    /// Where it ran.
    pub backend: gpu_runtime::Backend,
    /// Pixels with K^2 >= beta ([`flags::NO_MOTION`], tau_c = +inf): static, or beta too low.
    pub no_motion: usize,
    /// Pixels with K = 0 ([`flags::NO_CONTRAST`], tau_c = 0).
    pub no_contrast: usize,
    /// Pixels with NaN or negative K ([`flags::UNDEFINED`], tau_c NaN).
    pub undefined: usize,
    /// All pixels of the map.
    pub pixels: usize,
    /// The record to keep with the map: library, device, precision, start time.
    pub provenance: gpu_runtime::Provenance,
}

impl FlowInfo {
    /// Counts of `map`'s flags, computed on `backend` as `provenance` records.
    pub fn of(
        map: &TauMap,
        backend: gpu_runtime::Backend,
        provenance: gpu_runtime::Provenance,
    ) -> Self {
        // One pass; flags are mostly 0.
        let (mut no_motion, mut no_contrast, mut undefined) = (0, 0, 0);
        for &f in map.flags.iter().filter(|&&f| f != 0) {
            no_motion += usize::from(f & flags::NO_MOTION != 0);
            no_contrast += usize::from(f & flags::NO_CONTRAST != 0);
            undefined += usize::from(f & flags::UNDEFINED != 0);
        }
        Self {
            backend,
            no_motion,
            no_contrast,
            undefined,
            pixels: map.flags.len(),
            provenance,
        }
    }
}

impl TauMap {
    /// tau_c with NaN wherever a flag is set (+inf no motion, 0 no contrast, NaN
    /// undefined), for figures and statistics that must not mix flagged pixels in.
    pub fn masked_tau_c(&self) -> Map {
        let mut t = self.tau_c.clone();
        ndarray::Zip::from(&mut t)
            .and(&self.flags)
            .for_each(|v, &f| {
                if f != 0 {
                    *v = f32::NAN;
                }
            });
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Round trip tau_c -> K -> tau_c, relative.
    const TOL_ROUND_TRIP: f64 = 1e-6;

    #[test]
    fn erf_matches_reference_values() {
        // Values from a libm erf (Python math.erf), to the last digit.
        let table = [
            (1e-8, 1.1283791670955126e-08),
            (0.1, 0.1124629160182849),
            (0.5, 0.5204998778130465),
            (1.0, 0.8427007929497149),
            (1.5, 0.9661051464753108),
            (2.0, 0.9953222650189527),
            (2.4999, 0.9995928300996666),
            (2.5, 0.999593047982555),
            (3.0, 0.9999779095030014),
            (3.5, 0.9999992569016276),
            (4.0, 0.9999999845827421),
            (5.0, 0.9999999999984626),
            (6.5, 1.0),
        ];
        for (x, want) in table {
            let got = erf(x);
            assert!(
                (got - want).abs() <= 4.0 * f64::EPSILON * want,
                "erf({x}) = {got}, want {want}"
            );
            assert_eq!(erf(-x), -got);
        }
        assert!(erf(f64::NAN).is_nan());
        assert_eq!(erf(f64::INFINITY), 1.0);
    }

    /// K^2 / beta from the defining integral (2/x) int_0^x (1 - s/x) |g1(s)|^2 ds, by
    /// composite Simpson on 20000 intervals: independent of the closed forms and of erf.
    fn k2_by_quadrature(model: FlowModel, x: f64) -> f64 {
        let n = 20_000;
        let h = x / n as f64;
        let g2 = |s: f64| match model {
            FlowModel::Lorentzian => (-2.0 * s).exp(),
            FlowModel::Gaussian => (-2.0 * s * s).exp(),
        };
        let f = |s: f64| (1.0 - s / x) * g2(s);
        let mut sum = f(0.0) + f(x);
        for i in 1..n {
            sum += f(i as f64 * h) * if i % 2 == 1 { 4.0 } else { 2.0 };
        }
        2.0 / x * sum * h / 3.0
    }

    #[test]
    fn closed_forms_match_the_defining_integral() {
        for model in [FlowModel::Lorentzian, FlowModel::Gaussian] {
            for x in [1e-3, 0.05, 0.2, 0.25, 0.4999, 0.5, 0.7, 1.0, 2.0, 5.0, 20.0] {
                let (closed, quad) = (k2_model(model, x), k2_by_quadrature(model, x));
                assert!(
                    (closed - quad).abs() <= 1e-9 * quad,
                    "{model:?} x={x}: {closed} vs {quad}"
                );
            }
        }
    }

    #[test]
    fn series_and_closed_forms_agree_near_the_switch() {
        // Both branches at the same x around the switch (v = 2x = 0.5, u = 2x^2 = 0.5).
        for (branch, xs) in [
            (lorentzian_branch as fn(f64, bool) -> ModelTerms, 0.25),
            (gaussian_branch, 0.5),
        ] {
            for x in [0.8 * xs, xs, 1.2 * xs] {
                let (a, b) = (branch(x, true), branch(x, false));
                assert!((a.f - b.f).abs() < 1e-15, "x={x}: f {a:?} {b:?}");
                assert!((a.g - b.g).abs() < 4e-15, "x={x}: g {a:?} {b:?}");
                assert!((a.s - b.s).abs() < 1e-14, "x={x}: s {a:?} {b:?}");
            }
        }
    }

    #[test]
    fn derivative_terms_match_finite_differences() {
        for model in [FlowModel::Lorentzian, FlowModel::Gaussian] {
            for x in [1e-3, 0.1, 0.3, 0.6, 2.0, 30.0] {
                // Differences of g = 1 - f (accurate near x = 0): x dg/dx = -s.
                let h = 1e-5 * x;
                let g = |x| model_terms(model, x).g;
                let fd = -x * (g(x + h) - g(x - h)) / (2.0 * h);
                let s = model_terms(model, x).s;
                assert!(
                    (s - fd).abs() <= 1e-6 * fd.abs().max(1e-6),
                    "{model:?} x={x}: s {s} fd {fd}"
                );
            }
        }
    }

    #[test]
    fn model_limits() {
        for model in [FlowModel::Lorentzian, FlowModel::Gaussian] {
            assert_eq!(k2_model(model, 0.0), 1.0);
            assert!((k2_model(model, 1e-6) - 1.0).abs() < 1e-5);
        }
        for x in [1e3, 1e5, 1e8] {
            // Lorentzian: K^2 / beta = 1/x - 1/(2x^2) + O(exp(-2x)/x^2).
            let l = k2_model(FlowModel::Lorentzian, x);
            assert!((l * x - 1.0).abs() <= 0.6 / x, "x={x} {l}");
            let g = k2_model(FlowModel::Gaussian, x);
            let c = (std::f64::consts::PI / 2.0).sqrt();
            assert!((g * x / c - 1.0).abs() <= 0.6 / x, "x={x} {g}");
        }
    }

    #[test]
    fn inversion_round_trips_over_x_1e_minus_12_to_1e12() {
        for model in [FlowModel::Lorentzian, FlowModel::Gaussian] {
            let mut worst = 0f64;
            let mut y = -12.0f64;
            while y <= 12.0 {
                let x = 10f64.powf(y);
                let t = model_terms(model, x);
                let got = x_from_k2(model, t.f, t.g);
                worst = worst.max((got / x - 1.0).abs());
                y += 0.01;
            }
            assert!(worst < 1e-12, "{model:?}: worst relative error {worst}");
        }
    }

    #[test]
    fn tau_c_round_trips_through_k_for_x_1e_minus_3_to_1e3() {
        let (t, beta) = (5e-3, 0.45);
        for model in [FlowModel::Lorentzian, FlowModel::Gaussian] {
            for i in 0..=600 {
                let x = 10f64.powf(-3.0 + i as f64 / 100.0);
                let tau = t / x;
                let k = (beta * k2_model(model, x)).sqrt();
                let (got, flag) = tau_c(k, t, beta, model);
                assert_eq!(flag, 0);
                assert!(
                    (got / tau - 1.0).abs() <= TOL_ROUND_TRIP,
                    "{model:?} x={x}: {got} vs {tau}"
                );
            }
        }
    }

    #[test]
    fn tau_c_special_values_and_flags() {
        let m = FlowModel::Lorentzian;
        assert_eq!(tau_c(0.8, 1e-3, 0.5, m), (f64::INFINITY, flags::NO_MOTION));
        assert_eq!(
            tau_c(0.5f64.sqrt() + 1e-12, 1e-3, 0.5, m).1,
            flags::NO_MOTION
        );
        assert_eq!(tau_c(0.0, 1e-3, 0.5, m), (0.0, flags::NO_CONTRAST));
        let (v, f) = tau_c(f64::NAN, 1e-3, 0.5, m);
        assert!(v.is_nan() && f == flags::UNDEFINED);
        assert_eq!(tau_c(-0.1, 1e-3, 0.5, m).1, flags::UNDEFINED);
        assert!(x_from_k2(m, f64::NAN, 0.5).is_nan());
        assert_eq!(x_from_k2(m, 1.0, 0.0), 0.0);
        assert_eq!(x_from_k2(m, 0.0, 1.0), f64::INFINITY);
    }
}
