//! Asymptotic standard errors of fitted voxels (f64, after either path's fit): from the
//! analytic Jacobian at the fitted parameters (the one LM uses), `sigma^2 = SSE / (n - p)`
//! and `cov = sigma^2 (J^T J)^-1` over the free parameters. On a uniform grid `J^T J` is
//! computed for [`LANES`] voxels at once in the lanes of the vector unit
//! ([`jacobian_lanes`], AVX-512 or AVX2 chosen at run time, the same bits as the portable
//! build); on other grids voxel by voxel through `conv::normal`. Both give `conv::normal`'s
//! values (unit test `the_uniform_jacobian_matches_the_fits_normal_equations`).
//!
//! `J^T J` is inverted in its correlation form `S = D^-1/2 J^T J D^-1/2` (unit diagonal,
//! `D` its diagonal), so that the parameters' units do not enter its conditioning. A free
//! parameter whose Jacobian column is zero (the curve does not depend on it at the fitted
//! values: ve with Ktrans = 0, a delay of an input with no inflow) gets an infinite SE and
//! is left out of the inversion; the others' SE is then that of the curve's identifiable
//! part. `S` is singular or ill-conditioned when its Cholesky factorisation fails or its
//! reciprocal condition number (1-norm) is below [`MIN_RCOND`]: every free parameter then
//! gets an infinite SE.

use super::conv::{Shift, by_flags, clamped, normal};
use crate::model::weights::{Weights, weights_d};
use crate::model::{Bounds, CANON, Canonical, MAX_PARAMS, Model, Problem, canonical, chain};

/// Reciprocal 1-norm condition number of the correlation-scaled `J^T J` below which it
/// counts as singular (f64 rounding of `J^T J`, ~1e-16, then leaves the inverse with fewer
/// than about 4 correct digits).
pub(crate) const MIN_RCOND: f64 = 1e-12;

/// One voxel's standard errors (user units, `MAX_PARAMS` slots; fixed parameters NaN) and
/// whether `J^T J` was singular or ill-conditioned (or the fit left no degree of freedom).
#[derive(Debug, Clone, Copy)]
pub(crate) struct StdErrors {
    pub se: [f64; MAX_PARAMS],
    pub singular: bool,
}

/// What the standard errors of one job's voxels share: on a uniform grid, the inputs and
/// their slopes padded so that every sample a delay can reach (`Shift::m` in `[-n, n]`) is
/// read without clamping, with the values `conv::normal` reads there.
#[derive(Debug, Clone)]
pub(crate) struct SePlan {
    /// `n` and the padded `u1, s1, u2, s2` (index `k + n + 1` for sample `k`), uniform grids
    /// only.
    padded: Option<(usize, [Vec<f64>; 4])>,
}

impl SePlan {
    pub(crate) fn new(p: &Problem) -> Self {
        if !(p.inv_dt > 0.0) {
            return SePlan { padded: None };
        }
        let n = p.t.len();
        let len = 3 * n + 3;
        let at = |j: usize| j as isize - n as isize - 1;
        let values = |u: &[f64]| -> Vec<f64> { (0..len).map(|j| clamped(u, at(j))).collect() };
        // The slope of interval k: 0 before the grid, the last (0) after it.
        let slopes = |s: &[f64]| -> Vec<f64> {
            (0..len)
                .map(|j| {
                    let k = at(j);
                    if k < 0 { 0.0 } else { clamped(s, k) }
                })
                .collect()
        };
        SePlan {
            padded: Some((
                n,
                [values(&p.u1), slopes(&p.s1), values(&p.u2), slopes(&p.s2)],
            )),
        }
    }
}

/// Voxels whose standard errors one call computes together (lanes of the vector units).
pub(crate) const LANES: usize = 8;
type Mat = [[f64; MAX_PARAMS]; MAX_PARAMS];

/// Buffers reused across calls (one per thread).
#[derive(Debug, Default)]
pub(crate) struct Scratch {
    data: Vec<f64>,
    work: Vec<f64>,
}

