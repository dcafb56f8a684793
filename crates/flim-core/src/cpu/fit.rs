//! Per-pixel fits on the CPU (f64, pixels in parallel).

// `!(x > 0.0)` is meant: it is also true for NaN.
#![allow(clippy::neg_cmp_op_on_partial_ord)]

use crate::cpu::lm::{PixelFit, fit_pixel, initial_guess};
use crate::error::Result;
use crate::model::cube::{Count, Cube};
use crate::model::fit::{DecayFit, Estimator, FitMaps, FitOptions, pearson_term};
use crate::model::fit_model::{ModelSetup, Work};
use rayon::prelude::*;

/// Fit one decay (`decay[j]` the counts of bin `j`, e.g. a region's sum).
///
/// ```
/// use flim_core::{FitOptions, Model, fit_decay};
/// use flim_core::sim::DecaySim;
/// let decay = DecaySim::new(256, 0.05, 1e6)?.expected(&[(0.3, 0.8), (0.7, 2.5)]);
/// let f = fit_decay(&decay, 0.05, 12.8, &FitOptions::new(Model::Bi))?;
/// assert!((f.tau[0] - 0.8).abs() < 1e-4 && (f.tau[1] - 2.5).abs() < 1e-4);
/// assert!((f.fraction[0] - 0.3).abs() < 1e-4);
/// # Ok::<(), flim_core::Error>(())
/// ```
pub fn fit_decay(
    decay: &[f64],
    bin_ns: f64,
    period_ns: f64,
    opts: &FitOptions,
) -> Result<DecayFit> {
    let su = opts.setup(decay.len(), bin_ns, period_ns, (1, 1))?;
    let counts = &decay[su.first..su.first + su.m];
    let mut work = Work::default();
    Ok(fit_counts(&su, &mut work, counts, opts, true))
}

/// Pearson's chi^2 `sum (N - y)^2 / y` of the model at `theta`.
fn pearson_chi2(su: &ModelSetup, work: &mut Work, theta: &[f64], counts: &[f64]) -> f64 {
    work.evaluate(su, theta);
    counts
        .iter()
        .enumerate()
        .map(|(j, &n)| pearson_term(n, work.bin(su, theta, j, None)))
        .sum()
}

/// Fit the counts of one pixel's range (`fit`: not masked by the mask).
fn fit_counts(
    su: &ModelSetup,
    work: &mut Work,
    counts: &[f64],
    opts: &FitOptions,
    fit: bool,
) -> DecayFit {
    let photons: f64 = counts.iter().sum();
    if !(fit && photons >= opts.threshold() && photons > 0.0) {
        return DecayFit::masked(su.k, photons);
    }
    let theta0 = initial_guess(su, work, counts, opts.lifetimes());
    let PixelFit {
        theta,
        objective,
        iterations,
        status,
    } = fit_pixel(
        su,
        work,
        counts,
        opts.estimator(),
        &theta0,
        opts.max_iterations(),
        opts.tolerance(),
    );
    let objective = if opts.estimator() == Estimator::LeastSquaresModel {
        pearson_chi2(su, work, &theta, counts)
    } else {
        objective
    };
    DecayFit::from_theta(su, &theta, objective, photons, iterations, status)
}

/// Fit every pixel on the CPU (f64, pixels in parallel).
pub(crate) fn fit<T: Count>(cube: &Cube<T>, opts: &FitOptions) -> Result<FitMaps> {
    let (h, w) = cube.shape();
    let su = opts.setup(cube.bins(), cube.bin_ns(), cube.period_ns(), (h, w))?;
    let bins = cube.bins();
    let data = cube.as_slice();
    let mask = opts.mask().map(|m| m.as_standard_layout().into_owned());
    let mask = mask
        .as_ref()
        .map(|m| m.as_slice().expect("standard layout"));
    let fits: Vec<DecayFit> = (0..h * w)
        .into_par_iter()
        .map_init(
            || (Work::default(), vec![0.0f64; su.m]),
            |(work, v), p| {
                let px = &data[p * bins + su.first..p * bins + su.first + su.m];
                for (d, &c) in v.iter_mut().zip(px) {
                    *d = c.into();
                }
                fit_counts(&su, work, v, opts, mask.is_none_or(|m| m[p]))
            },
        )
        .collect();
    Ok(FitMaps::from_fits(h, w, su.k, fits))
}
