//! Spatial speckle contrast K = sigma / mean over a sliding square window.
//!
//! # Formula
//! For a window of N pixels with sums `S1 = sum(I)` and `S2 = sum(I^2)`:
//! mean = S1 / N, sample variance s^2 = (N S2 - S1^2) / (N (N - 1)), K = s / mean, so
//! K^2 = (N S2 - S1^2) N / ((N - 1) S1^2). This is the estimator of Yang et al. 2011
//! (J. Biomed. Opt. 16(1) 016009, Eq. 1: N - 1 in the variance).
//!
//! # Exactness
//! Integer frames (u8, u16) are summed in integers: vertical running column sums (S1 in u32;
//! S2 in u32 where a per-band bound proves it fits, else u64) updated by adding the row
//! entering and subtracting the row leaving the window, then a horizontal running sum.
//! `N S2 - S1^2` is therefore an exact integer at any image size (below 2^52 for spatial
//! windows, so exact in f64 too). Only then is `v = (N S2 - S1^2) N / (N - 1)` rounded to
//! f32, and `K = sqrt(v) / S1` evaluated in f32 (one division shared with the SFI), as a GPU
//! kernel would: K is within 3e-7 relative of the exact value at any image size. Whole-image
//! float running sums, by contrast, lose 10-80% of K on large bright images.
//!
//! f32 frames are summed in f64, directly per window (no running sums): each window sum is
//! a fixed-order sum of `2 (2r + 1)` partial sums, so its rounding error is at most
//! `gamma = 2 (2r + 1) u` times the sum of absolute values (u = 2^-53), and the relative
//! error of K is below `3 gamma (1 + 1 / K^2)` plus the f32 rounding: 3e-7 for 5x5 and
//! 2e-6 for 31x31 windows at K = 1e-4, negligible for K of 0.01 and more.
//!
//! # Borders
//! [`Border::Reflect`] mirrors the image (any window works on any image of at least one
//! pixel), [`Border::Zero`] pads with zeros that still count in N (as Yang et al.), and
//! [`Border::Valid`] keeps only windows fully inside the image.
//!
//! # Flags
//! Every output pixel gets a flag byte (bits in [`flags`]): [`flags::UNDEFINED`] where the
//! window mean is zero (integer data) or not positive / not finite (f32 data), with K = NaN
//! (never inf); [`flags::SATURATED`] where the window holds a pixel at or above the
//! saturation level.
//!
//! # Parallelism and GPU parity
//! Row bands run in parallel with rayon; each band keeps its own column sums. The integer
//! band kernel is compiled twice, for the baseline target and for AVX2 (chosen at run time);
//! both give bit-identical results. The GPU port must reproduce: integer sums for integer
//! data (so any summation order gives the same result), then, in f32,
//! `v = (N S2 - S1^2) N / (N - 1)`, `q = 1 / (S1 v)`, `K = sqrt(v) v q`, `SFI = S1^3 q / (2T)`.
//!
//! # Speed
//! K + SFI into reused buffers, with no allocation per frame; measured figures (against
//! OpenCV's boxFilter contrast too) are in docs/benchmarks.md and docs/speckle.md.

// ndarray views are cheap handles, taken by value as ndarray's own APIs do.
#![allow(clippy::needless_pass_by_value)]

use ndarray::{Array2, Array3, ArrayView2, ArrayView3, ArrayViewMut2};
use rayon::prelude::*;

use crate::error::{Error, Result};
use crate::model::flags;
use crate::model::types::{Map, Pixel};
use crate::model::window::{Border, Geom, Window, contrast_shape, reflect_index};

/// Spatial (or temporal) contrast of one frame: K, the window mean and the flag byte,
/// all of the output size.
#[derive(Debug, Clone, PartialEq)]
pub struct ContrastMap {
    /// Speckle contrast K = sigma / mean (NaN where [`flags::UNDEFINED`]).
    pub k: Map,
    /// Window mean in the input's units (counts), e.g. for shot-noise correction.
    pub mean: Map,
    /// Flag bits from [`flags`].
    pub flags: Array2<u8>,
}

/// Contrast of a stack, (frame, row, column).
#[derive(Debug, Clone, PartialEq)]
pub struct ContrastStack {
    /// Speckle contrast K per output frame.
    pub k: Array3<f32>,
    /// Window mean per output frame.
    pub mean: Array3<f32>,
    /// Flag bits from [`flags`].
    pub flags: Array3<u8>,
}

/// Caller-provided output buffers for [`spatial_contrast_into`]: K is required, the mean,
/// the flags and the SFI are optional. Buffers must have the output shape
/// ([`contrast_shape`]) and standard (row-major, contiguous) layout. Reusing them across
/// frames avoids all large allocations in streaming.
#[derive(Debug)]
pub struct ContrastOut<'a> {
    k: ArrayViewMut2<'a, f32>,
    mean: Option<ArrayViewMut2<'a, f32>>,
    flags: Option<ArrayViewMut2<'a, u8>>,
    sfi: Option<(ArrayViewMut2<'a, f32>, f64)>,
}

impl<'a> ContrastOut<'a> {
    /// Outputs with only the K map.
    pub fn new(k: ArrayViewMut2<'a, f32>) -> Self {
        Self {
            k,
            mean: None,
            flags: None,
            sfi: None,
        }
    }

    /// Also write the window mean.
    pub fn mean(mut self, mean: ArrayViewMut2<'a, f32>) -> Self {
        self.mean = Some(mean);
        self
    }

    /// Also write the flag bits.
    pub fn flags(mut self, flags: ArrayViewMut2<'a, u8>) -> Self {
        self.flags = Some(flags);
        self
    }

    /// Also write SFI = 1 / (2 T K^2) (see [`crate::model::flow::sfi`]) for exposure `exposure_s`
    /// in seconds, in the same pass. K = 0 gives +inf, undefined K gives NaN.
    pub fn sfi(mut self, sfi: ArrayViewMut2<'a, f32>, exposure_s: f64) -> Self {
        self.sfi = Some((sfi, exposure_s));
        self
    }

    pub(crate) fn into_slices(self, h: usize, w: usize) -> Result<(RowsOut<'a>, f64)> {
        let inv_2t = match &self.sfi {
            Some((_, t)) => 0.5 / crate::model::flow::check_exposure(*t)?,
            None => f64::NAN,
        };
        Ok((
            RowsOut {
                k: out_slice("K output", self.k, h, w)?,
                mean: self
                    .mean
                    .map(|m| out_slice("mean output", m, h, w))
                    .transpose()?,
                flags: self
                    .flags
                    .map(|f| out_slice("flags output", f, h, w))
                    .transpose()?,
                sfi: self
                    .sfi
                    .map(|(s, _)| out_slice("SFI output", s, h, w))
                    .transpose()?,
            },
            inv_2t,
        ))
    }
}

fn out_slice<'b, U>(
    what: &str,
    v: ArrayViewMut2<'b, U>,
    h: usize,
    w: usize,
) -> Result<&'b mut [U]> {
    let (got_h, got_w) = v.dim();
    if (got_h, got_w) != (h, w) {
        return Err(Error::FrameSizeMismatch {
            what: what.to_string(),
            expected_w: w,
            expected_h: h,
            got_w,
            got_h,
        });
    }
    v.into_slice().ok_or_else(|| Error::InvalidParameter {
        name: "output",
        value: what.to_string(),
        why: "must be a contiguous row-major array (standard layout)".into(),
    })
}

