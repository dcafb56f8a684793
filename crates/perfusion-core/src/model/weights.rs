//! Weights of the exact exponential-convolution recursion over one interval (see
//! `cpu/conv.rs`), with their derivatives in the rate: the formula both paths and the
//! phantoms share.

use gpu_kernels::perfusion::WEIGHT_SERIES;

/// Below this `x = k dt` the weights come from their Taylor series (exactly representable
/// threshold, so CPU and GPU take the same branch).
pub(crate) const SERIES_BELOW: f64 = 0.5;
/// `sum c[j] y^j` over series `which` of the kernels' `WEIGHT_SERIES` (17 terms, the next
/// below 1e-19 at x = 1/2), by Horner's rule in the kernels' order.
#[inline]
fn series(y: f64, which: usize) -> f64 {
    let c = &WEIGHT_SERIES[which];
    let mut acc = c[c.len() - 1];
    for &cj in c.iter().rev().skip(1) {
        acc = acc * y + cj;
    }
    acc
}

/// Weights of one interval for one decay rate, with their derivatives in k.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Weights {
    pub e: f64,
    pub wa: f64,
    pub wb: f64,
    pub de: f64,
    pub dwa: f64,
    pub dwb: f64,
}

/// `(E, dt a, dt b)` for decay `k` (1/s) over `dt` (s).
#[inline]
pub(crate) fn weights(k: f64, dt: f64) -> Weights {
    let x = k * dt;
    let e = (-x).exp();
    let (a, b) = if x < SERIES_BELOW {
        // a = sum_{m>=2} (m-1) (-x)^(m-2) / m!,  b = sum_{m>=2} (-x)^(m-2) / m!
        (series(-x, 0), series(-x, 1))
    } else {
        let xx = x * x;
        let em = 1.0 - e;
        ((em - x * e) / xx, (x - em) / xx)
    };
    Weights {
        e,
        wa: dt * a,
        wb: dt * b,
        ..Weights::default()
    }
}

/// [`weights`] plus d/dk of `E`, `dt a`, `dt b` (for the analytic Jacobian).
#[inline]
pub(crate) fn weights_d(k: f64, dt: f64) -> Weights {
    let mut w = weights(k, dt);
    let x = k * dt;
    let (da, db) = if x < SERIES_BELOW {
        // a' = -sum_{m>=3} (m-1)(m-2) (-x)^(m-3) / m!,  b' = -sum_{m>=3} (m-2) (-x)^(m-3) / m!
        (series(-x, 2), series(-x, 3))
    } else {
        let e = w.e;
        let em = 1.0 - e;
        let xxx = x * x * x;
        (
            (x * x * e - 2.0 * (em - x * e)) / xxx,
            (x * em - 2.0 * (x - em)) / xxx,
        )
    };
    w.de = -dt * w.e;
    w.dwa = dt * dt * da;
    w.dwb = dt * dt * db;
    w
}
