//! Iterative lifetime fits, what both paths share: mono-, bi- and tri-exponential decays
//! with an offset, as a tail fit or by reconvolution with an instrument response (IRF) with
//! a fitted shift; Neyman or Pearson weighted least squares or Poisson maximum likelihood,
//! per pixel ([`fit`](crate::fit()), [`fit_decay`](crate::fit_decay)) or with lifetimes shared
//! over segments ([`fit_global`](crate::fit_global)).
//!
//! The model and its exact bin-domain reconvolution are in [`fit_model`](super::fit_model);
//! the per-pixel Levenberg-Marquardt in `cpu/lm.rs` (f64) and the kernels (f32).
//!
//! ```
//! use flim_core::{Estimator, FitOptions, FitStatus, Model, fit, sim::mono_exponential};
//! let cube = mono_exponential(&[2.0], 4, 4, 256, 0.05, 12.8, 5_000.0, 1)?;
//! let opts = FitOptions::new(Model::Mono).with_estimator(Estimator::MaximumLikelihood);
//! let (maps, _) = fit(&cube, &opts, &gpu_runtime::Device::cpu())?;
//! assert_eq!(maps.status[[1, 1]], FitStatus::Converged);
//! assert!((maps.tau[0][[1, 1]] - 2.0).abs() < 0.15);
//! # Ok::<(), flim_core::Error>(())
//! ```

// `!(x > 0.0)` is meant: it is also true for NaN.
#![allow(clippy::neg_cmp_op_on_partial_ord)]

use crate::error::{Result, invalid};
use crate::model::fit_model::{MAX_PARAMS, ModelSetup, Offset, Shift, Work};
use crate::model::segments::Segments;
use crate::model::tuning::GpuTuning;
use ndarray::{Array2, ArrayView2};
use rayon::prelude::*;

/// Decay model: how many exponential components.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Model {
    Mono,
    Bi,
    Tri,
}

impl Model {
    /// Exponential components.
    pub fn components(self) -> usize {
        match self {
            Model::Mono => 1,
            Model::Bi => 2,
            Model::Tri => 3,
        }
    }
}

/// What the fit minimises.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Estimator {
    /// Least squares with data weights `1 / max(N, 1)` (biased low at low counts: about -8%
    /// to -13% on tau at 1,000 photons).
    LeastSquaresNeyman,
    /// Least squares minimising `sum (N - y)^2 / y`, the weights' dependence on the model
    /// included (Pearson's chi^2; biased high, about +6%, at 1,000 photons).
    LeastSquaresPearson,
    /// Model-weighted least squares: weights `1 / y` from the current model, re-estimated at
    /// every iteration and held fixed within it (iteratively reweighted least squares, as
    /// flimlib's "Poisson fit" noise model). Its fixed point solves
    /// `sum (N - y) / y dy/dtheta = 0`, the Poisson likelihood equations, so it is unbiased
    /// and as precise as [`Estimator::MaximumLikelihood`]: its iterations are Fisher scoring
    /// steps, accepted by the deviance (a fixed-weight chi^2 changes with the weights and
    /// cannot judge a step). The reported `chi2_red` is Pearson's `sum (N - y)^2 / y` at the
    /// fit over the degrees of freedom (per pixel and in global analysis).
    LeastSquaresModel,
    /// Poisson maximum likelihood (deviance): the most precise at any count.
    MaximumLikelihood,
}

impl Estimator {
    /// Short name, as summaries write it: `lsq-neyman`, `lsq-pearson`, `lsq-model`, `mle`.
    pub fn name(self) -> &'static str {
        match self {
            Estimator::LeastSquaresNeyman => "lsq-neyman",
            Estimator::LeastSquaresPearson => "lsq-pearson",
            Estimator::LeastSquaresModel => "lsq-model",
            Estimator::MaximumLikelihood => "mle",
        }
    }

    /// What a fit's `chi2_red` is for this estimator (per pixel and in global analysis),
    /// in words.
    pub fn goodness_of_fit(self) -> &'static str {
        match self {
            Estimator::LeastSquaresNeyman => {
                "Neyman's chi^2, sum (N - y)^2 / max(N, 1), per degree of freedom"
            }
            Estimator::LeastSquaresPearson | Estimator::LeastSquaresModel => {
                "Pearson's chi^2, sum (N - y)^2 / y, per degree of freedom"
            }
            Estimator::MaximumLikelihood => {
                "Poisson deviance, 2 sum [y - N + N ln(N / y)], per degree of freedom"
            }
        }
    }
}