/// Spatial speckle contrast of one frame (see the module docs for the exact formula).
///
/// `saturation`: pixels at or above this level flag their windows [`flags::SATURATED`]
/// (use [`crate::CameraInfo::saturation`]; `None` disables the check).
///
/// ```
/// use ndarray::Array2;
/// use speckle_core::{Border, Window};
/// use speckle_core::{flags, cpu::spatial_contrast};
/// let frame = Array2::from_shape_fn((64, 80), |(y, x)| ((x * 7 + y * 13) % 50 + 100) as u16);
/// let c = spatial_contrast(frame.view(), Window::new(5)?, Border::Reflect, Some(4095.0))?;
/// assert_eq!(c.k.dim(), (64, 80));
/// assert!(c.k.iter().all(|k| k.is_finite() && *k > 0.0 && *k < 0.5));
/// assert!(c.flags.iter().all(|f| *f == 0));
/// # Ok::<(), speckle_core::Error>(())
/// ```
pub fn spatial_contrast<T: Pixel>(
    frame: ArrayView2<T>,
    window: Window,
    border: Border,
    saturation: Option<f64>,
) -> Result<ContrastMap> {
    let (h_out, w_out) = contrast_shape(frame.nrows(), frame.ncols(), window, border)?;
    let mut k = Array2::zeros((h_out, w_out));
    let mut mean = Array2::zeros((h_out, w_out));
    let mut fl = Array2::zeros((h_out, w_out));
    spatial_contrast_into(
        frame,
        window,
        border,
        saturation,
        ContrastOut::new(k.view_mut())
            .mean(mean.view_mut())
            .flags(fl.view_mut()),
    )?;
    Ok(ContrastMap { k, mean, flags: fl })
}

/// Spatial contrast written into caller buffers, optionally fused with SFI: the fastest path
/// for streaming (one pass over the frame, no large allocation).
///
/// ```
/// use ndarray::Array2;
/// use speckle_core::{Border, Window};
/// use speckle_core::cpu::{ContrastOut, spatial_contrast_into};
/// let frame = Array2::from_shape_fn((48, 64), |(y, x)| ((x * 31 + y * 17) % 97 + 20) as u16);
/// let (mut k, mut sfi) = (Array2::zeros((48, 64)), Array2::zeros((48, 64)));
/// let out = ContrastOut::new(k.view_mut()).sfi(sfi.view_mut(), 5e-3);
/// spatial_contrast_into(frame.view(), Window::new(7)?, Border::Reflect, None, out)?;
/// let expect = 1.0 / (2.0 * 5e-3 * k[[3, 4]] * k[[3, 4]]);
/// assert!((sfi[[3, 4]] - expect).abs() <= 1e-5 * expect);
/// # Ok::<(), speckle_core::Error>(())
/// ```
pub fn spatial_contrast_into<T: Pixel>(
    frame: ArrayView2<T>,
    window: Window,
    border: Border,
    saturation: Option<f64>,
    out: ContrastOut<'_>,
) -> Result<()> {
    let g = Geom::new(frame.nrows(), frame.ncols(), window, border)?;
    if T::INTEGER && std::mem::size_of::<T>() > 2 {
        // The exact sums are sized for values below 2^16 (S1 columns in u32).
        return Err(Error::InvalidParameter {
            name: "pixel type",
            value: T::NAME.into(),
            why: "exact integer contrast supports u8 and u16; convert wider integers to f32".into(),
        });
    }
    let sat = Saturation::new(saturation)?;
    let (rows, inv_2t) = out.into_slices(g.h_out, g.w_out)?;
    let frame = frame.as_standard_layout();
    let data = frame.as_slice().expect("standard layout is contiguous");
    let src = Pixels { data, w: g.w, sat };
    let fin = Finish::new(window.area() as u64, max_value::<T>(), inv_2t);
    if T::INTEGER {
        run_pixel_int_bands(&src, &g, &fin, rows);
    } else {
        run_float_bands(&src, &g, &fin, rows);
    }
    Ok(())
}

/// Spatial contrast of every frame of a stack (frame, row, column), frames in parallel.
pub fn spatial_contrast_stack<T: Pixel>(
    stack: ArrayView3<T>,
    window: Window,
    border: Border,
    saturation: Option<f64>,
) -> Result<ContrastStack> {
    let (n, h, w) = stack.dim();
    let (h_out, w_out) = contrast_shape(h, w, window, border)?;
    let mut k = Array3::zeros((n, h_out, w_out));
    let mut mean = Array3::zeros((n, h_out, w_out));
    let mut fl = Array3::zeros((n, h_out, w_out));
    stack
        .outer_iter()
        .into_par_iter()
        .zip(k.outer_iter_mut())
        .zip(mean.outer_iter_mut())
        .zip(fl.outer_iter_mut())
        .try_for_each(|(((frame, k), m), f)| {
            spatial_contrast_into(
                frame,
                window,
                border,
                saturation,
                ContrastOut::new(k).mean(m).flags(f),
            )
        })?;
    Ok(ContrastStack { k, mean, flags: fl })
}

// ---------------------------------------------------------------------------------------
// Shared machinery (also used by the temporal and spatio-temporal paths).
// ---------------------------------------------------------------------------------------
// ---------------------------------------------------------------------------------------

/// Largest value of an integer pixel type (u8: 255, u16: 65535), used to prove that sums fit.
pub(crate) fn max_value<T: Pixel>() -> u64 {
    if T::INTEGER {
        (1u64 << (8 * std::mem::size_of::<T>())) - 1
    } else {
        u64::MAX
    }
}

impl Geom {
    fn span(&self) -> usize {
        2 * self.r + 1
    }

    /// Offset from an output index to the source index of the window centre.
    fn off(&self) -> usize {
        if self.border == Border::Valid {
            self.r
        } else {
            0
        }
    }

    /// The source row for (possibly outside) row index `i`, or `None` for a zero row.
    fn src_row(&self, i: isize) -> Option<usize> {
        match self.border {
            Border::Reflect => Some(reflect_index(i, self.h)),
            Border::Zero | Border::Valid => (i >= 0 && (i as usize) < self.h).then_some(i as usize),
        }
    }

    /// The (unmapped) source rows that the windows of output rows `j0..j0 + rows` touch.
    fn band_source_rows(&self, j0: usize, rows: usize) -> std::ops::RangeInclusive<isize> {
        let (off, r, j0) = (self.off() as isize, self.r as isize, j0 as isize);
        j0 + off - r..=j0 + rows as isize - 1 + off + r
    }
}

/// Saturation level, pre-converted for integer and float comparisons.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Saturation {
    /// Integer pixels `v >= int` are saturated (`None`: none can be).
    pub int: Option<u32>,
    /// Float pixels `v >= float` are saturated.
    pub float: Option<f64>,
}

impl Saturation {
    pub fn new(level: Option<f64>) -> Result<Self> {
        match level {
            None => Ok(Self {
                int: None,
                float: None,
            }),
            Some(l) if l.is_nan() => Err(Error::InvalidParameter {
                name: "saturation",
                value: "NaN".into(),
                why: "give the saturation level in counts, e.g. 4095 for 12-bit data, or none"
                    .into(),
            }),
            Some(l) => {
                let c = l.ceil();
                let int = if c <= 0.0 {
                    Some(0)
                } else if c > f64::from(u32::MAX) {
                    None
                } else {
                    Some(c as u32)
                };
                Ok(Self {
                    int,
                    float: Some(l),
                })
            }
        }
    }

    pub fn enabled(self) -> bool {
        self.float.is_some()
    }

    #[inline(always)]
    pub fn is_sat<T: Pixel>(self, v: T) -> bool {
        if T::INTEGER {
            self.int.is_some_and(|t| v.to_u32() >= t)
        } else {
            self.float.is_some_and(|t| v.to_f64() >= t)
        }
    }
}

