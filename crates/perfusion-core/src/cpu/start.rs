//! The linear least-squares start of one voxel (f64): the delay scan of
//! [`crate::model::start`] over its basis tables.

use crate::model::start::{
    CANDIDATES, StartPlan, n_coefficients, nnls, parameters, running_integral,
};
use crate::model::{Bounds, MAX_PARAMS, Model};

/// The searched starts for `data` under `plan`, best residual first: the dual-input model's
/// [`CANDIDATES`] distinct minima of the coarse scan (the integral form's residual is not
/// the model's, so the fit ranks them by its own cost), one for the other models; each
/// refined on the fine grid and turned into parameters (projected into `b`; undetermined
/// ones keep `start`).
pub(crate) fn lls_starts(
    plan: &StartPlan,
    data: &[f64],
    b: &Bounds,
    start: &[f64; MAX_PARAMS],
) -> Vec<[f64; MAX_PARAMS]> {
    let dd: f64 = data.iter().map(|d| d * d).sum();
    let mut coarse = Scan::new(plan, data, dd);
    if plan.model == Model::DualInput {
        dual_grid(&mut coarse);
    } else {
        let a = plan.axes[0];
        for k in (0..a.count).step_by(a.stride) {
            coarse.candidate(0, k);
        }
    }
    coarse.kept[..coarse.n]
        .iter()
        .map(|kept| {
            let mut scan = Scan::new(plan, data, dd);
            scan.kept[0] = *kept;
            scan.n = 1;
            scan.refine();
            let best = scan.kept[0];
            let delays = [0, 1].map(|a| plan.axes[a].delay(best.index[a]));
            parameters(plan, &best.theta, delays, b, start)
        })
        .collect()
}

/// The dual-input model's coarse search: every pair of arterial and portal delays. The
/// Gram matrix of a pair takes its input-only entries from the plan's tables and its
/// data entries from per-delay products computed once per voxel (O((K0 + K1) nt + K0 K1)).
fn dual_grid(scan: &mut Scan) {
    let plan = scan.plan;
    let (nt, t, data) = (plan.nt, &plan.tables, scan.data);
    let [ax0, ax1] = plan.axes;
    let (c0, c1) = (plan.coarse[0], plan.coarse[1]);
    let q = running_integral(&t[..nt], data);
    let (qq, qd) = q
        .iter()
        .zip(data)
        .fold((0.0, 0.0), |(qq, qd), (q, d)| (qq + q * q, qd + q * d));
    let products = |row: usize| {
        let (mut pd, mut pq) = (0.0, 0.0);
        for i in 0..nt {
            pd += t[row + i] * data[i];
            pq += t[row + i] * q[i];
        }
        (pd, pq)
    };
    let portal: Vec<(f64, f64)> = (0..c1)
        .map(|p| products(plan.a2 + p * ax1.stride * nt))
        .collect();
    for a in 0..c0 {
        let (ad, aq) = products(plan.a1 + a * ax0.stride * nt);
        for (p, &(pd, pq)) in portal.iter().enumerate() {
            let mut g = [[0.0; 4]; 4];
            g[0][0] = t[plan.norms + a];
            g[0][1] = t[plan.cross + a * c1 + p];
            g[0][2] = -aq;
            g[1][1] = t[plan.norms + c0 + p];
            g[1][2] = -pq;
            g[2][2] = qq;
            let rhs = [ad, pd, -qd, 0.0];
            let (theta, r) = nnls(&g, &rhs, scan.dd, 3);
            scan.keep_distinct(r, theta, [a * ax0.stride, p * ax1.stride]);
        }
    }
}

/// One solved candidate: residual of the integral form, coefficients, delay indices.
#[derive(Debug, Clone, Copy)]
struct Candidate {
    residual: f64,
    theta: [f64; 4],
    index: [usize; 2],
}

/// The search's state: the best candidates so far, ascending residual.
struct Scan<'a> {
    plan: &'a StartPlan,
    data: &'a [f64],
    dd: f64,
    kept: [Candidate; CANDIDATES],
    n: usize,
}

