//! Corrections around contrast: dark-frame subtraction, shot-noise correction of K^2 and
//! rolling averages of K along a stack.
//!
//! # Dark frames
//! [`subtract_dark`] returns `frame - dark` as f32 and **keeps negative values**: the window
//! sums of the contrast estimator are linear, so keeping them leaves the mean and the
//! variance of dark regions unbiased, while clamping at 0 would raise the mean and shrink
//! the variance (a K bias exactly where the signal is weakest). Windows whose mean ends up
//! <= 0 are flagged undefined by the contrast functions instead.
//!
//! # Shot noise
//! A pixel reading `I` counts holds `N_e = c I` photo-electrons (`c` in electrons per count,
//! the camera's conversion gain). Photon arrival is Poisson, `var(N_e) = N_e`, so the count
//! variance it adds is `var(I) = N_e / c^2 = I / c`, and its share of K^2 = var / mean^2 is
//! `1 / (c mean)`. Read noise of `sigma_r` counts adds `sigma_r^2 / mean^2`. Hence
//! `K_corr^2 = K^2 - 1 / (c mean) - sigma_r^2 / mean^2` (mean: dark-subtracted counts).
//! Where the noise alone exceeds the measured K^2 the corrected K^2 is negative: the
//! result is then NaN with [`flags::NOISE_DOMINATED`], never a clamped 0 that would read as
//! infinite flow.
//!
//! # Rolling average
//! [`rolling_average`] averages K over `M` consecutive frames (output `F - M + 1` frames,
//! frame `j` = frames `j ..= j + M - 1`), with running f64 sums per pixel (O(1) work per
//! frame, re-summed every `M` frames to bound rounding). It is NaN-aware: undefined (NaN)
//! pixels are skipped, and the average is NaN only when the whole window is NaN.

// ndarray views are cheap handles, taken by value as ndarray's own APIs do.
#![allow(clippy::needless_pass_by_value)]

use ndarray::{Array2, Array3, ArrayView2, ArrayView3, ArrayViewMut2, Axis, Zip};
use rayon::prelude::*;

use crate::error::{Error, Result};
use crate::model::flags;
use crate::model::types::{Map, Pixel, RawStack};

fn check_same_shape(what: &str, expected: (usize, usize), got: (usize, usize)) -> Result<()> {
    if expected == got {
        Ok(())
    } else {
        Err(Error::FrameSizeMismatch {
            what: what.to_string(),
            expected_w: expected.1,
            expected_h: expected.0,
            got_w: got.1,
            got_h: got.0,
        })
    }
}

/// `frame - dark` as f32, negative values kept (see the module docs).
///
/// ```
/// use ndarray::array;
/// use speckle_core::cpu::correct::subtract_dark;
/// let frame = array![[100u16, 5], [30, 40]];
/// let dark = array![[10.0f32, 8.0], [10.0, 10.0]];
/// assert_eq!(subtract_dark(frame.view(), dark.view())?, array![[90.0f32, -3.0], [20.0, 30.0]]);
/// # Ok::<(), speckle_core::Error>(())
/// ```
pub fn subtract_dark<T: Pixel>(frame: ArrayView2<T>, dark: ArrayView2<f32>) -> Result<Map> {
    check_same_shape("dark frame", frame.dim(), dark.dim())?;
    let mut out = Array2::zeros(frame.raw_dim());
    Zip::from(&mut out)
        .and(&frame)
        .and(&dark)
        .par_for_each(|o, &v, &d| *o = (v.to_f64() - f64::from(d)) as f32);
    Ok(out)
}

/// [`subtract_dark`] for every frame of a stack (frame, row, column).
pub fn subtract_dark_stack<T: Pixel>(
    stack: ArrayView3<T>,
    dark: ArrayView2<f32>,
) -> Result<Array3<f32>> {
    let (n, h, w) = stack.dim();
    check_same_shape("dark frame", (h, w), dark.dim())?;
    let mut out = Array3::zeros((n, h, w));
    out.outer_iter_mut()
        .into_par_iter()
        .zip(stack.outer_iter())
        .for_each(|(mut o, f)| {
            Zip::from(&mut o)
                .and(&f)
                .and(&dark)
                .for_each(|o, &v, &d| *o = (v.to_f64() - f64::from(d)) as f32);
        });
    Ok(out)
}