/// The final per-pixel formula, shared by all paths.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Finish {
    /// Pixels per window, N (>= 2).
    pub n: u64,
    /// `true` when `N S2` and `S1^2` are below 2^52, so every f64 step before the sqrt is exact.
    pub exact: bool,
    /// 1 / (2 T) for the fused SFI, NaN when no SFI is written.
    pub inv_2t: f64,
}

impl Finish {
    /// `max` is the largest pixel value (integer data); `n` the pixels per window.
    pub fn new(n: u64, max: u64, inv_2t: f64) -> Self {
        let bound = u128::from(n) * u128::from(max);
        let exact = max != u64::MAX && bound * bound < (1u128 << 52);
        Self { n, exact, inv_2t }
    }
}

/// Output slices of a band of rows (or of a run of pixels).
#[derive(Debug)]
pub(crate) struct RowsOut<'a> {
    pub k: &'a mut [f32],
    pub mean: Option<&'a mut [f32]>,
    pub flags: Option<&'a mut [u8]>,
    pub sfi: Option<&'a mut [f32]>,
}

impl<'a> RowsOut<'a> {
    /// Re-borrow pixels `[start, start + len)`.
    pub fn sub(&mut self, start: usize, len: usize) -> RowsOut<'_> {
        let e = start + len;
        RowsOut {
            k: &mut self.k[start..e],
            mean: self.mean.as_deref_mut().map(|m| &mut m[start..e]),
            flags: self.flags.as_deref_mut().map(|f| &mut f[start..e]),
            sfi: self.sfi.as_deref_mut().map(|s| &mut s[start..e]),
        }
    }

    /// Split into consecutive pieces of `len` pixels (the last may be shorter).
    pub fn split(self, len: usize) -> Vec<RowsOut<'a>> {
        let mut mean = self.mean.map(|m| m.chunks_mut(len));
        let mut fl = self.flags.map(|f| f.chunks_mut(len));
        let mut sfi = self.sfi.map(|s| s.chunks_mut(len));
        self.k
            .chunks_mut(len)
            .map(|k| RowsOut {
                k,
                mean: mean.as_mut().and_then(Iterator::next),
                flags: fl.as_mut().and_then(Iterator::next),
                sfi: sfi.as_mut().and_then(Iterator::next),
            })
            .collect()
    }
}

/// An exact integer accumulator: u32 where a bound proves the sums fit, else u64. All updates
/// wrap, which is exact because every true partial result is in range.
pub(crate) trait Acc: Copy + Default + Send + Sync + Into<u64> + 'static {
    /// `v * v` (the caller proves it fits; always true for u64 and `v < 2^16`).
    fn sq(v: u32) -> Self;
    fn wadd(self, o: Self) -> Self;
    fn wsub(self, o: Self) -> Self;
    /// The value as f64, exact below 2^52, with vectorisable bit operations.
    fn exact_f64(self) -> f64;
}

const TWO_52: f64 = 4503599627370496.0;

impl Acc for u32 {
    #[inline(always)]
    fn sq(v: u32) -> Self {
        v.wrapping_mul(v)
    }
    #[inline(always)]
    fn wadd(self, o: Self) -> Self {
        self.wrapping_add(o)
    }
    #[inline(always)]
    fn wsub(self, o: Self) -> Self {
        self.wrapping_sub(o)
    }
    #[inline(always)]
    fn exact_f64(self) -> f64 {
        f64::from(self)
    }
}

impl Acc for u64 {
    #[inline(always)]
    fn sq(v: u32) -> Self {
        u64::from(v) * u64::from(v)
    }
    #[inline(always)]
    fn wadd(self, o: Self) -> Self {
        self.wrapping_add(o)
    }
    #[inline(always)]
    fn wsub(self, o: Self) -> Self {
        self.wrapping_sub(o)
    }
    #[inline(always)]
    fn exact_f64(self) -> f64 {
        f64::from_bits(self | TWO_52.to_bits()) - TWO_52
    }
}

/// K (and mean, SFI, flags) from exact integer window sums `s1`, `s2` and saturated counts.
/// `tmp` is scratch of at least twice the output length.
///
/// When [`Finish::exact`], S1, S2 and `N S2 - S1^2` (an integer below 2^52) are exact in
/// f64; the numerator `v = (N S2 - S1^2) N / (N - 1)` and S1 are then rounded once to f32 and
/// the square root and divisions run in f32, as on the GPU: K and SFI are within 3e-7
/// relative of the exact values (a few f32 roundings of exact inputs).
#[inline(always)]
pub(crate) fn finish_int<H1: Acc, H2: Acc>(
    f: &Finish,
    s1: &[H1],
    s2: &[H2],
    sat: Option<&[u32]>,
    o: RowsOut<'_>,
    tmp: &mut [f32],
) {
    let len = o.k.len();
    let (s1, s2) = (&s1[..len], &s2[..len]);
    let n = f.n as f64;
    let c = n / (n - 1.0);
    let k = o.k;
    // Two passes so that the f32 pass runs at full vector width: v and S1 go to scratch
    // (in L1), then K = sqrt(v) / S1 and SFI = S1^2 / (2 T v) are written once.
    let (tv, ta) = tmp[..2 * len].split_at_mut(len);
    if f.exact {
        for j in 0..len {
            let a = s1[j].exact_f64();
            tv[j] = ((n * s2[j].exact_f64() - a * a) * c) as f32;
            ta[j] = a as f32;
        }
    } else {
        // Very long temporal windows: exact numerator in u128, rounded once.
        for j in 0..len {
            let (a, b): (u64, u64) = (s1[j].into(), s2[j].into());
            let num = u128::from(f.n) * u128::from(b) - u128::from(a) * u128::from(a);
            tv[j] = (num as f64 * c) as f32;
            ta[j] = a as f32;
        }
    }
    // One division serves K and SFI: q = 1 / (S1 v), K = sqrt(v) v q, SFI = S1^3 q / (2T).
    // The K-only path uses the same formula, so K does not depend on whether SFI is asked for.
    // v = 0 (flat window): K = 0 and SFI = +inf; S1 = 0: both NaN.
    let inv_2t = f.inv_2t as f32;
    if let Some(sfi) = o.sfi {
        let sfi = &mut sfi[..len];
        for j in 0..len {
            let (v, a) = (tv[j], ta[j]);
            let q = 1.0 / (a * v);
            k[j] = k_of(v, a, q);
            sfi[j] = inv_2t * (a * a * a) * q;
        }
    } else {
        for j in 0..len {
            let (v, a) = (tv[j], ta[j]);
            k[j] = k_of(v, a, 1.0 / (a * v));
        }
    }
    if let Some(mean) = o.mean {
        let inv_n = 1.0 / n;
        for (m, &a) in mean.iter_mut().zip(s1) {
            *m = (a.exact_f64() * inv_n) as f32;
        }
    }
    if let Some(fl) = o.flags {
        match sat {
            Some(sat) => {
                for ((q, &a), &s) in fl.iter_mut().zip(s1).zip(&sat[..len]) {
                    let a: u64 = a.into();
                    *q = (u8::from(a == 0) * flags::UNDEFINED)
                        | (u8::from(s > 0) * flags::SATURATED);
                }
            }
            None => {
                for (q, &a) in fl.iter_mut().zip(s1) {
                    let a: u64 = a.into();
                    *q = u8::from(a == 0) * flags::UNDEFINED;
                }
            }
        }
    }
}