/// Outcome of a pixel's fit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[repr(u8)]
pub enum FitStatus {
    /// The objective reached a minimum inside the bounds.
    #[default]
    Converged = 0,
    /// Not fitted: under the photon threshold or outside the mask.
    Masked = 1,
    /// Iterations ran out, the numbers stopped being finite, or a lifetime hit its bound.
    Failed = 2,
}

/// Settings of [`fit`](crate::fit()) (builder style).
#[derive(Debug, Clone, PartialEq)]
pub struct FitOptions {
    model: Model,
    estimator: Estimator,
    offset: Offset,
    irf: Option<Vec<f64>>,
    shift: Shift,
    first: usize,
    bins: Option<usize>,
    threshold: f64,
    mask: Option<Array2<bool>>,
    max_iterations: u32,
    tolerance: f64,
    lifetimes: Option<Vec<f64>>,
    tuning: GpuTuning,
}

impl FitOptions {
    /// Fit `model` by maximum likelihood, no offset (fixed at 0), no IRF (tail fit over
    /// the whole window), pixels with at least 10 photons, up to 100 iterations.
    pub fn new(model: Model) -> Self {
        Self {
            model,
            estimator: Estimator::MaximumLikelihood,
            offset: Offset::Fixed(0.0),
            irf: None,
            shift: Shift::Fixed(0.0),
            first: 0,
            bins: None,
            threshold: 10.0,
            mask: None,
            max_iterations: 100,
            tolerance: 1e-9,
            lifetimes: None,
            tuning: GpuTuning::default(),
        }
    }

    /// How the GPU path runs (workers, chunk size); results do not depend on it.
    pub fn with_tuning(mut self, tuning: GpuTuning) -> Self {
        self.tuning = tuning;
        self
    }

    /// The GPU path's tuning.
    pub fn tuning(&self) -> GpuTuning {
        self.tuning
    }

    pub fn with_estimator(mut self, e: Estimator) -> Self {
        self.estimator = e;
        self
    }

    /// Background per bin: fixed (counts per bin) or fitted.
    pub fn with_offset(mut self, o: Offset) -> Self {
        self.offset = o;
        self
    }

    /// Reconvolve with this instrument response, one value per bin of the cube (any scale;
    /// it is normalised). Time zero is then the excitation, not the fit range's start.
    pub fn with_irf(mut self, irf: &[f64]) -> Self {
        self.irf = Some(irf.to_vec());
        self
    }

    /// Shift of the IRF (bins): fixed, or fitted from a start. Default fixed at 0.
    pub fn with_irf_shift(mut self, s: Shift) -> Self {
        self.shift = s;
        self
    }

    /// Fit bins `first .. first + bins` (all remaining when `None`).
    pub fn with_range(mut self, first: usize, bins: Option<usize>) -> Self {
        self.first = first;
        self.bins = bins;
        self
    }

    /// Pixels with fewer photons in the range are masked. Default 10.
    pub fn with_threshold(mut self, photons: f64) -> Self {
        self.threshold = photons;
        self
    }

    /// Fit only where `mask` is true (same shape as the image).
    pub fn with_mask(mut self, mask: ArrayView2<'_, bool>) -> Self {
        self.mask = Some(mask.to_owned());
        self
    }

    pub fn with_max_iterations(mut self, n: u32) -> Self {
        self.max_iterations = n;
        self
    }

    /// Relative decrease of the objective below which a fit has converged (default 1e-9;
    /// the f32 GPU path uses at least 1e-6).
    pub fn with_tolerance(mut self, tol: f64) -> Self {
        self.tolerance = tol;
        self
    }

