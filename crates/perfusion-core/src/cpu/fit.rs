//! The CPU fit (f64, all cores): every voxel by Nelder-Mead or bounded Levenberg-Marquardt,
//! optionally from a coarse delay grid, with the per-voxel statuses the GPU reports alike.

use super::conv::{by_flags, normal, sse};
use super::levenberg_marquardt::{LmEnd, levenberg_marquardt};
use super::nelder_mead::nelder_mead;
use super::start::lls_starts;
use crate::model::start::{kink_escape, on_kink};
use crate::model::{
    Control, FitStatus, Fits, MAX_PARAMS, Method, Problem, Setup, VoxelFit, canonical, chain,
};
use ndarray::ArrayView2;
use rayon::prelude::*;

/// Voxels per block between progress reports and stop checks.
const BLOCK: usize = 2048;

/// Fit every voxel of `curves` (one curve per row) on all cores; unfitted voxels (stopped
/// by `control`) keep status [`FitStatus::NotFitted`].
pub(crate) fn fit(
    curves: ArrayView2<f32>,
    problem: &Problem,
    setup: &Setup,
    control: &Control,
) -> Fits {
    let n = curves.nrows();
    let nt = problem.len();
    let mut out = Fits::new_for(setup, n);
    let mut results = Vec::with_capacity(n);
    let mut done = 0;
    while done < n {
        if control.stopped() {
            break;
        }
        let end = (done + BLOCK).min(n);
        let block: Vec<VoxelFit> = (done..end)
            .into_par_iter()
            .map_init(
                || vec![0.0; nt],
                |buf, v| {
                    for (b, &c) in buf.iter_mut().zip(curves.row(v)) {
                        *b = f64::from(c);
                    }
                    fit_voxel(setup, problem, buf)
                },
            )
            .collect();
        results.extend(block);
        done = end;
        control.report(done, n);
    }
    for (v, r) in results.iter().enumerate() {
        out.store(v, r);
    }
    out
}

/// Curve statistics: (valid, SST about the mean, sum of squares). The GPU computes the same.
pub(crate) fn curve_stats(data: &[f64]) -> (bool, f64, f64) {
    let mut sum = 0.0;
    let mut sumsq = 0.0;
    let mut valid = true;
    for &d in data {
        if !d.is_finite() {
            valid = false;
        }
        sum += d;
        sumsq += d * d;
    }
    let mean = sum / data.len() as f64;
    let mut sst = 0.0;
    for &d in data {
        let r = d - mean;
        sst += r * r;
    }
    (valid && sst > 0.0, sst, sumsq)
}

/// Fit one voxel (f64).
pub(crate) fn fit_voxel(setup: &Setup, problem: &Problem, data: &[f64]) -> VoxelFit {
    let mut evals = 0;
    by_flags!(
        setup.model,
        fit_voxel_impl,
        (setup, problem, data, &mut evals)
    )
}

/// Mean number of model evaluations per voxel of the CPU fit over `curves` (cost passes for
/// Nelder-Mead; cost and Jacobian passes for LM, a Jacobian pass counted as one): for
/// performance accounting (`biogpu-bench` divides kernel times by it).
pub(crate) fn mean_evaluations(curves: ArrayView2<f32>, problem: &Problem, setup: &Setup) -> f64 {
    let total: u64 = (0..curves.nrows())
        .into_par_iter()
        .map(|v| {
            let data: Vec<f64> = curves.row(v).iter().map(|&c| f64::from(c)).collect();
            let mut evals = 0;
            by_flags!(
                setup.model,
                fit_voxel_impl,
                (setup, problem, &data, &mut evals)
            );
            evals
        })
        .sum();
    total as f64 / curves.nrows().max(1) as f64
}

