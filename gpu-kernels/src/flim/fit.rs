//! Per-pixel iterative fits (flim-core's `fit`), one unit per pixel, in f32: the same decay
//! model (tail or exact bin-domain reconvolution with a fractional IRF shift, recursions
//! over the bins), the same objectives (Neyman or Pearson least squares, Poisson deviance),
//! the same start and the same bounded Levenberg-Marquardt. The model and its Jacobian are
//! accumulated bin by bin into the normal equations, so a unit holds no per-bin arrays.
//!
//! f32 specifics: `1 - e^-x`, `e^-x - 1 + x` and `x / (e^x - 1)` use series below 0.1 (no
//! cancellation); the relative convergence tolerance is at least [`F32_TOLERANCE`].

use super::lifetimes::{b_fn, cmm_rate};
use super::{KIND_F32, KIND_U16, count, holds_decays};
use crate::CUBE_1D;
use crate::configured::{CatalogEntry, array, entry, settings_1d};
use crate::linalg::cholesky_solve;
use cubecl::prelude::*;
use gpu_runtime::{Error, Gpu, GpuArray, Result};

/// Estimators (flim-core's `Estimator`).
pub const EST_NEYMAN: u32 = 0;
pub const EST_PEARSON: u32 = 1;
pub const EST_POISSON: u32 = 2;
/// Model-weighted least squares: the Poisson iterations (the same fixed point), then
/// Pearson's chi^2 at the fit as the reported objective.
pub const EST_MODEL: u32 = 3;

/// IRF modes: tail fit, reconvolution with a fixed shift, with a fitted shift.
pub const IRF_NONE: u32 = 0;
pub const IRF_FIXED: u32 = 1;
pub const IRF_FITTED: u32 = 2;

/// Fit statuses (flim-core's `FitStatus`), in the low byte of the status word; iterations
/// above it.
pub const FIT_CONVERGED: u32 = 0;
pub const FIT_MASKED: u32 = 1;
pub const FIT_FAILED: u32 = 2;

/// Smallest relative objective decrease that means anything in f32.
pub const F32_TOLERANCE: f32 = 1e-6;
/// Remaining step (standard errors) below which a fit is stationary. The CPU uses 1e-3;
/// f32 objectives cannot confirm decreases much below (1e-2)^2 of a standard error.
pub(crate) const STATIONARY: f32 = 1e-2;
/// Remaining step (standard errors) below which a fit that no step can improve any more is
/// converged: at high counts (~1e5 photons) the f32 objective's rounding (~1e-3 absolute on a
/// chi^2 of a few hundred) hides decreases of steps below ~0.03 standard errors.
pub(crate) const STUCK: f32 = 0.1;
/// Smallest model value in the Pearson and Poisson objectives.
const Y_FLOOR: f32 = 1e-10;

/// Parameters of a model: amplitudes, log-lifetimes, offset?, shift?.
pub const fn params(k: u32, offset_fitted: bool, irf_mode: u32) -> u32 {
    2 * k + offset_fitted as u32 + (irf_mode == IRF_FITTED) as u32
}

/// `1 - e^{-x}` for `x >= 0`.
#[cube]
fn one_minus_exp(x: f32) -> f32 {
    let mut r = 1.0f32 - f32::exp(-x);
    if x < 0.1f32 {
        r = x
            * (1.0f32
                - x * (0.5f32
                    - x * (f32::new(1.0 / 6.0)
                        - x * (f32::new(1.0 / 24.0)
                            - x * (f32::new(1.0 / 120.0) - x / 720.0f32)))));
    }
    r
}

/// `phi(x) = e^{-x} - 1 + x` for `x >= 0`.
#[cube]
fn phi(x: f32) -> f32 {
    let mut r = x - one_minus_exp(x);
    if x < 0.1f32 {
        r = x
            * x
            * (0.5f32
                - x * (f32::new(1.0 / 6.0)
                    - x * (f32::new(1.0 / 24.0)
                        - x * (f32::new(1.0 / 120.0)
                            - x * (f32::new(1.0 / 720.0) - x / 5040.0f32)))));
    }
    r
}

/// Geometry and fixed settings of one pixel's fit.
#[derive(CubeType, Clone, Copy)]
pub(crate) struct Geo {
    /// Element index of the pixel's bin 0.
    pub(crate) base: u32,
    pub(crate) first: u32,
    pub(crate) m: u32,
    pub(crate) bins: u32,
    pub(crate) h: f32,
    pub(crate) period_bins: f32,
    pub(crate) ln_tau_lo: f32,
    pub(crate) ln_tau_hi: f32,
    pub(crate) offset: f32,
    pub(crate) shift: f32,
}