/// [`subtract_dark_stack`] of a stack in any pixel type: the dark-subtracted frames as f32
/// (no longer integers, so they run on the CPU path).
pub fn subtract_dark_raw(stack: &RawStack, dark: ArrayView2<f32>) -> Result<RawStack> {
    Ok(RawStack::F32(match stack {
        RawStack::U8(s) => subtract_dark_stack(s.view(), dark)?,
        RawStack::U16(s) => subtract_dark_stack(s.view(), dark)?,
        RawStack::F32(s) => subtract_dark_stack(s.view(), dark)?,
    }))
}

/// Camera noise of a shot-noise correction.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct NoiseModel {
    /// Conversion gain `c`, electrons per count (> 0), from the camera data sheet or a
    /// photon-transfer curve.
    pub e_per_count: f64,
    /// Read noise in counts (>= 0); 0 for shot noise only.
    pub read_noise_counts: f64,
}

impl NoiseModel {
    /// Shot noise only, with conversion gain `e_per_count`.
    pub fn shot_only(e_per_count: f64) -> Self {
        Self {
            e_per_count,
            read_noise_counts: 0.0,
        }
    }

    fn check(&self) -> Result<()> {
        if !(self.e_per_count.is_finite() && self.e_per_count > 0.0) {
            return Err(Error::InvalidParameter {
                name: "e_per_count",
                value: self.e_per_count.to_string(),
                why: "the conversion gain must be finite and > 0 (electrons per count, e.g. 0.5)"
                    .into(),
            });
        }
        if !(self.read_noise_counts.is_finite() && self.read_noise_counts >= 0.0) {
            return Err(Error::InvalidParameter {
                name: "read_noise_counts",
                value: self.read_noise_counts.to_string(),
                why: "the read noise must be finite and >= 0 counts".into(),
            });
        }
        Ok(())
    }

    /// The noise share of K^2 at mean intensity `mean` (counts):
    /// `1 / (c mean) + sigma_r^2 / mean^2`.
    pub fn k2_noise(&self, mean: f64) -> f64 {
        1.0 / (self.e_per_count * mean)
            + self.read_noise_counts * self.read_noise_counts / (mean * mean)
    }
}

/// Shot-noise corrected K of one pixel and its flag (0, `UNDEFINED` for NaN K or a mean
/// <= 0, `NOISE_DOMINATED` where the corrected K^2 < 0). Pure scalar function.
///
/// ```
/// use speckle_core::cpu::correct::{NoiseModel, correct_k};
/// let (k, flag) = correct_k(0.2, 500.0, &NoiseModel::shot_only(2.0));
/// assert_eq!(flag, 0);
/// assert!((k * k - (0.04 - 1.0 / 1000.0)).abs() < 1e-15);
/// ```
pub fn correct_k(k: f64, mean: f64, model: &NoiseModel) -> (f64, u8) {
    if !(k.is_finite() && mean > 0.0 && mean.is_finite()) {
        return (f64::NAN, flags::UNDEFINED);
    }
    let k2 = k * k - model.k2_noise(mean);
    if k2 < 0.0 {
        (f64::NAN, flags::NOISE_DOMINATED)
    } else {
        (k2.sqrt(), 0)
    }
}

/// Corrected K with its flags.
#[derive(Debug, Clone, PartialEq)]
pub struct CorrectedK {
    /// Corrected K (NaN where flagged).
    pub k: Map,
    /// Flag bits from [`crate::model::flags`].
    pub flags: Array2<u8>,
}

/// [`correct_k`] over a K map and its window-mean map (from the same contrast call, on
/// dark-subtracted data), in parallel.
pub fn correct_shot_noise(
    k: ArrayView2<f32>,
    mean: ArrayView2<f32>,
    model: &NoiseModel,
) -> Result<CorrectedK> {
    model.check()?;
    check_same_shape("mean map", k.dim(), mean.dim())?;
    let mut out = CorrectedK {
        k: Array2::zeros(k.raw_dim()),
        flags: Array2::zeros(k.raw_dim()),
    };
    Zip::from(&mut out.k)
        .and(&mut out.flags)
        .and(&k)
        .and(&mean)
        .par_for_each(|o, f, &k, &m| {
            let (v, flag) = correct_k(f64::from(k), f64::from(m), model);
            *o = v as f32;
            *f = flag;
        });
    Ok(out)
}

/// Pixels per parallel task of the rolling average.
const CHUNK: usize = 16 * 1024;

