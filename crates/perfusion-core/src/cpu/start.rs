//! The linear least-squares start of one voxel (f64): the delay scan of
//! [`crate::model::start`] over its basis tables.

use crate::model::start::{StartPlan, n_coefficients, nnls, parameters, running_integral};
use crate::model::{Bounds, MAX_PARAMS, Model};

/// The best start for `data` under `plan`: coefficients solved for every scanned delay, the
/// smallest residual's parameters (projected into `b`; undetermined ones keep `start`).
pub(crate) fn lls_start(
    plan: &StartPlan,
    data: &[f64],
    b: &Bounds,
    start: &[f64; MAX_PARAMS],
) -> [f64; MAX_PARAMS] {
    let dd: f64 = data.iter().map(|d| d * d).sum();
    let new_scan = || Scan {
        plan,
        data,
        dd,
        index: [plan.axes[0].first, plan.axes[1].first],
        best: f64::INFINITY,
        theta: [0.0; 4],
    };
    let mut scan = new_scan();
    if plan.model == Model::DualInput {
        dual_grid(&mut scan);
    } else {
        let a = plan.axes[0];
        for k in (0..a.count).step_by(a.stride) {
            scan.candidate(0, k);
        }
    }
    for axis in 0..2 {
        let a = plan.axes[axis];
        if a.free {
            let centre = scan.index[axis];
            let lo = centre.saturating_sub(a.stride - 1);
            let hi = (centre + a.stride - 1).min(a.count - 1);
            for k in lo..=hi {
                scan.candidate(axis, k);
            }
        }
    }
    let delays = [0, 1].map(|a| plan.axes[a].delay(scan.index[a]));
    parameters(plan, &scan.theta, delays, b, start)
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
            scan.keep(r, theta, [a * ax0.stride, p * ax1.stride]);
        }
    }
}

/// The search's state: the best residual so far, its coefficients and delay indices.
struct Scan<'a> {
    plan: &'a StartPlan,
    data: &'a [f64],
    dd: f64,
    index: [usize; 2],
    best: f64,
    theta: [f64; 4],
}

impl Scan<'_> {
    /// Solve at delay index `k` of `axis` (the other axis at its best); keep it if strictly
    /// better.
    fn candidate(&mut self, axis: usize, k: usize) {
        let mut at = self.index;
        at[axis] = k;
        let (g, rhs) = normal_equations(self.plan, self.data, at);
        let (theta, r) = nnls(&g, &rhs, self.dd, n_coefficients(self.plan.model));
        self.keep(r, theta, at);
    }

    /// Keep the candidate at `at` if its residual `r` is strictly the smallest so far.
    fn keep(&mut self, r: f64, theta: [f64; 4], at: [usize; 2]) {
        if r < self.best {
            self.best = r;
            self.theta = theta;
            self.index = at;
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