/// Standard errors of the fits `xs` (user units) of the curves `rows` (one to [`LANES`]
/// voxels) under `model` and bounds `b`; the results of the first `xs.len()` slots.
pub(crate) fn standard_errors(
    model: Model,
    b: &Bounds,
    problem: &Problem,
    plan: &SePlan,
    xs: &[[f64; MAX_PARAMS]],
    rows: &[ndarray::ArrayView1<f32>],
    scratch: &mut Scratch,
) -> [StdErrors; LANES] {
    let k = xs.len().min(rows.len()).min(LANES);
    let nt = problem.len();
    let none = StdErrors {
        se: [f64::NAN; MAX_PARAMS],
        singular: false,
    };
    let mut out = [none; LANES];
    if k == 0 {
        return out;
    }
    match &plan.padded {
        Some((n, padded)) if *n == nt => {
            // The curves interleaved (`data[i * LANES + l]`); empty lanes repeat the first.
            let lanes: [usize; LANES] = std::array::from_fn(|l| if l < k { l } else { 0 });
            scratch.data.clear();
            scratch.data.resize(nt * LANES, 0.0);
            for (l, &src) in lanes.iter().enumerate() {
                for (i, &c) in rows[src].iter().enumerate() {
                    scratch.data[i * LANES + l] = f64::from(c);
                }
            }
            let x4: [[f64; MAX_PARAMS]; LANES] = std::array::from_fn(|l| xs[lanes[l]]);
            let ne = by_flags!(
                model,
                jacobian_dispatch,
                (
                    model,
                    b,
                    problem,
                    padded,
                    &x4,
                    &scratch.data,
                    &mut scratch.work
                )
            );
            for l in 0..k {
                out[l] = covariance(b, &xs[l], nt, ne[l].0, &ne[l].1);
            }
        }
        _ => {
            for l in 0..k {
                scratch.data.clear();
                scratch.data.extend(rows[l].iter().map(|&c| f64::from(c)));
                let x = &xs[l];
                let nr = by_flags!(
                    model,
                    normal,
                    (
                        problem,
                        &canonical(model, x),
                        &chain(model, x),
                        b.np,
                        &scratch.data
                    )
                );
                let mut a = [[0.0; MAX_PARAMS]; MAX_PARAMS];
                for j in 0..b.n_free {
                    for m in 0..b.n_free {
                        let (p, q) = (b.free_index[j], b.free_index[m]);
                        a[j][m] = if p <= q { nr.jtj[p][q] } else { nr.jtj[q][p] };
                    }
                }
                out[l] = covariance(b, x, nt, nr.cost, &a);
            }
        }
    }
    out
}

/// Standard errors from the cost and `J^T J` over the free parameters (`a[j][k]`: the j-th
/// and k-th free parameters) of a fit `x` to `nt` samples.
fn covariance(b: &Bounds, x: &[f64; MAX_PARAMS], nt: usize, cost: f64, a: &Mat) -> StdErrors {
    let mut se = [f64::NAN; MAX_PARAMS];
    let nf = b.n_free;
    let undetermined = |mut se: [f64; MAX_PARAMS]| {
        for &p in &b.free_index[..nf] {
            se[p] = f64::INFINITY;
        }
        StdErrors { se, singular: true }
    };
    if nf == 0 {
        return StdErrors {
            se,
            singular: false,
        };
    }
    let dof = nt as isize - nf as isize;
    if dof <= 0 || !x[..b.np].iter().all(|v| v.is_finite()) || !cost.is_finite() {
        return undetermined(se);
    }
    let sigma2 = cost / dof as f64;
    // The free parameters with a non-zero column.
    let mut idx = [0usize; MAX_PARAMS];
    let mut m = 0;
    for j in 0..nf {
        let d = a[j][j];
        if d > 0.0 && d.is_finite() {
            idx[m] = j;
            m += 1;
        } else if d == 0.0 {
            se[b.free_index[j]] = f64::INFINITY;
        } else {
            return undetermined(se);
        }
    }
    let mut s = [[0.0; MAX_PARAMS]; MAX_PARAMS];
    let mut scale = [0.0; MAX_PARAMS];
    for i in 0..m {
        scale[i] = a[idx[i]][idx[i]].sqrt();
    }
    for i in 0..m {
        for j in 0..m {
            s[i][j] = if i == j {
                1.0
            } else {
                a[idx[i]][idx[j]] / (scale[i] * scale[j])
            };
        }
    }
    let Some(inv) = spd_inverse(&s, m) else {
        return undetermined(se);
    };
    let norm1 = |a: &Mat| {
        (0..m)
            .map(|j| (0..m).map(|i| a[i][j].abs()).sum::<f64>())
            .fold(0.0, f64::max)
    };
    let rcond = 1.0 / (norm1(&s) * norm1(&inv));
    if !(rcond >= MIN_RCOND) {
        return undetermined(se);
    }
    for i in 0..m {
        let v = sigma2 * inv[i][i] / (scale[i] * scale[i]);
        se[b.free_index[idx[i]]] = v.max(0.0).sqrt();
    }
    let singular = b.free_index[..nf].iter().any(|&p| !se[p].is_finite());
    StdErrors { se, singular }
}

