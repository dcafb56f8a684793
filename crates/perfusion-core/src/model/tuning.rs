//! The GPU path's launch shape ([`GpuTuning`]): chosen per device by default, set by tests and
//! benchmarks, or read by the caller from the `BIOGPU_PERFUSION_*` variables
//! ([`GpuTuning::from_lookup`]). The library itself never reads the environment.

use crate::error::{Error, Result};
use gpu_kernels::perfusion::CUBES;

/// Variable naming the units per cube of the fit kernels ([`GpuTuning::cube`]).
pub const CUBE_ENV: &str = "BIOGPU_PERFUSION_CUBE";
/// Variable turning persistent units on (`1`) or off (`0`) ([`GpuTuning::persistent`]).
pub const PERSISTENT_ENV: &str = "BIOGPU_PERFUSION_PERSISTENT";
/// Variable capping the persistent units per launch ([`GpuTuning::units`]).
pub const UNITS_ENV: &str = "BIOGPU_PERFUSION_UNITS";

/// Launch shape of the GPU fits (docs/perfusion.md). Every field `None` (the `Default`) lets
/// the library choose per device; results are the same operations either way.
///
/// ```
/// use perfusion_core::GpuTuning;
/// let vars = [("BIOGPU_PERFUSION_PERSISTENT", "1"), ("BIOGPU_PERFUSION_CUBE", "32")];
/// let lookup = |k: &str| vars.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string());
/// let t = GpuTuning::from_lookup(lookup).unwrap();
/// assert_eq!((t.cube, t.persistent, t.units), (Some(32), Some(true), None));
/// assert!(GpuTuning::from_lookup(|_| Some("many".into())).is_err());
/// assert_eq!(GpuTuning::from_lookup(|_| None).unwrap(), GpuTuning::default());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct GpuTuning {
    /// Units per cube of the fit kernels, one of `gpu_kernels::perfusion::CUBES` (on CUDA it
    /// also caps registers per unit). `None`: 384 for persistent Nelder-Mead in f64, else
    /// 128. Variable [`CUBE_ENV`].
    pub cube: Option<u32>,
    /// Persistent units: Nelder-Mead units take voxels from a counter with their curves in
    /// shared memory, and LM keeps its stash in shared memory. `None`: on CUDA only.
    /// Variable [`PERSISTENT_ENV`] (`0` or `1`).
    pub persistent: Option<bool>,
    /// At most this many persistent units per launch. `None` (or 0): 2048 per streaming
    /// multiprocessor, all a GPU can keep resident. Variable [`UNITS_ENV`].
    pub units: Option<u32>,
    /// Kernel launches per round of voxels that fit on the device (benchmarks, tests).
    /// `None`: one where the curves stream in while the kernel runs (CUDA) or units are
    /// persistent, else four (each launch's curves go up while the previous one runs).
    /// No variable.
    pub launches: Option<usize>,
}

impl GpuTuning {
    /// The tuning named by the `BIOGPU_PERFUSION_*` variables as `lookup` gives them (e.g.
    /// a closure over the process environment); unset (or empty) variables keep the default. An
    /// unparsable value is an error naming the variable.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self> {
        let read = |name: &'static str, why: &str| -> Result<Option<u32>> {
            match lookup(name) {
                Some(v) if !v.trim().is_empty() => {
                    v.trim()
                        .parse::<u32>()
                        .map(Some)
                        .map_err(|_| Error::InvalidOption {
                            name,
                            value: v.clone(),
                            why: why.into(),
                        })
                }
                _ => Ok(None),
            }
        };
        let cube = read(
            CUBE_ENV,
            &format!("expected units per cube, one of {CUBES:?}"),
        )?;
        if let Some(c) = cube.filter(|c| !CUBES.contains(c)) {
            return Err(Error::InvalidOption {
                name: CUBE_ENV,
                value: c.to_string(),
                why: format!("expected units per cube, one of {CUBES:?}"),
            });
        }
        let persistent = read(PERSISTENT_ENV, "expected 0 (off) or 1 (on)")?.map(|v| v != 0);
        let units = read(UNITS_ENV, "expected a number of units (0: the default)")?;
        Ok(GpuTuning {
            cube,
            persistent,
            units: units.filter(|&u| u > 0),
            launches: None,
        })
    }

    /// Units per cube ([`GpuTuning::cube`]).
    pub fn with_cube(mut self, cube: Option<u32>) -> Self {
        self.cube = cube;
        self
    }

    /// Persistent units on or off ([`GpuTuning::persistent`]).
    pub fn with_persistent(mut self, persistent: Option<bool>) -> Self {
        self.persistent = persistent;
        self
    }

    /// Most persistent units per launch ([`GpuTuning::units`]).
    pub fn with_units(mut self, units: Option<u32>) -> Self {
        self.units = units;
        self
    }

    /// Kernel launches per round ([`GpuTuning::launches`]).
    pub fn with_launches(mut self, launches: Option<usize>) -> Self {
        self.launches = launches;
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lookup(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let vars: Vec<(String, String)> = vars
            .iter()
            .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
            .collect();
        move |k| vars.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone())
    }

    #[test]
    fn the_ci_variables_give_their_tuning() {
        let t = GpuTuning::from_lookup(lookup(&[
            (PERSISTENT_ENV, "1"),
            (CUBE_ENV, "32"),
            (UNITS_ENV, "8"),
        ]))
        .unwrap();
        assert_eq!(t.cube, Some(32));
        assert_eq!(t.persistent, Some(true));
        assert_eq!(t.units, Some(8));
        let off = GpuTuning::from_lookup(lookup(&[(PERSISTENT_ENV, "0"), (UNITS_ENV, "0")]));
        assert_eq!(off.unwrap().with_launches(None).persistent, Some(false));
        let t = GpuTuning::from_lookup(lookup(&[(UNITS_ENV, " 0 ")])).unwrap();
        assert_eq!(t, GpuTuning::default());
    }

    #[test]
    fn bad_values_name_their_variable() {
        for (k, v) in [
            (CUBE_ENV, "100"),
            (CUBE_ENV, "big"),
            (PERSISTENT_ENV, "yes"),
            (UNITS_ENV, "-3"),
        ] {
            let e = GpuTuning::from_lookup(lookup(&[(k, v)]))
                .unwrap_err()
                .to_string();
            assert!(e.contains(k) && e.contains(v.trim()), "{e}");
        }
    }
}
