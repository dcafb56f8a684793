//! Levenberg-Marquardt for one pixel, on three objectives (`N_j` counts, `y_j` model):
//! - Neyman least squares `sum (N - y)^2 / max(N, 1)` (data variance);
//! - Pearson least squares `sum (N - y)^2 / y` (model variance; exact gradient
//!   `-(N - y)(N + y) / y^2 dy`);
//! - Poisson maximum likelihood, the deviance `2 sum [y - N + N ln(N / y)]`, gradient
//!   `2 (1 - N/y) dy`, Fisher information `2 dy dy^T / y` as the curvature (Fisher scoring,
//!   damped): converges to the maximum-likelihood estimate, efficient at any count.
//!
//! Bounds by projection with an active set (a parameter on a bound that the descent would
//! push out is held), Marquardt's diagonal damping. A fit is converged when the remaining
//! Newton step is below 1e-3 standard errors in every free parameter, or a step lowers the
//! objective by less than `tol` relative; it failed when the iterations run out, no step
//! lowers the objective away from a stationary point, the numbers stop being finite, or a
//! lifetime ends on its bound.

// `!(x > 0.0)` is meant: it is also true for NaN.
#![allow(clippy::neg_cmp_op_on_partial_ord)]

use crate::model::fit::{Estimator, FitStatus, term};
use crate::model::fit_model::{MAX_PARAMS, ModelSetup, Shift, Work};
use gpu_kernels::linalg::solve_spd;

/// Result of one pixel's fit.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PixelFit {
    pub theta: [f64; MAX_PARAMS],
    pub objective: f64,
    pub iterations: u32,
    pub status: FitStatus,
}

/// Curvature matrix (upper triangle used) and gradient.
type Normal = ([[f64; MAX_PARAMS]; MAX_PARAMS], [f64; MAX_PARAMS]);

/// Objective at `theta`, and with `normal` the curvature and gradient.
pub(crate) fn accumulate(
    su: &ModelSetup,
    work: &mut Work,
    theta: &[f64],
    counts: &[f64],
    est: Estimator,
    normal: Option<&mut Normal>,
) -> f64 {
    work.evaluate(su, theta);
    let np = su.np();
    let mut obj = 0.0;
    match normal {
        None => {
            for (j, &n) in counts.iter().enumerate() {
                let y = work.bin(su, theta, j, None);
                obj += term(est, n, y).0;
            }
        }
        Some((h, g)) => {
            for row in h.iter_mut() {
                *row = [0.0; MAX_PARAMS];
            }
            *g = [0.0; MAX_PARAMS];
            let mut d = [0.0; MAX_PARAMS];
            for (j, &n) in counts.iter().enumerate() {
                let y = work.bin(su, theta, j, Some(&mut d[..np]));
                let (o, gw, hw) = term(est, n, y);
                obj += o;
                for u in 0..np {
                    g[u] += gw * d[u];
                    let du = hw * d[u];
                    for v in u..np {
                        h[u][v] += du * d[v];
                    }
                }
            }
        }
    }
    obj
}

/// Largest remaining Newton step over the free parameters in units of their standard
/// error: `|g_u| / sqrt(H_uu)` (objectives are chi^2-scaled, H = 2 J^T W J, so one unit of
/// objective is one standard error). A fit is stationary when this is below 1e-3.
pub(crate) fn stationarity(su: &ModelSetup, theta: &[f64], n: &Normal) -> f64 {
    let (h, g) = n;
    let mut worst: f64 = 0.0;
    for u in 0..su.np() {
        if !su.blocked(theta, g, u) && h[u][u] > 0.0 {
            worst = worst.max(g[u].abs() / h[u][u].sqrt());
        }
    }
    worst
}

/// Remaining step (in standard errors) below which a fit is at its minimum.
pub(crate) const STATIONARY: f64 = 1e-3;