/// NaN-aware rolling mean of a K stack over `frames` consecutive frames (module docs).
///
/// ```
/// use ndarray::Array3;
/// use speckle_core::cpu::correct::rolling_average;
/// let mut k = Array3::from_shape_fn((4, 1, 2), |(t, _, x)| (t + x) as f32);
/// k[[1, 0, 0]] = f32::NAN;
/// let a = rolling_average(k.view(), 2)?;
/// assert_eq!(a.dim(), (3, 1, 2));
/// assert_eq!(a[[0, 0, 0]], 0.0); // NaN skipped: mean of {0}
/// assert_eq!(a[[2, 0, 1]], 3.5);
/// # Ok::<(), speckle_core::Error>(())
/// ```
pub fn rolling_average(stack: ArrayView3<f32>, frames: usize) -> Result<Array3<f32>> {
    let (nf, h, w) = stack.dim();
    if frames == 0 || frames > nf {
        return Err(Error::InvalidTemporalWindow {
            frames,
            why: format!("the average needs 1 to {nf} frames (the stack length)"),
        });
    }
    let (hw, nout) = (h * w, nf - frames + 1);
    let mut out = Array3::zeros((nout, h, w));
    if hw == 0 {
        return Ok(out);
    }
    let stack = stack.as_standard_layout();
    let data = stack.as_slice().expect("standard layout is contiguous");
    let mut o2 = out
        .view_mut()
        .into_shape_with_order((nout, hw))
        .expect("contiguous");
    o2.axis_chunks_iter_mut(Axis(1), CHUNK)
        .into_par_iter()
        .enumerate()
        .for_each(|(ci, o)| rolling_chunk(data, hw, ci * CHUNK, frames, o));
    Ok(out)
}

