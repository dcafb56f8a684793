//! Global analysis: lifetimes (and the IRF shift, where fitted) shared by every pixel of a
//! segment, amplitudes (and offset) per pixel, on the same objectives as the per-pixel fit.
//!
//! Levenberg-Marquardt on the joint parameters with the block structure eliminated
//! (Schur complement, as variable projection does): each pixel's small amplitude block is
//! solved locally, the shared lifetimes from the reduced system, so an iteration costs
//! O(pixels x bins) and the decay components are evaluated once per segment. Started from
//! a fit of the segment's summed decay.

// `!(x > 0.0)` is meant: it is also true for NaN.
#![allow(clippy::neg_cmp_op_on_partial_ord)]

use crate::cpu::lm::{STATIONARY, fit_pixel, initial_guess};
use crate::error::Result;
use crate::model::cube::{Count, Cube};
use crate::model::fit::{DecayFit, Estimator, FitMaps, FitOptions, FitStatus, pearson_term, term};
use crate::model::fit_model::{MAX_PARAMS, ModelSetup, Work};
use crate::model::segments::{Segments, segment_pixels};
use gpu_kernels::linalg::solve_spd;
use rayon::prelude::*;

/// Shared and local parameter maps into the per-pixel parameter vector.
struct Layout {
    /// Full-vector index of each shared parameter (log-lifetimes, then the shift).
    shared: Vec<usize>,
    /// Full-vector index of each local parameter (amplitudes, then the offset).
    local: Vec<usize>,
}

impl Layout {
    fn new(su: &ModelSetup) -> Self {
        let k = su.k;
        let mut shared: Vec<usize> = (k..2 * k).collect();
        shared.extend(su.shift_index());
        let mut local: Vec<usize> = (0..k).collect();
        local.extend(su.offset_index());
        Layout { shared, local }
    }
}

type Block = [[f64; MAX_PARAMS]; MAX_PARAMS];

/// Result of one segment.
pub(crate) struct SegmentFit {
    /// Full parameter vector of each pixel.
    pub thetas: Vec<[f64; MAX_PARAMS]>,
    /// Goodness of fit of each pixel: its objective, or Pearson's chi^2 `sum (N - y)^2 / y`
    /// for [`Estimator::LeastSquaresModel`] (which minimises the deviance).
    pub objectives: Vec<f64>,
    pub iterations: u32,
    pub status: FitStatus,
}

/// Per-pixel blocks at `thetas`: objective, H_ss, H_sl, H_ll, g_s, g_l.
struct Blocks {
    obj: Vec<f64>,
    hss: Vec<Block>,
    hsl: Vec<Block>,
    hll: Vec<Block>,
    gs: Vec<[f64; MAX_PARAMS]>,
    gl: Vec<[f64; MAX_PARAMS]>,
}

fn blocks(
    su: &ModelSetup,
    lay: &Layout,
    work: &mut Work,
    thetas: &[[f64; MAX_PARAMS]],
    counts: &[&[f64]],
    est: Estimator,
) -> Blocks {
    let np = su.np();
    work.evaluate(su, &thetas[0]);
    let n = thetas.len();
    let zero = [[0.0; MAX_PARAMS]; MAX_PARAMS];
    let mut b = Blocks {
        obj: vec![0.0; n],
        hss: vec![zero; n],
        hsl: vec![zero; n],
        hll: vec![zero; n],
        gs: vec![[0.0; MAX_PARAMS]; n],
        gl: vec![[0.0; MAX_PARAMS]; n],
    };
    let mut d = [0.0; MAX_PARAMS];
    for p in 0..n {
        let theta = &thetas[p];
        for (j, &c) in counts[p].iter().enumerate() {
            let y = work.bin(su, theta, j, Some(&mut d[..np]));
            let (o, gw, hw) = term(est, c, y);
            b.obj[p] += o;
            for (u, &iu) in lay.shared.iter().enumerate() {
                b.gs[p][u] += gw * d[iu];
                for (v, &iv) in lay.shared.iter().enumerate() {
                    b.hss[p][u][v] += hw * d[iu] * d[iv];
                }
                for (v, &iv) in lay.local.iter().enumerate() {
                    b.hsl[p][u][v] += hw * d[iu] * d[iv];
                }
            }
            for (u, &iu) in lay.local.iter().enumerate() {
                b.gl[p][u] += gw * d[iu];
                for (v, &iv) in lay.local.iter().enumerate() {
                    b.hll[p][u][v] += hw * d[iu] * d[iv];
                }
            }
        }
    }
    b
}

