//! Multi-exposure speckle imaging (MESI): per-pixel fits of K(T) over several exposures.
//!
//! # Model
//! Parthasarathy et al., Opt. Express 16, 1975 (2008), Eq. 6, with `x = T / tau_c`:
//!
//! `K^2(T) = beta rho^2 L(x) + 4 beta rho (1 - rho) M(x) + beta (1 - rho)^2 + v_noise`,
//! `L(x) = (e^{-2x} - 1 + 2x) / (2 x^2)`, `M(x) = (e^{-x} - 1 + x) / x^2`,
//!
//! where `rho` is the fraction of light scattered by moving particles, `beta` the coherence
//! factor and `v_noise` the exposure-independent variance (noise, non-ergodic terms).
//! `L` is the Lorentzian model of [`crate::flow`] and `M(x) = L(x / 2) / 2`, so both come
//! from [`crate::model::flow::lorentzian_terms`] (series near x = 0, no cancellation).
//!
//! # Fit
//! [`fit_mesi`] is a Levenberg-Marquardt fit over a fixed-size state (3 or 4 parameters,
//! stack arrays, no allocation) so it ports to a GPU kernel one pixel per thread:
//! - parameters `ln tau_c`, `rho`, `v_noise` and, when free, `beta`; bounds are kept by
//!   projection (clamping) of every trial point: `rho` in [0, 1], `v_noise >= 0`,
//!   `beta` in [1e-6, 10], `tau_c` within `[T_min / 1000, 1000 T_max]`;
//! - residuals relative to the data, `r_i = (K^2_model(T_i) - K_i^2) / K_i^2`: least squares
//!   for noise proportional to K^2 (as speckle statistics give), so short and long exposures
//!   weigh alike;
//! - analytic Jacobian; Marquardt damping `lambda diag(J^T J)`; 4x4 Cholesky solves;
//! - start from a data-driven guess (the exposure where K^2 falls half-way);
//! - stops on a relative cost change or step below `tolerance`, or when the gradient is
//!   orthogonal to the residuals (MINPACK's gtol test), else after `max_iterations`.
//!
//! A fit that cannot reduce the cost further while the gradient is not small, that leaves
//! non-finite values, or whose tau_c ends on its bound (not resolvable with these
//! exposures) is [`FitStatus::Failed`], never `Converged`.
//!
//! # What the data can resolve
//! Simulations (tests below; K^2 with Gaussian relative noise) show:
//! - beta known (calibrated, e.g. [`crate::cpu::calibrate::calibrate_beta`]), six log-spaced exposures
//!   0.01..80 ms: every fit recovers tau_c within 10% for tau_c from 0.01 to 10 ms at 0.5%
//!   K^2 noise (ROI-level data), and stays unbiased (median within 3%) at 1%;
//! - the shortest exposure must reach down to about 2-3 tau_c: with 0.05 ms (the span of
//!   Parthasarathy et al.) tau_c = 0.01 ms leaves only the `K^2 ~ 1/T` tail, where rho and
//!   v_noise trade off, and tau_c is biased by up to ~27%; likewise tau_c near T_max / 8
//!   loses the long-exposure plateau and its spread grows;
//! - beta free: beta and v_noise are separated only by the curve's shape, so with six
//!   exposures and 1% noise tau_c scatters by ~20%; exact data are still recovered. Prefer a
//!   calibrated beta.
//!
//! Speed: about 15 iterations per fit with beta known (6 exposures); beta free costs more
//! (measured figures: docs/benchmarks.md).

// ndarray views are cheap handles, taken by value as ndarray's own APIs do.
#![allow(clippy::needless_pass_by_value)]

use ndarray::{Array2, ArrayView3};
use rayon::prelude::*;

use gpu_kernels::linalg::solve_spd;

use crate::error::Result;
use crate::model::mesi::{
    BetaMode, FitStatus, MAX_EXPOSURES, MesiFit, MesiMaps, MesiOptions, MesiParams, check_inputs,
    lorentzian_pair,
};
use crate::model::types::Map;