fn rolling_chunk(data: &[f32], hw: usize, p0: usize, m: usize, mut out: ArrayViewMut2<f32>) {
    let len = out.ncols();
    let at = |t: usize| &data[t * hw + p0..t * hw + p0 + len];
    let mut sum = vec![0f64; len];
    let mut cnt = vec![0u32; len];
    let add = |sum: &mut [f64], cnt: &mut [u32], px: &[f32], sign: f64| {
        for ((s, c), &v) in sum.iter_mut().zip(cnt.iter_mut()).zip(px) {
            if v.is_finite() {
                *s += sign * f64::from(v);
                *c = if sign > 0.0 { *c + 1 } else { *c - 1 };
            }
        }
    };
    for to in 0..out.nrows() {
        if to.is_multiple_of(m) {
            // Fresh sums every M outputs bound the running-sum rounding.
            sum.fill(0.0);
            cnt.fill(0);
            for t in to..to + m {
                add(&mut sum, &mut cnt, at(t), 1.0);
            }
        } else {
            add(&mut sum, &mut cnt, at(to + m - 1), 1.0);
            add(&mut sum, &mut cnt, at(to - 1), -1.0);
        }
        let row = out.row_mut(to).into_slice().expect("contiguous row");
        for ((o, &s), &c) in row.iter_mut().zip(&sum).zip(&cnt) {
            *o = if c == 0 {
                f32::NAN
            } else {
                (s / f64::from(c)) as f32
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu::spatial::tests::splitmix;
    use ndarray::{Array3, array};

    #[test]
    fn dark_subtraction_keeps_negatives_and_checks_shape() {
        let f = array![[10u8, 0], [255, 3]];
        let d = array![[1.5f32, 2.0], [0.0, 3.0]];
        assert_eq!(
            subtract_dark(f.view(), d.view()).unwrap(),
            array![[8.5f32, -2.0], [255.0, 0.0]]
        );
        let bad = Array2::<f32>::zeros((3, 2));
        assert!(matches!(
            subtract_dark(f.view(), bad.view()),
            Err(Error::FrameSizeMismatch { got_h: 3, .. })
        ));
        let st = Array3::from_shape_fn((3, 2, 2), |(t, y, x)| (t * 100 + y * 10 + x) as u16);
        let s = subtract_dark_stack(st.view(), d.view()).unwrap();
        for t in 0..3 {
            assert_eq!(
                s.index_axis(Axis(0), t),
                subtract_dark(st.index_axis(Axis(0), t), d.view()).unwrap()
            );
        }
        assert!(subtract_dark_stack(st.view(), bad.view()).is_err());
    }

    #[test]
    fn shot_noise_correction_removes_poisson_contrast() {
        // Poisson-like counts on a perfectly flat field: measured K^2 ~ 1 / (c mean), so the
        // corrected K^2 is ~0 (within the sampling error of the variance).
        let (c, mean) = (1.0, 400.0);
        let mut s = 3u64;
        let n = 200_000;
        let mut sum = 0.0;
        let mut sum2 = 0.0;
        for _ in 0..n {
            // Normal approximation of Poisson(400): mean 400, var 400 (Box-Muller).
            let u1 = ((splitmix(&mut s) >> 11) + 1) as f64 / (1u64 << 53) as f64;
            let u2 = (splitmix(&mut s) >> 11) as f64 / (1u64 << 53) as f64;
            let v = mean + 20.0 * (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos();
            sum += v;
            sum2 += v * v;
        }
        let m = sum / f64::from(n);
        let var = (sum2 - sum * m) / f64::from(n - 1);
        let k2 = var / (m * m);
        let model = NoiseModel::shot_only(c);
        // Relative sd of a variance estimate from n samples: sqrt(2 / n) = 0.3%.
        assert!(
            (k2 - model.k2_noise(m)).abs() <= 0.01 * k2,
            "K^2 {k2} vs shot {}",
            model.k2_noise(m)
        );
    }

    #[test]
    fn shot_noise_flags_and_parameters() {
        let model = NoiseModel {
            e_per_count: 2.0,
            read_noise_counts: 3.0,
        };
        let want = 0.01 - 1.0 / (2.0 * 100.0) - 9.0 / 10_000.0;
        let (k, f) = correct_k(0.1, 100.0, &model);
        assert_eq!(f, 0);
        assert!((k * k - want).abs() < 1e-15);
        assert_eq!(correct_k(0.05, 100.0, &model).1, flags::NOISE_DOMINATED);
        assert!(correct_k(0.05, 100.0, &model).0.is_nan());
        assert_eq!(correct_k(f64::NAN, 100.0, &model).1, flags::UNDEFINED);
        assert_eq!(correct_k(0.1, 0.0, &model).1, flags::UNDEFINED);
        assert_eq!(correct_k(0.1, -5.0, &model).1, flags::UNDEFINED);
        let k = array![[0.1f32, 0.05], [f32::NAN, 0.3]];
        let m = array![[100.0f32, 100.0], [100.0, 0.0]];
        let c = correct_shot_noise(k.view(), m.view(), &model).unwrap();
        assert_eq!(
            c.flags,
            array![
                [0, flags::NOISE_DOMINATED],
                [flags::UNDEFINED, flags::UNDEFINED]
            ]
        );
        assert!((f64::from(c.k[[0, 0]]).powi(2) - want).abs() < 1e-7);
        for bad in [
            NoiseModel::shot_only(0.0),
            NoiseModel::shot_only(f64::NAN),
            NoiseModel {
                e_per_count: 1.0,
                read_noise_counts: -1.0,
            },
        ] {
            assert!(matches!(
                correct_shot_noise(k.view(), m.view(), &bad),
                Err(Error::InvalidParameter { .. })
            ));
        }
        let wrong = Array2::<f32>::zeros((1, 2));
        assert!(matches!(
            correct_shot_noise(k.view(), wrong.view(), &model),
            Err(Error::FrameSizeMismatch { .. })
        ));
    }

    #[test]
    fn rolling_average_matches_direct_mean_and_skips_nan() {
        let mut s = 9u64;
        let (nf, h, w) = (40, 3, 70_000 / 3 + 5); // several parallel chunks
        let mut st = Array3::from_shape_fn((nf, h, w), |_| {
            (splitmix(&mut s) % 1000) as f32 * 1e-3 + 5.0
        });
        st[[3, 1, 2]] = f32::NAN;
        st.slice_mut(ndarray::s![10..15, 2, 7]).fill(f32::NAN);
        for m in [1, 4, 5, 40] {
            let a = rolling_average(st.view(), m).unwrap();
            assert_eq!(a.dim(), (nf - m + 1, h, w));
            for (to, y, x) in [
                (0, 1, 2),
                (1, 1, 2),
                (10, 2, 7),
                (11, 2, 7),
                (nf - m, h - 1, w - 1),
                (7, 2, 20_000),
            ] {
                if to > nf - m {
                    continue;
                }
                let vals: Vec<f64> = (to..to + m)
                    .map(|t| f64::from(st[[t, y, x]]))
                    .filter(|v| v.is_finite())
                    .collect();
                let got = a[[to, y, x]];
                if vals.is_empty() {
                    assert!(got.is_nan(), "m {m} at {to},{y},{x}");
                } else {
                    let want = vals.iter().sum::<f64>() / vals.len() as f64;
                    assert!(
                        (f64::from(got) - want).abs() <= 1e-6 * want,
                        "m {m} at {to},{y},{x}: {got} vs {want}"
                    );
                }
            }
        }
        assert!(rolling_average(st.view(), 0).is_err());
        assert!(rolling_average(st.view(), 41).is_err());
    }
}