/// `sum_j f(N_j, y_j)` of every pixel at `thetas` (no derivatives): the objective, or
/// another statistic of the fit.
fn per_pixel(
    su: &ModelSetup,
    work: &mut Work,
    thetas: &[[f64; MAX_PARAMS]],
    counts: &[&[f64]],
    f: impl Fn(f64, f64) -> f64,
) -> Vec<f64> {
    work.evaluate(su, &thetas[0]);
    thetas
        .iter()
        .zip(counts)
        .map(|(theta, c)| {
            c.iter()
                .enumerate()
                .map(|(j, &n)| f(n, work.bin(su, theta, j, None)))
                .sum()
        })
        .collect()
}

/// Objective of every pixel at `thetas` (no derivatives).
fn objectives(
    su: &ModelSetup,
    work: &mut Work,
    thetas: &[[f64; MAX_PARAMS]],
    counts: &[&[f64]],
    est: Estimator,
) -> Vec<f64> {
    per_pixel(su, work, thetas, counts, |n, y| term(est, n, y).0)
}

/// Invert a small symmetric positive definite matrix (size `n`) by solving for each unit
/// vector; `None` when not positive definite.
fn inverse(m: &Block, n: usize) -> Option<Block> {
    let mut inv = [[0.0; MAX_PARAMS]; MAX_PARAMS];
    for c in 0..n {
        let mut e = [0.0; MAX_PARAMS];
        e[c] = 1.0;
        let mut x = [0.0; MAX_PARAMS];
        if !solve_spd(m, &e, &mut x, n) {
            return None;
        }
        for r in 0..n {
            inv[r][c] = x[r];
        }
    }
    Some(inv)
}