const NP: usize = 4;
/// Relative residuals this small are rounding noise: the data are fitted exactly.
const ROUNDOFF_RESIDUAL: f64 = 1e-13;
const BETA_MIN: f64 = 1e-6;
const BETA_MAX: f64 = 10.0;

/// Normal equations being accumulated: `J^T J` (upper triangle), `J^T r`, column norms^2.
type Normal<'a> = (
    &'a mut [[f64; NP]; NP],
    &'a mut [f64; NP],
    &'a mut [f64; NP],
);

/// Per-pixel data in fixed-size arrays.
struct Data {
    t: [f64; MAX_EXPOSURES],
    d: [f64; MAX_EXPOSURES],
    n: usize,
    np: usize,
    beta: f64, // fixed value (unused when free)
    ln_tau_lo: f64,
    ln_tau_hi: f64,
}

impl Data {
    fn unpack(&self, p: &[f64; NP]) -> MesiParams {
        MesiParams {
            tau_c: p[0].exp(),
            rho: p[1],
            v_noise: p[2],
            beta: if self.np == 4 { p[3] } else { self.beta },
        }
    }

    fn project(&self, p: &mut [f64; NP]) {
        p[0] = p[0].clamp(self.ln_tau_lo, self.ln_tau_hi);
        p[1] = p[1].clamp(0.0, 1.0);
        p[2] = p[2].max(0.0);
        if self.np == 4 {
            p[3] = p[3].clamp(BETA_MIN, BETA_MAX);
        }
    }

    /// Cost `sum r_i^2`; with `jac`, also `J^T J` (upper triangle) and `J^T r`, and the
    /// squared column norms of J (for the gradient test).
    fn eval(&self, p: &[f64; NP], jac: Option<Normal<'_>>) -> f64 {
        let q = self.unpack(p);
        let (rho, beta) = (q.rho, q.beta);
        let (a2, a1, a0) = (
            rho * rho,
            4.0 * rho * (1.0 - rho),
            (1.0 - rho) * (1.0 - rho),
        );
        let mut cost = 0.0;
        let mut jac = jac;
        if let Some((a, g, cn)) = jac.as_mut() {
            **a = [[0.0; NP]; NP];
            **g = [0.0; NP];
            **cn = [0.0; NP];
        }
        for i in 0..self.n {
            let x = self.t[i] / q.tau_c;
            let (lt, mt) = lorentzian_pair(x);
            let (l, m) = (lt.f, 0.5 * mt.f);
            let core = a2 * l + a1 * m + a0;
            let inv_d = 1.0 / self.d[i];
            let r = (beta * core + q.v_noise - self.d[i]) * inv_d;
            cost += r * r;
            if let Some((a, g, cn)) = jac.as_mut() {
                // d m / d ln tau = -x dm/dx; x dM/dx = s_L(x/2) / 2.
                let j = [
                    -beta * (a2 * lt.s + 2.0 * rho * (1.0 - rho) * mt.s) * inv_d,
                    beta * (2.0 * rho * l + 4.0 * (1.0 - 2.0 * rho) * m - 2.0 * (1.0 - rho))
                        * inv_d,
                    inv_d,
                    core * inv_d,
                ];
                for u in 0..self.np {
                    g[u] += j[u] * r;
                    cn[u] += j[u] * j[u];
                    for w in u..self.np {
                        a[u][w] += j[u] * j[w];
                    }
                }
            }
        }
        cost
    }
}

/// Whether parameter `u` sits on a bound that the descent direction `-g` points out of:
/// such parameters are held fixed for the step (active set), the rest take the LM step.
fn blocked(data: &Data, p: &[f64; NP], g: &[f64; NP], u: usize) -> bool {
    match u {
        0 => (p[0] <= data.ln_tau_lo && g[0] > 0.0) || (p[0] >= data.ln_tau_hi && g[0] < 0.0),
        1 => (p[1] <= 0.0 && g[1] > 0.0) || (p[1] >= 1.0 && g[1] < 0.0),
        2 => p[2] <= 0.0 && g[2] > 0.0,
        _ => (p[3] <= BETA_MIN && g[3] > 0.0) || (p[3] >= BETA_MAX && g[3] < 0.0),
    }
}