/// Fit one pixel's counts (fit range) from `theta0`.
pub(crate) fn fit_pixel(
    su: &ModelSetup,
    work: &mut Work,
    counts: &[f64],
    est: Estimator,
    theta0: &[f64],
    max_iterations: u32,
    tol: f64,
) -> PixelFit {
    let np = su.np();
    let mut theta = [0.0; MAX_PARAMS];
    theta[..np].copy_from_slice(&theta0[..np]);
    su.project(&mut theta);
    let mut normal: Normal = ([[0.0; MAX_PARAMS]; MAX_PARAMS], [0.0; MAX_PARAMS]);
    let mut trial_normal: Normal = normal;
    let mut obj = accumulate(su, work, &theta[..np], counts, est, Some(&mut normal));
    let mut lambda = 1e-3;
    let mut status = FitStatus::Failed;
    let mut iterations = 0;
    while iterations < max_iterations {
        iterations += 1;
        if !obj.is_finite() {
            break;
        }
        // At the minimum to well within the statistical error (also ends exact fits,
        // whose objective cannot fall further).
        if stationarity(su, &theta, &normal) <= STATIONARY {
            status = FitStatus::Converged;
            break;
        }
        let (h, g) = &normal;
        let mut m = *h;
        let mut rhs = [0.0; MAX_PARAMS];
        for u in 0..np {
            if su.blocked(&theta, g, u) {
                for v in 0..np {
                    m[u][v] = 0.0;
                    m[v][u] = 0.0;
                }
                m[u][u] = 1.0;
            } else {
                let d = h[u][u];
                m[u][u] = d + lambda * d.max(1e-12 * (1.0 + d));
                rhs[u] = -g[u];
            }
        }
        let mut delta = [0.0; MAX_PARAMS];
        if !solve_spd(&m, &rhs, &mut delta, np) {
            lambda *= 10.0;
            if lambda > 1e16 {
                break;
            }
            continue;
        }
        let mut trial = theta;
        for u in 0..np {
            trial[u] += delta[u];
        }
        su.project(&mut trial);
        let t_obj = accumulate(su, work, &trial[..np], counts, est, Some(&mut trial_normal));
        if t_obj.is_finite() && t_obj < obj {
            let small = obj - t_obj <= tol * t_obj.abs().max(1e-300);
            theta = trial;
            obj = t_obj;
            std::mem::swap(&mut normal, &mut trial_normal);
            lambda = (lambda * 0.1).max(1e-12);
            if small {
                status = FitStatus::Converged;
                break;
            }
        } else {
            lambda *= 10.0;
            if lambda > 1e16 {
                // No step lowers the objective: a minimum only if the gradient vanishes.
                if stationarity(su, &theta, &normal) <= STATIONARY {
                    status = FitStatus::Converged;
                }
                break;
            }
        }
    }
    let finite = obj.is_finite() && theta[..np].iter().all(|v| v.is_finite());
    if !finite || su.at_lifetime_bound(&theta) {
        status = FitStatus::Failed;
    }
    PixelFit {
        theta,
        objective: obj,
        iterations,
        status,
    }
}

