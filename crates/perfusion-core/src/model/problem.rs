//! A fitting problem shared by all voxels: the time grid and the input functions, checked
//! once and prepared the way the evaluators (CPU and GPU) read them.

use super::kinetics::Model;
use crate::error::{Error, Result};

/// Relative spread of sampling intervals below which a grid counts as uniform; its intervals
/// are then set to their mean so the convolution weights are computed once per evaluation.
const UNIFORM_SPREAD: f64 = 1e-9;

/// Times (s) and input functions (concentration, e.g. mM) of a perfusion job.
///
/// ```
/// use perfusion_core::Problem;
/// let t: Vec<f64> = (0..8).map(|i| 2.0 * i as f64).collect();
/// let aif = [0.0, 0.0, 3.0, 5.0, 3.0, 2.0, 1.5, 1.2];
/// let p = Problem::new(&t, &aif, None).unwrap();
/// assert_eq!(p.len(), 8);
/// assert!(Problem::new(&t[..7], &aif, None).is_err()); // lengths disagree
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Problem {
    pub(crate) t: Vec<f64>,
    /// `dt[i] = t[i+1] - t[i]` (the mean on a uniform grid); `dt[n-1] = 0`.
    pub(crate) dt: Vec<f64>,
    pub(crate) u1: Vec<f64>,
    /// Slope of `u1` on `[t[j], t[j+1]]`; 0 at the end.
    pub(crate) s1: Vec<f64>,
    pub(crate) u2: Vec<f64>,
    pub(crate) s2: Vec<f64>,
    dual: bool,
    uniform: bool,
    /// 1 / interval on a uniform grid (samples are then indexed directly), else 0.
    pub(crate) inv_dt: f64,
}

impl Problem {
    /// Check `times` (s, strictly increasing, at least 4) and the arterial input (and the
    /// portal-venous one for the dual-input model), one value per time point.
    pub fn new(times: &[f64], arterial: &[f64], portal: Option<&[f64]>) -> Result<Self> {
        let n = times.len();
        if n < 4 {
            return Err(Error::InvalidTimes {
                why: format!("{n} time points; at least 4 are needed to fit a curve"),
            });
        }
        if let Some(i) = times.iter().position(|t| !t.is_finite()) {
            return Err(Error::InvalidTimes {
                why: format!(
                    "time {i} is {}; every time must be a finite number of seconds",
                    times[i]
                ),
            });
        }
        if let Some(i) = (1..n).find(|&i| times[i] <= times[i - 1]) {
            return Err(Error::InvalidTimes {
                why: format!(
                    "times must increase strictly, but t[{}] = {} s follows t[{}] = {} s",
                    i,
                    times[i],
                    i - 1,
                    times[i - 1]
                ),
            });
        }
        let u1 = check_input("arterial", arterial, n)?;
        let u2 = match portal {
            Some(p) => check_input("portal-venous", p, n)?,
            None => vec![0.0; n],
        };
        let mut dt: Vec<f64> = (0..n)
            .map(|i| {
                if i + 1 < n {
                    times[i + 1] - times[i]
                } else {
                    0.0
                }
            })
            .collect();
        let mean = (times[n - 1] - times[0]) / (n - 1) as f64;
        let uniform = dt[..n - 1]
            .iter()
            .all(|d| (d - mean).abs() <= UNIFORM_SPREAD * mean);
        if uniform {
            dt[..n - 1].fill(mean);
        }
        let slopes = |u: &[f64]| -> Vec<f64> {
            (0..n)
                .map(|j| {
                    if j + 1 < n {
                        (u[j + 1] - u[j]) / (times[j + 1] - times[j])
                    } else {
                        0.0
                    }
                })
                .collect()
        };
        Ok(Problem {
            t: times.to_vec(),
            dt,
            s1: slopes(&u1),
            s2: slopes(&u2),
            u1,
            u2,
            dual: portal.is_some(),
            uniform,
            inv_dt: if uniform { 1.0 / mean } else { 0.0 },
        })
    }