impl<'a> Scan<'a> {
    fn new(plan: &'a StartPlan, data: &'a [f64], dd: f64) -> Self {
        let none = Candidate {
            residual: f64::INFINITY,
            theta: [0.0; 4],
            index: [plan.axes[0].first, plan.axes[1].first],
        };
        Scan {
            plan,
            data,
            dd,
            kept: [none; CANDIDATES],
            n: 0,
        }
    }

    /// Solve at delay index `k` of `axis` (the other axis at the best's); keep it if
    /// strictly better than the best.
    fn candidate(&mut self, axis: usize, k: usize) {
        let mut at = self.kept[0].index;
        at[axis] = k;
        let (g, rhs) = normal_equations(self.plan, self.data, at);
        let (theta, r) = nnls(&g, &rhs, self.dd, n_coefficients(self.plan.model));
        if r < self.kept[0].residual {
            self.kept[0] = Candidate {
                residual: r,
                theta,
                index: at,
            };
            self.n = 1;
        }
    }

    /// Each free axis in turn, every fine point within a coarse step of the best.
    fn refine(&mut self) {
        for axis in 0..2 {
            let a = self.plan.axes[axis];
            if a.free {
                let centre = self.kept[0].index[axis];
                let lo = centre.saturating_sub(a.stride - 1);
                let hi = (centre + a.stride - 1).min(a.count - 1);
                for k in lo..=hi {
                    self.candidate(axis, k);
                }
            }
        }
    }

    /// Keep the coarse candidate at `at` among the best [`CANDIDATES`] that are pairwise
    /// not neighbours on the coarse grid: it replaces a kept neighbour it beats (else it is
    /// dropped), or the worst kept one it beats.
    fn keep_distinct(&mut self, r: f64, theta: [f64; 4], at: [usize; 2]) {
        let strides = [self.plan.axes[0].stride, self.plan.axes[1].stride];
        let near = |c: &Candidate| (0..2).all(|a| c.index[a].abs_diff(at[a]) <= strides[a]);
        let slot = match self.kept[..self.n].iter().position(near) {
            Some(j) if r < self.kept[j].residual => j,
            None if self.n < CANDIDATES => {
                self.n += 1;
                self.n - 1
            }
            None if r < self.kept[CANDIDATES - 1].residual => CANDIDATES - 1,
            Some(_) | None => return,
        };
        self.kept[slot] = Candidate {
            residual: r,
            theta,
            index: at,
        };
        let mut j = slot;
        while j > 0 && self.kept[j].residual < self.kept[j - 1].residual {
            self.kept.swap(j, j - 1);
            j -= 1;
        }
    }
}

/// Gram matrix (upper triangle) and right-hand side of the integral form at delay indices
/// `at`, accumulated over time in order (the GPU kernel accumulates alike).
fn normal_equations(plan: &StartPlan, data: &[f64], at: [usize; 2]) -> ([[f64; 4]; 4], [f64; 4]) {
    let nt = plan.nt;
    let t = &plan.tables;
    let row = |table: usize, axis: usize| table + at[axis] * nt;
    let (a1, v1, aa1, a2) = (
        row(plan.a1, 0),
        plan.v1.wrapping_add(at[0] * nt),
        plan.aa1.wrapping_add(at[0] * nt),
        plan.a2.wrapping_add(at[1] * nt),
    );
    let l = n_coefficients(plan.model);
    let mut g = [[0.0; 4]; 4];
    let mut rhs = [0.0; 4];
    let (mut q, mut qq) = (0.0, 0.0);
    for i in 0..nt {
        if i > 0 {
            let h = 0.5 * t[i - 1];
            let q_next = q + h * (data[i - 1] + data[i]);
            qq += h * (q + q_next);
            q = q_next;
        }
        let c = match plan.model {
            Model::DualInput => [t[a1 + i], t[a2 + i], -q, 0.0],
            Model::Tofts => [t[a1 + i], -q, 0.0, 0.0],
            Model::ExtendedTofts => [t[v1 + i], t[a1 + i], -q, 0.0],
            Model::Patlak => [t[v1 + i], t[a1 + i], 0.0, 0.0],
            Model::TwoCompartmentExchange => [t[a1 + i], -q, t[aa1 + i], -qq],
        };
        for j in 0..l {
            for k in j..l {
                g[j][k] += c[j] * c[k];
            }
            rhs[j] += c[j] * data[i];
        }
    }
    (g, rhs)
}
