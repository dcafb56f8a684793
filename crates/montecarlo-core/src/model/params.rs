//! Parameters: the transport's ([`Params`], part of every [`Simulation`]), the GPU path's
//! tuning ([`GpuTuning`]) and a run's ([`RunParams`]: tuning, stop flag, progress).
//!
//! [`Simulation`]: crate::model::simulation::Simulation

use crate::error::{Error, Result};
use gpu_kernels::montecarlo::F_NESTED;
use gpu_runtime::{Backend, Device};
use std::sync::atomic::AtomicBool;

/// The kernel variants (re-exported so users need not depend on gpu-kernels).
pub use gpu_kernels::montecarlo::McVariant;

/// Transport parameters shared by the CPU and GPU paths.
#[derive(Debug, Clone, Copy)]
pub struct Params {
    /// Roulette threshold weight.
    pub wmin: f64,
    /// Roulette: survive with probability 1/prwin.
    pub prwin: f64,
    /// Stop packets after this many ns of flight (lengths in mm); None = no limit.
    pub time_limit_ns: Option<f64>,
    /// Seed of all photon streams.
    pub seed: u64,
    /// How absorbed weight and fluence are scored (default: track length, as MMC).
    pub estimator: Estimator,
    /// Specular reflection at launch: a beam source (pencil, cone, disk, Gaussian) on the
    /// mesh surface loses the normal-incidence Fresnel reflectance where the index outside
    /// differs from its start region's (as MCML and MCX do). Default on.
    pub specular: bool,
}

/// How absorbed weight (and from it fluence) is scored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Estimator {
    /// Track length (MMC's default): steps are drawn in scattering mean free paths and the
    /// weight decays as exp(-mua l) along every path segment, the loss scored in the
    /// tetrahedron it crosses. Every segment scores, so fluence is less noisy per photon.
    #[default]
    TrackLength,
    /// Interaction (absorption, MCML's): steps in total mean free paths, w mua/mu_t dropped
    /// at each interaction only.
    Interaction,
}

impl Default for Params {
    fn default() -> Self {
        Params {
            wmin: 1e-4,
            prwin: 10.0,
            time_limit_ns: None,
            seed: 1,
            estimator: Estimator::TrackLength,
            specular: true,
        }
    }
}

impl Params {
    /// Builder: seed all photon streams with `seed`.
    pub fn with_seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// Builder: stop packets after `ns` of flight (None: no limit).
    pub fn with_time_limit_ns(mut self, ns: Option<f64>) -> Self {
        self.time_limit_ns = ns;
        self
    }

    /// Builder: score absorption with `estimator`.
    pub fn with_estimator(mut self, estimator: Estimator) -> Self {
        self.estimator = estimator;
        self
    }

    /// Builder: specular reflection at launch on (default) or off.
    pub fn with_specular(mut self, specular: bool) -> Self {
        self.specular = specular;
        self
    }

    /// Builder: roulette below weight `wmin`, survivors with probability 1/`prwin`.
    pub fn with_roulette(mut self, wmin: f64, prwin: f64) -> Self {
        self.wmin = wmin;
        self.prwin = prwin;
        self
    }
}

/// Environment variable selecting the kernel variant (see [`McVariant`]'s syntax, e.g.
/// `prefetch+k2`); unset or `default` gives the default. Read by
/// [`GpuTuning::from_lookup`], never by the library itself.
pub const VARIANT_ENV: &str = "BIOGPU_MC_VARIANT";

/// How the GPU path runs: kernel variant, launch size, batch length, packing order. None of
/// these changes the result: every photon's random stream is seeded by its global index and
/// every tally is an exact integer sum.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GpuTuning {
    /// Kernel variant (`BIOGPU_MC_VARIANT`; default [`McVariant::DEFAULT`]).
    pub variant: McVariant,
    /// Cubes of `variant.units` threads per launch; None = the device's default (see
    /// [`GpuTuning::cubes_on`]).
    pub cubes: Option<u32>,
    /// Wall time aimed at per batch after the first (progress and Ctrl-C are checked
    /// between batches; each batch ends with a tail where few packets are left).
    pub batch_seconds: f64,
    /// Pack the tetrahedra in the mesh's Morton order (as the CPU path does), so that
    /// neighbours are close in memory; results are mapped back and bit-identical either way.
    pub reorder: bool,
}

impl Default for GpuTuning {
    fn default() -> Self {
        GpuTuning {
            variant: McVariant::DEFAULT,
            cubes: None,
            batch_seconds: 0.25,
            reorder: true,
        }
    }
}