/// One bin's objective, gradient weight and curvature weight (flim-core's `lm::term`),
/// packed as (o, gw, hw) into `t`.
#[cube]
fn term(n: f32, y: f32, t: &mut Array<f32>, #[comptime] est: u32) {
    if comptime!(est == EST_NEYMAN) {
        let w = 1.0f32 / f32::max(n, 1.0f32);
        let r = n - y;
        t[0] = w * r * r;
        t[1] = -2.0f32 * w * r;
        t[2] = 2.0f32 * w;
    } else if comptime!(est == EST_PEARSON) {
        let yy = f32::max(y, Y_FLOOR);
        let r = n - y;
        t[0] = r * r / yy;
        t[1] = -r * (n + y) / (yy * yy);
        t[2] = 2.0f32 / yy;
    } else {
        // Deviance 2 [y - n + n ln(n/y)] = 2 y h(u), u = (n - y)/y, h(u) = (1+u) ln(1+u) - u:
        // the direct form cancels to ~1e-3 relative in f32 at 1e4 counts per bin, which hides
        // the objective's decreases near the minimum; h's series has no cancellation.
        let yy = f32::max(y, Y_FLOOR);
        let mut o = 2.0f32 * yy;
        if n > 0.0f32 {
            let u = (n - yy) / yy;
            let mut hu = (1.0f32 + u) * f32::ln(n / yy) - u;
            if f32::abs(u) < 0.1f32 {
                hu = u
                    * u
                    * (0.5f32
                        - u * (f32::new(1.0 / 6.0)
                            - u * (f32::new(1.0 / 12.0)
                                - u * (0.05f32 - u * (f32::new(1.0 / 30.0) - u / 42.0f32)))));
            }
            o = 2.0f32 * yy * hu;
        }
        t[0] = o;
        t[1] = 2.0f32 * (1.0f32 - n / yy);
        t[2] = 2.0f32 / yy;
    }
}

/// Add bin `j`'s contribution: objective into `acc[0]`, and with `jac` the curvature
/// (upper triangle of `hm`, row-major 8x8) and gradient `g`; `acc[4]` is the objective's
/// compensation. In `linear` mode (the start's amplitudes), only the amplitude block of
/// `sum w F F^T` and `sum w F (N - Z)`, and `sum F` into `acc[1..=k]`.
#[cube]
fn accumulate(
    n: f32,
    y: f32,
    z: f32,
    d: &Array<f32>,
    t: &mut Array<f32>,
    acc: &mut Array<f32>,
    hm: &mut Array<f32>,
    g: &mut Array<f32>,
    #[comptime] np: u32,
    #[comptime] k: u32,
    #[comptime] est: u32,
    #[comptime] jac: bool,
    #[comptime] linear: bool,
) {
    if comptime!(linear) {
        let w = 1.0f32 / f32::max(n, 1.0f32);
        #[unroll]
        for u in 0..k {
            g[u as usize] += w * d[u as usize] * (n - z);
            acc[(1 + u) as usize] += d[u as usize];
            #[unroll]
            for v in u..k {
                hm[(u * 8 + v) as usize] += w * d[u as usize] * d[v as usize];
            }
        }
    } else {
        term(n, y, t, est);
        // Compensated (Kahan) sum: the objective must resolve the small decreases near the
        // minimum (a plain f32 sum of 256 terms would hide changes below ~1e-6 relative).
        let yk = t[0] - acc[4];
        let sum = acc[0] + yk;
        acc[4] = (sum - acc[0]) - yk;
        acc[0] = sum;
        if comptime!(jac) {
            #[unroll]
            for u in 0..np {
                g[u as usize] += t[1] * d[u as usize];
                let du = t[2] * d[u as usize];
                #[unroll]
                for v in u..np {
                    hm[(u * 8 + v) as usize] += du * d[v as usize];
                }
            }
        }
    }
}

/// IRF value `q` (zero outside the window).
#[cube]
fn irf_at(irf: &Array<f32>, q: i32, bins: u32) -> f32 {
    let mut v = 0.0f32;
    if q >= 0 && q < bins as i32 {
        v = irf[q as usize];
    }
    v
}

