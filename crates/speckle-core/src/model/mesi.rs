//! The MESI model shared by the CPU fit and the GPU kernel: parameters, K^2(T), fit
//! settings, statuses and result maps (see [`crate::cpu::mesi`] for the fit itself).

use ndarray::{Array2, ArrayView3};

use crate::error::{Error, Result};
use crate::model::flow::{ModelTerms, check_exposure, lorentzian_terms};
use crate::model::types::Map;

/// Most exposures a fit accepts (fixed-size per-pixel state).
pub const MAX_EXPOSURES: usize = 32;

/// MESI model parameters (SI units).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MesiParams {
    /// Decorrelation time in seconds.
    pub tau_c: f64,
    /// Dynamically scattered fraction of the light, 0..=1.
    pub rho: f64,
    /// Exposure-independent variance added to K^2 (noise, static non-ergodic terms), >= 0.
    pub v_noise: f64,
    /// Coherence factor (K^2 of a static sample at short exposure, minus v_noise).
    pub beta: f64,
}

/// `K^2` of the MESI model at exposure `exposure_s` (seconds).
///
/// ```
/// use speckle_core::model::mesi::{MesiParams, mesi_k2};
/// let p = MesiParams { tau_c: 1e-3, rho: 0.8, v_noise: 0.002, beta: 0.5 };
/// assert!((mesi_k2(&p, 1e-9) - 0.502).abs() < 1e-6); // x -> 0: beta + v_noise
/// let plateau = 0.5 * 0.2f64.powi(2) + 0.002; // x -> inf: beta (1 - rho)^2 + v_noise
/// assert!((mesi_k2(&p, 1e3) - plateau).abs() < 1e-5);
/// ```
pub fn mesi_k2(p: &MesiParams, exposure_s: f64) -> f64 {
    let (lt, mt) = lorentzian_pair(exposure_s / p.tau_c);
    let (l, m) = (lt.f, 0.5 * mt.f);
    let rho = p.rho;
    p.beta * (rho * rho * l + 4.0 * rho * (1.0 - rho) * m + (1.0 - rho) * (1.0 - rho)) + p.v_noise
}

/// Lorentzian terms at `x` and `x / 2` (for L and M) with a single exponential where both
/// use the closed form (x >= 0.5): `1 - e^{-2x} = e1 (2 - e1)` with `e1 = 1 - e^{-x}`.
#[inline]
pub(crate) fn lorentzian_pair(x: f64) -> (ModelTerms, ModelTerms) {
    if x < 0.5 {
        return (lorentzian_terms(x), lorentzian_terms(0.5 * x));
    }
    let e1 = -(-x).exp_m1();
    let closed = |v: f64, em1: f64| {
        let f = 2.0 * (v - em1) / (v * v);
        ModelTerms {
            f,
            g: 1.0 - f,
            s: 2.0 * em1 / v - 2.0 * f,
        }
    };
    (closed(2.0 * x, e1 * (2.0 - e1)), closed(x, e1))
}

/// Whether beta is known or fitted.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum BetaMode {
    /// Known beta (e.g. from [`crate::cpu::calibrate::calibrate_beta`]); needs >= 3 exposures.
    Fixed(f64),
    /// Fitted beta; needs >= 4 exposures.
    Free,
}

/// Fit settings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MesiOptions {
    /// Known or fitted beta.
    pub beta: BetaMode,
    /// Iteration cap (accepted or rejected steps each count one).
    pub max_iterations: u32,
    /// Relative tolerance on the cost change and on the step.
    pub tolerance: f64,
    /// Largest RMS relative K^2 residual, `sqrt(rss / exposures)`, a converged fit may keep;
    /// above it the pixel becomes [`FitStatus::PoorFit`] (`None`: no limit). Applied after
    /// the fit, identically on both paths.
    pub max_residual_rms: Option<f64>,
}

impl Default for MesiOptions {
    fn default() -> Self {
        Self {
            beta: BetaMode::Free,
            max_iterations: 200,
            tolerance: 1e-10,
            max_residual_rms: None,
        }
    }
}

impl MesiOptions {
    /// Defaults with a known beta.
    pub fn fixed_beta(beta: f64) -> Self {
        Self {
            beta: BetaMode::Fixed(beta),
            ..Self::default()
        }
    }

    /// Mark converged fits whose RMS relative residual exceeds `rms` as
    /// [`FitStatus::PoorFit`].
    pub fn with_max_residual_rms(mut self, rms: f64) -> Self {
        self.max_residual_rms = Some(rms);
        self
    }

    pub(crate) fn n_params(&self) -> usize {
        if matches!(self.beta, BetaMode::Free) {
            4
        } else {
            3
        }
    }
}

/// Outcome of one pixel's fit (stored as `u8` in maps).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum FitStatus {
    /// A convergence test passed; the parameters are a (local) least-squares minimum.
    Converged = 0,
    /// The iteration cap was reached first; the parameters are the best found.
    MaxIterations = 1,
    /// The cost could not be reduced with a non-small gradient, a value became non-finite,
    /// or tau_c ran to its bound; the parameters are not trustworthy.
    Failed = 2,
    /// Too few exposures, non-finite or non-positive K or exposures, bad beta: no fit made.
    InvalidInput = 3,
    /// The fit converged, but its RMS relative K^2 residual exceeds
    /// [`MesiOptions::max_residual_rms`]: the curve does not follow the model.
    PoorFit = 4,
}

impl FitStatus {
    /// Every status, in code order.
    pub const ALL: [FitStatus; 5] = [
        FitStatus::Converged,
        FitStatus::MaxIterations,
        FitStatus::Failed,
        FitStatus::InvalidInput,
        FitStatus::PoorFit,
    ];