/// Starting point: lifetimes from the window-corrected centre of mass of the decay after
/// its peak (spread by 0.4x / 1.5x for two components, 0.25x / 1x / 3x for three, or the
/// caller's), the offset from the quietest bins, amplitudes by weighted linear least squares.
pub(crate) fn initial_guess(
    su: &ModelSetup,
    work: &mut Work,
    counts: &[f64],
    lifetimes: Option<&[f64]>,
) -> [f64; MAX_PARAMS] {
    let m = counts.len();
    let k = su.k;
    let mut theta = [0.0; MAX_PARAMS];
    // Offset: half the lowest 5-bin mean (a background is never above the quietest bins).
    let z0 = match su.offset_index() {
        Some(_) => {
            let w = 5.min(m);
            let low = (0..=m - w)
                .map(|i| counts[i..i + w].iter().sum::<f64>() / w as f64)
                .fold(f64::INFINITY, f64::min);
            0.5 * low.max(0.0)
        }
        None => su.offset_of(&theta),
    };
    if let Some(i) = su.offset_index() {
        theta[i] = z0;
    }
    if let Some(i) = su.shift_index() {
        // The options' start (reading it back from `theta` would give 0).
        theta[i] = match su.shift {
            Shift::Fixed(s) | Shift::Fitted(s) => s,
        };
    }
    // Mono-exponential lifetime from the tail after the peak (all of it without an IRF).
    let start = if su.irf.is_some() {
        (0..m)
            .max_by(|&a, &b| counts[a].total_cmp(&counts[b]))
            .unwrap_or(0)
    } else {
        0
    };
    let tail = &counts[start..];
    let (mut n, mut m1) = (0.0, 0.0);
    for (j, &c) in tail.iter().enumerate() {
        let v = c - z0;
        n += v;
        m1 += j as f64 * v;
    }
    let mut tau0 = if n > 0.0 && tail.len() >= 4 {
        su.h / crate::model::lifetimes::cmm_rate(m1 / n, tail.len() as f64)
    } else {
        f64::NAN
    };
    if !(tau0.is_finite() && tau0 > 0.0) {
        tau0 = 0.2 * m as f64 * su.h;
    }
    let spread: &[f64] = match k {
        1 => &[1.0],
        2 => &[0.4, 1.5],
        _ => &[0.25, 1.0, 3.0],
    };
    for i in 0..k {
        let tau = lifetimes
            .and_then(|l| l.get(i).copied())
            .unwrap_or(tau0 * spread[i.min(spread.len() - 1)]);
        theta[k + i] = tau.clamp(su.tau_min, su.tau_max).ln();
    }
    // Amplitudes: weighted linear least squares for the lifetimes above, clamped >= 0.
    for i in 0..k {
        theta[i] = 1.0;
    }
    work.evaluate(su, &theta);
    let mut a = [[0.0f64; MAX_PARAMS]; MAX_PARAMS];
    let mut b = [0.0f64; MAX_PARAMS];
    let mut d = [0.0f64; MAX_PARAMS];
    let mut per_unit = [0.0f64; MAX_PARAMS];
    for (j, &c) in counts.iter().enumerate() {
        work.bin(su, &theta, j, Some(&mut d[..su.np()]));
        let w = 1.0 / c.max(1.0);
        for u in 0..k {
            per_unit[u] += d[u];
            b[u] += w * d[u] * (c - z0);
            for v in u..k {
                a[u][v] += w * d[u] * d[v];
            }
        }
    }
    let mut amp = [0.0f64; MAX_PARAMS];
    let signal = (counts.iter().sum::<f64>() - m as f64 * z0).max(1.0);
    let ok = solve_spd(&a, &b, &mut amp, k);
    for i in 0..k {
        // A vanishing or negative amplitude would pin the component at 0: start it at a
        // tenth of the light instead.
        theta[i] = if ok && amp[i] > 0.0 {
            amp[i]
        } else {
            0.1 * signal / per_unit[i].max(1e-300)
        };
    }
    theta
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::fit_model::Offset;

    /// A fitted IRF shift starts from the options' value (the GPU kernels do too).
    #[test]
    fn a_fitted_shift_starts_from_the_given_shift() {
        let irf: Vec<f64> = (0..64)
            .map(|i| (-0.5 * ((f64::from(i) - 12.0) / 2.0).powi(2)).exp())
            .collect();
        let su = ModelSetup::new(
            1,
            0,
            64,
            64,
            0.1,
            6.4,
            Some(&irf),
            Offset::Fixed(0.0),
            Shift::Fitted(3.5),
        )
        .unwrap();
        let counts: Vec<f64> = (0..64)
            .map(|j| 100.0 * (-f64::from(j) / 20.0).exp())
            .collect();
        let theta = initial_guess(&su, &mut Work::default(), &counts, None);
        assert_eq!(theta[su.shift_index().unwrap()], 3.5);
    }
}