/// Largest cosine between the residual vector and a column of J, over parameters not
/// blocked by a bound (MINPACK's scale-free gtol measure; 0 at a stationary point).
fn gradient_cosine(data: &Data, p: &[f64; NP], g: &[f64; NP], cn: &[f64; NP], cost: f64) -> f64 {
    if cost == 0.0 {
        return 0.0;
    }
    let mut worst: f64 = 0.0;
    for u in 0..data.np {
        if !blocked(data, p, g, u) && cn[u] > 0.0 {
            worst = worst.max(g[u].abs() / (cn[u] * cost).sqrt());
        }
    }
    worst
}

fn invalid(n_exposures: usize) -> MesiFit {
    let nan = f64::NAN;
    let _ = n_exposures;
    MesiFit {
        params: MesiParams {
            tau_c: nan,
            rho: nan,
            v_noise: nan,
            beta: nan,
        },
        status: FitStatus::InvalidInput,
        iterations: 0,
        rss: nan,
    }
}

/// Data-driven start: with K^2 running from `hi` (short T) to `lo` (long T), tau_c is taken
/// where K^2 crosses half-way (in log T, where the model's dynamic part has fallen to about
/// half at x ~ 1.5), rho from the long-exposure plateau, v_noise = 0.
fn initial_guess(data: &Data) -> [f64; NP] {
    let (t, d, n) = (&data.t, &data.d, data.n);
    let (mut i_min, mut i_max) = (0, 0);
    for i in 0..n {
        if t[i] < t[i_min] {
            i_min = i;
        }
        if t[i] > t[i_max] {
            i_max = i;
        }
    }
    let beta = if data.np == 4 {
        d[i_min].max(d[i_max]).clamp(BETA_MIN, BETA_MAX)
    } else {
        data.beta
    };
    let lo = d[i_max].min(beta);
    let hi = if data.np == 4 { d[i_min] } else { beta };
    let rho = (1.0 - (lo / beta).sqrt()).clamp(0.05, 0.95);
    let half = 0.5 * (hi + lo);
    // Crossing: the largest exposure still above half-way and the smallest below it.
    let (mut t_above, mut t_below) = (0.0f64, f64::INFINITY);
    for i in 0..n {
        if d[i] >= half {
            t_above = t_above.max(t[i]);
        } else {
            t_below = t_below.min(t[i]);
        }
    }
    let t_half = if t_above == 0.0 {
        // Every exposure is in the tail: K^2 - plateau ~ beta (4 rho - 3 rho^2) tau / T.
        let amp = beta * (4.0 * rho - 3.0 * rho * rho);
        (t[i_min] * (d[i_min] - lo).max(1e-12) / amp).max(t[i_min] * 1e-3) * 1.5
    } else if t_below.is_infinite() {
        t[i_max] * 3.0
    } else {
        (t_above * t_below).sqrt()
    };
    let mut p = [(t_half / 1.5).ln(), rho, 0.0, beta];
    data.project(&mut p);
    p
}