/// Evaluate the model at `theta` over the fit range and accumulate (see [`accumulate`]);
/// returns the objective. Per-component state lives in `st` (16 values per component).
#[cube]
pub(crate) fn evaluate(
    words: &Array<u32>,
    irf: &Array<f32>,
    geo: Geo,
    theta: &Array<f32>,
    hm: &mut Array<f32>,
    g: &mut Array<f32>,
    st: &mut Array<f32>,
    d: &mut Array<f32>,
    t: &mut Array<f32>,
    acc: &mut Array<f32>,
    #[comptime] kind: u32,
    #[comptime] k: u32,
    #[comptime] est: u32,
    #[comptime] zfit: bool,
    #[comptime] irf_mode: u32,
    #[comptime] jac: bool,
    #[comptime] linear: bool,
) -> f32 {
    let np = comptime!(params(k, zfit, irf_mode));
    #[unroll]
    for u in 0..8u32 {
        g[u as usize] = 0.0f32;
        d[u as usize] = 0.0f32;
        #[unroll]
        for v in 0..8u32 {
            hm[(u * 8 + v) as usize] = 0.0f32;
        }
    }
    #[unroll]
    for u in 0..5u32 {
        acc[u as usize] = 0.0f32;
    }
    let mut z = geo.offset;
    if comptime!(zfit) {
        z = theta[(2 * k) as usize];
    }
    let mut shift = geo.shift;
    if comptime!(irf_mode == IRF_FITTED) {
        shift = theta[(np - 1) as usize];
    }
    if comptime!(irf_mode == IRF_NONE) {
        // Tail: F = P tau (1 - e^-a) e^{-ja}, dF/dln tau = F (d0 + j a).
        #[unroll]
        for c in 0..k {
            let tau = f32::exp(theta[(k + c) as usize]);
            let a = geo.h / tau;
            let x = geo.period_bins * a;
            let o = c * 16;
            st[o as usize] = tau * one_minus_exp(a) / one_minus_exp(x); // running F
            st[(o + 1) as usize] = f32::exp(-a); // r
            // 1 - a/(e^a - 1) + x/(e^x - 1) = -a B(a) + 1 + x B(x)
            st[(o + 2) as usize] = 1.0f32 - a * b_fn(a) + x * b_fn(x);
            st[(o + 3) as usize] = a;
        }
        for j in 0..geo.m {
            let n = count(words, geo.base + geo.first + j, kind);
            let jf = f32::cast_from(j);
            let mut y = z;
            #[unroll]
            for c in 0..k {
                let o = c * 16;
                let f = st[o as usize];
                y += theta[c as usize] * f;
                d[c as usize] = f;
                d[(k + c) as usize] =
                    theta[c as usize] * f * (st[(o + 2) as usize] + jf * st[(o + 3) as usize]);
                st[o as usize] = f * st[(o + 1) as usize];
            }
            if comptime!(zfit) {
                d[(2 * k) as usize] = 1.0f32;
            }
            accumulate(n, y, z, d, t, acc, hm, g, np, k, est, jac, linear);
        }
    } else {
        let nf = f32::floor(shift);
        let fr = shift - nf;
        let gg = 1.0f32 - fr;
        let ni = i32::cast_from(nf);
        let b = geo.bins;
        let bf = f32::cast_from(b);
        // Per component: kernel constants and the earlier pulses' state W, DW.
        #[unroll]
        for c in 0..k {
            let tau = f32::exp(theta[(k + c) as usize]);
            let a = geo.h / tau;
            let r = f32::exp(-a);
            let ta = tau / a;
            let eg = f32::exp(-gg * a);
            let em = one_minus_exp(a);
            let emg = one_minus_exp(gg * a);
            let pg = phi(gg * a);
            let p1 = phi(a);
            let o = c * 16;
            let cc = ta * em * em * eg;
            st[o as usize] = ta * pg; // k0
            st[(o + 1) as usize] = tau * emg - ta * (pg - eg * p1); // k1
            st[(o + 2) as usize] = cc; // c
            st[(o + 3) as usize] = ta * (2.0f32 * pg - gg * a * emg); // dk0
            st[(o + 4) as usize] = tau * (emg - gg * a * eg) - ta * (2.0f32 * pg - gg * a * emg)
                + ta * eg * ((2.0f32 + gg * a) * p1 - a * em); // dk1
            // 2 a r / (1 - r) = 2 a / (e^a - 1) = 2 (1 + a B(a))
            st[(o + 5) as usize] = cc * (2.0f32 - 2.0f32 * (1.0f32 + a * b_fn(a)) + gg * a); // dc
            st[(o + 6) as usize] = -tau * emg; // sk0
            st[(o + 7) as usize] = tau * (emg - eg * em); // sk1
            st[(o + 8) as usize] = a * cc; // sc
            st[(o + 9) as usize] = r;
            st[(o + 10) as usize] = a;
            st[(o + 13) as usize] = 0.0f32;
            st[(o + 14) as usize] = 0.0f32;
        }
        // Pass 1: the window's source state from zero, all components in one loop (a
        // thread's loop iterations are budgeted on lavapipe).
        for q in 0..b {
            let v = irf_at(irf, q as i32 - ni, b);
            #[unroll]
            for c in 0..k {
                let o = c * 16;
                let r = st[(o + 9) as usize];
                let s0 = st[(o + 13) as usize];
                st[(o + 14) as usize] = r * st[(o + 14) as usize] + r * st[(o + 10) as usize] * s0;
                st[(o + 13) as usize] = r * s0 + v;
            }
        }
        #[unroll]
        for c in 0..k {
            let o = c * 16;
            let r = st[(o + 9) as usize];
            let a = st[(o + 10) as usize];
            let s0 = st[(o + 13) as usize];
            let ds0 = st[(o + 14) as usize];
            let xp = a * geo.period_bins;
            let rho = f32::exp(-a * (geo.period_bins - bf)) / one_minus_exp(xp);
            let w = s0 * rho;
            let mut dw = rho * ds0;
            if s0 > 0.0f32 {
                // R P a / (1 - R) = x / (e^x - 1) = 1 + x B(x)
                dw = w * (ds0 / s0 + (geo.period_bins - bf) * a + 1.0f32 + xp * b_fn(xp));
            }
            st[(o + 11) as usize] = w;
            st[(o + 12) as usize] = dw;
            st[(o + 13) as usize] = 0.0f32; // s0_{j-1}
            st[(o + 14) as usize] = 0.0f32; // ds0_{j-1}
            st[(o + 15) as usize] = 1.0f32 / r; // r^{j-1}
        }
        let mut prev = 0.0f32;
        for jj in 0..geo.first + geo.m {
            let cur = irf_at(irf, jj as i32 - ni, b);
            if jj >= geo.first {
                let n = count(words, geo.base + jj, kind);
                let jm = f32::cast_from(jj) - 1.0f32;
                let mut y = z;
                let mut dsh = 0.0f32;
                #[unroll]
                for c in 0..k {
                    let o = c * 16;
                    let rj = st[(o + 15) as usize];
                    let w = st[(o + 11) as usize];
                    let a = st[(o + 10) as usize];
                    let sp = st[(o + 13) as usize] + w * rj;
                    let dsp = st[(o + 14) as usize] + rj * (st[(o + 12) as usize] + w * jm * a);
                    let f = st[o as usize] * cur
                        + st[(o + 1) as usize] * prev
                        + st[(o + 2) as usize] * sp;
                    let df = st[(o + 3) as usize] * cur
                        + st[(o + 4) as usize] * prev
                        + st[(o + 5) as usize] * sp
                        + st[(o + 2) as usize] * dsp;
                    let fs = st[(o + 6) as usize] * cur
                        + st[(o + 7) as usize] * prev
                        + st[(o + 8) as usize] * sp;
                    y += theta[c as usize] * f;
                    d[c as usize] = f;
                    d[(k + c) as usize] = theta[c as usize] * df;
                    dsh += theta[c as usize] * fs;
                }
                if comptime!(zfit) {
                    d[(2 * k) as usize] = 1.0f32;
                }
                if comptime!(irf_mode == IRF_FITTED) {
                    d[(np - 1) as usize] = dsh;
                }
                accumulate(n, y, z, d, t, acc, hm, g, np, k, est, jac, linear);
            }
            #[unroll]
            for c in 0..k {
                let o = c * 16;
                let r = st[(o + 9) as usize];
                let s0 = st[(o + 13) as usize];
                st[(o + 14) as usize] = r * st[(o + 14) as usize] + r * st[(o + 10) as usize] * s0;
                st[(o + 13) as usize] = r * s0 + prev;
                st[(o + 15) as usize] = st[(o + 15) as usize] * r;
            }
            prev = cur;
        }
    }
    acc[0]
}

