//! The method options of `biogpu flim fit` as command-line arguments: the lifetime method,
//! the decay model and the fitting methods' settings, turned into
//! [`flim_core::MethodOptions`] (the methods themselves run in [`flim_core::run_method`]).

use anyhow::{Context, bail};
use flim_core::{GpuTuning, MethodOptions, Segments};

/// Lifetime methods.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Method {
    /// Integral equation method (Simpson-weighted; Wu et al. 2016).
    Iem,
    /// Centre of mass, window-corrected.
    Cmm,
    /// Rapid lifetime determination, two gates.
    Rld,
    /// Phase lifetime from the phasor.
    Phasor,
    /// Bi-exponential centre of mass for FRET (Wu et al. 2016; --donor-tau for BCMM1 and
    /// the phasor method, else BCMM2).
    Bcmm,
    /// Levenberg-Marquardt least squares (--weights), IRF reconvolution with --irf.
    Lsq,
    /// Poisson maximum likelihood by Levenberg-Marquardt, IRF reconvolution with --irf.
    Mle,
    /// Global analysis: lifetimes shared by each segment (--segments), amplitudes per pixel.
    Global,
}

impl From<Method> for flim_core::Method {
    fn from(m: Method) -> Self {
        match m {
            Method::Iem => Self::Iem,
            Method::Cmm => Self::Cmm,
            Method::Rld => Self::Rld,
            Method::Phasor => Self::Phasor,
            Method::Bcmm => Self::Bcmm,
            Method::Lsq => Self::Lsq,
            Method::Mle => Self::Mle,
            Method::Global => Self::Global,
        }
    }
}

/// Decay models of the fitting methods.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Model {
    /// One exponential.
    Mono,
    /// Two exponentials.
    Bi,
    /// Three exponentials.
    Tri,
}

impl From<Model> for flim_core::Model {
    fn from(m: Model) -> Self {
        match m {
            Model::Mono => Self::Mono,
            Model::Bi => Self::Bi,
            Model::Tri => Self::Tri,
        }
    }
}

/// Least-squares weights of `--method lsq`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Weights {
    /// `1 / y` from the current model, re-estimated every iteration (unbiased: converges
    /// to the Poisson maximum-likelihood lifetimes; chi2_red is Pearson's).
    Model,
    /// `1 / max(N, 1)` from the data (biased low: about -8% to -13% at 1,000 photons).
    Neyman,
    /// Minimise Pearson's chi^2 `sum (N - y)^2 / y` (biased high: about +6%).
    Pearson,
}

/// Options of the fitting methods.
#[derive(Debug, Clone, clap::Args)]
pub struct FitMethodArgs {
    /// Least-squares weights (lsq).
    #[arg(long, value_enum, default_value = "model")]
    weights: Weights,
    /// Fit the background per pixel (lsq, mle, global) instead of fixing it at --offset.
    #[arg(long)]
    fit_offset: bool,
    /// Global analysis: pixels that share lifetimes, `whole` (the image) or a number of
    /// consecutive analysed pixels (32 as in Wu et al. 2016).
    #[arg(long, default_value = "whole")]
    segments: String,
    /// BCMM: the free donor's lifetime in ns (BCMM1 and the phasor method, PM); without it
    /// the donor lifetime is estimated per pixel (BCMM2).
    #[arg(long)]
    donor_tau: Option<f64>,
    /// Levenberg-Marquardt iteration cap (lsq, mle, global).
    #[arg(long, default_value_t = 100)]
    max_iterations: u32,
}

impl FitMethodArgs {
    /// The library's options for `method` and `model` with `tuning` (the donor lifetime
    /// is checked for bcmm, the segments for global).
    pub fn options(
        &self,
        method: Method,
        model: Model,
        tuning: GpuTuning,
    ) -> anyhow::Result<MethodOptions> {
        if method == Method::Bcmm
            && model != Model::Tri
            && let Some(t) = self.donor_tau
            && !(t.is_finite() && t > 0.0)
        {
            bail!("--donor-tau {t}: expected a lifetime > 0 ns");
        }
        Ok(MethodOptions {
            model: model.into(),
            weights: match self.weights {
                Weights::Neyman => flim_core::Weights::Neyman,
                Weights::Pearson => flim_core::Weights::Pearson,
                Weights::Model => flim_core::Weights::Model,
            },
            fit_offset: self.fit_offset,
            segments: if method == Method::Global {
                parse_segments(&self.segments)?
            } else {
                Segments::Whole
            },
            donor_tau: self.donor_tau,
            max_iterations: self.max_iterations,
            tuning,
        })
    }
}

fn parse_segments(spec: &str) -> anyhow::Result<Segments> {
    if spec == "whole" {
        return Ok(Segments::Whole);
    }
    let n: usize = spec.parse().ok().filter(|&n| n >= 1).with_context(|| {
        format!("--segments {spec}: expected `whole` or a number of pixels >= 1")
    })?;
    Ok(Segments::Runs(n))
}