    /// Lower-case name, as in summary files.
    pub fn name(self) -> &'static str {
        match self {
            FitStatus::Converged => "converged",
            FitStatus::MaxIterations => "max_iterations",
            FitStatus::Failed => "failed",
            FitStatus::InvalidInput => "invalid_input",
            FitStatus::PoorFit => "poor_fit",
        }
    }
}

/// Result of [`fit_mesi`](crate::cpu::mesi::fit_mesi).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MesiFit {
    /// Fitted parameters (NaN for [`FitStatus::InvalidInput`]).
    pub params: MesiParams,
    /// How the fit ended.
    pub status: FitStatus,
    /// Iterations used.
    pub iterations: u32,
    /// Sum of squared relative K^2 residuals at the result.
    pub rss: f64,
}

/// Fitted parameter maps of [`fit_mesi_map`](crate::cpu::mesi::fit_mesi_map).
#[derive(Debug, Clone, PartialEq)]
pub struct MesiMaps {
    /// tau_c in seconds.
    pub tau_c: Map,
    /// Dynamic fraction.
    pub rho: Map,
    /// Exposure-independent variance.
    pub v_noise: Map,
    /// Coherence factor (the fixed value where beta was given).
    pub beta: Map,
    /// Sum of squared relative K^2 residuals.
    pub rss: Map,
    /// [`FitStatus`] as `u8`.
    pub status: Array2<u8>,
}

impl MesiMaps {
    /// RMS relative K^2 residual per pixel, `sqrt(rss / exposures)` (0.01 = the fitted curve
    /// is 1% off the data on average; NaN where no fit was made).
    pub fn residual_rms(&self, exposures: usize) -> Map {
        let n = exposures.max(1) as f32;
        self.rss.mapv(|r| (r / n).sqrt())
    }

    /// Pixels per [`FitStatus`], in the order of [`FitStatus::ALL`].
    pub fn status_counts(&self) -> [usize; 5] {
        let mut c = [0usize; 5];
        for &s in &self.status {
            c[usize::from(s).min(4)] += 1;
        }
        c
    }

    /// Fraction of pixels whose fit converged (0 for an empty map).
    pub fn converged_fraction(&self) -> f64 {
        let n = self.status.len();
        if n == 0 {
            0.0
        } else {
            self.status_counts()[0] as f64 / n as f64
        }
    }

    /// The maps with NaN in tau_c, rho, v_noise and beta wherever the fit did not converge
    /// (any status but [`FitStatus::Converged`]); rss and status unchanged.
    pub fn masked(&self) -> MesiMaps {
        let mut m = self.clone();
        for map in [&mut m.tau_c, &mut m.rho, &mut m.v_noise, &mut m.beta] {
            ndarray::Zip::from(map).and(&self.status).for_each(|v, &s| {
                if s != FitStatus::Converged as u8 {
                    *v = f32::NAN;
                }
            });
        }
        m
    }

    /// Apply [`MesiOptions::max_residual_rms`]: converged pixels above it become
    /// [`FitStatus::PoorFit`].
    pub(crate) fn apply_residual_limit(&mut self, exposures: usize, opts: &MesiOptions) {
        let Some(limit) = opts.max_residual_rms else {
            return;
        };
        let n = exposures.max(1) as f64;
        ndarray::Zip::from(&mut self.status)
            .and(&self.rss)
            .for_each(|s, &r| {
                if *s == FitStatus::Converged as u8 && (f64::from(r) / n).sqrt() > limit {
                    *s = FitStatus::PoorFit as u8;
                }
            });
    }
}

/// The stack's exposure count, the times and beta make a well-posed fit.
pub(crate) fn check_inputs(ne: usize, exposures_s: &[f64], opts: &MesiOptions) -> Result<()> {
    if ne != exposures_s.len() {
        return Err(Error::InvalidParameter {
            name: "exposures",
            value: format!("{} exposure times", exposures_s.len()),
            why: format!("the K stack has {ne} exposures; give one time per K frame"),
        });
    }
    let np = opts.n_params();
    if ne < np || ne > MAX_EXPOSURES {
        return Err(Error::InvalidParameter {
            name: "exposures",
            value: ne.to_string(),
            why: format!(
                "MESI needs {np} to {MAX_EXPOSURES} exposures with beta {:?}",
                opts.beta
            ),
        });
    }
    for &t in exposures_s {
        check_exposure(t)?;
    }
    if let Some(r) = opts.max_residual_rms
        && !(r.is_finite() && r > 0.0)
    {
        return Err(Error::InvalidParameter {
            name: "max_residual_rms",
            value: r.to_string(),
            why: "must be finite and > 0, e.g. 0.1 for a 10% RMS relative K^2 residual".into(),
        });
    }
    if let BetaMode::Fixed(b) = opts.beta
        && !(b.is_finite() && b > 0.0)
    {
        return Err(Error::InvalidParameter {
            name: "beta",
            value: b.to_string(),
            why: "must be finite and > 0".into(),
        });
    }
    Ok(())
}

/// Input of [`crate::api::mesi`]: a multi-exposure K stack (exposure, row, column) and the
/// exposure time of each of its frames, in seconds.
#[derive(Debug, Clone, Copy)]
pub struct MesiInput<'a> {
    pub k: ArrayView3<'a, f32>,
    pub exposures_s: &'a [f64],
}

/// How MESI maps were computed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MesiInfo {
    /// Where it ran.
    pub backend: gpu_runtime::Backend,
    /// Pixels per [`FitStatus`], in the order of [`FitStatus::ALL`].
    pub status_counts: [usize; 5],
    /// The record to keep with the maps: library, device, precision, start time.
    pub provenance: gpu_runtime::Provenance,
}