/// [`LANES`] f64 values, one per voxel, with lane-wise arithmetic (vector operations where
/// the target has them).
#[derive(Debug, Clone, Copy, Default)]
#[repr(C, align(64))]
struct V([f64; LANES]);

impl V {
    /// The lanes at `s[o..o + LANES]`.
    #[inline(always)]
    fn at(s: &[f64], o: usize) -> V {
        let c: &[f64; LANES] = s[o..o + LANES].try_into().unwrap_or(&[0.0; LANES]);
        V(*c)
    }
}

macro_rules! lanewise {
    ($tr:ident, $f:ident, $op:tt) => {
        impl std::ops::$tr for V {
            type Output = V;
            #[inline(always)]
            fn $f(self, o: V) -> V {
                let (a, b) = (self.0, o.0);
                V(std::array::from_fn(|l| a[l] $op b[l]))
            }
        }
    };
}
lanewise!(Add, add, +);
lanewise!(Sub, sub, -);
lanewise!(Mul, mul, *);

/// Lane `l` of the delayed input `u` (padded as [`SePlan`] pads it) and its derivative in
/// the delay (minus the slope `sl` of the interval read; on a sample itself, that of the
/// interval before), into `val` and `der` (interleaved).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn delayed(
    u: &[f64],
    sl: &[f64],
    tau: f64,
    inv_dt: f64,
    n: usize,
    l: usize,
    val: &mut [f64],
    der: &mut [f64],
) {
    let sh = Shift::new(tau, inv_dt, n);
    let base = (sh.m + n as isize + 1) as usize;
    let u = &u[base..=base + n];
    let kink = usize::from(sh.fr == 0.0);
    let sl = &sl[base - kink..base - kink + n];
    let fr = sh.fr;
    for i in 0..n {
        val[i * LANES + l] = u[i] + fr * (u[i + 1] - u[i]);
        der[i * LANES + l] = -sl[i];
    }
}

/// [`jacobian_lanes`] compiled for AVX-512 or AVX2 where the CPU has it (detected at run
/// time): the same IEEE operations in the same order (no fused multiply-adds), so the same
/// bits.
fn jacobian_dispatch<const TI: bool, const TE: bool, const VA: bool>(
    model: Model,
    b: &Bounds,
    problem: &Problem,
    padded: &[Vec<f64>; 4],
    xs: &[[f64; MAX_PARAMS]; LANES],
    data: &[f64],
    work: &mut Vec<f64>,
) -> [(f64, Mat); LANES] {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx512f") {
        // SAFETY: `jacobian_avx512` only requires AVX-512F, which the CPU has (checked just
        // above).
        return unsafe { jacobian_avx512::<TI, TE, VA>(model, b, problem, padded, xs, data, work) };
    }
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: `jacobian_avx2` only requires AVX2, which the CPU has (checked just above).
        return unsafe { jacobian_avx2::<TI, TE, VA>(model, b, problem, padded, xs, data, work) };
    }
    jacobian_lanes::<TI, TE, VA>(model, b, problem, padded, xs, data, work)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