/// Keep `theta` in bounds (flim-core's `ModelSetup::project`).
#[cube]
pub(crate) fn project(
    geo: Geo,
    theta: &mut Array<f32>,
    #[comptime] k: u32,
    #[comptime] zfit: bool,
    #[comptime] irf_mode: u32,
) {
    let np = comptime!(params(k, zfit, irf_mode));
    #[unroll]
    for c in 0..k {
        theta[c as usize] = f32::max(theta[c as usize], 0.0f32);
        theta[(k + c) as usize] = f32::clamp(theta[(k + c) as usize], geo.ln_tau_lo, geo.ln_tau_hi);
    }
    if comptime!(zfit) {
        theta[(2 * k) as usize] = f32::max(theta[(2 * k) as usize], 0.0f32);
    }
    if comptime!(irf_mode == IRF_FITTED) {
        let half = 0.5f32 * f32::cast_from(geo.bins);
        theta[(np - 1) as usize] = f32::clamp(theta[(np - 1) as usize], -half, half);
    }
}

/// Whether parameter `u` sits on a bound the descent direction leaves.
#[cube]
pub(crate) fn blocked(
    geo: Geo,
    theta: &Array<f32>,
    g: &Array<f32>,
    u: u32,
    #[comptime] k: u32,
    #[comptime] zfit: bool,
) -> bool {
    let half = 0.5f32 * f32::cast_from(geo.bins);
    let v = theta[u as usize];
    let gu = g[u as usize];
    let mut b = (v <= -half && gu > 0.0f32) || (v >= half && gu < 0.0f32); // shift
    if u < k {
        b = v <= 0.0f32 && gu > 0.0f32;
    } else if u < 2 * k {
        b = (v <= geo.ln_tau_lo && gu > 0.0f32) || (v >= geo.ln_tau_hi && gu < 0.0f32);
    } else if comptime!(zfit) {
        if u == 2 * k {
            b = v <= 0.0f32 && gu > 0.0f32;
        }
    }
    b
}