/// Fit one segment: `counts[p]` the fit range of its pixel `p`.
pub(crate) fn fit_segment(su: &ModelSetup, counts: &[&[f64]], opts: &FitOptions) -> SegmentFit {
    let est = opts.estimator();
    let lay = Layout::new(su);
    let (ns, nl) = (lay.shared.len(), lay.local.len());
    let np = su.np();
    let mut work = Work::default();
    // Start: the summed decay's fit gives the shared parameters; amplitudes per pixel.
    let m = su.m;
    let mut sum = vec![0.0; m];
    for c in counts {
        for (s, v) in sum.iter_mut().zip(c.iter()) {
            *s += v;
        }
    }
    let theta0 = initial_guess(su, &mut work, &sum, opts.lifetimes());
    let pooled = fit_pixel(
        su,
        &mut work,
        &sum,
        est,
        &theta0,
        opts.max_iterations(),
        opts.tolerance(),
    );
    let mut taus = vec![0.0; su.k];
    for i in 0..su.k {
        taus[i] = pooled.theta[su.k + i].exp();
    }
    let mut thetas: Vec<[f64; MAX_PARAMS]> = counts
        .iter()
        .map(|c| {
            let mut t = initial_guess(su, &mut work, c, Some(&taus));
            for &i in &lay.shared {
                t[i] = pooled.theta[i];
            }
            t
        })
        .collect();
    let mut b = blocks(su, &lay, &mut work, &thetas, counts, est);
    let mut obj: f64 = b.obj.iter().sum();
    let mut lambda = 1e-3;
    let mut status = FitStatus::Failed;
    let mut iterations = 0;
    while iterations < opts.max_iterations() {
        iterations += 1;
        if !obj.is_finite() {
            break;
        }
        // Reduced system for the shared parameters.
        let mut hss = [[0.0; MAX_PARAMS]; MAX_PARAMS];
        let mut gs = [0.0; MAX_PARAMS];
        for p in 0..thetas.len() {
            for u in 0..ns {
                gs[u] += b.gs[p][u];
                for v in 0..ns {
                    hss[u][v] += b.hss[p][u][v];
                }
            }
        }
        let damp = |d: f64| d + lambda * d.max(1e-12 * (1.0 + d));
        let mut shared_g_full = [0.0; MAX_PARAMS];
        for (u, &i) in lay.shared.iter().enumerate() {
            shared_g_full[i] = gs[u];
        }
        let shared_blocked: Vec<bool> = (0..ns)
            .map(|u| su.blocked(&thetas[0], &shared_g_full, lay.shared[u]))
            .collect();
        let mut reduced = hss;
        let mut rhs = [0.0; MAX_PARAMS];
        for u in 0..ns {
            reduced[u][u] = damp(hss[u][u]);
            rhs[u] = -gs[u];
        }
        let mut local_inv = Vec::with_capacity(thetas.len());
        let mut local_blocked = Vec::with_capacity(thetas.len());
        let mut ok = true;
        for p in 0..thetas.len() {
            let mut full_g = [0.0; MAX_PARAMS];
            for (u, &i) in lay.local.iter().enumerate() {
                full_g[i] = b.gl[p][u];
            }
            let blocked: Vec<bool> = (0..nl)
                .map(|u| su.blocked(&thetas[p], &full_g, lay.local[u]))
                .collect();
            let mut hll = b.hll[p];
            for u in 0..nl {
                if blocked[u] {
                    for v in 0..nl {
                        hll[u][v] = 0.0;
                        hll[v][u] = 0.0;
                    }
                    hll[u][u] = 1.0;
                } else {
                    hll[u][u] = damp(b.hll[p][u][u]);
                }
            }
            let Some(inv) = inverse(&hll, nl) else {
                ok = false;
                break;
            };
            // reduced -= H_sl inv H_ls; rhs -= H_sl inv (-g_l)... with blocked columns zeroed.
            let mut hsl = b.hsl[p];
            let mut gl = b.gl[p];
            for u in 0..nl {
                if blocked[u] {
                    for row in hsl.iter_mut().take(ns) {
                        row[u] = 0.0;
                    }
                    gl[u] = 0.0;
                }
            }
            for u in 0..ns {
                for v in 0..ns {
                    let mut acc = 0.0;
                    for a in 0..nl {
                        for c in 0..nl {
                            acc += hsl[u][a] * inv[a][c] * hsl[v][c];
                        }
                    }
                    reduced[u][v] -= acc;
                }
                let mut acc = 0.0;
                for a in 0..nl {
                    for c in 0..nl {
                        acc += hsl[u][a] * inv[a][c] * gl[c];
                    }
                }
                rhs[u] += acc;
            }
            local_inv.push(inv);
            local_blocked.push(blocked);
        }
        for u in 0..ns {
            if shared_blocked[u] {
                for v in 0..ns {
                    reduced[u][v] = 0.0;
                    reduced[v][u] = 0.0;
                }
                reduced[u][u] = 1.0;
                rhs[u] = 0.0;
            }
        }
        let mut ds = [0.0; MAX_PARAMS];
        if !ok || !solve_spd(&reduced, &rhs, &mut ds, ns) {
            lambda *= 10.0;
            if lambda > 1e16 {
                break;
            }
            continue;
        }
        let mut trial = thetas.clone();
        for (p, t) in trial.iter_mut().enumerate() {
            // dl = inv (-g_l - H_ls ds)
            let mut r = [0.0; MAX_PARAMS];
            for u in 0..nl {
                if local_blocked[p][u] {
                    continue;
                }
                r[u] = -b.gl[p][u];
                for v in 0..ns {
                    r[u] -= b.hsl[p][v][u] * ds[v];
                }
            }
            for u in 0..nl {
                let mut dl = 0.0;
                for v in 0..nl {
                    dl += local_inv[p][u][v] * r[v];
                }
                if !local_blocked[p][u] {
                    t[lay.local[u]] += dl;
                }
            }
            for (u, &i) in lay.shared.iter().enumerate() {
                t[i] += ds[u];
            }
            su.project(&mut t[..np]);
        }
        let t_obj: f64 = objectives(su, &mut work, &trial, counts, est).iter().sum();
        if t_obj.is_finite() && t_obj < obj {
            let small = obj - t_obj <= opts.tolerance() * t_obj.abs().max(1e-300);
            thetas = trial;
            b = blocks(su, &lay, &mut work, &thetas, counts, est);
            obj = b.obj.iter().sum();
            lambda = (lambda * 0.1).max(1e-12);
            if small {
                status = FitStatus::Converged;
                break;
            }
        } else {
            lambda *= 10.0;
            if lambda > 1e16 {
                // No step lowers the objective: a minimum only if the shared gradient
                // vanishes (the local blocks are solved exactly at each step).
                let stationary = (0..ns)
                    .all(|u| shared_blocked[u] || gs[u].abs() <= STATIONARY * hss[u][u].sqrt());
                if stationary {
                    status = FitStatus::Converged;
                }
                break;
            }
        }
    }
    if !obj.is_finite() || su.at_lifetime_bound(&thetas[0]) {
        status = FitStatus::Failed;
    }
    // Model weights iterate on the deviance; their goodness of fit is Pearson's chi^2, as
    // the per-pixel fit reports it.
    let objectives = if est == Estimator::LeastSquaresModel {
        per_pixel(su, &mut work, &thetas, counts, pearson_term)
    } else {
        b.obj
    };
    SegmentFit {
        thetas,
        objectives,
        iterations,
        status,
    }
}