    /// Number of time points.
    pub fn len(&self) -> usize {
        self.t.len()
    }

    pub fn is_empty(&self) -> bool {
        self.t.is_empty()
    }

    /// The sampling times (s).
    pub fn times(&self) -> &[f64] {
        &self.t
    }

    /// The arterial input function.
    pub fn arterial(&self) -> &[f64] {
        &self.u1
    }

    /// The portal-venous input function, when given.
    pub fn portal(&self) -> Option<&[f64]> {
        self.dual.then_some(self.u2.as_slice())
    }

    /// Mean sampling interval (s).
    pub fn mean_interval(&self) -> f64 {
        let n = self.t.len();
        (self.t[n - 1] - self.t[0]) / (n - 1) as f64
    }

    /// Whether the grid is uniform (convolution weights computed once per evaluation).
    pub fn is_uniform(&self) -> bool {
        self.uniform
    }

    /// Check that `model` can be fitted with these inputs.
    pub(crate) fn check_model(&self, model: Model) -> Result<()> {
        if model.dual_input() && !self.dual {
            return Err(Error::InvalidInputFunction {
                which: "portal-venous",
                why: "missing: the dual-input model needs an arterial and a portal-venous input function".into(),
            });
        }
        Ok(())
    }
}

fn check_input(which: &'static str, u: &[f64], n: usize) -> Result<Vec<f64>> {
    if u.len() != n {
        return Err(Error::LengthMismatch {
            what: format!("{which} input function"),
            expected: n,
            got: u.len(),
        });
    }
    if let Some(i) = u.iter().position(|v| !v.is_finite()) {
        return Err(Error::InvalidInputFunction {
            which,
            why: format!("value {i} is {}; input functions must be finite", u[i]),
        });
    }
    if u.iter().all(|&v| v == 0.0) {
        return Err(Error::InvalidInputFunction {
            which,
            why: "all values are zero: no contrast arrived (check the ROI or the CSV column)"
                .into(),
        });
    }
    Ok(u.to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(n: usize) -> Vec<f64> {
        (0..n).map(|i| i as f64 * 1.5).collect()
    }

    #[test]
    fn bad_times_and_inputs_are_errors_that_say_what_is_wrong() {
        let aif: Vec<f64> = (0..6).map(|i| i as f64).collect();
        let mut times = t(6);
        times[3] = times[2];
        let e = Problem::new(&times, &aif, None).unwrap_err().to_string();
        assert!(e.contains("increase strictly") && e.contains("t[3]"), "{e}");
        times[3] = f64::NAN;
        assert!(
            Problem::new(&times, &aif, None)
                .unwrap_err()
                .to_string()
                .contains("finite")
        );
        let e = Problem::new(&t(6), &aif[..5], None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("5 values") && e.contains("has 6"), "{e}");
        let e = Problem::new(&t(6), &[0.0; 6], None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("all values are zero"), "{e}");
        let mut bad = aif.clone();
        bad[2] = f64::INFINITY;
        assert!(Problem::new(&t(6), &bad, None).is_err());
        let e = Problem::new(&t(3), &aif[..3], None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("at least 4"), "{e}");
        let p = Problem::new(&t(6), &aif, None).unwrap();
        let e = p.check_model(Model::DualInput).unwrap_err().to_string();
        assert!(e.contains("portal-venous") && e.contains("missing"), "{e}");
    }

    #[test]
    fn uniform_grids_get_identical_intervals() {
        let times: Vec<f64> = (0..50).map(|i| i as f64 * 0.1).collect();
        let p = Problem::new(&times, &vec![1.0; 50], None).unwrap();
        assert!(p.is_uniform());
        assert!(p.dt[..49].iter().all(|&d| d == p.dt[0]));
        let mut ragged = times.clone();
        ragged[10] += 0.03;
        let p = Problem::new(&ragged, &vec![1.0; 50], None).unwrap();
        assert!(!p.is_uniform());
        assert!((p.dt[9] - 0.13).abs() < 1e-12);
    }
}
