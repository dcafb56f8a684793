//! Bounded Levenberg-Marquardt with the analytic Jacobian (`conv::normal`): Marquardt's
//! diagonal damping, projection onto the bounds, and an active set (parameters on a bound
//! whose gradient points out of the box, and fixed parameters, are held for the step), and
//! delay steps limited to one sampling interval.
//! `gpu_kernels::perfusion` implements the same sequence.

use super::conv::Normal;
use crate::model::{
    Bounds, DAMP_FLOOR, LAMBDA_MAX, LAMBDA_MIN, LAMBDA_START, LmSettings, MAX_PARAMS,
};
use gpu_kernels::linalg::solve_spd;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LmEnd {
    Converged,
    MaxIterations,
    Failed,
}

#[derive(Debug, Clone, Copy)]
pub(crate) struct LmOutcome {
    pub x: [f64; MAX_PARAMS],
    pub f: f64,
    pub iterations: u32,
    pub end: LmEnd,
}

fn blocked(b: &Bounds, x: &[f64; MAX_PARAMS], g: &[f64; MAX_PARAMS], u: usize) -> bool {
    !b.free[u] || (x[u] <= b.lo[u] && g[u] > 0.0) || (x[u] >= b.hi[u] && g[u] < 0.0)
}

/// Largest |cosine| between the residuals and a free, unblocked Jacobian column.
fn gradient_cosine(b: &Bounds, x: &[f64; MAX_PARAMS], nr: &Normal) -> f64 {
    let mut worst = 0.0;
    if nr.cost > 0.0 {
        for u in 0..b.np {
            let d = nr.jtj[u][u];
            if !blocked(b, x, &nr.jtr, u) && d > 0.0 {
                let c = nr.jtr[u].abs() / (d * nr.cost).sqrt();
                if c > worst {
                    worst = c;
                }
            }
        }
    }
    worst
}

/// No step reduces the cost any more: a minimum if the fit is at the data's rounding floor
/// or the gradient is about zero, else a failure.
fn stalled(cost: f64, cosine: f64, s: &LmSettings) -> LmEnd {
    if cost <= s.floor || cosine <= s.stall {
        LmEnd::Converged
    } else {
        LmEnd::Failed
    }
}

/// Minimise from `x0` (projected into the bounds); `normal` gives cost and normal equations,
/// `cost` the cost alone (trial points).
pub(crate) fn levenberg_marquardt(
    normal: &mut impl FnMut(&[f64; MAX_PARAMS]) -> Normal,
    cost: &mut impl FnMut(&[f64; MAX_PARAMS]) -> f64,
    x0: &[f64; MAX_PARAMS],
    b: &Bounds,
    s: &LmSettings,
) -> LmOutcome {
    let np = b.np;
    let mut x = *x0;
    b.project(&mut x);
    let mut nr = normal(&x);
    let mut lambda = LAMBDA_START;
    let mut end = LmEnd::MaxIterations;
    let mut iterations = 0;
    while iterations < s.max_iterations {
        iterations += 1;
        if !(nr.cost < f64::INFINITY) {
            end = LmEnd::Failed;
            break;
        }
        let cosine = gradient_cosine(b, &x, &nr);
        if nr.cost <= s.floor || cosine <= s.tol_grad {
            end = LmEnd::Converged;
            break;
        }
        let mut m = nr.jtj;
        let mut rhs = [0.0; MAX_PARAMS];
        for u in 0..np {
            if blocked(b, &x, &nr.jtr, u) {
                for w in 0..np {
                    m[u][w] = 0.0;
                    m[w][u] = 0.0;
                }
                m[u][u] = 1.0;
                rhs[u] = 0.0;
            } else {
                let d = nr.jtj[u][u];
                let scale = if d > DAMP_FLOOR { d } else { DAMP_FLOOR };
                m[u][u] = d + lambda * scale;
                rhs[u] = -nr.jtr[u];
            }
        }
        let mut delta = [0.0; MAX_PARAMS];
        if !solve_spd(&m, &rhs, &mut delta, np) {
            lambda *= 10.0;
            if lambda > LAMBDA_MAX {
                end = stalled(nr.cost, cosine, s);
                break;
            }
            continue;
        }
        let mut scale = 1.0;
        for u in 0..np {
            let a = delta[u].abs();
            if s.delay[u] && a > s.max_delay_step {
                let f = s.max_delay_step / a;
                if f < scale {
                    scale = f;
                }
            }
        }
        if scale < 1.0 {
            for d in &mut delta[..np] {
                *d *= scale;
            }
        }
        let mut trial = x;
        for u in 0..np {
            trial[u] = x[u] + delta[u];
        }
        b.project(&mut trial);
        let ft = cost(&trial);
        if ft < nr.cost {
            let mut step_small = true;
            for u in 0..np {
                if (trial[u] - x[u]).abs() > s.tol * (x[u].abs() + s.tol) {
                    step_small = false;
                }
            }
            let cost_small = nr.cost - ft <= s.tol * ft;
            x = trial;
            nr = normal(&x);
            lambda /= 10.0;
            if lambda < LAMBDA_MIN {
                lambda = LAMBDA_MIN;
            }
            if step_small || cost_small {
                end = LmEnd::Converged;
                break;
            }
        } else {
            lambda *= 10.0;
            if lambda > LAMBDA_MAX {
                end = stalled(nr.cost, cosine, s);
                break;
            }
        }
    }
    // The cap reached at a point that passes the stopping test is a converged fit.
    if end == LmEnd::MaxIterations
        && (nr.cost <= s.floor || gradient_cosine(b, &x, &nr) <= s.tol_grad)
    {
        end = LmEnd::Converged;
    }
    LmOutcome {
        x,
        f: nr.cost,
        iterations,
        end,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shared_cholesky_solves_spd_systems_and_rejects_indefinite_ones() {
        let mut m = [[0.0; MAX_PARAMS]; MAX_PARAMS];
        m[0] = [4.0, 1.0, 0.5, 0.0, 0.0];
        m[1] = [0.0, 3.0, 0.2, 0.0, 0.0];
        m[2] = [0.0, 0.0, 2.0, 0.0, 0.0];
        let rhs = [1.0, 2.0, 3.0, 0.0, 0.0];
        let mut x = [0.0; MAX_PARAMS];
        assert!(solve_spd(&m, &rhs, &mut x, 3));
        let full = |i: usize, j: usize| if i <= j { m[i][j] } else { m[j][i] };
        for i in 0..3 {
            let r: f64 = (0..3).map(|j| full(i, j) * x[j]).sum();
            assert!((r - rhs[i]).abs() < 1e-12);
        }
        m[2][2] = -1.0;
        assert!(!solve_spd(&m, &rhs, &mut x, 3));
    }
}