/// Global fit on the CPU (f64, segments in parallel): lifetimes shared per segment, the
/// other parameters per pixel. Pixels under the threshold, outside the mask or outside
/// every segment are masked.
pub(crate) fn fit_global<T: Count>(
    cube: &Cube<T>,
    opts: &FitOptions,
    segments: &Segments,
) -> Result<FitMaps> {
    let (h, w) = cube.shape();
    let su = opts.setup(cube.bins(), cube.bin_ns(), cube.period_ns(), (h, w))?;
    let bins = cube.bins();
    let data = cube.as_slice();
    let counts: Vec<Vec<f64>> = (0..h * w)
        .into_par_iter()
        .map(|p| {
            data[p * bins + su.first..p * bins + su.first + su.m]
                .iter()
                .map(|&c| c.into())
                .collect()
        })
        .collect();
    let mask = opts.mask().map(|m| m.as_standard_layout().into_owned());
    let fitted: Vec<bool> = (0..h * w)
        .map(|p| {
            let photons: f64 = counts[p].iter().sum();
            photons >= opts.threshold()
                && photons > 0.0
                && mask
                    .as_ref()
                    .is_none_or(|m| m.as_slice().expect("standard layout")[p])
        })
        .collect();
    let segs = segment_pixels(segments, &fitted, (h, w))?;
    let results: Vec<SegmentFit> = segs
        .par_iter()
        .map(|seg| {
            let c: Vec<&[f64]> = seg.iter().map(|&p| counts[p].as_slice()).collect();
            fit_segment(&su, &c, opts)
        })
        .collect();
    let mut fits: Vec<DecayFit> = counts
        .iter()
        .map(|c| DecayFit::masked(su.k, c.iter().sum()))
        .collect();
    for (seg, r) in segs.iter().zip(&results) {
        let n = seg.len() as f64;
        // Degrees of freedom per pixel: its bins less its own parameters and its share of
        // the shared ones.
        let dof_fix = (su.np() as f64 - Layout::new(&su).local.len() as f64) * (1.0 - 1.0 / n);
        for (i, &p) in seg.iter().enumerate() {
            let mut f = DecayFit::from_theta(
                &su,
                &r.thetas[i],
                r.objectives[i],
                fits[p].intensity,
                r.iterations,
                r.status,
            );
            let dof = (su.m - su.np()) as f64;
            f.chi2_red = r.objectives[i] / (dof + dof_fix);
            fits[p] = f;
        }
    }
    Ok(FitMaps::from_fits(h, w, su.k, fits))
}