/// Largest remaining step in standard errors, `|g_u| / sqrt(H_uu)` over free parameters.
#[cube]
fn stationarity(
    geo: Geo,
    theta: &Array<f32>,
    hm: &Array<f32>,
    g: &Array<f32>,
    #[comptime] np: u32,
    #[comptime] k: u32,
    #[comptime] zfit: bool,
) -> f32 {
    let mut worst = 0.0f32;
    #[unroll]
    for u in 0..np {
        let huu = hm[(u * 9) as usize];
        if !blocked(geo, theta, g, u, k, zfit) && huu > 0.0f32 {
            worst = f32::max(worst, f32::abs(g[u as usize]) / f32::sqrt(huu));
        }
    }
    worst
}

/// One fit per pixel. Outputs `out[q * pixels + p]`: the `np` parameters (amplitudes,
/// ln tau, offset?, shift?), then the objective and the photons; `status[p]`: status in the
/// low byte, iterations above. `mask[mask_offset + p]` (u32, 0 = skip) when `use_mask`.
/// `init` holds start lifetimes (ns; 0 = from the data). `nan_bits` is 0x7FC0_0000.
#[cube(launch_unchecked)]
pub fn fit_kernel(
    words: &Array<u32>,
    irf: &Array<f32>,
    mask: &Array<u32>,
    init: &Array<f32>,
    out: &mut Array<f32>,
    status: &mut Array<u32>,
    pixels: u32,
    mask_offset: u32,
    stride: u32,
    first: u32,
    m: u32,
    h: f32,
    period_bins: f32,
    ln_tau_lo: f32,
    ln_tau_hi: f32,
    offset: f32,
    shift: f32,
    threshold: f32,
    max_iterations: u32,
    tol: f32,
    nan_bits: u32,
    #[comptime] kind: u32,
    #[comptime] k: u32,
    #[comptime] est: u32,
    #[comptime] zfit: bool,
    #[comptime] irf_mode: u32,
    #[comptime] use_mask: bool,
) {
    let p = ABSOLUTE_POS_X + ABSOLUTE_POS_Y * CUBE_COUNT_X * CUBE_DIM_X;
    if p < pixels {
        let np = comptime!(params(k, zfit, irf_mode));
        let geo = Geo {
            base: p * stride,
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
        // Photons, the 5-bin minimum (offset start) and the peak (tail start).
        let mut photons = 0.0f32;
        let mut win = 0.0f32;
        let mut low = f32::new(3.0e38);
        let mut peak = 0u32;
        let mut peak_v = f32::new(-1.0);
        let w5 = u32::min(5u32, m);
        for j in 0..m {
            let c = count(words, geo.base + first + j, kind);
            photons += c;
            win += c;
            if j >= w5 {
                win -= count(words, geo.base + first + j - w5, kind);
            }
            if j + 1 >= w5 {
                low = f32::min(low, win / f32::cast_from(w5));
            }
            if c > peak_v {
                peak_v = c;
                peak = j;
            }
        }
        let mut fitted = photons >= threshold && photons > 0.0f32;
        if comptime!(use_mask) {
            if mask[(mask_offset + p) as usize] == 0u32 {
                fitted = false;
            }
        }
        let nan = f32::reinterpret(nan_bits);
        let mut theta = Array::<f32>::new(8usize);
        #[unroll]
        for u in 0..8u32 {
            theta[u as usize] = nan;
        }
        let mut obj = nan;
        let mut result = u32::new(FIT_MASKED as i64); // a runtime value: a bare const would be comptime
        let mut iterations = 0u32;
        if fitted {
            let mut hm = Array::<f32>::new(64usize);
            let mut g = Array::<f32>::new(8usize);
            let mut st = Array::<f32>::new(48usize);
            let mut d = Array::<f32>::new(8usize);
            let mut t = Array::<f32>::new(4usize);
            let mut acc = Array::<f32>::new(5usize);
            // Start (flim-core's `lm::initial_guess`).
            let mut z0 = geo.offset;
            if comptime!(zfit) {
                z0 = 0.5f32 * f32::max(low, 0.0f32);
                theta[(2 * k) as usize] = z0;
            }
            if comptime!(irf_mode == IRF_FITTED) {
                theta[(np - 1) as usize] = shift;
            }
            let mut start = 0u32;
            if comptime!(irf_mode != IRF_NONE) {
                start = peak;
            }
            let mut tn = 0.0f32;
            let mut tm1 = 0.0f32;
            for j in start..m {
                let v = count(words, geo.base + first + j, kind) - z0;
                tn += v;
                tm1 += f32::cast_from(j - start) * v;
            }
            let tail = f32::cast_from(m - start);
            let mut tau0 = 0.2f32 * f32::cast_from(m) * h;
            if tn > 0.0f32 && m - start >= 4u32 {
                let mu = tm1 / tn;
                if mu > 0.0f32 && mu < 0.5f32 * (tail - 1.0f32) {
                    tau0 = h / cmm_rate(mu, tail);
                }
            }
            #[unroll]
            for c in 0..k {
                let mut spread = 1.0f32;
                if comptime!(k == 2) {
                    spread = 0.4f32;
                    if c == 1 {
                        spread = 1.5f32;
                    }
                } else if comptime!(k == 3) {
                    spread = 0.25f32;
                    if c == 1 {
                        spread = 1.0f32;
                    } else if c == 2 {
                        spread = 3.0f32;
                    }
                }
                let mut tau = tau0 * spread;
                if init[c as usize] > 0.0f32 {
                    tau = init[c as usize];
                }
                theta[(k + c) as usize] = f32::clamp(f32::ln(tau), ln_tau_lo, ln_tau_hi);
                theta[c as usize] = 1.0f32;
            }
            // Amplitudes by weighted linear least squares at those lifetimes.
            evaluate(
                words, irf, geo, &theta, &mut hm, &mut g, &mut st, &mut d, &mut t, &mut acc, kind,
                k, est, zfit, irf_mode, true, true,
            );
            let mut amp = Array::<f32>::new(8usize);
            let ok = cholesky_solve::<f32>(&hm, &g, &mut amp, 8u32, k);
            let signal = f32::max(photons - f32::cast_from(m) * z0, 1.0f32);
            #[unroll]
            for c in 0..k {
                let mut a = 0.1f32 * signal / f32::max(acc[(1 + c) as usize], 1e-30f32);
                if ok && amp[c as usize] > 0.0f32 {
                    a = amp[c as usize];
                }
                theta[c as usize] = a;
            }
            project(geo, &mut theta, k, zfit, irf_mode);
            // Levenberg-Marquardt (flim-core's `lm::fit_pixel`).
            let mut mm = Array::<f32>::new(64usize);
            let mut rhs = Array::<f32>::new(8usize);
            let mut delta = Array::<f32>::new(8usize);
            let mut trial = Array::<f32>::new(8usize);
            let mut th = Array::<f32>::new(64usize);
            let mut tg = Array::<f32>::new(8usize);
            obj = evaluate(
                words, irf, geo, &theta, &mut hm, &mut g, &mut st, &mut d, &mut t, &mut acc, kind,
                k, est, zfit, irf_mode, true, false,
            );
            let mut lambda = 1e-3f32;
            result = FIT_FAILED;
            let mut running = true;
            while running && iterations < max_iterations {
                iterations += 1u32;
                if !(obj <= 3.0e38f32) {
                    running = false;
                } else if stationarity(geo, &theta, &hm, &g, np, k, zfit) <= STATIONARY {
                    result = FIT_CONVERGED;
                    running = false;
                } else {
                    #[unroll]
                    for u in 0..np {
                        #[unroll]
                        for v in 0..8u32 {
                            mm[(u * 8 + v) as usize] = hm[(u * 8 + v) as usize];
                        }
                    }
                    #[unroll]
                    for u in 0..np {
                        if blocked(geo, &theta, &g, u, k, zfit) {
                            #[unroll]
                            for v in 0..np {
                                mm[(u * 8 + v) as usize] = 0.0f32;
                                mm[(v * 8 + u) as usize] = 0.0f32;
                            }
                            mm[(u * 9) as usize] = 1.0f32;
                            rhs[u as usize] = 0.0f32;
                        } else {
                            let dd = hm[(u * 9) as usize];
                            mm[(u * 9) as usize] =
                                dd + lambda * f32::max(dd, 1e-12f32 * (1.0f32 + dd));
                            rhs[u as usize] = -g[u as usize];
                        }
                    }
                    if !cholesky_solve::<f32>(&mm, &rhs, &mut delta, 8u32, np) {
                        lambda *= 10.0f32;
                        if lambda > 1e16f32 {
                            running = false;
                        }
                    } else {
                        #[unroll]
                        for u in 0..8u32 {
                            trial[u as usize] = theta[u as usize];
                        }
                        #[unroll]
                        for u in 0..np {
                            trial[u as usize] += delta[u as usize];
                        }
                        project(geo, &mut trial, k, zfit, irf_mode);
                        let t_obj = evaluate(
                            words, irf, geo, &trial, &mut th, &mut tg, &mut st, &mut d, &mut t,
                            &mut acc, kind, k, est, zfit, irf_mode, true, false,
                        );
                        if t_obj <= 3.0e38f32 && t_obj < obj {
                            let small = obj - t_obj <= tol * f32::abs(t_obj);
                            #[unroll]
                            for u in 0..8u32 {
                                theta[u as usize] = trial[u as usize];
                                g[u as usize] = tg[u as usize];
                            }
                            #[unroll]
                            for u in 0..64u32 {
                                hm[u as usize] = th[u as usize];
                            }
                            obj = t_obj;
                            lambda = f32::max(lambda * 0.1f32, 1e-12f32);
                            if small {
                                result = FIT_CONVERGED;
                                running = false;
                            }
                        } else {
                            lambda *= 10.0f32;
                            if lambda > 1e16f32 {
                                if stationarity(geo, &theta, &hm, &g, np, k, zfit) <= STUCK {
                                    result = FIT_CONVERGED;
                                }
                                running = false;
                            }
                        }
                    }
                }
            }
            // Not finite, or a lifetime on its bound: failed.
            let mut bad = !(f32::abs(obj) <= 3.0e38f32);
            #[unroll]
            for u in 0..np {
                if !(f32::abs(theta[u as usize]) <= 3.0e38f32) {
                    bad = true;
                }
            }
            #[unroll]
            for c in 0..k {
                let lt = theta[(k + c) as usize];
                if theta[c as usize] > 0.0f32
                    && (lt <= ln_tau_lo + 1e-6f32 || lt >= ln_tau_hi - 1e-6f32)
                {
                    bad = true;
                }
            }
            if bad {
                result = FIT_FAILED;
            }
            if comptime!(est == EST_MODEL) {
                obj = evaluate(
                    words,
                    irf,
                    geo,
                    &theta,
                    &mut hm,
                    &mut g,
                    &mut st,
                    &mut d,
                    &mut t,
                    &mut acc,
                    kind,
                    k,
                    EST_PEARSON,
                    zfit,
                    irf_mode,
                    true,
                    false,
                );
            }
        }
        #[unroll]
        for u in 0..np {
            out[(u * pixels + p) as usize] = theta[u as usize];
        }
        out[(np * pixels + p) as usize] = obj;
        out[((np + 1) * pixels + p) as usize] = photons;
        status[p as usize] = result | (iterations << 8u32);
    }
}

/// Scalar settings of [`fit`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FitParams {
    /// Pixels in this launch.
    pub pixels: u32,
    /// Index of this launch's first pixel in the mask.
    pub mask_offset: u32,
    /// Bins per pixel (the IRF's length).
    pub stride: u32,
    /// Fit range.
    pub first: u32,
    pub m: u32,
    /// Bin width (ns) and laser period (bins).
    pub h: f32,
    pub period_bins: f32,
    /// Lifetime bounds (ns).
    pub tau_bounds: (f32, f32),
    /// Fixed offset (counts per bin) and fixed or starting shift (bins).
    pub offset: f32,
    pub shift: f32,
    /// Photon threshold.
    pub threshold: f32,
    pub max_iterations: u32,
    /// Relative objective decrease for convergence; raised to [`F32_TOLERANCE`].
    pub tolerance: f32,
    /// Count type (`KIND_*`).
    pub kind: u32,
    /// Components (1..=3).
    pub components: u32,
    /// `EST_*`.
    pub estimator: u32,
    pub offset_fitted: bool,
    /// `IRF_*`.
    pub irf_mode: u32,
    /// Whether `mask` applies.
    pub use_mask: bool,
}

