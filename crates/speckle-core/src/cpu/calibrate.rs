//! Calibration of the coherence factor beta from a K map.

// ndarray views are cheap handles, taken by value as ndarray's own APIs do.
#![allow(clippy::needless_pass_by_value)]

use ndarray::{ArrayView2, Zip};

use crate::error::{Error, Result};
use crate::model::flow::BetaSource;

/// Calibrate the coherence factor beta from a K map (NaN pixels are ignored).
///
/// ```
/// use ndarray::Array2;
/// use speckle_core::{BetaSource, cpu::calibrate_beta};
/// let k = Array2::from_shape_fn((10, 10), |(y, x)| if x < 5 { 0.7f32 } else { 0.2 });
/// let mask = Array2::from_shape_fn((10, 10), |(_, x)| x < 5);
/// let b = calibrate_beta(k.view(), BetaSource::Static(mask.view()))?;
/// assert!((b - 0.49).abs() < 1e-6);
/// assert!((calibrate_beta(k.view(), BetaSource::Percentile(99.0))? - 0.49).abs() < 1e-6);
/// # Ok::<(), speckle_core::Error>(())
/// ```
pub fn calibrate_beta(k: ArrayView2<f32>, source: BetaSource<'_>) -> Result<f64> {
    let none = || Error::InvalidParameter {
        name: "beta calibration",
        value: "no finite K".into(),
        why: "the region holds no finite K value; choose a region with signal".into(),
    };
    match source {
        BetaSource::Static(mask) => {
            if mask.dim() != k.dim() {
                return Err(Error::FrameSizeMismatch {
                    what: "static-region mask".into(),
                    expected_w: k.ncols(),
                    expected_h: k.nrows(),
                    got_w: mask.ncols(),
                    got_h: mask.nrows(),
                });
            }
            let (mut sum, mut n) = (0.0, 0usize);
            Zip::from(&k).and(&mask).for_each(|&k, &m| {
                if m && k.is_finite() {
                    sum += f64::from(k) * f64::from(k);
                    n += 1;
                }
            });
            if n == 0 {
                Err(none())
            } else {
                Ok(sum / n as f64)
            }
        }
        BetaSource::Percentile(p) => {
            if !(p > 0.0 && p <= 100.0) {
                return Err(Error::InvalidParameter {
                    name: "percentile",
                    value: p.to_string(),
                    why: "use a percentile in (0, 100], e.g. 99".into(),
                });
            }
            let mut v: Vec<f64> = k
                .iter()
                .filter(|k| k.is_finite())
                .map(|&k| f64::from(k) * f64::from(k))
                .collect();
            if v.is_empty() {
                return Err(none());
            }
            let i = ((p / 100.0 * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1;
            Ok(*v.select_nth_unstable_by(i, f64::total_cmp).1)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::Array2;

    #[test]
    fn beta_calibration() {
        let k = Array2::from_shape_fn((20, 20), |(y, x)| {
            if y < 4 {
                0.8f32
            } else {
                0.05 + 0.001 * x as f32
            }
        });
        let mask = Array2::from_shape_fn((20, 20), |(y, _)| y < 4);
        let b = calibrate_beta(k.view(), BetaSource::Static(mask.view())).unwrap();
        assert!((b - 0.64).abs() < 1e-6, "{b}");
        let p = calibrate_beta(k.view(), BetaSource::Percentile(50.0)).unwrap();
        assert!(p < 0.01, "median K^2 of the flow region, got {p}");
        assert!(calibrate_beta(k.view(), BetaSource::Percentile(0.0)).is_err());
        assert!(calibrate_beta(k.view(), BetaSource::Percentile(101.0)).is_err());
        let wrong = Array2::from_elem((3, 3), true);
        assert!(matches!(
            calibrate_beta(k.view(), BetaSource::Static(wrong.view())),
            Err(Error::FrameSizeMismatch { .. })
        ));
        let nan = Array2::from_elem((3, 3), f32::NAN);
        assert!(calibrate_beta(nan.view(), BetaSource::Percentile(99.0)).is_err());
    }
}