    /// Starting lifetimes (ns), one per component (default: from the centre of mass).
    pub fn with_initial_lifetimes(mut self, taus: &[f64]) -> Self {
        self.lifetimes = Some(taus.to_vec());
        self
    }

    pub fn model(&self) -> Model {
        self.model
    }

    pub fn estimator(&self) -> Estimator {
        self.estimator
    }

    /// Iteration cap.
    pub fn max_iterations(&self) -> u32 {
        self.max_iterations
    }

    pub(crate) fn tolerance(&self) -> f64 {
        self.tolerance
    }

    pub(crate) fn threshold(&self) -> f64 {
        self.threshold
    }

    pub(crate) fn lifetimes(&self) -> Option<&[f64]> {
        self.lifetimes.as_deref()
    }

    pub(crate) fn mask(&self) -> Option<&Array2<bool>> {
        self.mask.as_ref()
    }

    /// The checked model setup for `bins` bins of `bin_ns`, period `period_ns`, and an
    /// image of `shape` (for the mask).
    pub(crate) fn setup(
        &self,
        bins: usize,
        bin_ns: f64,
        period_ns: f64,
        shape: (usize, usize),
    ) -> Result<ModelSetup> {
        let k = self.model.components();
        let m = self.bins.unwrap_or(bins.saturating_sub(self.first));
        if self.first >= bins || self.first + m > bins {
            return Err(invalid(
                "fit range",
                format!("bins {}..{}", self.first, self.first + m),
                format!("must lie within the cube's {bins} bins"),
            ));
        }
        let su = ModelSetup::new(
            k,
            self.first,
            m,
            bins,
            bin_ns,
            period_ns,
            self.irf.as_deref(),
            self.offset,
            self.shift,
        )?;
        if m < su.np() + 2 {
            return Err(invalid(
                "fit range",
                format!("{m} bins"),
                format!("{} parameters need at least {} bins", su.np(), su.np() + 2),
            ));
        }
        if !(self.threshold.is_finite() && self.threshold >= 0.0) {
            return Err(invalid("threshold", self.threshold, "must be >= 0 photons"));
        }
        if self.max_iterations == 0 {
            return Err(invalid("max iterations", 0, "must be >= 1"));
        }
        if !(self.tolerance.is_finite() && self.tolerance > 0.0) {
            return Err(invalid("tolerance", self.tolerance, "must be > 0"));
        }
        if let Some(t) = &self.lifetimes
            && (t.len() != k || t.iter().any(|&x| !(x.is_finite() && x > 0.0)))
        {
            return Err(invalid(
                "initial lifetimes",
                format!("{t:?}"),
                format!("need {k} values > 0 ns"),
            ));
        }
        if let Some(mask) = &self.mask
            && mask.dim() != shape
        {
            return Err(invalid(
                "mask",
                format!("{:?}", mask.dim()),
                format!("must match the image, {shape:?}"),
            ));
        }
        Ok(su)
    }
}

/// Per-pixel results of [`fit`](crate::fit()): lifetimes sorted shortest first; NaN where masked.
#[derive(Debug, Clone, PartialEq)]
pub struct FitMaps {
    /// Photons in the fit range.
    pub intensity: Array2<f32>,
    /// Lifetimes (ns), one map per component, shortest first.
    pub tau: Vec<Array2<f32>>,
    /// Amplitudes (counts per ns at time zero), same order.
    pub amplitude: Vec<Array2<f32>>,
    /// Amplitude fractions `a_k / sum a`, same order.
    pub fraction: Vec<Array2<f32>>,
    /// Background (counts per bin).
    pub offset: Array2<f32>,
    /// IRF shift (bins).
    pub shift: Array2<f32>,
    /// Amplitude-weighted mean lifetime `sum a tau / sum a` (ns).
    pub tau_amp_mean: Array2<f32>,
    /// Intensity-weighted mean lifetime `sum a tau^2 / sum a tau` (ns).
    pub tau_int_mean: Array2<f32>,
    /// Goodness of fit over degrees of freedom, near 1 for a good fit: the weighted chi^2
    /// (least squares; Pearson's `sum (N - y)^2 / y` for model weights) or the Poisson
    /// deviance (maximum likelihood).
    pub chi2_red: Array2<f32>,
    /// Levenberg-Marquardt iterations.
    pub iterations: Array2<u32>,
    pub status: Array2<FitStatus>,
}

