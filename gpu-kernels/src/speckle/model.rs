//! The speckle flow models in f32 (Lorentzian and Gaussian K^2(T / tau_c) with their
//! series near x = 0) and the bracketed Newton inversion: ports of speckle-core's f64
//! `model::flow` formulas, shared by the tau_c and MESI kernels.

// CubeCL evaluates `if comptime!(..)` at expansion time; merging it with a runtime
// condition would turn it into a runtime branch.
#![allow(clippy::collapsible_if)]
// `!(x > 0.0)` is meant: it is also true for NaN. Ranges are written as CubeCL 0.10 parses them.
#![allow(
    clippy::neg_cmp_op_on_partial_ord,
    clippy::if_not_else,
    clippy::range_plus_one
)]

use cubecl::prelude::*;

/// `f = K^2 / beta` at x, with `g = 1 - f` and `s = x df/dx`, each without cancellation.
#[derive(CubeType, Clone, Copy)]
pub(crate) struct Terms {
    pub(crate) f: f32,
    pub(crate) g: f32,
    pub(crate) s: f32,
}

/// Lorentzian model terms at `x >= 0`: series for `2x < 0.5` (10 terms reach f32
/// rounding there), closed form above.
#[cube]
pub(crate) fn lorentzian(x: f32) -> Terms {
    let v = 2.0f32 * x;
    let mut t = Terms {
        f: 0.0f32,
        g: 0.0f32,
        s: 0.0f32,
    };
    if v < 0.5f32 {
        // g = v sum_{j>=1} 2 (-v)^(j-1) / (j+2)!,  s = -v sum_{j>=1} 2 j (-v)^(j-1) / (j+2)!
        let mut term = f32::new(1.0 / 3.0);
        let mut sg = 0.0f32;
        let mut ss = 0.0f32;
        #[unroll]
        for j in 1..11u32 {
            sg += term;
            ss += term * f32::cast_from(j);
            term = term * (-v) / f32::cast_from(j + 3);
        }
        t.g = v * sg;
        t.f = 1.0f32 - t.g;
        t.s = -v * ss;
    } else {
        let em1 = 1.0f32 - f32::exp(-v);
        let f = 2.0f32 * (v - em1) / (v * v);
        t.f = f;
        t.g = 1.0f32 - f;
        t.s = 2.0f32 * em1 / v - 2.0f32 * f;
    }
    t
}

/// Gaussian model terms at `x >= 0`: series for `2x^2 < 0.5`, closed form (with erf) above.
#[cube]
pub(crate) fn gaussian(x: f32) -> Terms {
    let u = 2.0f32 * x * x;
    let mut t = Terms {
        f: 0.0f32,
        g: 0.0f32,
        s: 0.0f32,
    };
    if u < 0.5f32 {
        // g = u sum_{m>=2} (-u)^(m-2) / (m! (2m-1)),  s = -u sum_{m>=2} 2 (m-1) (same terms)
        let mut a = 0.5f32; // (-u)^(m-2) / m! at m = 2
        let mut sg = 0.0f32;
        let mut ss = 0.0f32;
        #[unroll]
        for m in 2..12u32 {
            let term = a / f32::cast_from(2 * m - 1);
            sg += term;
            ss += term * f32::cast_from(2 * (m - 1));
            a = a * (-u) / f32::cast_from(m + 1);
        }
        t.g = u * sg;
        t.f = 1.0f32 - t.g;
        t.s = -u * ss;
    } else {
        let e = Erf::erf(core::f32::consts::SQRT_2 * x);
        let c = 2.506_628_3f32; // sqrt(2 pi)
        let f = (f32::exp(-u) - 1.0f32 + c * x * e) / u;
        t.f = f;
        t.g = 1.0f32 - f;
        t.s = c * e / (2.0f32 * x) - 2.0f32 * f;
    }
    t
}

#[cube]
pub(crate) fn model_terms(x: f32, #[comptime] gaussian_model: bool) -> Terms {
    if comptime!(gaussian_model) {
        gaussian(x)
    } else {
        lorentzian(x)
    }
}

/// x = T / tau_c at which `K^2 / beta = q` (with `d = 1 - q` given separately): Newton on
/// ln x, kept inside a shrinking bracket (bisection where Newton leaves it), solving on
/// ln(1 - f) near the static end (q >= 0.5) and on ln f elsewhere, as the CPU does.
#[cube]
pub(crate) fn x_from_k2(q: f32, d: f32, #[comptime] gaussian_model: bool) -> f32 {
    let upper = q >= 0.5f32;
    let mut x0 = 1.5f32 * d;
    if upper {
        if comptime!(gaussian_model) {
            x0 = f32::sqrt(3.0f32 * d);
        }
    } else {
        let mut c = 1.0f32;
        if comptime!(gaussian_model) {
            c = 1.253_314_1f32; // sqrt(pi / 2)
        }
        x0 = (c + f32::sqrt(f32::max(c * c - 2.0f32 * q, 0.0f32))) / (2.0f32 * q);
    }
    let mut target = f32::ln(q);
    if upper {
        target = f32::ln(d);
    }
    let mut lo = f32::new(-87.0);
    let mut hi = 88.0f32;
    let mut y = f32::clamp(f32::ln(x0), lo, hi);
    let mut done = false;
    for _ in 0..100u32 {
        if done {
            break;
        }
        let t = model_terms(f32::exp(y), gaussian_model);
        let mut r = target - f32::ln(t.f);
        let mut dr = -t.s / t.f;
        if upper {
            r = f32::ln(t.g) - target;
            dr = -t.s / t.g;
        }
        if r == 0.0f32 {
            done = true;
        } else {
            if r > 0.0f32 {
                hi = y;
            } else {
                lo = y;
            }
            let newton = y - r / dr;
            let mut next = 0.5f32 * (lo + hi);
            // The comparisons are false for NaN or infinite Newton steps.
            if newton >= lo && newton <= hi {
                next = newton;
            }
            let step = f32::abs(next - y);
            y = next;
            if step <= 1e-6f32 * f32::max(f32::abs(y), 1.0f32) || hi - lo <= 1e-6f32 {
                done = true;
            }
        }
    }
    f32::exp(y)
}