impl GpuTuning {
    /// The defaults with the variant named by `BIOGPU_MC_VARIANT` ([`VARIANT_ENV`]) if
    /// `lookup` gives one; an unknown variant is an error naming the variable.
    ///
    /// ```
    /// use montecarlo_core::model::params::{GpuTuning, McVariant};
    /// let t = GpuTuning::from_lookup(|k| (k == "BIOGPU_MC_VARIANT").then(|| "keep+k2".into()))?;
    /// assert_eq!(t.variant, "keep+k2".parse::<McVariant>().unwrap());
    /// assert_eq!(GpuTuning::from_lookup(|_| None)?, GpuTuning::default());
    /// assert!(GpuTuning::from_lookup(|_| Some("fast".into())).is_err());
    /// # Ok::<(), montecarlo_core::Error>(())
    /// ```
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<GpuTuning> {
        let mut o = GpuTuning::default();
        if let Some(text) = lookup(VARIANT_ENV) {
            o.variant = text
                .parse()
                .map_err(|e: String| Error::Invalid(format!("{VARIANT_ENV}: {e}")))?;
        }
        Ok(o)
    }

    /// Builder: use `variant`.
    pub fn with_variant(mut self, variant: McVariant) -> Self {
        self.variant = variant;
        self
    }

    /// Builder: launch `cubes` cubes.
    pub fn with_cubes(mut self, cubes: u32) -> Self {
        self.cubes = Some(cubes);
        self
    }

    /// Builder: pack tetrahedra in Morton order (`true`, the default) or in mesh order.
    pub fn with_reorder(mut self, reorder: bool) -> Self {
        self.reorder = reorder;
        self
    }

    /// Builder: aim at `seconds` of wall time per batch.
    pub fn with_batch_seconds(mut self, seconds: f64) -> Self {
        self.batch_seconds = seconds;
        self
    }

    /// Cubes per launch on `device`: [`GpuTuning::cubes`] if set (at least 1), else
    /// [`default_cubes`].
    pub fn cubes_on(&self, device: &Device) -> u32 {
        self.cubes
            .unwrap_or_else(|| default_cubes(device, &self.variant))
            .max(1)
    }
}

/// Cubes per launch when nobody chose: about 2,048 threads per multiprocessor for the
/// flat loop (the photon counter hands out work, so extra cubes only wait and exit); the
/// nested variant's measured best (16,384 cubes of 128, see docs/benchmarks.md); 64 on
/// lavapipe.
pub fn default_cubes(device: &Device, variant: &McVariant) -> u32 {
    let info = device.info();
    if info.software {
        return 64;
    }
    if variant.flags & F_NESTED != 0 {
        return 16_384;
    }
    match (device.backend(), info.compute_units) {
        (Backend::Cuda, Some(sms)) => (sms * (2048 / variant.units)).max(1),
        _ => 1024,
    }
}

/// A run's parameters besides the simulation: the GPU tuning, a flag that stops the run
/// between batches (the result then covers the photons finished, normalised by their
/// number and marked interrupted) and a progress callback `progress(done, total)` called
/// between batches.
#[derive(Clone, Copy, Default)]
pub struct RunParams<'a> {
    pub tuning: GpuTuning,
    pub stop: Option<&'a AtomicBool>,
    pub progress: Option<&'a dyn Fn(u64, u64)>,
}

impl std::fmt::Debug for RunParams<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunParams")
            .field("tuning", &self.tuning)
            .field("stop", &self.stop)
            .field("progress", &self.progress.map(|_| "Fn(done, total)"))
            .finish()
    }
}

impl<'a> RunParams<'a> {
    /// Default tuning, no stop flag, no progress.
    pub fn new() -> Self {
        RunParams::default()
    }

    /// Builder: use `tuning` on GPUs.
    pub fn with_tuning(mut self, tuning: GpuTuning) -> Self {
        self.tuning = tuning;
        self
    }

    /// Builder: stop between batches once `stop` is set.
    pub fn with_stop(mut self, stop: &'a AtomicBool) -> Self {
        self.stop = Some(stop);
        self
    }

    /// Builder: call `progress(done, total)` between batches.
    pub fn with_progress(mut self, progress: &'a dyn Fn(u64, u64)) -> Self {
        self.progress = Some(progress);
        self
    }

    /// Report progress (a no-op without a callback).
    pub(crate) fn report(&self, done: u64, total: u64) {
        if let Some(p) = self.progress {
            p(done, total);
        }
    }
}