impl FitParams {
    /// Output planes per pixel: the parameters, the objective and the photons.
    pub fn planes(&self) -> usize {
        params(self.components, self.offset_fitted, self.irf_mode) as usize + 2
    }
}

/// Launch [`fit_kernel()`]; checks every length first. `irf` holds `stride` values (any
/// length >= 1 without an IRF), `init` 3 start lifetimes (0 = from the data), `mask` the
/// image's mask (>= 1 value).
pub fn fit<R: Runtime>(
    gpu: &Gpu<R>,
    words: &GpuArray<u32>,
    irf: &GpuArray<f32>,
    mask: &GpuArray<u32>,
    init: &GpuArray<f32>,
    p: &FitParams,
    out: &GpuArray<f32>,
    status: &GpuArray<u32>,
) -> Result<()> {
    let name = "flim_fit";
    let pixels = p.pixels as usize;
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
    if !holds_decays(words, p.kind, pixels, p.stride)
        || (p.irf_mode != IRF_NONE && irf.len() < p.stride as usize)
        || irf.is_empty()
        || init.len() < 3
        || (p.use_mask && mask.len() < p.mask_offset as usize + pixels)
        || mask.is_empty()
        || out.len() < p.planes() * pixels
        || status.len() < pixels
    {
        return Err(Error::invalid_launch(
            name,
            format!("buffers too short for {pixels} pixels x {} bins", p.stride),
        ));
    }
    if pixels == 0 {
        return Ok(());
    }
    let (lo, hi) = p.tau_bounds;
    let count = gpu.cube_count_1d(name, pixels, CUBE_1D)?;
    gpu.launch(name, count, |count| {
        // SAFETY: lengths checked above; unit p < pixels reads counts p * stride + j
        // (j < first + m <= stride), irf[q] (q < stride), mask[mask_offset + p], init[c]
        // (c < 3), and writes out[q * pixels + p] (q < planes) and status[p].
        unsafe {
            fit_kernel::launch_unchecked::<R>(
                gpu.client(),
                count,
                CubeDim::new_1d(CUBE_1D),
                words.arg(),
                irf.arg(),
                mask.arg(),
                init.arg(),
                out.arg(),
                status.arg(),
                p.pixels,
                p.mask_offset,
                p.stride,
                p.first,
                p.m,
                p.h,
                p.period_bins,
                lo.ln(),
                hi.ln(),
                p.offset,
                p.shift,
                p.threshold,
                p.max_iterations,
                p.tolerance.max(F32_TOLERANCE),
                0x7FC0_0000u32,
                p.kind,
                p.components,
                p.estimator,
                p.offset_fitted,
                p.irf_mode,
                p.use_mask,
            );
        };
    })
}

