//! The lifetime methods of a whole analysis run (`biogpu flim fit`), by name, and the
//! settings of the fitting ones.

use crate::model::fit::{Estimator, FitOptions, Model};
use crate::model::fit_model::{Offset, Shift};
use crate::model::segments::Segments;
use crate::model::tuning::GpuTuning;

/// A lifetime method.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Method {
    /// Integral equation method (Simpson-weighted; Wu et al. 2016).
    Iem,
    /// Centre of mass, window-corrected.
    Cmm,
    /// Rapid lifetime determination, two gates.
    Rld,
    /// Phase lifetime from the phasor.
    Phasor,
    /// Bi-exponential centre of mass for FRET (BCMM1 and the phasor method with a known
    /// donor lifetime, else BCMM2).
    Bcmm,
    /// Levenberg-Marquardt least squares.
    Lsq,
    /// Poisson maximum likelihood by Levenberg-Marquardt.
    Mle,
    /// Global analysis: lifetimes shared by each segment, amplitudes per pixel.
    Global,
}

impl Method {
    /// The method's name in map names (`tau_<name>_ns`) and summaries.
    pub fn name(self) -> &'static str {
        match self {
            Method::Iem => "iem",
            Method::Cmm => "cmm",
            Method::Rld => "rld",
            Method::Phasor => "phasor",
            Method::Bcmm => "bcmm",
            Method::Lsq => "lsq",
            Method::Mle => "mle",
            Method::Global => "global",
        }
    }

    /// Whether the method fits a model (and can reconvolve an IRF): lsq, mle, global.
    pub fn reconvolves(self) -> bool {
        matches!(self, Method::Lsq | Method::Mle | Method::Global)
    }

    /// The names of the maps [`crate::run_method`] returns for this method, in order, known
    /// before any work (so a caller can check its output files first). `shift_fitted`: the
    /// IRF shift is fitted per pixel (a per-pixel shift map was prepared).
    pub fn map_names(self, opts: &MethodOptions, shift_fitted: bool) -> Vec<String> {
        let fixed: &[&str] = match self {
            Method::Iem => &["tau_iem_ns", "intensity"],
            Method::Cmm => &["tau_cmm_ns", "intensity"],
            Method::Rld => &["tau_rld_ns", "intensity"],
            Method::Phasor => &["tau_phase_ns", "intensity", "g", "s", "tau_mod_ns"],
            Method::Bcmm if opts.donor_tau.is_some() => &[
                "tau_avg_bcmm_ns",
                "intensity",
                "tau_f_bcmm_ns",
                "tau_d_bcmm_ns",
                "f_d_bcmm",
                "tau_avg_pm_ns",
                "tau_f_pm_ns",
                "f_d_pm",
            ],
            Method::Bcmm => &[
                "tau_avg_bcmm_ns",
                "intensity",
                "tau_f_bcmm_ns",
                "tau_d_bcmm_ns",
                "f_d_bcmm",
            ],
            Method::Lsq | Method::Mle | Method::Global => &[],
        };
        if !fixed.is_empty() {
            return fixed.iter().map(ToString::to_string).collect();
        }
        let k = opts.model.components();
        let mut names = vec![format!("tau_{}_ns", self.name()), "intensity".into()];
        for i in 1..=k {
            if k > 1 {
                names.push(format!("tau{i}_ns"));
            }
            names.push(format!("a{i}"));
            if k > 1 {
                names.push(format!("f{i}"));
            }
        }
        if k > 1 {
            names.extend(["tau_amp_mean_ns".into(), "tau_int_mean_ns".into()]);
        }
        if opts.fit_offset {
            names.push("offset".into());
        }
        if shift_fitted {
            names.push("irf_shift_fit_bins".into());
        }
        names.extend(["chi2_red".into(), "iterations".into(), "status".into()]);
        names
    }
}

/// Least-squares weights of [`Method::Lsq`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Weights {
    /// `1 / y` from the current model, re-estimated every iteration (unbiased; see
    /// [`Estimator::LeastSquaresModel`]).
    #[default]
    Model,
    /// `1 / max(N, 1)` from the data (as many tools; biased low at low counts).
    Neyman,
    /// `1 / y` from the model, minimising Pearson's chi^2 (biased high at low counts).
    Pearson,
}

/// Settings of the fitting methods (bcmm, lsq, mle, global) of a run.
#[derive(Debug, Clone, PartialEq)]
pub struct MethodOptions {
    /// Decay model (lsq, mle, global; BCMM is bi-exponential).
    pub model: Model,
    /// Least-squares weights (lsq).
    pub weights: Weights,
    /// Fit the background per pixel (lsq, mle, global) instead of fixing it.
    pub fit_offset: bool,
    /// Pixels that share lifetimes (global).
    pub segments: Segments,
    /// The free donor's lifetime in ns (bcmm): BCMM1 and PM when known, else BCMM2.
    pub donor_tau: Option<f64>,
    /// Levenberg-Marquardt iteration cap (lsq, mle, global).
    pub max_iterations: u32,
    /// How the GPU path runs.
    pub tuning: GpuTuning,
}

impl Default for MethodOptions {
    fn default() -> Self {
        Self {
            model: Model::Mono,
            weights: Weights::Model,
            fit_offset: false,
            segments: Segments::Whole,
            donor_tau: None,
            max_iterations: 100,
            tuning: GpuTuning::default(),
        }
    }
}

impl MethodOptions {
    /// The per-pixel fit's settings for `method` with the preparation's range (`first`,
    /// `bins`), threshold, background `offset` per bin and IRF (`per_pixel_shift`: the IRF
    /// shift is fitted per pixel, else fixed at 0, the IRF being shifted already).
    pub fn fit_options(
        &self,
        method: Method,
        range: Option<(usize, usize)>,
        threshold: f64,
        offset: f64,
        irf: Option<&[f64]>,
        per_pixel_shift: bool,
    ) -> FitOptions {
        let estimator = match (method, self.weights) {
            (Method::Lsq, Weights::Neyman) => Estimator::LeastSquaresNeyman,
            (Method::Lsq, Weights::Pearson) => Estimator::LeastSquaresPearson,
            (Method::Lsq, Weights::Model) => Estimator::LeastSquaresModel,
            _ => Estimator::MaximumLikelihood,
        };
        let mut opts = FitOptions::new(self.model)
            .with_estimator(estimator)
            .with_offset(if self.fit_offset {
                Offset::Fitted
            } else {
                Offset::Fixed(offset)
            })
            .with_threshold(threshold)
            .with_max_iterations(self.max_iterations)
            .with_tuning(self.tuning);
        if let Some((first, bins)) = range {
            opts = opts.with_range(first, Some(bins));
        }
        if let Some(irf) = irf {
            opts = opts.with_irf(irf).with_irf_shift(if per_pixel_shift {
                Shift::Fitted(0.0)
            } else {
                Shift::Fixed(0.0)
            });
        }
        opts
    }
}
