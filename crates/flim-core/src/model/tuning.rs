//! How the GPU path is run: pipeline workers and chunk size. Results do not depend on
//! either (tested bit for bit); only the time does.

use crate::error::{Result, invalid};

/// Most pipeline workers.
pub const MAX_WORKERS: usize = 16;

/// Settings of the GPU path's chunk pipeline (see `gpu/pipeline.rs`).
///
/// [`GpuTuning::default`] is the tuned setting; [`GpuTuning::from_lookup`] reads the
/// variables below from any source (the CLI, xtask and tests pass the environment):
///
/// | field        | variable                | default | range     |
/// |--------------|-------------------------|---------|-----------|
/// | `workers`    | `BIOGPU_FLIM_WORKERS`   | 3       | 1 ..= 16  |
/// | `chunk_mib`  | `BIOGPU_FLIM_CHUNK_MIB` | 16      | >= 1      |
///
/// ```
/// use flim_core::GpuTuning;
/// let t = GpuTuning::from_lookup(|k| (k == "BIOGPU_FLIM_WORKERS").then(|| "1".to_string()))?;
/// assert_eq!((t.workers, t.chunk_mib), (1, 16));
/// assert!(GpuTuning::from_lookup(|_| Some("many".into())).is_err());
/// # Ok::<(), flim_core::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct GpuTuning {
    /// Pipeline workers, chunks in flight (1 = sequential).
    pub workers: usize,
    /// Largest chunk of counts per transfer (MiB) for the transfer-bound methods.
    pub chunk_mib: usize,
}

impl Default for GpuTuning {
    fn default() -> Self {
        Self {
            workers: 3,
            chunk_mib: 16,
        }
    }
}

impl GpuTuning {
    /// Names the number of pipeline workers.
    pub const WORKERS_VAR: &'static str = "BIOGPU_FLIM_WORKERS";
    /// Names the largest chunk (MiB).
    pub const CHUNK_MIB_VAR: &'static str = "BIOGPU_FLIM_CHUNK_MIB";

    /// The default, with each variable `lookup` gives a value for parsed in its place
    /// (the CLI, xtask and tests pass the process environment); an unparsable or
    /// out-of-range value is an error naming the variable.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self> {
        let mut t = Self::default();
        if let Some(v) = lookup(Self::WORKERS_VAR) {
            t.workers = match v.trim().parse::<usize>() {
                Ok(w) if (1..=MAX_WORKERS).contains(&w) => w,
                _ => {
                    return Err(invalid(
                        Self::WORKERS_VAR,
                        v,
                        format!("must be a whole number from 1 to {MAX_WORKERS}"),
                    ));
                }
            };
        }
        if let Some(v) = lookup(Self::CHUNK_MIB_VAR) {
            t.chunk_mib = match v.trim().parse::<usize>() {
                Ok(m) if m >= 1 => m,
                _ => {
                    return Err(invalid(
                        Self::CHUNK_MIB_VAR,
                        v,
                        "must be a whole number >= 1",
                    ));
                }
            };
        }
        Ok(t)
    }

    /// Pipeline workers, clamped to 1 ..= [`MAX_WORKERS`].
    pub fn workers(&self) -> usize {
        self.workers.clamp(1, MAX_WORKERS)
    }

    /// Largest chunk of counts per transfer (bytes).
    pub fn chunk_bytes(&self) -> usize {
        self.chunk_mib.max(1) << 20
    }

    /// Set the pipeline workers (1 ..= 16).
    pub fn with_workers(mut self, workers: usize) -> Self {
        self.workers = workers;
        self
    }

    /// Set the largest chunk (MiB).
    pub fn with_chunk_mib(mut self, mib: usize) -> Self {
        self.chunk_mib = mib;
        self
    }
}

#[cfg(test)]
mod tests {
    use super::GpuTuning;

    #[test]
    fn lookup_parses_the_variables_and_rejects_bad_values() {
        assert_eq!(
            GpuTuning::from_lookup(|_| None).unwrap(),
            GpuTuning::default()
        );
        let t = GpuTuning::from_lookup(|k| match k {
            "BIOGPU_FLIM_WORKERS" => Some("5".into()),
            "BIOGPU_FLIM_CHUNK_MIB" => Some("64".into()),
            _ => None,
        })
        .unwrap();
        assert_eq!((t.workers, t.chunk_bytes()), (5, 64 << 20));
        for bad in ["0", "17", "x", ""] {
            let e = GpuTuning::from_lookup(|k| (k == "BIOGPU_FLIM_WORKERS").then(|| bad.into()));
            assert!(
                e.unwrap_err().to_string().contains("BIOGPU_FLIM_WORKERS"),
                "{bad}"
            );
        }
        assert!(
            GpuTuning::from_lookup(|k| (k == "BIOGPU_FLIM_CHUNK_MIB").then(|| "0".into())).is_err()
        );
    }
}