/// [`fit_kernel`] configured as [`fit`] configures it, for u16 counts without a mask (`k`
/// components, estimator `est`, offset fitted when `zfit`, IRF mode `irf_mode`); the
/// catalog's entries.
pub(crate) fn configured<R: Runtime>(
    client: &ComputeClient<R>,
    k: u32,
    est: u32,
    zfit: bool,
    irf_mode: u32,
) -> fit_kernel::FitKernel<R> {
    fit_kernel::FitKernel::<R>::new(
        settings_1d(CUBE_1D),
        client.clone(),
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
        KIND_U16,
        k,
        est,
        zfit,
        irf_mode,
        false,
    )
}

/// This module's kernels, configured as their launch wrappers configure them: the models
/// the benchmarks and the CLI use.
pub(crate) fn catalog<R: Runtime>(client: &ComputeClient<R>) -> Vec<CatalogEntry> {
    [
        ("fit_mono_neyman_tail", 1, EST_NEYMAN, false, IRF_NONE),
        ("fit_mono_mle_tail", 1, EST_POISSON, false, IRF_NONE),
        ("fit_mono_mle_irf", 1, EST_POISSON, false, IRF_FIXED),
        ("fit_mono_model_irf", 1, EST_MODEL, false, IRF_FIXED),
        (
            "fit_bi_mle_irf_shift_offset",
            2,
            EST_POISSON,
            true,
            IRF_FITTED,
        ),
        (
            "fit_tri_pearson_irf_shift_offset",
            3,
            EST_PEARSON,
            true,
            IRF_FITTED,
        ),
    ]
    .into_iter()
    .map(|(name, k, est, zfit, irf_mode)| {
        let kern = configured(client, k, est, zfit, irf_mode);
        entry("flim", name, kern)
    })
    .collect()
}
