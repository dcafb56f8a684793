//! ROI time courses: the mean of each region in each frame.

use ndarray::{ArrayView3, Axis};
use rayon::prelude::*;

use crate::error::{Error, Result};
use crate::model::roi::{Roi, Table};

/// Mean of each ROI in each frame of `stack` (frame, row, column).
///
/// Non-finite pixels (NaN where K is undefined, infinities) are left out of the mean and
/// counted out of `valid_pixels`; a frame with no finite pixel in a ROI has mean NaN. ROIs
/// are named `roi1`, `roi2`, ... ([`Table::with_names`] renames them).
///
/// ```
/// use ndarray::Array3;
/// use speckle_core::{Roi, cpu::time_course};
/// let k = Array3::from_shape_fn((3, 8, 8), |(f, _, _)| 0.1 * f as f32);
/// let t = time_course(k.view(), &[Roi::rect(0, 0, 4, 4)]).unwrap();
/// assert!((t.mean(2, 0) - 0.2).abs() < 1e-6);
/// assert_eq!(t.valid_pixels(2, 0), 16);
/// ```
#[allow(clippy::needless_pass_by_value)] // views are passed by value throughout the crate
pub fn time_course(stack: ArrayView3<'_, f32>, rois: &[Roi]) -> Result<Table> {
    let (n, h, w) = stack.dim();
    if rois.is_empty() {
        return Err(Error::InvalidParameter {
            name: "rois",
            value: "none".into(),
            why: "give at least one ROI".into(),
        });
    }
    if n == 0 {
        return Err(Error::InvalidParameter {
            name: "stack",
            value: "0 frames".into(),
            why: "no frame to measure".into(),
        });
    }
    let pixels: Vec<Vec<usize>> = rois.iter().map(|r| r.pixels(h, w)).collect::<Result<_>>()?;
    let stack = stack.as_standard_layout();
    let per_frame: Vec<Vec<(f64, usize)>> = stack
        .axis_iter(Axis(0))
        .into_par_iter()
        .map(|frame| {
            let data = frame.to_slice().expect("standard layout");
            pixels
                .iter()
                .map(|idx| {
                    let (sum, count) = idx
                        .iter()
                        .map(|&i| data[i])
                        .filter(|v| v.is_finite())
                        .fold((0.0f64, 0usize), |(s, c), v| (s + f64::from(v), c + 1));
                    (
                        if count == 0 {
                            f64::NAN
                        } else {
                            sum / count as f64
                        },
                        count,
                    )
                })
                .collect()
        })
        .collect();
    let (mean, valid) = per_frame.into_iter().flatten().unzip();
    Ok(Table {
        names: (1..=rois.len()).map(|i| format!("roi{i}")).collect(),
        frames: n,
        mean,
        valid,
        size: pixels.iter().map(Vec::len).collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::Array3;

    #[test]
    fn time_course_ignores_nan_and_counts_valid_pixels() {
        let mut k = Array3::from_shape_fn((3, 4, 4), |(f, r, c)| (f * 100 + r * 4 + c) as f32);
        k[[1, 0, 0]] = f32::NAN;
        k[[2, 0, 0]] = f32::INFINITY;
        for r in 0..2 {
            for c in 0..2 {
                k[[0, 2 + r, 2 + c]] = f32::NAN;
            }
        }
        let rois = [Roi::rect(0, 0, 2, 2), Roi::rect(2, 2, 2, 2)];
        let t = time_course(k.view(), &rois).unwrap();
        assert_eq!(t.frames(), 3);
        assert_eq!(t.mean(0, 0), (0.0 + 1.0 + 4.0 + 5.0) / 4.0);
        assert_eq!(t.mean(1, 0), (101.0 + 104.0 + 105.0) / 3.0);
        assert_eq!(t.valid_pixels(1, 0), 3);
        assert_eq!(t.valid_pixels(2, 0), 3);
        assert!(t.mean(0, 1).is_nan());
        assert_eq!(t.valid_pixels(0, 1), 0);
        assert_eq!(t.roi_pixels(1), 4);
    }

    #[test]
    fn roi_outside_fails_time_course() {
        let k = Array3::<f32>::zeros((2, 10, 10));
        let err =
            time_course(k.view(), &[Roi::rect(0, 0, 2, 2), Roi::rect(8, 8, 4, 4)]).unwrap_err();
        assert!(err.to_string().contains("8,8,4,4"), "{err}");
    }
}