/// K = sqrt(v) / S1 from `q = 1 / (S1 v)`, with the flat-window (v = 0) and zero-mean cases.
#[inline(always)]
fn k_of(v: f32, a: f32, q: f32) -> f32 {
    let flat = if a > 0.0 { 0.0 } else { f32::NAN };
    if v > 0.0 { v.sqrt() * v * q } else { flat }
}

/// K (and mean, SFI, flags) from f64 window sums (f32 input), all in f64. Undefined where
/// the mean is not positive or anything is not finite.
pub(crate) fn finish_f64(f: &Finish, s1: &[f64], s2: &[f64], sat: Option<&[u32]>, o: RowsOut<'_>) {
    let len = o.k.len();
    let n = f.n as f64;
    let inv_n1 = 1.0 / (n - 1.0);
    let mut sfi = o.sfi;
    let mut mean = o.mean;
    let mut fl = o.flags;
    for j in 0..len {
        let m = s1[j] / n;
        let var = (s2[j] - s1[j] * m) * inv_n1;
        let ok = m > 0.0 && var.is_finite() && m.is_finite();
        // Rounding can make the variance of a flat window slightly negative.
        let var = if var < 0.0 { 0.0 } else { var };
        let kv = if ok { var.sqrt() / m } else { f64::NAN };
        o.k[j] = kv as f32;
        if let Some(s) = sfi.as_deref_mut() {
            s[j] = if ok {
                (f.inv_2t * (m * m) / var) as f32
            } else {
                f32::NAN
            };
        }
        if let Some(mm) = mean.as_deref_mut() {
            mm[j] = m as f32;
        }
        if let Some(q) = fl.as_deref_mut() {
            let saturated = sat.is_some_and(|s| s[j] > 0);
            q[j] = (u8::from(!ok) * flags::UNDEFINED) | (u8::from(saturated) * flags::SATURATED);
        }
    }
}

/// Rows that a band kernel sums vertically.
pub(crate) trait RowSource: Sync {
    /// Whether saturation is tracked at all.
    fn tracks_sat(&self) -> bool;
    /// Whether row `y` may hold a saturated pixel (false only if it certainly does not).
    fn row_has_sat(&self, y: usize) -> bool;
    /// Add (`add`) or subtract the saturated-pixel counts of row `y` to per-column counts.
    fn sat_update(&self, y: usize, cs: &mut [u32], add: bool);
}

/// Integer rows: adds `x` to S1 columns and `x^2` to S2 columns, exactly. The same types
/// hold the window sums.
pub(crate) trait IntRows: RowSource {
    type A1: Acc;
    type A2: Acc;
    fn add(&self, y: usize, c1: &mut [Self::A1], c2: &mut [Self::A2]);
    fn sub(&self, y: usize, c1: &mut [Self::A1], c2: &mut [Self::A2]);
    fn add_sub(&self, ya: usize, ys: usize, c1: &mut [Self::A1], c2: &mut [Self::A2]);
}

/// Float rows: adds `x` to `c1` and `x^2` to `c2` in f64.
pub(crate) trait FloatRows: RowSource {
    fn add(&self, y: usize, c1: &mut [f64], c2: &mut [f64]);
}

/// A frame of pixels, row-major.
#[derive(Debug)]
pub(crate) struct Pixels<'a, T> {
    pub data: &'a [T],
    pub w: usize,
    pub sat: Saturation,
}

impl<T: Pixel> Pixels<'_, T> {
    #[inline(always)]
    fn row(&self, y: usize) -> &[T] {
        &self.data[y * self.w..(y + 1) * self.w]
    }

    /// Bitwise OR of a row: an upper bound of its maximum that vectorises on any CPU.
    fn row_or(&self, y: usize) -> u32 {
        self.row(y).iter().fold(0u32, |m, v| m | v.to_u32())
    }
}

impl<T: Pixel> RowSource for Pixels<'_, T> {
    fn tracks_sat(&self) -> bool {
        self.sat.enabled()
    }

    fn row_has_sat(&self, y: usize) -> bool {
        if T::INTEGER {
            self.sat.int.is_some_and(|t| self.row_or(y) >= t)
        } else {
            self.row(y).iter().any(|&v| self.sat.is_sat(v))
        }
    }

    #[inline(always)]
    fn sat_update(&self, y: usize, cs: &mut [u32], add: bool) {
        let row = self.row(y);
        let cs = &mut cs[..row.len()];
        // Branch-free, vectorisable: +1 / -1 (wrapping) per saturated pixel.
        let inc = if add { 1u32 } else { u32::MAX };
        if T::INTEGER {
            let Some(t) = self.sat.int else { return };
            for x in 0..row.len() {
                cs[x] = cs[x].wrapping_add(u32::from(row[x].to_u32() >= t).wrapping_mul(inc));
            }
        } else {
            let Some(t) = self.sat.float else { return };
            for x in 0..row.len() {
                cs[x] = cs[x].wrapping_add(u32::from(row[x].to_f64() >= t).wrapping_mul(inc));
            }
        }
    }
}

impl<T: Pixel> FloatRows for Pixels<'_, T> {
    #[inline]
    fn add(&self, y: usize, c1: &mut [f64], c2: &mut [f64]) {
        for ((a, b), &v) in c1.iter_mut().zip(c2.iter_mut()).zip(self.row(y)) {
            let v = v.to_f64();
            *a += v;
            *b += v * v;
        }
    }
}

/// Integer pixels with the S2 accumulator `A2`: u32 when the band's values bound the window
/// S2 below 2^32, else u64. S1 is always u32: at most 31 x 31 values below 2^16.
#[derive(Debug)]
struct IntPixels<'p, 'a, T, A2> {
    px: &'p Pixels<'a, T>,
    _a2: std::marker::PhantomData<A2>,
}

impl<T: Pixel, A2: Acc> RowSource for IntPixels<'_, '_, T, A2> {
    fn tracks_sat(&self) -> bool {
        self.px.tracks_sat()
    }
    fn row_has_sat(&self, y: usize) -> bool {
        self.px.row_has_sat(y)
    }
    #[inline(always)]
    fn sat_update(&self, y: usize, cs: &mut [u32], add: bool) {
        self.px.sat_update(y, cs, add);
    }
}

impl<T: Pixel, A2: Acc> IntRows for IntPixels<'_, '_, T, A2> {
    type A1 = u32;
    type A2 = A2;

    #[inline(always)]
    fn add(&self, y: usize, c1: &mut [u32], c2: &mut [A2]) {
        let row = self.px.row(y);
        let n = row.len();
        let (c1, c2) = (&mut c1[..n], &mut c2[..n]);
        for x in 0..n {
            c1[x] = c1[x].wrapping_add(row[x].to_u32());
        }
        for x in 0..n {
            c2[x] = c2[x].wadd(A2::sq(row[x].to_u32()));
        }
    }

    #[inline(always)]
    fn sub(&self, y: usize, c1: &mut [u32], c2: &mut [A2]) {
        let row = self.px.row(y);
        let n = row.len();
        let (c1, c2) = (&mut c1[..n], &mut c2[..n]);
        for x in 0..n {
            c1[x] = c1[x].wrapping_sub(row[x].to_u32());
        }
        for x in 0..n {
            c2[x] = c2[x].wsub(A2::sq(row[x].to_u32()));
        }
    }