/// One decay's fit (see [`FitMaps`] for the fields).
#[derive(Debug, Clone, PartialEq)]
pub struct DecayFit {
    pub intensity: f64,
    pub tau: Vec<f64>,
    pub amplitude: Vec<f64>,
    pub fraction: Vec<f64>,
    pub offset: f64,
    pub shift: f64,
    pub tau_amp_mean: f64,
    pub tau_int_mean: f64,
    pub chi2_red: f64,
    pub iterations: u32,
    pub status: FitStatus,
}

/// Most components of a model (tri-exponential).
const MAX_COMPONENTS: usize = 3;

/// One pixel's values as the maps store them (f32), with no heap storage: a 512x512 image
/// has a quarter of a million fits, and three small vectors per fit cost more to allocate
/// and free than the GPU takes to fit them.
#[derive(Debug, Clone, Copy)]
pub(crate) struct MapPixel {
    intensity: f32,
    tau: [f32; MAX_COMPONENTS],
    amplitude: [f32; MAX_COMPONENTS],
    fraction: [f32; MAX_COMPONENTS],
    offset: f32,
    shift: f32,
    tau_amp_mean: f32,
    tau_int_mean: f32,
    chi2_red: f32,
    iterations: u32,
    status: FitStatus,
}

/// Lifetimes and amplitudes of `theta` sorted by lifetime, with the sums the means need.
struct Derived {
    comps: [(f64, f64); MAX_COMPONENTS],
    total: f64,
    s1: f64,
    s2: f64,
}

impl Derived {
    fn new(k: usize, theta: &[f64]) -> Self {
        let mut comps = [(f64::NAN, f64::NAN); MAX_COMPONENTS];
        for (i, c) in comps.iter_mut().enumerate().take(k) {
            *c = (theta[k + i].exp(), theta[i]);
        }
        comps[..k].sort_by(|a, b| a.0.total_cmp(&b.0));
        let c = &comps[..k];
        Derived {
            comps,
            total: c.iter().map(|c| c.1).sum(),
            s1: c.iter().map(|c| c.1 * c.0).sum(),
            s2: c.iter().map(|c| c.1 * c.0 * c.0).sum(),
        }
    }
}

impl MapPixel {
    /// The maps' values of a pixel's parameters (sorted by lifetime).
    pub(crate) fn from_theta(
        su: &ModelSetup,
        theta: &[f64],
        objective: f64,
        intensity: f64,
        iterations: u32,
        status: FitStatus,
    ) -> Self {
        let d = Derived::new(su.k, theta);
        let mut px = MapPixel {
            intensity: intensity as f32,
            offset: su.offset_of(theta) as f32,
            shift: su.shift_of(theta) as f32,
            tau_amp_mean: (d.s1 / d.total) as f32,
            tau_int_mean: (d.s2 / d.s1) as f32,
            chi2_red: (objective / (su.m - su.np()) as f64) as f32,
            iterations,
            status,
            ..MapPixel::masked(intensity)
        };
        for (i, &(tau, a)) in d.comps.iter().enumerate().take(su.k) {
            px.tau[i] = tau as f32;
            px.amplitude[i] = a as f32;
            px.fraction[i] = (a / d.total) as f32;
        }
        px
    }