fn fit_voxel_impl<const TI: bool, const TE: bool, const VA: bool>(
    setup: &Setup,
    problem: &Problem,
    data: &[f64],
    evals: &mut u64,
) -> VoxelFit {
    let (valid, sst, sumsq) = curve_stats(data);
    if !valid {
        return VoxelFit {
            params: [f64::NAN; MAX_PARAMS],
            sse: f64::NAN,
            r2: f64::NAN,
            iterations: 0,
            status: FitStatus::InvalidInput,
        };
    }
    let model = setup.model;
    let b = &setup.bounds;
    let count = std::cell::Cell::new(0u64);
    let mut cost = |x: &[f64; MAX_PARAMS]| {
        count.set(count.get() + 1);
        let f = sse::<TI, TE, VA>(problem, &canonical(model, x), data);
        if f < f64::INFINITY { f } else { f64::INFINITY }
    };
    let mut x0 = setup.start;
    b.project(&mut x0);
    // The searched starts; the fit begins at the one that fits best where it beats the given
    // start (ties: the earlier, the given first).
    let seeds = setup
        .plan
        .as_ref()
        .map_or_else(Vec::new, |plan| lls_starts(plan, data, b, &x0));
    let mut chosen = None;
    let mut best = cost(&x0);
    for (g, seed) in seeds.iter().enumerate() {
        let f = cost(seed);
        if f < best {
            best = f;
            chosen = Some(g);
        }
    }
    if let Some(g) = chosen {
        x0 = seeds[g];
    }
    let (x, f, iterations, end) = match setup.method {
        Method::NelderMead => {
            let o = nelder_mead(&mut cost, &x0, b, &setup.nm);
            let end = if o.converged {
                LmEnd::Converged
            } else {
                LmEnd::MaxIterations
            };
            (o.x, o.f, o.iterations, end)
        }
        Method::LevenbergMarquardt => {
            let np = b.np;
            let mut nrm = |x: &[f64; MAX_PARAMS]| {
                count.set(count.get() + 1);
                normal::<TI, TE, VA>(problem, &canonical(model, x), &chain(model, x), np, data)
            };
            let mut s = setup.lm;
            s.floor = setup.floor_rel * setup.floor_rel * sumsq;
            s.max_delay_step = problem.mean_interval();
            let inv_dt = problem.inv_dt;
            // A run that stalls on a kink of a delay's cost ended at a minimum.
            let mut lm = |x0: &[f64; MAX_PARAMS]| {
                let mut o = levenberg_marquardt(&mut nrm, &mut cost, x0, b, &s);
                if o.end == LmEnd::Failed && o.f < f64::INFINITY && on_kink(model, &o.x, b, inv_dt)
                {
                    o.end = LmEnd::Converged;
                }
                o
            };
            // Restarts from the other searched starts, then from either side of the kinks
            // the best fit's delays sit on; a restart wins only with a strictly lower cost.
            let mut o = lm(&x0);
            let others = seeds
                .iter()
                .enumerate()
                .filter(|&(g, _)| Some(g) != chosen)
                .map(|(_, seed)| *seed);
            for seed in others.collect::<Vec<_>>() {
                let r = lm(&seed);
                if r.f < o.f {
                    o = r;
                }
            }
            for e in 0..2 * np {
                if let Some(seed) = kink_escape(model, &o.x, b, inv_dt, e) {
                    let r = lm(&seed);
                    if r.f < o.f {
                        o = r;
                    }
                }
            }
            (o.x, o.f, o.iterations, o.end)
        }
    };
    *evals += count.get();
    let status = if !(f < f64::INFINITY) {
        FitStatus::Failed
    } else {
        match end {
            LmEnd::Failed => FitStatus::Failed,
            LmEnd::MaxIterations => FitStatus::MaxIterations,
            LmEnd::Converged if b.at_bound(&x) => FitStatus::AtBound,
            LmEnd::Converged => FitStatus::Converged,
        }
    };
    VoxelFit {
        params: x,
        sse: f,
        r2: 1.0 - f / sst,
        iterations,
        status,
    }
}