fn jacobian_avx512<const TI: bool, const TE: bool, const VA: bool>(
    model: Model,
    b: &Bounds,
    problem: &Problem,
    padded: &[Vec<f64>; 4],
    xs: &[[f64; MAX_PARAMS]; LANES],
    data: &[f64],
    work: &mut Vec<f64>,
) -> [(f64, Mat); LANES] {
    jacobian_lanes::<TI, TE, VA>(model, b, problem, padded, xs, data, work)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn jacobian_avx2<const TI: bool, const TE: bool, const VA: bool>(
    model: Model,
    b: &Bounds,
    problem: &Problem,
    padded: &[Vec<f64>; 4],
    xs: &[[f64; MAX_PARAMS]; LANES],
    data: &[f64],
    work: &mut Vec<f64>,
) -> [(f64, Mat); LANES] {
    jacobian_lanes::<TI, TE, VA>(model, b, problem, padded, xs, data, work)
}

/// Cost and `J^T J` over the free parameters of [`LANES`] fits on a uniform grid at once
/// (`data` interleaved, `data[i * LANES + l]`): the quantities of `conv::normal` (the same
/// recursions and sampling rules, kinks included, and the same sums in the same order),
/// with the voxels in the lanes of the vector units: the delayed inputs and their delay
/// derivatives first, then one pass over time with the recursions of the canonical
/// partials, the Jacobian row through the non-zero entries of the chain matrix, and its
/// products.
#[inline(always)]
fn jacobian_lanes<const TI: bool, const TE: bool, const VA: bool>(
    model: Model,
    b: &Bounds,
    problem: &Problem,
    padded: &[Vec<f64>; 4],
    xs: &[[f64; MAX_PARAMS]; LANES],
    data: &[f64],
    work: &mut Vec<f64>,
) -> [(f64, Mat); LANES] {
    const L: usize = LANES;
    let n = data.len() / L;
    let nl = n * L;
    let nf = b.n_free;
    let cs: [Canonical; L] = std::array::from_fn(|l| canonical(model, &xs[l]));
    let chs: [[[f64; MAX_PARAMS]; CANON]; L] = std::array::from_fn(|l| chain(model, &xs[l]));
    // The delayed inputs a1, a2 and their delay derivatives da1, da2, interleaved.
    if work.len() < 4 * nl {
        work.resize(4 * nl, 0.0);
    }
    let (a1, r) = work[..4 * nl].split_at_mut(nl);
    let (da1, r) = r.split_at_mut(nl);
    let (a2, da2) = r.split_at_mut(nl);
    for l in 0..L {
        let inv_dt = problem.inv_dt;
        delayed(&padded[0], &padded[1], cs[l].tau1, inv_dt, n, l, a1, da1);
        if TI {
            delayed(&padded[2], &padded[3], cs[l].tau2, inv_dt, n, l, a2, da2);
        }
    }
    let (a1, da1, a2, da2) = (&*a1, &*da1, &*a2, &*da2);
    let h = problem.dt[0];
    let w1: [Weights; L] = std::array::from_fn(|l| weights_d(cs[l].k1, h));
    let w2: [Weights; L] = std::array::from_fn(|l| if TE { weights_d(cs[l].k2, h) } else { w1[l] });
    macro_rules! lanes {
        ($l:ident => $e:expr) => {
            V(std::array::from_fn(|$l| $e))
        };
    }
    let (e1, wa1, wb1) = (
        lanes!(l => w1[l].e),
        lanes!(l => w1[l].wa),
        lanes!(l => w1[l].wb),
    );
    let (de1, dwa1, dwb1) = (
        lanes!(l => w1[l].de),
        lanes!(l => w1[l].dwa),
        lanes!(l => w1[l].dwb),
    );
    let (e2, wa2, wb2) = (
        lanes!(l => w2[l].e),
        lanes!(l => w2[l].wa),
        lanes!(l => w2[l].wb),
    );
    let (de2, dwa2, dwb2) = (
        lanes!(l => w2[l].de),
        lanes!(l => w2[l].dwa),
        lanes!(l => w2[l].dwb),
    );
    let (g1, h1) = (lanes!(l => cs[l].g1), lanes!(l => cs[l].h1));
    let (g2, v) = (lanes!(l => cs[l].g2), lanes!(l => cs[l].v));
    // The canonical partial `k` (k1, g1, h1, k2, g2, v, tau1, tau2) of the model's form.
    let present = |k: usize| match k {
        2 | 7 => TI,
        3 | 4 => TE,
        5 => VA,
        _ => true,
    };
    // Each free parameter's non-zero chain entries: (partial, coefficients).
    let mut terms = [[(0usize, V::default()); CANON]; MAX_PARAMS];
    let mut nterms = [0usize; MAX_PARAMS];
    for j in 0..nf {
        let p = b.free_index[j];
        for k in 0..CANON {
            let coef = lanes!(l => chs[l][k][p]);
            if present(k) && coef.0.iter().any(|&c| c != 0.0) {
                terms[j][nterms[j]] = (k, coef);
                nterms[j] += 1;
            }
        }
    }
    let z = V::default();
    let (mut y1, mut dk1, mut c1, mut d1, mut c2, mut d2) = (z, z, z, z, z, z);
    let (mut y2, mut dk2, mut q1, mut q1d) = (z, z, z, z);
    let mut f1p = g1 * V::at(a1, 0);
    if TI {
        f1p = f1p + h1 * V::at(a2, 0);
    }
    let mut f2p = g2 * V::at(a1, 0);
    let mut part = [z; CANON];
    let mut acc = [[z; MAX_PARAMS]; MAX_PARAMS];
    let mut cost = z;
    for i in 0..n {
        let o = i * L;
        let (ua, dua) = (V::at(a1, o), V::at(da1, o));
        let (ub, dub) = if TI {
            (V::at(a2, o), V::at(da2, o))
        } else {
            (z, z)
        };
        if i > 0 {
            let (pa, dpa) = (V::at(a1, o - L), V::at(da1, o - L));
            let mut f1 = g1 * ua;
            if TI {
                f1 = f1 + h1 * ub;
            }
            dk1 = e1 * dk1 + de1 * y1 + dwa1 * f1p + dwb1 * f1;
            y1 = e1 * y1 + wa1 * f1p + wb1 * f1;
            c1 = e1 * c1 + wa1 * pa + wb1 * ua;
            d1 = e1 * d1 + wa1 * dpa + wb1 * dua;
            if TI {
                let (pb, dpb) = (V::at(a2, o - L), V::at(da2, o - L));
                c2 = e1 * c2 + wa1 * pb + wb1 * ub;
                d2 = e1 * d2 + wa1 * dpb + wb1 * dub;
            }
            f1p = f1;
            if TE {
                let f2 = g2 * ua;
                dk2 = e2 * dk2 + de2 * y2 + dwa2 * f2p + dwb2 * f2;
                y2 = e2 * y2 + wa2 * f2p + wb2 * f2;
                q1 = e2 * q1 + wa2 * pa + wb2 * ua;
                q1d = e2 * q1d + wa2 * dpa + wb2 * dua;
                f2p = f2;
            }
        }
        let mut y = y1;
        if TE {
            y = y + y2;
        }
        if VA {
            y = y + v * ua;
        }
        let r = y - V::at(data, o);
        cost = cost + r * r;
        part[0] = dk1;
        part[1] = c1;
        let mut pt = g1 * d1;
        if TI {
            part[2] = c2;
            part[7] = h1 * d2;
        }
        if TE {
            part[3] = dk2;
            part[4] = q1;
            pt = pt + g2 * q1d;
        }
        if VA {
            part[5] = ua;
            pt = pt + v * dua;
        }
        part[6] = pt;
        let mut row = [z; MAX_PARAMS];
        for j in 0..nf {
            let mut x = z;
            for &(k, coef) in &terms[j][..nterms[j]] {
                x = x + part[k] * coef;
            }
            row[j] = x;
        }
        for j in 0..nf {
            for k in j..nf {
                acc[j][k] = acc[j][k] + row[j] * row[k];
            }
        }
    }
    let mut out = [(0.0, [[0.0; MAX_PARAMS]; MAX_PARAMS]); L];
    for j in 0..nf {
        for k in j..nf {
            for l in 0..L {
                out[l].1[j][k] = acc[j][k].0[l];
                out[l].1[k][j] = acc[j][k].0[l];
            }
        }
    }
    for l in 0..L {
        out[l].0 = cost.0[l];
    }
    out
}

/// The inverse of the symmetric positive definite `a` (`m x m`) by Cholesky; `None` when a
/// pivot is not positive.
fn spd_inverse(
    a: &[[f64; MAX_PARAMS]; MAX_PARAMS],
    m: usize,
) -> Option<[[f64; MAX_PARAMS]; MAX_PARAMS]> {
    let mut l = [[0.0; MAX_PARAMS]; MAX_PARAMS];
    for j in 0..m {
        let mut d = a[j][j];
        for k in 0..j {
            d -= l[j][k] * l[j][k];
        }
        if !(d > 0.0) {
            return None;
        }
        let djj = d.sqrt();
        l[j][j] = djj;
        for i in j + 1..m {
            let mut v = a[i][j];
            for k in 0..j {
                v -= l[i][k] * l[j][k];
            }
            l[i][j] = v / djj;
        }
    }
    // L^-1 (lower), then A^-1 = L^-T L^-1.
    let mut li = [[0.0; MAX_PARAMS]; MAX_PARAMS];
    for j in 0..m {
        li[j][j] = 1.0 / l[j][j];
        for i in j + 1..m {
            let mut v = 0.0;
            for k in j..i {
                v -= l[i][k] * li[k][j];
            }
            li[i][j] = v / l[i][i];
        }
    }
    let mut inv = [[0.0; MAX_PARAMS]; MAX_PARAMS];
    for i in 0..m {
        for j in 0..=i {
            let mut v = 0.0;
            for k in i..m {
                v += li[k][i] * li[k][j];
            }
            inv[i][j] = v;
            inv[j][i] = v;
        }
    }
    Some(inv)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cholesky_inverse_inverts() {
        let mut a = [[0.0; MAX_PARAMS]; MAX_PARAMS];
        let v = [[4.0, 1.0, 0.5], [1.0, 3.0, 0.2], [0.5, 0.2, 2.0]];
        for i in 0..3 {
            a[i][..3].copy_from_slice(&v[i]);
        }
        let inv = spd_inverse(&a, 3).unwrap();
        for i in 0..3 {
            for j in 0..3 {
                let r: f64 = (0..3).map(|k| a[i][k] * inv[k][j]).sum();
                assert!(
                    (r - f64::from(u8::from(i == j))).abs() < 1e-14,
                    "{i} {j} {r}"
                );
            }
        }
        a[2][2] = -1.0;
        assert!(spd_inverse(&a, 3).is_none());
    }

    /// The column-wise uniform-grid Jacobian gives `conv::normal`'s cost and `J^T J`, for
    /// every model, at delays between samples, on samples (kinks) and beyond the grid.
    #[test]
    fn the_uniform_jacobian_matches_the_fits_normal_equations() {
        let t: Vec<f64> = (0..40).map(|i| f64::from(i) * 1.5).collect();
        let u1: Vec<f64> = t.iter().map(|&s| crate::sim::parker_aif(s - 6.0)).collect();
        let u2: Vec<f64> = crate::sim::portal_venous(&t);
        let p = Problem::new(&t, &u1, Some(&u2)).unwrap();
        let plan = SePlan::new(&p);
        let (n, padded) = plan.padded.as_ref().unwrap();
        assert_eq!(*n, t.len());
        let data: Vec<f64> = (0..t.len()).map(|i| 0.3 + 0.01 * i as f64).collect();
        let points = crate::cpu::TEST_POINTS;
        let mut work = Vec::new();
        let delays = [
            None,
            Some(3.0),
            Some(-4.5),
            Some(0.0),
            Some(200.0),
            Some(-200.0),
        ];
        for (model, v) in points {
            let np = model.n_params();
            let theta = |delay: Option<f64>| {
                let mut th = [0.0; MAX_PARAMS];
                th[..v.len()].copy_from_slice(v);
                for (q, info) in model.params().iter().enumerate() {
                    if let (true, Some(d)) = (info.delay, delay) {
                        th[q] = d;
                    }
                }
                th
            };
            let mut free = [false; MAX_PARAMS];
            free[..np].fill(true);
            let b = Bounds::new(
                &[-1e9; MAX_PARAMS],
                &[1e9; MAX_PARAMS],
                free,
                &theta(None),
                np,
            );
            for group in delays.chunks(LANES) {
                let xs: [[f64; MAX_PARAMS]; LANES] =
                    std::array::from_fn(|l| theta(group[l.min(group.len() - 1)]));
                // Each lane its own curve.
                let mut inter = vec![0.0; n * LANES];
                for i in 0..*n {
                    for l in 0..LANES {
                        inter[i * LANES + l] = data[i] * (1.0 + 0.1 * l as f64);
                    }
                }
                let got = by_flags!(
                    model,
                    jacobian_lanes,
                    (model, &b, &p, padded, &xs, &inter, &mut work)
                );
                for l in 0..LANES {
                    let th = xs[l];
                    let d: Vec<f64> = (0..*n).map(|i| inter[i * LANES + l]).collect();
                    let nr = by_flags!(
                        model,
                        normal,
                        (&p, &canonical(model, &th), &chain(model, &th), np, &d)
                    );
                    let (cost, a) = got[l];
                    let what = format!("{model} lane {l} {:?}", &th[..np]);
                    assert!((cost - nr.cost).abs() <= 1e-12 * nr.cost, "{what}");
                    for j in 0..np {
                        for k in j..np {
                            let want = nr.jtj[j][k];
                            let tol = 1e-10 * (nr.jtj[j][j] * nr.jtj[k][k]).sqrt() + 1e-300;
                            assert!(
                                (a[j][k] - want).abs() <= tol,
                                "{what} J^T J[{j}][{k}]: {} vs {want}",
                                a[j][k]
                            );
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod cost {
    use crate::sim::Simulation;
    use crate::{FitInput, FitParams, Method, fit};
    use gpu_runtime::Device;
    use std::time::Instant;

    /// The post-pass (standard errors and flags) on the paper's liver at Nt 128, CNR 20:
    /// `cargo test --release -p perfusion-core post_pass_cost -- --ignored --nocapture`.
    #[test]
    #[ignore = "timing; run by hand"]
    fn post_pass_cost() {
        // The fits of the first CUDA device where there is one (the end-to-end time, post-pass
        // included, of the third of three runs; the benchmark's 626,400 voxels), else of the
        // CPU (4,096 voxels).
        let device = gpu_runtime::Device::all_of(gpu_runtime::Backend::Cuda)
            .ok()
            .and_then(|d| d.into_iter().next())
            .unwrap_or_else(Device::cpu);
        let n = if device.is_gpu() { 626_400 } else { 4096 };
        let sim = Simulation::paper(128)
            .with_cnr(Some(20.0))
            .with_voxels(n)
            .run()
            .unwrap();
        let params =
            FitParams::new(crate::Model::DualInput).with_method(Method::LevenbergMarquardt);
        let input = FitInput::new(sim.curves.view(), &sim.problem);
        let runs = if device.is_gpu() { 3 } else { 1 };
        let mut fit_s = 0.0;
        let mut fits = None;
        for (k, se) in [true, false, true, false].into_iter().enumerate() {
            if k >= 2 * runs {
                break;
            }
            let mut best = f64::INFINITY;
            for _ in 0..runs {
                let t0 = Instant::now();
                let f = fit(input, &params.clone().with_standard_errors(se), &device)
                    .unwrap()
                    .0;
                best = best.min(t0.elapsed().as_secs_f64());
                if se {
                    fits = Some(f);
                }
            }
            if se {
                fit_s = best;
            }
            println!(
                "{n} voxels fitted on {} in {:.1} ms end to end (best of {runs}), standard errors {}",
                device.info().id,
                best * 1e3,
                if se { "on" } else { "off" }
            );
        }
        let fits = fits.unwrap();
        let setup = params.setup().unwrap().with_plan(&sim.problem);
        for threads in [1, rayon::current_num_threads()] {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap();
            let mut f = fits.clone();
            let mut best = f64::INFINITY;
            let reps = 5;
            for _ in 0..reps {
                let t = Instant::now();
                pool.install(|| f.set_flags(sim.curves.view(), &sim.problem, &setup));
                best = best.min(t.elapsed().as_secs_f64());
            }
            assert_eq!(f.flags, fits.flags);
            let mut flags_only = f64::INFINITY;
            let mut off = setup.clone();
            off.standard_errors = false;
            for _ in 0..reps {
                let t = Instant::now();
                pool.install(|| f.set_flags(sim.curves.view(), &sim.problem, &off));
                flags_only = flags_only.min(t.elapsed().as_secs_f64());
            }
            println!(
                "flags alone (standard errors off) on {threads} thread(s): {:.3} us/voxel ({:.1} ms for {n})",
                flags_only / n as f64 * 1e6,
                flags_only * 1e3
            );
            println!(
                "post-pass on {threads} thread(s): {:.3} us/voxel ({:.1} ms for {n}); the whole fit {:.3} s ({:.2} us/voxel)",
                best / n as f64 * 1e6,
                best * 1e3,
                fit_s,
                fit_s / n as f64 * 1e6
            );
        }
        // The standard errors alone, one thread: in lanes (uniform grid), and one voxel at a
        // time through `conv::normal` (the path of non-uniform grids).
        let b = &setup.bounds;
        for (name, plan) in [
            ("lanes", super::SePlan::new(&sim.problem)),
            ("conv::normal", super::SePlan { padded: None }),
        ] {
            let mut scratch = super::Scratch::default();
            let mut best = f64::INFINITY;
            let reps = 5;
            for _ in 0..reps {
                let t = Instant::now();
                for v0 in (0..n).step_by(super::LANES) {
                    let group = v0..(v0 + super::LANES).min(n);
                    let xs: Vec<[f64; crate::MAX_PARAMS]> = group
                        .clone()
                        .map(|v| std::array::from_fn(|p| fits.params[[p, v]]))
                        .collect();
                    let rows: Vec<_> = group.map(|v| sim.curves.row(v)).collect();
                    let e = super::standard_errors(
                        setup.model,
                        b,
                        &sim.problem,
                        &plan,
                        &xs,
                        &rows,
                        &mut scratch,
                    );
                    std::hint::black_box(e);
                }
                best = best.min(t.elapsed().as_secs_f64());
            }
            println!(
                "standard errors alone ({name}), 1 thread: {:.3} us/voxel",
                best / n as f64 * 1e6
            );
        }
        // The Jacobian alone, the same voxels over and over.
        let plan = super::SePlan::new(&sim.problem);
        let (_, padded) = plan.padded.as_ref().unwrap();
        let xs: [[f64; crate::MAX_PARAMS]; super::LANES] =
            std::array::from_fn(|l| std::array::from_fn(|p| fits.params[[p, l]]));
        let mut data = vec![0.0; 128 * super::LANES];
        for l in 0..super::LANES {
            for i in 0..128 {
                data[i * super::LANES + l] = f64::from(sim.curves[[l, i]]);
            }
        }
        let mut work = Vec::new();
        let reps = 20_000;
        let t = Instant::now();
        for _ in 0..reps {
            std::hint::black_box(super::jacobian_dispatch::<true, false, false>(
                setup.model,
                b,
                &sim.problem,
                padded,
                std::hint::black_box(&xs),
                &data,
                &mut work,
            ));
        }
        println!(
            "the Jacobian alone: {:.3} us/voxel",
            t.elapsed().as_secs_f64() / (reps * super::LANES) as f64 * 1e6
        );
        println!("flag counts {:?}", fits.flag_counts());
    }
}