    /// The float values in the order [`FitMaps::fill`] writes the planes: intensity, offset, shift,
    /// the two mean lifetimes, chi^2, then tau, amplitude and fraction per component.
    fn planes(&self, k: usize) -> impl Iterator<Item = f32> + '_ {
        [
            self.intensity,
            self.offset,
            self.shift,
            self.tau_amp_mean,
            self.tau_int_mean,
            self.chi2_red,
        ]
        .into_iter()
        .chain((0..k).flat_map(|i| [self.tau[i], self.amplitude[i], self.fraction[i]]))
    }

    /// The same pixel with reduced chi^2 `chi2_red` (global analysis counts its degrees of
    /// freedom per segment).
    pub(crate) fn with_chi2_red(mut self, chi2_red: f64) -> Self {
        self.chi2_red = chi2_red as f32;
        self
    }

    pub(crate) fn masked(intensity: f64) -> Self {
        let nan = [f32::NAN; MAX_COMPONENTS];
        MapPixel {
            intensity: intensity as f32,
            tau: nan,
            amplitude: nan,
            fraction: nan,
            offset: f32::NAN,
            shift: f32::NAN,
            tau_amp_mean: f32::NAN,
            tau_int_mean: f32::NAN,
            chi2_red: f32::NAN,
            iterations: 0,
            status: FitStatus::Masked,
        }
    }

    fn of(d: &DecayFit) -> Self {
        let mut px = MapPixel {
            intensity: d.intensity as f32,
            offset: d.offset as f32,
            shift: d.shift as f32,
            tau_amp_mean: d.tau_amp_mean as f32,
            tau_int_mean: d.tau_int_mean as f32,
            chi2_red: d.chi2_red as f32,
            iterations: d.iterations,
            status: d.status,
            ..MapPixel::masked(d.intensity)
        };
        for i in 0..d.tau.len().min(MAX_COMPONENTS) {
            px.tau[i] = d.tau[i] as f32;
            px.amplitude[i] = d.amplitude[i] as f32;
            px.fraction[i] = d.fraction[i] as f32;
        }
        px
    }
}

impl DecayFit {
    /// Derived values of a pixel's parameters (sorted by lifetime).
    pub(crate) fn from_theta(
        su: &ModelSetup,
        theta: &[f64],
        objective: f64,
        intensity: f64,
        iterations: u32,
        status: FitStatus,
    ) -> Self {
        let k = su.k;
        let d = Derived::new(k, theta);
        let comps = &d.comps[..k];
        let dof = (su.m - su.np()) as f64;
        DecayFit {
            intensity,
            tau: comps.iter().map(|c| c.0).collect(),
            amplitude: comps.iter().map(|c| c.1).collect(),
            fraction: comps.iter().map(|c| c.1 / d.total).collect(),
            offset: su.offset_of(theta),
            shift: su.shift_of(theta),
            tau_amp_mean: d.s1 / d.total,
            tau_int_mean: d.s2 / d.s1,
            chi2_red: objective / dof,
            iterations,
            status,
        }
    }

    pub(crate) fn masked(k: usize, intensity: f64) -> Self {
        let nan = vec![f64::NAN; k];
        DecayFit {
            intensity,
            tau: nan.clone(),
            amplitude: nan.clone(),
            fraction: nan,
            offset: f64::NAN,
            shift: f64::NAN,
            tau_amp_mean: f64::NAN,
            tau_int_mean: f64::NAN,
            chi2_red: f64::NAN,
            iterations: 0,
            status: FitStatus::Masked,
        }
    }
}

impl FitMaps {
    /// The maps of `fits` (row-major pixels).
    pub(crate) fn from_fits(h: usize, w: usize, k: usize, fits: Vec<DecayFit>) -> Self {
        let px: Vec<MapPixel> = fits.par_iter().map(MapPixel::of).collect();
        // Three small vectors per fit: freeing them one by one is as slow as building them.
        fits.into_par_iter().for_each(drop);
        Self::from_pixels(h, w, k, &px)
    }

    /// The maps of `px` (row-major pixels).
    pub(crate) fn from_pixels(h: usize, w: usize, k: usize, px: &[MapPixel]) -> Self {
        let mut maps = Self::unfilled(h, w, k);
        maps.fill(0..h * w, |p| px[p]);
        maps
    }

    /// Maps of `h x w` pixels and `k` components whose every pixel [`FitMaps::fill`] is
    /// still to write (zeros until then: the memory is mapped lazily, so the pages are
    /// touched once, by the threads that fill them).
    pub(crate) fn unfilled(h: usize, w: usize, k: usize) -> Self {
        let z = || Array2::zeros((h, w));
        FitMaps {
            intensity: z(),
            tau: (0..k).map(|_| z()).collect(),
            amplitude: (0..k).map(|_| z()).collect(),
            fraction: (0..k).map(|_| z()).collect(),
            offset: z(),
            shift: z(),
            tau_amp_mean: z(),
            tau_int_mean: z(),
            chi2_red: z(),
            iterations: Array2::zeros((h, w)),
            status: Array2::from_elem((h, w), FitStatus::Masked),
        }
    }