    #[inline(always)]
    fn add_sub(&self, ya: usize, ys: usize, c1: &mut [u32], c2: &mut [A2]) {
        let (ra, rs) = (self.px.row(ya), self.px.row(ys));
        let n = ra.len();
        let (rs, c1, c2) = (&rs[..n], &mut c1[..n], &mut c2[..n]);
        for x in 0..n {
            c1[x] = c1[x].wrapping_add(ra[x].to_u32().wrapping_sub(rs[x].to_u32()));
        }
        for x in 0..n {
            c2[x] = c2[x].wadd(A2::sq(ra[x].to_u32()).wsub(A2::sq(rs[x].to_u32())));
        }
    }
}

/// Rows of a band: enough rows per task to amortise the band start-up (2r + 1 rows), and
/// about four tasks per thread for balance.
fn band_rows(h_out: usize, r: usize) -> usize {
    let tasks = 4 * rayon::current_num_threads();
    h_out
        .div_ceil(tasks)
        .max(4 * (2 * r + 1))
        .max(16)
        .min(h_out.max(1))
}

/// Run `f(first_output_row, band_outputs)` over row bands in parallel.
fn run_bands<F>(g: &Geom, out: RowsOut<'_>, f: F)
where
    F: Fn(usize, RowsOut<'_>) + Sync,
{
    let band = band_rows(g.h_out, g.r);
    out.split(band * g.w_out)
        .into_par_iter()
        .enumerate()
        .for_each(|(b, o)| f(b * band, o));
}

/// Integer bands over any exact row source.
pub(crate) fn run_int_bands<S: IntRows>(src: &S, g: &Geom, fin: &Finish, out: RowsOut<'_>) {
    run_bands(g, out, |j0, o| {
        let track = o.flags.is_some() && band_tracks_sat(src, g, j0, o.k.len() / g.w_out);
        int_band(src, g, fin, j0, o, track);
    });
}

/// Integer pixel bands: each band bounds the values it reads (bitwise OR) and sums S2 in u32
/// when `area * bound^2 < 2^32` (e.g. 12-bit data up to 15 x 15), else in u64.
fn run_pixel_int_bands<T: Pixel>(px: &Pixels<'_, T>, g: &Geom, fin: &Finish, out: RowsOut<'_>) {
    run_bands(g, out, |j0, o| {
        let rows = o.k.len() / g.w_out;
        let mut seen = vec![false; g.h];
        let bound = g
            .band_source_rows(j0, rows)
            .filter_map(|i| g.src_row(i))
            .filter(|&y| !std::mem::replace(&mut seen[y], true))
            .fold(0u32, |m, y| m | px.row_or(y));
        // Saturation only matters for the flags: skip the counts when none are written.
        let track = o.flags.is_some() && px.sat.int.is_some_and(|t| bound >= t);
        let area = (g.span() * g.span()) as u64;
        if area * u64::from(bound) * u64::from(bound) < (1u64 << 32) {
            int_band(
                &IntPixels::<T, u32> {
                    px,
                    _a2: std::marker::PhantomData,
                },
                g,
                fin,
                j0,
                o,
                track,
            );
        } else {
            int_band(
                &IntPixels::<T, u64> {
                    px,
                    _a2: std::marker::PhantomData,
                },
                g,
                fin,
                j0,
                o,
                track,
            );
        }
    });
}

/// Float bands over any f64 row source.
pub(crate) fn run_float_bands<S: FloatRows>(src: &S, g: &Geom, fin: &Finish, out: RowsOut<'_>) {
    run_bands(g, out, |j0, o| {
        let track = o.flags.is_some() && band_tracks_sat(src, g, j0, o.k.len() / g.w_out);
        float_band(src, g, fin, j0, o, track);
    });
}

/// Whether any source row that the band's windows touch may hold a saturated pixel.
fn band_tracks_sat<S: RowSource>(src: &S, g: &Geom, j0: usize, rows: usize) -> bool {
    if !src.tracks_sat() {
        return false;
    }
    let mut seen = vec![false; g.h];
    g.band_source_rows(j0, rows)
        .filter_map(|i| g.src_row(i))
        .any(|y| !std::mem::replace(&mut seen[y], true) && src.row_has_sat(y))
}

/// Mirror the column sums into the `r` padding cells on each side (reflect border); zero and
/// valid borders leave the padding at zero / unused.
#[inline(always)]
fn fill_edges<A: Copy>(c: &mut [A], g: &Geom) {
    if g.border != Border::Reflect {
        return;
    }
    let (r, w) = (g.r, g.w);
    for t in 1..=r {
        c[r - t] = c[r + reflect_index(-(t as isize), w)];
        c[r + w - 1 + t] = c[r + reflect_index((w - 1 + t) as isize, w)];
    }
}

/// Horizontal running window sums of two column-sum rows at once:
/// `o[j] = sum(c[base + j ..= base + j + span - 1])`. The differences `c[j + span] - c[j]` are
/// formed in vectorised passes, so the serial part is one wrapping add per output and array
/// (exact: every true sum is in range).
#[inline(always)]
fn hrun2<A: Acc, B: Acc>(
    (c1, c2): (&[A], &[B]),
    base: usize,
    span: usize,
    (o1, o2): (&mut [A], &mut [B]),
) {
    let n = o1.len();
    let m = n - 1;
    let o2 = &mut o2[..n];
    // Differences first (vectorised), stored in place of the outputs ...
    let (a1, s1) = (&c1[base + span..base + span + m], &c1[base..base + m]);
    for j in 0..m {
        o1[j] = a1[j].wsub(s1[j]);
    }
    let (a2, s2) = (&c2[base + span..base + span + m], &c2[base..base + m]);
    for j in 0..m {
        o2[j] = a2[j].wsub(s2[j]);
    }
    // ... then one serial pass turns them into running sums.
    let mut x1 = c1[base..base + span]
        .iter()
        .fold(A::default(), |s, &v| s.wadd(v));
    let mut x2 = c2[base..base + span]
        .iter()
        .fold(B::default(), |s, &v| s.wadd(v));
    for (p1, p2) in o1.iter_mut().zip(o2.iter_mut()) {
        let (e1, e2) = (*p1, *p2);
        *p1 = x1;
        *p2 = x2;
        x1 = x1.wadd(e1);
        x2 = x2.wadd(e2);
    }
}

/// Horizontal running counts (saturation), same scheme as [`hrun2`].
#[inline(always)]
fn hrun_counts(c: &[u32], base: usize, span: usize, out: &mut [u32]) {
    let n = out.len();
    let m = n - 1;
    let (a, s) = (&c[base + span..base + span + m], &c[base..base + m]);
    for j in 0..m {
        out[j] = a[j].wrapping_sub(s[j]);
    }
    let mut x: u32 = c[base..base + span].iter().sum();
    for o in out.iter_mut() {
        let e = *o;
        *o = x;
        x = x.wrapping_add(e);
    }
}

/// Horizontal direct window sums in a fixed order (f64 path):
/// `out[j] = c[base + j] + c[base + j + 1] + ... + c[base + j + span - 1]`.
fn hdirect(c: &[f64], base: usize, span: usize, out: &mut [f64]) {
    let n = out.len();
    out.copy_from_slice(&c[base..base + n]);
    for t in 1..span {
        for (o, &v) in out.iter_mut().zip(&c[base + t..base + t + n]) {
            *o += v;
        }
    }
}

/// [`int_band_portable`] compiled for AVX2 where the CPU has it (detected at run time), else
/// for the baseline target. Both give bit-identical results: integer sums are exact and the
/// float steps are the same IEEE operations (Rust never fuses them into FMA).
fn int_band<S: IntRows>(src: &S, g: &Geom, fin: &Finish, j0: usize, out: RowsOut<'_>, track: bool) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: `int_band_avx2` only requires AVX2, which the CPU has (checked just above).
        unsafe { int_band_avx2(src, g, fin, j0, out, track) };
        return;
    }
    int_band_portable(src, g, fin, j0, out, track);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn int_band_avx2<S: IntRows>(
    src: &S,
    g: &Geom,
    fin: &Finish,
    j0: usize,
    out: RowsOut<'_>,
    track: bool,
) {
    int_band_portable(src, g, fin, j0, out, track);
}

/// Integer band kernel: running column sums down the band, running window sums across.
#[inline(always)]
fn int_band_portable<S: IntRows>(
    src: &S,
    g: &Geom,
    fin: &Finish,
    j0: usize,
    mut out: RowsOut<'_>,
    track: bool,
) {
    let (r, w, w_out) = (g.r, g.w, g.w_out);
    let span = g.span();
    let rows = out.k.len() / w_out;
    let pw = w + 2 * r;
    let off = g.off();
    let mut c1 = vec![S::A1::default(); pw];
    let mut c2 = vec![S::A2::default(); pw];
    let mut h1 = vec![S::A1::default(); w_out];
    let mut h2 = vec![S::A2::default(); w_out];
    let mut tmp = vec![0f32; 2 * w_out];
    let (mut cs, mut hs) = if track {
        (vec![0u32; pw], vec![0u32; w_out])
    } else {
        (Vec::new(), Vec::new())
    };

    let (ri, c0) = (r as isize, (j0 + off) as isize);
    for i in c0 - ri..=c0 + ri {
        if let Some(y) = g.src_row(i) {
            src.add(y, &mut c1[r..r + w], &mut c2[r..r + w]);
            if track {
                src.sat_update(y, &mut cs[r..r + w], true);
            }
        }
    }
    for jl in 0..rows {
        if jl > 0 {
            let c = (j0 + jl + off) as isize;
            let (ya, ys) = (g.src_row(c + ri), g.src_row(c - ri - 1));
            let (e1, e2) = (&mut c1[r..r + w], &mut c2[r..r + w]);
            match (ya, ys) {
                (Some(a), Some(s)) => src.add_sub(a, s, e1, e2),
                (Some(a), None) => src.add(a, e1, e2),
                (None, Some(s)) => src.sub(s, e1, e2),
                (None, None) => {}
            }
            if track {
                if let Some(a) = ya {
                    src.sat_update(a, &mut cs[r..r + w], true);
                }
                if let Some(s) = ys {
                    src.sat_update(s, &mut cs[r..r + w], false);
                }
            }
        }
        fill_edges(&mut c1, g);
        fill_edges(&mut c2, g);
        hrun2((&c1, &c2), off, span, (&mut h1, &mut h2));
        if track {
            fill_edges(&mut cs, g);
            hrun_counts(&cs, off, span, &mut hs);
        }
        finish_int(
            fin,
            &h1,
            &h2,
            track.then_some(&hs[..]),
            out.sub(jl * w_out, w_out),
            &mut tmp,
        );
    }
}

/// Float band kernel: direct (non-running) f64 window sums in a fixed summation order.
fn float_band<S: FloatRows>(
    src: &S,
    g: &Geom,
    fin: &Finish,
    j0: usize,
    mut out: RowsOut<'_>,
    track: bool,
) {
    let (r, w, w_out) = (g.r, g.w, g.w_out);
    let span = g.span();
    let rows = out.k.len() / w_out;
    let pw = w + 2 * r;
    let off = g.off();
    let mut c1 = vec![0f64; pw];
    let mut c2 = vec![0f64; pw];
    let mut h1 = vec![0f64; w_out];
    let mut h2 = vec![0f64; w_out];
    let (mut cs, mut hs) = if track {
        (vec![0u32; pw], vec![0u32; w_out])
    } else {
        (Vec::new(), Vec::new())
    };
    let ri = r as isize;
    for jl in 0..rows {
        let c = (j0 + jl + off) as isize;
        c1.fill(0.0);
        c2.fill(0.0);
        cs.fill(0);
        for i in c - ri..=c + ri {
            if let Some(y) = g.src_row(i) {
                src.add(y, &mut c1[r..r + w], &mut c2[r..r + w]);
                if track {
                    src.sat_update(y, &mut cs[r..r + w], true);
                }
            }
        }
        fill_edges(&mut c1, g);
        fill_edges(&mut c2, g);
        hdirect(&c1, off, span, &mut h1);
        hdirect(&c2, off, span, &mut h2);
        if track {
            fill_edges(&mut cs, g);
            hrun_counts(&cs, off, span, &mut hs);
        }
        finish_f64(
            fin,
            &h1,
            &h2,
            track.then_some(&hs[..]),
            out.sub(jl * w_out, w_out),
        );
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use ndarray::Array2;
    use proptest::prelude::*;

    /// Relative tolerance on K against the f64 two-pass reference: the final f32 roundings
    /// (about 3e-7) with margin.
    pub const TOL_K: f64 = 1e-6;

    /// How the window sums behind K were formed, which sets how far K may be from the
    /// reference on top of [`TOL_K`].
    #[derive(Clone, Copy, Debug)]
    pub enum Sums {
        /// Integer input: the sums are exact.
        Exact,
        /// f32 input summed in f64 over `terms` additions: the documented summation bound
        /// `3 terms u (K + 1 / K)` (u = 2^-53) applies.
        Float { terms: usize },
    }

    impl Sums {
        /// Allowed absolute error on a K whose reference value is `kr`.
        pub fn allowed(self, kr: f64) -> f64 {
            let u = f64::EPSILON / 2.0;
            let sum_bound = match self {
                Sums::Exact => 0.0,
                Sums::Float { terms } => 3.0 * terms as f64 * u * (kr + 1.0 / kr.max(1e-300)),
            };
            TOL_K * kr + sum_bound
        }
    }

    /// Mean: stored as f32, so within one f32 rounding.
    pub const TOL_MEAN: f64 = 2e-7;

    /// splitmix64: a small deterministic generator for test data.
    pub fn splitmix(s: &mut u64) -> u64 {
        *s = s.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = *s;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Plain brute-force reference: explicit window loops, two-pass f64 mean and variance.
    #[derive(Debug)]
    pub struct RefMap {
        pub k: Array2<f64>,
        pub mean: Array2<f64>,
        pub flags: Array2<u8>,
    }

    pub fn reference<T: Pixel>(
        img: &Array2<T>,
        size: usize,
        border: Border,
        sat: Option<f64>,
    ) -> Option<RefMap> {
        let (h, w) = img.dim();
        let r = size / 2;
        let (ho, wo, off) = match border {
            Border::Valid if h < size || w < size => return None,
            Border::Valid => (h - 2 * r, w - 2 * r, r as isize),
            _ => (h, w, 0),
        };
        let mut out = RefMap {
            k: Array2::zeros((ho, wo)),
            mean: Array2::zeros((ho, wo)),
            flags: Array2::zeros((ho, wo)),
        };
        let mut vals = Vec::with_capacity(size * size);
        for i in 0..ho {
            for j in 0..wo {
                vals.clear();
                let mut saturated = false;
                for dy in -(r as isize)..=r as isize {
                    for dx in -(r as isize)..=r as isize {
                        let (y, x) = (i as isize + off + dy, j as isize + off + dx);
                        let v = match border {
                            Border::Reflect => {
                                Some(img[[reflect_index(y, h), reflect_index(x, w)]])
                            }
                            _ if y < 0 || x < 0 || y >= h as isize || x >= w as isize => None,
                            _ => Some(img[[y as usize, x as usize]]),
                        };
                        if let Some(v) = v {
                            saturated |= sat.is_some_and(|s| v.to_f64() >= s);
                        }
                        vals.push(v.map_or(0.0, Pixel::to_f64));
                    }
                }
                let n = vals.len() as f64;
                let mean = vals.iter().sum::<f64>() / n;
                let var = vals.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / (n - 1.0);
                let undefined = if T::INTEGER {
                    mean == 0.0
                } else {
                    !(mean > 0.0 && var.is_finite())
                };
                out.k[[i, j]] = if undefined {
                    f64::NAN
                } else {
                    var.sqrt() / mean
                };
                out.mean[[i, j]] = mean;
                out.flags[[i, j]] = (u8::from(undefined) * flags::UNDEFINED)
                    | (u8::from(saturated) * flags::SATURATED);
            }
        }
        Some(out)
    }

    /// Check a computed map against the reference; `span` is the window side.
    pub fn assert_matches(got: &ContrastMap, want: &RefMap, sums: Sums, what: &str) {
        assert_eq!(got.k.dim(), want.k.dim(), "{what}: shape");
        for ((idx, &k), &kr) in got.k.indexed_iter().zip(want.k.iter()) {
            let fl = got.flags[idx];
            assert_eq!(fl, want.flags[idx], "{what}: flags at {idx:?}");
            if kr.is_nan() {
                assert!(k.is_nan(), "{what}: K at {idx:?} is {k}, want NaN");
                continue;
            }
            let k = f64::from(k);
            assert!(
                (k - kr).abs() <= sums.allowed(kr),
                "{what}: K at {idx:?} = {k}, want {kr}"
            );
            let (m, mr) = (f64::from(got.mean[idx]), want.mean[idx]);
            assert!(
                (m - mr).abs() <= TOL_MEAN * mr.abs() + 1e-30,
                "{what}: mean at {idx:?} = {m}, want {mr}"
            );
        }
    }

    /// Test images of several kinds: full range, tiny values (zero and flat windows), high
    /// mean with small variance, and exponential speckle.
    pub fn image_u16(h: usize, w: usize, mode: u8, seed: u64) -> Array2<u16> {
        let mut s = seed;
        Array2::from_shape_fn((h, w), |_| {
            let z = splitmix(&mut s);
            match mode % 4 {
                0 => z as u16,
                1 => (z % 3) as u16,
                2 => 60_000 + (z % 8) as u16,
                _ => (-((z >> 11) as f64 / (1u64 << 53) as f64 + 1e-12).ln() * 900.0).min(4095.0)
                    as u16,
            }
        })
    }

    fn border_of(b: u8) -> Border {
        [Border::Reflect, Border::Zero, Border::Valid][usize::from(b % 3)]
    }

    fn check_any<T: Pixel>(
        img: &Array2<T>,
        size: usize,
        border: Border,
        sat: Option<f64>,
        float_input: bool,
    ) {
        let win = Window::new(size).unwrap();
        // Separable window sums: the documented bound has gamma = 2 size u.
        let sums = if float_input {
            Sums::Float { terms: 2 * size }
        } else {
            Sums::Exact
        };
        let got = spatial_contrast(img.view(), win, border, sat);
        match reference(img, size, border, sat) {
            None => assert!(
                matches!(got, Err(Error::ImageTooSmall { .. })),
                "valid border must reject a small image"
            ),
            Some(want) => assert_matches(
                &got.unwrap(),
                &want,
                sums,
                &format!("{}x{} w{size} {border:?}", img.nrows(), img.ncols()),
            ),
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 160, ..ProptestConfig::default() })]

        #[test]
        fn spatial_k_matches_reference_u16(h in 1usize..40, w in 1usize..40, half in 1usize..16, b in 0u8..3,
                                            mode in 0u8..4, seed in any::<u64>(), sat in prop::option::of(1u32..70_000)) {
            let img = image_u16(h, w, mode, seed);
            check_any(&img, 2 * half + 1, border_of(b), sat.map(f64::from), false);
        }

        #[test]
        fn spatial_k_matches_reference_u8(h in 1usize..40, w in 1usize..40, half in 1usize..16, b in 0u8..3,
                                           mode in 0u8..4, seed in any::<u64>(), sat in prop::option::of(1u32..256)) {
            let img = image_u16(h, w, mode, seed).mapv(|v| if mode % 4 == 2 { 250 + (v % 6) as u8 } else { v as u8 });
            check_any(&img, 2 * half + 1, border_of(b), sat.map(f64::from), false);
        }

        #[test]
        fn spatial_k_matches_reference_f32(h in 1usize..40, w in 1usize..40, half in 1usize..16, b in 0u8..3,
                                            mode in 0u8..4, seed in any::<u64>(), sat in prop::option::of(1.0f64..5000.0)) {
            let img = image_u16(h, w, mode, seed).mapv(|v| f32::from(v) * 0.37 + 0.01 * f32::from(v % 7));
            check_any(&img, 2 * half + 1, border_of(b), sat, true);
        }
    }

    #[test]
    fn one_pixel_wide_and_tiny_images_work_with_reflect_and_zero() {
        for (h, w) in [(1, 1), (1, 17), (23, 1), (2, 2), (3, 40)] {
            for size in [3, 5, 31] {
                let img = image_u16(h, w, 0, (h * 100 + w) as u64);
                for border in [Border::Reflect, Border::Zero, Border::Valid] {
                    check_any(&img, size, border, Some(65_000.0), false);
                }
            }
        }
    }

    #[test]
    fn large_bright_low_variance_frame_is_exact() {
        // Mean ~60000, sd ~2: N S2 and S1^2 agree in their first 9 digits, which float
        // running sums over a whole 2000 x 2000 image cannot resolve.
        let img = image_u16(2000, 2000, 2, 7);
        let got =
            spatial_contrast(img.view(), Window::new(5).unwrap(), Border::Reflect, None).unwrap();
        let r = 2usize;
        let mut worst = 0f64;
        // Brute force on a strided subset of rows (every pixel of each), edges included.
        for i in (0..2000).step_by(37).chain([1, 1998, 1999]) {
            for j in 0..2000 {
                let mut v = Vec::with_capacity(25);
                for dy in -(r as isize)..=r as isize {
                    for dx in -(r as isize)..=r as isize {
                        v.push(f64::from(
                            img[[
                                reflect_index(i as isize + dy, 2000),
                                reflect_index(j as isize + dx, 2000),
                            ]],
                        ));
                    }
                }
                let m = v.iter().sum::<f64>() / 25.0;
                let kr = (v.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / 24.0).sqrt() / m;
                let e = (f64::from(got.k[[i, j]]) - kr).abs() / kr;
                worst = worst.max(e);
            }
        }
        assert!(worst <= TOL_K, "worst relative K error {worst}");
    }

    #[test]
    fn all_zero_windows_give_nan_and_undefined_flag() {
        let mut img = Array2::<u16>::zeros((20, 30));
        img[[10, 15]] = 100;
        let c =
            spatial_contrast(img.view(), Window::new(3).unwrap(), Border::Reflect, None).unwrap();
        assert!(c.k[[0, 0]].is_nan());
        assert_eq!(c.flags[[0, 0]], flags::UNDEFINED);
        assert_eq!(c.mean[[0, 0]], 0.0);
        assert!(c.k[[10, 15]].is_finite() && c.k[[10, 15]] > 0.0);
        assert_eq!(c.flags[[10, 15]], 0);
        assert!(c.k.iter().all(|k| !k.is_infinite()));
    }

    #[test]
    fn saturated_pixels_flag_exactly_their_windows() {
        let mut img = image_u16(30, 30, 3, 1).mapv(|v| v.min(4000));
        img[[5, 7]] = 4095;
        let c = spatial_contrast(
            img.view(),
            Window::new(5).unwrap(),
            Border::Zero,
            Some(4095.0),
        )
        .unwrap();
        for ((i, j), &f) in c.flags.indexed_iter() {
            let inside = i.abs_diff(5) <= 2 && j.abs_diff(7) <= 2;
            assert_eq!(f & flags::SATURATED != 0, inside, "at ({i}, {j})");
        }
        let none =
            spatial_contrast(img.view(), Window::new(5).unwrap(), Border::Zero, None).unwrap();
        assert!(none.flags.iter().all(|&f| f == 0));
    }

    #[test]
    fn bad_parameters_give_clear_errors() {
        assert!(matches!(
            Window::new(6),
            Err(Error::InvalidWindow { size: 6, .. })
        ));
        assert!(matches!(
            Window::new(33),
            Err(Error::InvalidWindow { size: 33, .. })
        ));
        assert!(matches!(
            Window::new(1),
            Err(Error::InvalidWindow { size: 1, .. })
        ));
        let img = image_u16(10, 10, 0, 1);
        let w7 = Window::new(7).unwrap();
        let e =
            spatial_contrast(img.slice(ndarray::s![..5, ..]), w7, Border::Valid, None).unwrap_err();
        assert!(
            matches!(
                e,
                Error::ImageTooSmall {
                    width: 10,
                    height: 5,
                    window: 7
                }
            ),
            "{e}"
        );
        let empty = Array2::<u16>::zeros((0, 5));
        assert!(spatial_contrast(empty.view(), w7, Border::Reflect, None).is_err());
        assert!(spatial_contrast(img.view(), w7, Border::Reflect, Some(f64::NAN)).is_err());
        let (mut k, mut s) = (Array2::zeros((10, 10)), Array2::zeros((10, 10)));
        for t in [0.0, -1e-3, f64::NAN, f64::INFINITY] {
            let out = ContrastOut::new(k.view_mut()).sfi(s.view_mut(), t);
            let e = spatial_contrast_into(img.view(), w7, Border::Reflect, None, out).unwrap_err();
            assert!(matches!(e, Error::InvalidExposure { .. }), "{e}");
        }
        let mut small = Array2::zeros((10, 9));
        let e = spatial_contrast_into(
            img.view(),
            w7,
            Border::Reflect,
            None,
            ContrastOut::new(small.view_mut()),
        )
        .unwrap_err();
        assert!(
            matches!(
                e,
                Error::FrameSizeMismatch {
                    expected_w: 10,
                    got_w: 9,
                    ..
                }
            ),
            "{e}"
        );
        let mut t = Array2::zeros((10, 10));
        let e = spatial_contrast_into(
            img.view(),
            w7,
            Border::Reflect,
            None,
            ContrastOut::new(t.view_mut().reversed_axes()),
        )
        .unwrap_err();
        assert!(matches!(e, Error::InvalidParameter { .. }), "{e}");
    }

    #[test]
    fn fused_sfi_equals_sfi_of_k() {
        let mut img = image_u16(64, 50, 3, 3);
        img.slice_mut(ndarray::s![0..8, 0..8]).fill(1000); // flat: K = 0, SFI = inf
        img.slice_mut(ndarray::s![20..30, 20..30]).fill(0); // zero: K, SFI NaN
        let (mut k, mut s) = (Array2::zeros((64, 50)), Array2::zeros((64, 50)));
        let t = 2e-3;
        let out = ContrastOut::new(k.view_mut()).sfi(s.view_mut(), t);
        spatial_contrast_into(
            img.view(),
            Window::new(5).unwrap(),
            Border::Reflect,
            None,
            out,
        )
        .unwrap();
        let plain =
            spatial_contrast(img.view(), Window::new(5).unwrap(), Border::Reflect, None).unwrap();
        assert!(
            k.iter()
                .zip(plain.k.iter())
                .all(|(a, b)| a.to_bits() == b.to_bits()),
            "K must not depend on SFI"
        );
        assert_eq!(k[[2, 2]], 0.0);
        assert_eq!(s[[2, 2]], f32::INFINITY);
        assert!(k[[25, 25]].is_nan() && s[[25, 25]].is_nan());
        for (&kk, &ss) in k.iter().zip(s.iter()) {
            if kk.is_finite() && kk > 0.0 {
                let want = 1.0 / (2.0 * t * f64::from(kk) * f64::from(kk));
                assert!(
                    (f64::from(ss) - want).abs() <= 1e-6 * want,
                    "SFI {ss} want {want}"
                );
            }
        }
    }

    #[test]
    fn stack_matches_frame_by_frame() {
        let frames: Vec<Array2<u16>> = (0..5).map(|i| image_u16(33, 21, 3, i)).collect();
        let views: Vec<_> = frames.iter().map(|f| f.view()).collect();
        let stack = ndarray::stack(ndarray::Axis(0), &views).unwrap();
        let w = Window::new(7).unwrap();
        let st = spatial_contrast_stack(stack.view(), w, Border::Valid, Some(4000.0)).unwrap();
        for (i, f) in frames.iter().enumerate() {
            let c = spatial_contrast(f.view(), w, Border::Valid, Some(4000.0)).unwrap();
            assert_eq!(st.k.index_axis(ndarray::Axis(0), i), c.k);
            assert_eq!(st.mean.index_axis(ndarray::Axis(0), i), c.mean);
            assert_eq!(st.flags.index_axis(ndarray::Axis(0), i), c.flags);
        }
    }

    #[test]
    fn simd_dispatch_is_bit_identical_to_portable_code() {
        for (mode, size) in [(0u8, 5usize), (3, 7), (2, 31), (1, 3)] {
            let img = image_u16(57, 83, mode, 11);
            let win = Window::new(size).unwrap();
            let g = Geom::new(57, 83, win, Border::Reflect).unwrap();
            let px = Pixels {
                data: img.as_slice().unwrap(),
                w: 83,
                sat: Saturation::new(Some(60_001.0)).unwrap(),
            };
            let fin = Finish::new(win.area() as u64, 65_535, 0.5 / 1e-3);
            let run = |portable: bool, a2_u64: bool| {
                let (mut k, mut m, mut f, mut s) = (
                    vec![0f32; 57 * 83],
                    vec![0f32; 57 * 83],
                    vec![0u8; 57 * 83],
                    vec![0f32; 57 * 83],
                );
                let out = RowsOut {
                    k: &mut k,
                    mean: Some(&mut m),
                    flags: Some(&mut f),
                    sfi: Some(&mut s),
                };
                macro_rules! go {
                    ($a2:ty) => {{
                        let src = IntPixels::<u16, $a2> {
                            px: &px,
                            _a2: std::marker::PhantomData,
                        };
                        if portable {
                            int_band_portable(&src, &g, &fin, 0, out, true)
                        } else {
                            int_band(&src, &g, &fin, 0, out, true)
                        }
                    }};
                }
                if a2_u64 {
                    go!(u64);
                } else {
                    go!(u32);
                }
                (k, m, f, s)
            };
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            let (a, b) = (run(true, true), run(false, true));
            assert_eq!(
                (bits(&a.0), bits(&a.1), &a.2, bits(&a.3)),
                (bits(&b.0), bits(&b.1), &b.2, bits(&b.3))
            );
            if mode == 1 || mode == 3 {
                // Small values: the u32 accumulators must agree bit for bit with u64.
                let c = run(false, false);
                assert_eq!((bits(&a.0), bits(&a.3)), (bits(&c.0), bits(&c.3)));
            }
        }
    }
}
