//! Nelder-Mead exactly as Lagarias et al. (1998) and MATLAB's `fminsearch`: the same initial
//! simplex (5% steps, 0.00025 for zero components), coefficients (reflection 1, expansion 2,
//! contraction 1/2, shrink 1/2), branch order and stable sort of the vertices.
//!
//! Differences, all documented in docs/perfusion.md: the paper's stopping rule (vertex cost
//! spread <= `tol_fun` (and, if set, vertex spread <= `tol_x`) or `max_iterations`
//! simplex updates, with MATLAB's `10 eps` floor written as `10 eps |f|`); no cap on cost
//! evaluations; bounds as a barrier (a trial point outside the box costs +inf, so the
//! simplex stays non-degenerate and follows fminsearch exactly while inside), fixed
//! parameters held. `gpu_kernels::perfusion` implements the same sequence.

use crate::model::{Bounds, MAX_PARAMS, NmSettings};

#[derive(Debug, Clone, Copy)]
pub(crate) struct NmOutcome {
    pub x: [f64; MAX_PARAMS],
    pub f: f64,
    pub iterations: u32,
    pub converged: bool,
}

type Simplex = [[f64; MAX_PARAMS]; MAX_PARAMS + 1];

/// Stable insertion sort of the `n + 1` vertices by cost, written as the fixed network the
/// GPU unrolls (no early exit: once an element stops, the sorted prefix never swaps).
fn sort(v: &mut Simplex, f: &mut [f64; MAX_PARAMS + 1], n: usize) {
    for i in 1..=n {
        for j in (1..=i).rev() {
            if f[j] < f[j - 1] {
                f.swap(j, j - 1);
                v.swap(j, j - 1);
            }
        }
    }
}

/// Put `x` with cost `fx` in the place of the worst vertex `n` and keep the vertices sorted:
/// the result of [`sort`] when only the worst vertex changed (the others are sorted, so its
/// earlier passes swap nothing), found as a rank and one move per row (the GPU runs the
/// network's last pass: the same order).
fn insert(
    v: &mut Simplex,
    f: &mut [f64; MAX_PARAMS + 1],
    n: usize,
    x: &[f64; MAX_PARAMS],
    fx: f64,
) {
    let pos = f[..n].iter().filter(|&&fk| fk <= fx).count();
    for k in (pos + 1..=n).rev() {
        v[k] = v[k - 1];
        f[k] = f[k - 1];
    }
    v[pos] = *x;
    f[pos] = fx;
}

/// Whether the vertices lie within `tol_x` (floored at `10 eps |x|`) of the best one.
fn vertices_within(v: &Simplex, n: usize, b: &Bounds, s: &NmSettings) -> bool {
    let mut spread_x = 0.0;
    let mut top_x = 0.0;
    for p in 0..b.np {
        if b.free[p] {
            let a = v[0][p].abs();
            if a > top_x {
                top_x = a;
            }
            for vj in &v[1..=n] {
                let d = (vj[p] - v[0][p]).abs();
                if !(d <= spread_x) {
                    spread_x = d;
                }
            }
        }
    }
    let floor_x = s.ten_eps * top_x;
    let tol_x = if floor_x > s.tol_x { floor_x } else { s.tol_x };
    spread_x <= tol_x
}