    /// Write pixels `range` (row-major indices) as `px` gives them, on all cores, each
    /// pixel's values scattered once into every plane: one pass, no per-plane re-reads.
    pub(crate) fn fill(
        &mut self,
        range: std::ops::Range<usize>,
        px: impl Fn(usize) -> MapPixel + Sync,
    ) {
        const PIECE: usize = 4096;
        let k = self.tau.len();
        let FitMaps {
            intensity,
            tau,
            amplitude,
            fraction,
            offset,
            shift,
            tau_amp_mean,
            tau_int_mean,
            chi2_red,
            iterations,
            status,
        } = self;
        // The float planes in the order of `MapPixel::planes`.
        let mut floats: Vec<&mut Array2<f32>> = vec![
            intensity,
            offset,
            shift,
            tau_amp_mean,
            tau_int_mean,
            chi2_red,
        ];
        for ((t, a), f) in tau.iter_mut().zip(amplitude).zip(fraction) {
            floats.extend([t, a, f]);
        }
        let mut floats: Vec<std::slice::ChunksMut<'_, f32>> = floats
            .into_iter()
            .map(|p| p.as_slice_mut().expect("standard layout")[range.clone()].chunks_mut(PIECE))
            .collect();
        let iterations = iterations.as_slice_mut().expect("standard layout");
        let status = status.as_slice_mut().expect("standard layout");
        let pieces: Vec<_> = iterations[range.clone()]
            .chunks_mut(PIECE)
            .zip(status[range.clone()].chunks_mut(PIECE))
            .enumerate()
            .map(|(c, (it, st))| {
                let planes: Vec<&mut [f32]> = floats
                    .iter_mut()
                    .map(|p| p.next().expect("a piece per plane"))
                    .collect();
                (range.start + c * PIECE, planes, it, st)
            })
            .collect();
        pieces
            .into_par_iter()
            .for_each(|(start, mut planes, it, st)| {
                for i in 0..it.len() {
                    let v = px(start + i);
                    for (plane, value) in planes.iter_mut().zip(v.planes(k)) {
                        plane[i] = value;
                    }
                    it[i] = v.iterations;
                    st[i] = v.status;
                }
            });
    }
}

/// The fitted model's expected counts over the fit range for the parameters of `fit` (e.g.
/// to plot the fit over a decay, or to simulate exactly what the model assumes).
///
/// ```
/// use flim_core::{FitOptions, Model, fit_decay, model_curve};
/// let decay: Vec<f64> = (0..64).map(|j| 500.0 * (-(j as f64) * 0.2 / 2.0).exp()).collect();
/// let opts = FitOptions::new(Model::Mono);
/// let f = fit_decay(&decay, 0.2, 12.8, &opts)?;
/// let curve = model_curve(&opts, 64, 0.2, 12.8, &f)?;
/// assert!((curve[10] / decay[10] - 1.0).abs() < 1e-3);
/// # Ok::<(), flim_core::Error>(())
/// ```
pub fn model_curve(
    opts: &FitOptions,
    bins: usize,
    bin_ns: f64,
    period_ns: f64,
    fit: &DecayFit,
) -> Result<Vec<f64>> {
    let su = opts.setup(bins, bin_ns, period_ns, (1, 1))?;
    if fit.tau.len() != su.k || fit.amplitude.len() != su.k {
        return Err(invalid(
            "fit",
            format!("{} lifetimes", fit.tau.len()),
            format!("the model has {} components", su.k),
        ));
    }
    let mut theta = [0.0; MAX_PARAMS];
    for i in 0..su.k {
        theta[i] = fit.amplitude[i];
        theta[su.k + i] = fit.tau[i].ln();
    }
    if let Some(i) = su.offset_index() {
        theta[i] = fit.offset;
    }
    if let Some(i) = su.shift_index() {
        theta[i] = fit.shift;
    }
    let mut work = Work::default();
    work.evaluate(&su, &theta);
    Ok((0..su.m).map(|j| work.bin(&su, &theta, j, None)).collect())
}

