//! GPU tuning of the speckle paths: settings that change speed, never results.

use crate::error::{Error, Result};

/// How the GPU paths run. `Default` is the tuned behaviour; the library never reads the
/// environment: callers (CLI, benchmarks, tests) build this once, e.g. with
/// [`GpuTuning::from_lookup`] over the process environment, and pass it in the params.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GpuTuning {
    /// Batches in flight on the GPU streaming path, each on its own worker thread and
    /// stream: one uploading, one computing, one downloading. (More workers do not raise
    /// the rate: the host link is the limit.) At least 1.
    pub stream_workers: usize,
}

impl Default for GpuTuning {
    fn default() -> Self {
        Self { stream_workers: 3 }
    }
}

impl GpuTuning {
    /// Variable that overrides [`GpuTuning::stream_workers`].
    pub const STREAM_WORKERS_ENV: &'static str = "BIOGPU_SPECKLE_STREAM_WORKERS";

    /// The defaults, overridden by the variables `lookup` finds
    /// ([`Self::STREAM_WORKERS_ENV`]); an unparsable value is an error naming it.
    ///
    /// ```
    /// use speckle_core::GpuTuning;
    /// let t = GpuTuning::from_lookup(|k| (k == "BIOGPU_SPECKLE_STREAM_WORKERS").then(|| "2".into()))?;
    /// assert_eq!(t.stream_workers, 2);
    /// assert_eq!(GpuTuning::from_lookup(|_| None)?, GpuTuning::default());
    /// assert!(GpuTuning::from_lookup(|_| Some("many".into())).is_err());
    /// # Ok::<(), speckle_core::Error>(())
    /// ```
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self> {
        let mut t = Self::default();
        if let Some(v) = lookup(Self::STREAM_WORKERS_ENV) {
            t.stream_workers = match v.trim().parse::<usize>() {
                Ok(n) if n >= 1 => n,
                _ => {
                    return Err(Error::InvalidParameter {
                        name: Self::STREAM_WORKERS_ENV,
                        value: v,
                        why: "expected a whole number of at least 1, such as 3".into(),
                    });
                }
            };
        }
        Ok(t)
    }
}