/// Fit the MESI model to contrasts `k[i]` measured at `exposures_s[i]` (seconds): a pure
/// function over fixed-size state (no allocation), GPU-portable.
///
/// ```
/// use speckle_core::{FitStatus, MesiOptions, MesiParams, cpu::fit_mesi, sim::simulate_mesi};
/// let truth = MesiParams { tau_c: 2e-4, rho: 0.8, v_noise: 0.001, beta: 0.45 };
/// let t = [5e-5, 2.5e-4, 1e-3, 5e-3, 2e-2, 8e-2];
/// let k = simulate_mesi(&truth, &t, 0.0, 1);
/// let fit = fit_mesi(&t, &k, &MesiOptions::fixed_beta(0.45));
/// assert_eq!(fit.status, FitStatus::Converged);
/// assert!((fit.params.tau_c / truth.tau_c - 1.0).abs() < 1e-6);
/// ```
pub fn fit_mesi(exposures_s: &[f64], k: &[f64], opts: &MesiOptions) -> MesiFit {
    let n = exposures_s.len();
    let np = opts.n_params();
    if n != k.len() || n < np || n > MAX_EXPOSURES {
        return invalid(n);
    }
    let beta_fixed = match opts.beta {
        BetaMode::Fixed(b) if !(b.is_finite() && b > 0.0) => return invalid(n),
        BetaMode::Fixed(b) => b,
        BetaMode::Free => f64::NAN,
    };
    let mut data = Data {
        t: [0.0; MAX_EXPOSURES],
        d: [0.0; MAX_EXPOSURES],
        n,
        np,
        beta: beta_fixed,
        ln_tau_lo: 0.0,
        ln_tau_hi: 0.0,
    };
    let (mut t_min, mut t_max) = (f64::INFINITY, 0.0f64);
    for i in 0..n {
        let (t, kk) = (exposures_s[i], k[i]);
        if !(t.is_finite() && t > 0.0 && kk.is_finite() && kk > 0.0) {
            return invalid(n);
        }
        data.t[i] = t;
        data.d[i] = kk * kk;
        t_min = t_min.min(t);
        t_max = t_max.max(t);
    }
    data.ln_tau_lo = (t_min * 1e-3).ln();
    data.ln_tau_hi = (t_max * 1e3).ln();

    let tol = opts.tolerance;
    let mut p = initial_guess(&data);
    let (mut a, mut g, mut cn) = ([[0.0; NP]; NP], [0.0; NP], [0.0; NP]);
    let mut cost = data.eval(&p, Some((&mut a, &mut g, &mut cn)));
    let mut lambda = 1e-3;
    let mut status = FitStatus::MaxIterations;
    let mut iterations = 0;
    while iterations < opts.max_iterations {
        iterations += 1;
        if !cost.is_finite() {
            status = FitStatus::Failed;
            break;
        }
        // Residuals at rounding level (exact data), or gradient orthogonal to them.
        if cost <= n as f64 * ROUNDOFF_RESIDUAL * ROUNDOFF_RESIDUAL
            || gradient_cosine(&data, &p, &g, &cn, cost) <= tol
        {
            status = FitStatus::Converged;
            break;
        }
        // Damped normal equations (J^T J + lambda diag(J^T J)) delta = -J^T r.
        // Parameters blocked by a bound are held: their rows and columns become identity.
        let mut m = a;
        let mut rhs = [0.0; NP];
        for u in 0..np {
            if blocked(&data, &p, &g, u) {
                for w in 0..np {
                    m[u][w] = 0.0;
                    m[w][u] = 0.0;
                }
                m[u][u] = 1.0;
            } else {
                m[u][u] += lambda * a[u][u].max(1e-12 * (1.0 + a[u][u]));
                rhs[u] = -g[u];
            }
        }
        let mut delta = [0.0; NP];
        if !solve_spd(&m, &rhs, &mut delta, np) {
            lambda *= 10.0;
            if lambda > 1e16 {
                status = FitStatus::Failed;
                break;
            }
            continue;
        }
        let mut trial = p;
        for u in 0..np {
            trial[u] += delta[u];
        }
        data.project(&mut trial);
        let trial_cost = data.eval(&trial, None);
        if trial_cost.is_finite() && trial_cost < cost {
            let step_small = (0..np).all(|u| (trial[u] - p[u]).abs() <= tol * (p[u].abs() + tol));
            let cost_small = cost - trial_cost <= tol * trial_cost;
            p = trial;
            cost = data.eval(&p, Some((&mut a, &mut g, &mut cn)));
            lambda = (lambda * 0.1).max(1e-12);
            if step_small || cost_small {
                status = FitStatus::Converged;
                break;
            }
        } else {
            lambda *= 10.0;
            if lambda > 1e16 {
                // No descent left: a minimum only if the gradient is (numerically) zero.
                status = if cost <= n as f64 * ROUNDOFF_RESIDUAL * ROUNDOFF_RESIDUAL
                    || gradient_cosine(&data, &p, &g, &cn, cost) <= 1e-6
                {
                    FitStatus::Converged
                } else {
                    FitStatus::Failed
                };
                break;
            }
        }
    }
    let params = data.unpack(&p);
    let finite = params.tau_c.is_finite()
        && params.rho.is_finite()
        && params.v_noise.is_finite()
        && params.beta.is_finite();
    let at_bound = p[0] <= data.ln_tau_lo * (1.0 - 1e-12) + 1e-300
        || p[0] >= data.ln_tau_hi - 1e-12 * data.ln_tau_hi.abs();
    if !finite || !cost.is_finite() || (status == FitStatus::Converged && at_bound) {
        status = FitStatus::Failed;
    }
    MesiFit {
        params,
        status,
        iterations,
        rss: cost,
    }
}