/// Minimise `cost` from `x0` (projected into the bounds).
pub(crate) fn nelder_mead(
    inner: &mut impl FnMut(&[f64; MAX_PARAMS]) -> f64,
    x0: &[f64; MAX_PARAMS],
    b: &Bounds,
    s: &NmSettings,
) -> NmOutcome {
    let n = b.n_free;
    let np = b.np;
    let mut cost = |x: &[f64; MAX_PARAMS]| {
        if b.inside(x) { inner(x) } else { f64::INFINITY }
    };
    let mut v: Simplex = [[0.0; MAX_PARAMS]; MAX_PARAMS + 1];
    let mut f = [0.0; MAX_PARAMS + 1];
    v[0] = *x0;
    b.project(&mut v[0]);
    f[0] = cost(&v[0]);
    let usual = 21.0 / 20.0; // 1 + 5%, as fminsearch
    let zero_term = 1.0 / 4000.0;
    for j in 0..n {
        let mut y = v[0];
        let p = b.free_index[j];
        y[p] = if y[p] != 0.0 { usual * y[p] } else { zero_term };
        v[j + 1] = y;
        f[j + 1] = cost(&y);
    }
    sort(&mut v, &mut f, n);
    let inv_n = 1.0 / n as f64;
    let mut iterations = 0;
    let converged = loop {
        // Stopping rule; NaN spreads (all-infinite simplex) never count as converged. The
        // vertex spread is looked at only where the costs pass.
        let mut spread_f = 0.0;
        for j in 1..=n {
            let d = (f[j] - f[0]).abs();
            if !(d <= spread_f) {
                spread_f = d;
            }
        }
        let floor_f = s.ten_eps * f[0].abs();
        let tol_f = if floor_f > s.tol_fun {
            floor_f
        } else {
            s.tol_fun
        };
        if spread_f <= tol_f && vertices_within(&v, n, b, s) {
            break true;
        }
        if iterations >= s.max_iterations {
            break false;
        }
        iterations += 1;
        // Centroid of the best n vertices (times 1/n: a multiplication, as the GPU).
        let mut xbar = v[0];
        for p in 0..np {
            if b.free[p] {
                let mut sum = 0.0;
                for vj in &v[..n] {
                    sum += vj[p];
                }
                xbar[p] = sum * inv_n;
            }
        }
        let worst = v[n];
        let combine = |a: f64, c: f64| {
            let mut x = xbar;
            for p in 0..np {
                x[p] = a * xbar[p] - c * worst[p];
            }
            b.hold_fixed(&mut x);
            x
        };
        let xr = combine(2.0, 1.0);
        let fr = cost(&xr);
        // The point that replaces the worst vertex, if any (else: shrink).
        let accepted = if fr < f[0] {
            let xe = combine(3.0, 2.0);
            let fe = cost(&xe);
            Some(if fe < fr { (xe, fe) } else { (xr, fr) })
        } else if fr < f[n - 1] {
            Some((xr, fr))
        } else if fr < f[n] {
            let xc = combine(1.5, 0.5);
            let fc = cost(&xc);
            (fc <= fr).then_some((xc, fc))
        } else {
            let mut xcc = xbar;
            for p in 0..np {
                xcc[p] = 0.5 * xbar[p] + 0.5 * worst[p];
            }
            b.hold_fixed(&mut xcc);
            let fcc = cost(&xcc);
            (fcc < f[n]).then_some((xcc, fcc))
        };
        if let Some((x, fx)) = accepted {
            insert(&mut v, &mut f, n, &x, fx);
        } else {
            for j in 1..=n {
                let mut x = v[j];
                for p in 0..np {
                    x[p] = v[0][p] + 0.5 * (v[j][p] - v[0][p]);
                }
                b.hold_fixed(&mut x);
                v[j] = x;
                f[j] = cost(&x);
            }
            sort(&mut v, &mut f, n);
        }
    };
    NmOutcome {
        x: v[0],
        f: f[0],
        iterations,
        converged,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bounds(np: usize) -> Bounds {
        Bounds::new(
            &[f64::NEG_INFINITY; MAX_PARAMS],
            &[f64::INFINITY; MAX_PARAMS],
            [true; MAX_PARAMS],
            &[0.0; MAX_PARAMS],
            np,
        )
    }

    #[test]
    fn rosenbrock_is_minimised_like_fminsearch() {
        // fminsearch(@(x) 100*(x(2)-x(1)^2)^2 + (1-x(1))^2, [-1.2 1]) reaches [1 1].
        let mut cost =
            |x: &[f64; MAX_PARAMS]| 100.0 * (x[1] - x[0] * x[0]).powi(2) + (1.0 - x[0]).powi(2);
        let mut x0 = [0.0; MAX_PARAMS];
        x0[0] = -1.2;
        x0[1] = 1.0;
        let s = NmSettings {
            max_iterations: 1000,
            tol_fun: 1e-10,
            tol_x: 1e-10,
            ten_eps: 10.0 * f64::EPSILON,
        };
        let out = nelder_mead(&mut cost, &x0, &bounds(2), &s);
        assert!(out.converged);
        assert!(
            (out.x[0] - 1.0).abs() < 1e-5 && (out.x[1] - 1.0).abs() < 1e-5,
            "{:?}",
            out.x
        );
        assert!(
            out.iterations > 50 && out.iterations < 400,
            "{}",
            out.iterations
        );
    }

    #[test]
    fn bounds_are_kept_and_fixed_parameters_never_move() {
        let mut cost = |x: &[f64; MAX_PARAMS]| (x[0] + 1.0).powi(2) + (x[1] - 2.0).powi(2) + x[2];
        let mut lo = [f64::NEG_INFINITY; MAX_PARAMS];
        lo[0] = 0.0;
        let mut free = [true; MAX_PARAMS];
        free[2] = false;
        let mut fixed = [0.0; MAX_PARAMS];
        fixed[2] = 0.1;
        let b = Bounds::new(&lo, &[10.0; MAX_PARAMS], free, &fixed, 3);
        let s = NmSettings {
            max_iterations: 600,
            tol_fun: 1e-12,
            tol_x: f64::INFINITY,
            ten_eps: 10.0 * f64::EPSILON,
        };
        let mut x0 = [0.0; MAX_PARAMS];
        x0[0] = 1.0;
        x0[1] = 1.0;
        x0[2] = 0.1;
        let out = nelder_mead(&mut cost, &x0, &b, &s);
        assert!(
            out.x[0] >= 0.0 && out.x[0] < 1e-3 && b.at_bound(&out.x),
            "minimum on the bound x0 >= 0: {out:?}"
        );
        assert_eq!(out.x[2], 0.1);
        assert!((out.x[1] - 2.0).abs() < 1e-5, "{out:?}");
    }

    #[test]
    fn insert_is_the_sort_of_a_replaced_worst_vertex() {
        // Ties (stable order), infinities, every rank of the new vertex.
        let sorted = [1.0, 2.0, 2.0, 5.0, f64::INFINITY, f64::INFINITY];
        for fx in [0.5, 1.0, 2.0, 3.0, 5.0, 7.0, f64::INFINITY] {
            for n in 1..=MAX_PARAMS {
                let mut v: Simplex = [[0.0; MAX_PARAMS]; MAX_PARAMS + 1];
                let mut f = [0.0; MAX_PARAMS + 1];
                for k in 0..=n {
                    v[k][0] = k as f64; // identifies the vertex
                    f[k] = sorted[k];
                }
                let x = [-1.0; MAX_PARAMS];
                let (mut vs, mut fs) = (v, f);
                vs[n] = x;
                fs[n] = fx;
                sort(&mut vs, &mut fs, n);
                insert(&mut v, &mut f, n, &x, fx);
                assert_eq!((v, f), (vs, fs), "n {n}, f {fx}");
            }
        }
    }

    #[test]
    fn an_infinite_cost_everywhere_never_converges() {
        let mut cost = |_: &[f64; MAX_PARAMS]| f64::INFINITY;
        let s = NmSettings {
            max_iterations: 20,
            tol_fun: 1e-8,
            tol_x: f64::INFINITY,
            ten_eps: 10.0 * f64::EPSILON,
        };
        let out = nelder_mead(&mut cost, &[1.0; MAX_PARAMS], &bounds(3), &s);
        assert!(!out.converged);
        assert_eq!(out.iterations, 20);
    }
}