/// The objective the fits minimise (the weighted chi^2 of least squares or the Poisson
/// deviance of maximum likelihood, as `opts` selects) of the parameters of `fit` against
/// `decay` (a pixel's `decay.len()` bins; only the fit range counts): e.g. to tell whether
/// two parameter sets are equally good fits of one decay. A difference of 1 is one
/// standard error along the worst-determined direction where the objective is quadratic.
///
/// ```
/// use flim_core::{FitOptions, Model, fit_decay, objective};
/// let decay: Vec<f64> = (0..64).map(|j| 500.0 * (-(j as f64) * 0.2 / 2.0).exp()).collect();
/// let opts = FitOptions::new(Model::Mono);
/// let mut f = fit_decay(&decay, 0.2, 12.8, &opts)?;
/// let best = objective(&opts, &decay, 0.2, 12.8, &f)?;
/// f.tau[0] *= 1.05;
/// assert!(objective(&opts, &decay, 0.2, 12.8, &f)? > best + 1.0);
/// # Ok::<(), flim_core::Error>(())
/// ```
pub fn objective(
    opts: &FitOptions,
    decay: &[f64],
    bin_ns: f64,
    period_ns: f64,
    fit: &DecayFit,
) -> Result<f64> {
    let curve = model_curve(opts, decay.len(), bin_ns, period_ns, fit)?;
    let su = opts.setup(decay.len(), bin_ns, period_ns, (1, 1))?;
    Ok(decay[su.first..su.first + su.m]
        .iter()
        .zip(&curve)
        .map(|(&n, &y)| term(opts.estimator(), n, y).0)
        .sum())
}

/// Settings of [`fit_global`](crate::fit_global): the per-pixel fit's settings and how
/// pixels are grouped to share lifetimes.
#[derive(Debug, Clone, PartialEq)]
pub struct GlobalOptions {
    /// Model, estimator, IRF, range, threshold, mask, iterations, tuning.
    pub fit: FitOptions,
    /// The segments whose pixels share lifetimes.
    pub segments: Segments,
}

impl GlobalOptions {
    /// `fit`'s settings with lifetimes shared over `segments`.
    pub fn new(fit: FitOptions, segments: Segments) -> Self {
        Self { fit, segments }
    }
}

/// Smallest model value in the Pearson and Poisson objectives (keeps them finite where the
/// model vanishes, e.g. before the IRF's rise without an offset).
const Y_FLOOR: f64 = 1e-10;

/// Pearson's chi^2 term `(N - y)^2 / y` of one bin: the goodness of fit reported for
/// [`Estimator::LeastSquaresModel`].
#[inline(always)]
pub(crate) fn pearson_term(n: f64, y: f64) -> f64 {
    let r = n - y;
    r * r / y.max(Y_FLOOR)
}

/// One bin's objective, gradient weight (d obj / d y) and curvature weight.
#[inline(always)]
pub(crate) fn term(est: Estimator, n: f64, y: f64) -> (f64, f64, f64) {
    match est {
        Estimator::LeastSquaresNeyman => {
            let w = 1.0 / n.max(1.0);
            let r = n - y;
            (w * r * r, -2.0 * w * r, 2.0 * w)
        }
        Estimator::LeastSquaresPearson => {
            let yy = y.max(Y_FLOOR);
            let r = n - y;
            (r * r / yy, -r * (n + y) / (yy * yy), 2.0 / yy)
        }
        Estimator::MaximumLikelihood | Estimator::LeastSquaresModel => {
            let yy = y.max(Y_FLOOR);
            let o = if n > 0.0 {
                2.0 * (yy - n + n * (n / yy).ln())
            } else {
                2.0 * yy
            };
            (o, 2.0 * (1.0 - n / yy), 2.0 / yy)
        }
    }
}