fn row_chunks(a: &mut Map, w: usize) -> rayon::slice::ChunksMut<'_, f32> {
    a.as_slice_mut().expect("standard layout").par_chunks_mut(w)
}

/// Fit every pixel of a multi-exposure K stack (exposure, row, column), rows in parallel.
pub fn fit_mesi_map(
    k: ArrayView3<f32>,
    exposures_s: &[f64],
    opts: &MesiOptions,
) -> Result<MesiMaps> {
    let (ne, h, w) = k.dim();
    check_inputs(ne, exposures_s, opts)?;
    let mut maps = MesiMaps {
        tau_c: Array2::zeros((h, w)),
        rho: Array2::zeros((h, w)),
        v_noise: Array2::zeros((h, w)),
        beta: Array2::zeros((h, w)),
        rss: Array2::zeros((h, w)),
        status: Array2::zeros((h, w)),
    };
    if h == 0 || w == 0 {
        return Ok(maps);
    }
    let (tau, rho, v, beta, rss) = (
        &mut maps.tau_c,
        &mut maps.rho,
        &mut maps.v_noise,
        &mut maps.beta,
        &mut maps.rss,
    );
    row_chunks(tau, w)
        .zip(row_chunks(rho, w))
        .zip(row_chunks(v, w))
        .zip(row_chunks(beta, w))
        .zip(row_chunks(rss, w))
        .zip(
            maps.status
                .as_slice_mut()
                .expect("standard layout")
                .par_chunks_mut(w),
        )
        .enumerate()
        .for_each(|(y, (((((tau, rho), v), beta), rss), st))| {
            let mut kv = [0f64; MAX_EXPOSURES];
            for x in 0..w {
                for e in 0..ne {
                    kv[e] = f64::from(k[[e, y, x]]);
                }
                let f = fit_mesi(exposures_s, &kv[..ne], opts);
                tau[x] = f.params.tau_c as f32;
                rho[x] = f.params.rho as f32;
                v[x] = f.params.v_noise as f32;
                beta[x] = f.params.beta as f32;
                rss[x] = f.rss as f32;
                st[x] = f.status as u8;
            }
        });
    maps.apply_residual_limit(ne, opts);
    Ok(maps)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;
    use crate::model::flow::lorentzian_terms;
    use crate::model::mesi::mesi_k2;
    use crate::sim::mesi::simulate_mesi;

    /// Every fit's tau_c within 10% of the truth ...
    const TOL_TAU_NOISY: f64 = 0.10;
    /// ... at 0.5% relative noise on K^2: ROI-level MESI data (K^2 averaged over ~1e5
    /// independent speckles, e.g. a 100 x 100 px region over 10-30 frames).
    const NOISE: f64 = 0.005;
    /// At 1% noise single fits at the ends of the range scatter beyond 10% (the spread
    /// grows where the exposures do not reach the plateaus), but the median stays within 3%.
    const NOISE_1PC: f64 = 0.01;
    const TOL_TAU_BIAS: f64 = 0.03;

    /// Six log-spaced exposures from 0.01 to 80 ms. The shortest must be near the shortest
    /// tau_c: with 0.05 ms, tau_c = 0.01 ms leaves only the K^2 ~ 1/T tail, where rho and
    /// v_noise trade off and tau_c is biased by up to ~27% (see the module docs).
    fn exposures() -> [f64; 6] {
        std::array::from_fn(|i| 1e-5 * (8e-2f64 / 1e-5).powf(i as f64 / 5.0))
    }

    fn taus() -> Vec<f64> {
        (0..=12)
            .map(|i| 1e-5 * 10f64.powf(i as f64 / 4.0))
            .collect() // 0.01 .. 10 ms
    }

    #[test]
    fn paired_terms_match_single_terms() {
        for x in [1e-4, 0.3, 0.4999, 0.5, 0.7, 3.0, 50.0, 1e5] {
            let (a, b) = lorentzian_pair(x);
            let (ra, rb) = (lorentzian_terms(x), lorentzian_terms(0.5 * x));
            for (p, q) in [(a, ra), (b, rb)] {
                assert!(
                    (p.f - q.f).abs() <= 4.0 * f64::EPSILON * q.f,
                    "x={x}: {p:?} {q:?}"
                );
                assert!(
                    (p.s - q.s).abs() <= 1e-14 * q.s.abs().max(1e-3),
                    "x={x}: {p:?} {q:?}"
                );
            }
        }
    }

    #[test]
    fn jacobian_matches_finite_differences() {
        let t = exposures();
        let truth = MesiParams {
            tau_c: 7e-4,
            rho: 0.7,
            v_noise: 0.003,
            beta: 0.4,
        };
        let k = simulate_mesi(&truth, &t, 0.02, 3);
        let mut data = Data {
            t: [0.0; MAX_EXPOSURES],
            d: [0.0; MAX_EXPOSURES],
            n: 6,
            np: 4,
            beta: f64::NAN,
            ln_tau_lo: -30.0,
            ln_tau_hi: 10.0,
        };
        for i in 0..6 {
            data.t[i] = t[i];
            data.d[i] = k[i] * k[i];
        }
        let p = [(5e-4f64).ln(), 0.6, 0.002, 0.45];
        let (mut a, mut g, mut cn) = ([[0.0; NP]; NP], [0.0; NP], [0.0; NP]);
        let c0 = data.eval(&p, Some((&mut a, &mut g, &mut cn)));
        for u in 0..4 {
            let h = 1e-6 * (1.0 + p[u].abs());
            let (mut pp, mut pm) = (p, p);
            pp[u] += h;
            pm[u] -= h;
            // d cost / dp = 2 J^T r.
            let fd = (data.eval(&pp, None) - data.eval(&pm, None)) / (2.0 * h);
            assert!(
                (fd - 2.0 * g[u]).abs() <= 1e-6 * fd.abs().max(1e-9),
                "param {u}: fd {fd} vs {}",
                2.0 * g[u]
            );
        }
        assert!(c0 > 0.0);
    }

    #[test]
    fn exact_data_is_recovered_to_high_precision() {
        let t = exposures();
        for &tau in &taus() {
            for rho in [0.6, 0.8, 0.95] {
                let truth = MesiParams {
                    tau_c: tau,
                    rho,
                    v_noise: 0.002,
                    beta: 0.5,
                };
                let k = simulate_mesi(&truth, &t, 0.0, 0);
                let f = fit_mesi(&t, &k, &MesiOptions::fixed_beta(0.5));
                assert_eq!(f.status, FitStatus::Converged, "tau {tau} rho {rho}: {f:?}");
                assert!(
                    (f.params.tau_c / tau - 1.0).abs() < 1e-6,
                    "tau {tau} rho {rho}: {f:?}"
                );
                assert!(
                    (f.params.rho - rho).abs() < 1e-6 && (f.params.v_noise - 0.002).abs() < 1e-7,
                    "{f:?}"
                );
                // Free beta (4 parameters): exact data pin it down too, away from the
                // tail-only end where convergence along the rho / v_noise valley is slow.
                if tau >= 3e-5 {
                    let f = fit_mesi(&t, &k, &MesiOptions::default());
                    assert_eq!(
                        f.status,
                        FitStatus::Converged,
                        "free beta, tau {tau} rho {rho}: {f:?}"
                    );
                    assert!(
                        (f.params.tau_c / tau - 1.0).abs() < 1e-6,
                        "free beta, tau {tau}: {f:?}"
                    );
                    assert!((f.params.beta - 0.5).abs() < 1e-6, "free beta: {f:?}");
                }
            }
        }
    }

    #[test]
    fn tau_c_recovered_within_10_percent_with_realistic_noise() {
        // 13 tau_c from 0.01 to 10 ms; per tau_c 120 noisy curves (rho 0.6, 0.8, 0.95;
        // 40 seeds); beta known (calibrated), v_noise = 0.002 fitted.
        let t = exposures();
        for &tau in &taus() {
            let mut worst = (0.0f64, 0.0, 0);
            for rho in [0.6, 0.8, 0.95] {
                for seed in 0..40 {
                    let truth = MesiParams {
                        tau_c: tau,
                        rho,
                        v_noise: 0.002,
                        beta: 0.5,
                    };
                    let k = simulate_mesi(&truth, &t, NOISE, seed);
                    let f = fit_mesi(&t, &k, &MesiOptions::fixed_beta(0.5));
                    assert_eq!(
                        f.status,
                        FitStatus::Converged,
                        "tau {tau} rho {rho} seed {seed}: {f:?}"
                    );
                    let e = (f.params.tau_c / tau - 1.0).abs();
                    if e > worst.0 {
                        worst = (e, rho, seed);
                    }
                }
            }
            assert!(
                worst.0 <= TOL_TAU_NOISY,
                "tau {tau}: error {} (rho {}, seed {})",
                worst.0,
                worst.1,
                worst.2
            );
        }
    }

    #[test]
    fn tau_c_is_unbiased_at_1_percent_noise() {
        let t = exposures();
        for &tau in &taus() {
            let mut signed = Vec::new();
            for rho in [0.6, 0.8, 0.95] {
                for seed in 100..140 {
                    let truth = MesiParams {
                        tau_c: tau,
                        rho,
                        v_noise: 0.002,
                        beta: 0.5,
                    };
                    let f = fit_mesi(
                        &t,
                        &simulate_mesi(&truth, &t, NOISE_1PC, seed),
                        &MesiOptions::fixed_beta(0.5),
                    );
                    assert_ne!(f.status, FitStatus::Failed, "tau {tau}: {f:?}");
                    signed.push(f.params.tau_c / tau - 1.0);
                }
            }
            signed.sort_by(f64::total_cmp);
            let median = signed[signed.len() / 2];
            assert!(
                median.abs() <= TOL_TAU_BIAS,
                "tau {tau}: median relative error {median}"
            );
        }
    }

    #[test]
    fn garbage_inputs_give_invalid_or_failed_never_converged() {
        let t = exposures();
        let good = simulate_mesi(
            &MesiParams {
                tau_c: 1e-3,
                rho: 0.8,
                v_noise: 0.0,
                beta: 0.5,
            },
            &t,
            0.0,
            0,
        );
        let opts = MesiOptions::fixed_beta(0.5);
        let mut nan = good.clone();
        nan[2] = f64::NAN;
        assert_eq!(fit_mesi(&t, &nan, &opts).status, FitStatus::InvalidInput);
        let mut zero = good.clone();
        zero[0] = 0.0;
        assert_eq!(fit_mesi(&t, &zero, &opts).status, FitStatus::InvalidInput);
        assert_eq!(
            fit_mesi(&t[..2], &good[..2], &opts).status,
            FitStatus::InvalidInput
        );
        assert_eq!(
            fit_mesi(&t[..3], &good[..3], &MesiOptions::default()).status,
            FitStatus::InvalidInput
        );
        assert_eq!(
            fit_mesi(&t, &good[..5], &opts).status,
            FitStatus::InvalidInput
        );
        assert_eq!(
            fit_mesi(&[-1e-3, 1e-3, 1e-2], &good[..3], &opts).status,
            FitStatus::InvalidInput
        );
        assert_eq!(
            fit_mesi(&t, &good, &MesiOptions::fixed_beta(f64::NAN)).status,
            FitStatus::InvalidInput
        );
        let f = fit_mesi(&t, &nan, &opts);
        assert!(f.params.tau_c.is_nan());
        // Flat data (no decorrelation visible): tau_c runs to its bound -> Failed.
        let flat = [0.7f64; 6];
        let f = fit_mesi(&t, &flat, &opts);
        assert_ne!(f.status, FitStatus::Converged, "{f:?}");
        // Too few iterations allowed: MaxIterations, not Converged.
        let k = simulate_mesi(
            &MesiParams {
                tau_c: 3e-4,
                rho: 0.6,
                v_noise: 0.01,
                beta: 0.5,
            },
            &t,
            0.01,
            1,
        );
        let f = fit_mesi(
            &t,
            &k,
            &MesiOptions {
                max_iterations: 1,
                ..MesiOptions::fixed_beta(0.5)
            },
        );
        assert_eq!(f.status, FitStatus::MaxIterations, "{f:?}");
    }

    #[test]
    fn map_fit_matches_pixel_fits_and_checks_inputs() {
        let t = exposures();
        let (h, w) = (3, 4);
        let mut k = ndarray::Array3::<f32>::zeros((6, h, w));
        for y in 0..h {
            for x in 0..w {
                let p = MesiParams {
                    tau_c: 1e-4 * (1 + y * w + x) as f64,
                    rho: 0.85,
                    v_noise: 0.001,
                    beta: 0.5,
                };
                for (e, v) in simulate_mesi(&p, &t, 0.01, (y * w + x) as u64)
                    .into_iter()
                    .enumerate()
                {
                    k[[e, y, x]] = v as f32;
                }
            }
        }
        k[[3, 2, 3]] = f32::NAN;
        let opts = MesiOptions::fixed_beta(0.5);
        let maps = fit_mesi_map(k.view(), &t, &opts).unwrap();
        for y in 0..h {
            for x in 0..w {
                let kv: Vec<f64> = (0..6).map(|e| f64::from(k[[e, y, x]])).collect();
                let f = fit_mesi(&t, &kv, &opts);
                assert_eq!(maps.status[[y, x]], f.status as u8);
                assert_eq!(
                    maps.tau_c[[y, x]].to_bits(),
                    (f.params.tau_c as f32).to_bits()
                );
            }
        }
        assert_eq!(maps.status[[2, 3]], FitStatus::InvalidInput as u8);
        assert!(fit_mesi_map(k.view(), &t[..5], &opts).is_err());
        assert!(fit_mesi_map(k.slice(ndarray::s![..2, .., ..]), &t[..2], &opts).is_err());
        let mut bad = t;
        bad[0] = 0.0;
        assert!(matches!(
            fit_mesi_map(k.view(), &bad, &opts),
            Err(Error::InvalidExposure { .. })
        ));
    }

    #[test]
    fn simulation_noise_has_the_stated_spread() {
        let p = MesiParams {
            tau_c: 1e-3,
            rho: 0.8,
            v_noise: 0.0,
            beta: 0.5,
        };
        let t = vec![1e-3; 20_000];
        let k = simulate_mesi(&p, &t, 0.05, 42);
        let k2_true = mesi_k2(&p, 1e-3);
        let rel: Vec<f64> = k.iter().map(|k| k * k / k2_true - 1.0).collect();
        let mean = rel.iter().sum::<f64>() / rel.len() as f64;
        let sd = (rel.iter().map(|r| (r - mean) * (r - mean)).sum::<f64>()
            / (rel.len() - 1) as f64)
            .sqrt();
        // Standard errors: mean 0.05/sqrt(2e4) = 3.5e-4, sd about 2.5e-4.
        assert!(mean.abs() < 1.5e-3, "mean {mean}");
        assert!((sd - 0.05).abs() < 1.5e-3, "sd {sd}");
    }
}
