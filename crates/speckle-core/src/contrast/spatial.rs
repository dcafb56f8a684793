//! Spatial speckle contrast K = sigma / mean over a sliding square window.
//!
//! # Formula
//! For a window of N pixels with sums `S1 = sum(I)` and `S2 = sum(I^2)`:
//! mean = S1 / N, sample variance s^2 = (N S2 - S1^2) / (N (N - 1)), K = s / mean, so
//! K^2 = (N S2 - S1^2) N / ((N - 1) S1^2). This is the estimator of Yang et al. 2011
//! (J. Biomed. Opt. 16(1) 016009, Eq. 1: N - 1 in the variance).
//!
//! # Exactness
//! Integer frames (u8, u16) are summed in integers: vertical running column sums (u32 for
//! S1, u64 for S2) updated by adding the row entering and subtracting the row leaving the
//! window, then a horizontal running sum. `N S2 - S1^2` is therefore an exact integer at any
//! image size; it is converted to f64 only in the final formula (for spatial windows it is
//! below 2^52 and so exact in f64 as well), and K is stored as f32. Whole-image float running
//! sums, by contrast, lose 10-80% of K on large bright images.
//!
//! f32 frames are summed in f64, directly per window (no running sums): each window sum is
//! a fixed-order sum of `2 (2r + 1)` partial sums, so its rounding error is at most
//! `gamma = 2 (2r + 1) u` times the sum of absolute values (u = 2^-53), and the relative
//! error of K is below `gamma (1 + 1 / K^2)`: under 1e-6 for K >= 1e-4 at any window size.
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
//! Row bands run in parallel with rayon; each band keeps its own column sums. The GPU port
//! must reproduce: integer sums for integer data (so any summation order gives the same
//! result), then `K = sqrt((N S2 - S1^2) N / (N - 1)) / S1` in floating point.

use ndarray::{Array2, Array3, ArrayView2, ArrayView3, ArrayViewMut2};
use rayon::prelude::*;

use super::params::{Border, Window, reflect_index};
use crate::error::{Error, Result};
use crate::types::{Map, Pixel};

/// Bits of the per-pixel flag maps. The bits of contrast, flow and correction maps are
/// distinct, so the maps of one pipeline can be OR-ed into one quality map.
pub mod flags {
    /// K (or the value derived from it) is undefined: zero or non-positive mean, NaN input.
    /// The value is NaN.
    pub const UNDEFINED: u8 = 1;
    /// The window (or, for flow maps, the input K) contains a pixel at or above the
    /// saturation level, so K is biased low.
    pub const SATURATED: u8 = 2;
    /// Flow: K^2 >= beta, no decorrelation detected; tau_c is +inf.
    pub const NO_MOTION: u8 = 4;
    /// Flow: K = 0 (or K^2 <= 0), decorrelation faster than resolvable; tau_c is 0.
    pub const NO_CONTRAST: u8 = 8;
    /// Correction: shot noise alone explains the measured K^2 (corrected K^2 < 0); K is NaN.
    pub const NOISE_DOMINATED: u8 = 16;
}

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
        Self { k, mean: None, flags: None, sfi: None }
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

    /// Also write SFI = 1 / (2 T K^2) (see [`crate::flow::sfi`]) for exposure `exposure_s`
    /// in seconds, in the same pass. K = 0 gives +inf, undefined K gives NaN.
    pub fn sfi(mut self, sfi: ArrayViewMut2<'a, f32>, exposure_s: f64) -> Self {
        self.sfi = Some((sfi, exposure_s));
        self
    }

    fn into_slices(self, h: usize, w: usize) -> Result<(RowsOut<'a>, f64)> {
        let inv_2t = match &self.sfi {
            Some((_, t)) => 0.5 / crate::flow::check_exposure(*t)?,
            None => f64::NAN,
        };
        Ok((
            RowsOut {
                k: out_slice("K output", self.k, h, w)?,
                mean: self.mean.map(|m| out_slice("mean output", m, h, w)).transpose()?,
                flags: self.flags.map(|f| out_slice("flags output", f, h, w)).transpose()?,
                sfi: self.sfi.map(|(s, _)| out_slice("SFI output", s, h, w)).transpose()?,
            },
            inv_2t,
        ))
    }
}

fn out_slice<'b, U>(what: &str, v: ArrayViewMut2<'b, U>, h: usize, w: usize) -> Result<&'b mut [U]> {
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

/// Output (height, width) of contrast for a `height x width` frame: the frame size, or
/// `(height - 2r) x (width - 2r)` for [`Border::Valid`].
///
/// ```
/// use speckle_core::{Border, Window};
/// use speckle_core::contrast::contrast_shape;
/// let w = Window::new(5)?;
/// assert_eq!(contrast_shape(1040, 1392, w, Border::Reflect)?, (1040, 1392));
/// assert_eq!(contrast_shape(1040, 1392, w, Border::Valid)?, (1036, 1388));
/// assert!(contrast_shape(4, 100, w, Border::Valid).is_err());
/// # Ok::<(), speckle_core::Error>(())
/// ```
pub fn contrast_shape(height: usize, width: usize, window: Window, border: Border) -> Result<(usize, usize)> {
    let g = Geom::new(height, width, window, border)?;
    Ok((g.h_out, g.w_out))
}

/// Spatial speckle contrast of one frame (see the module docs for the exact formula).
///
/// `saturation`: pixels at or above this level flag their windows [`flags::SATURATED`]
/// (use [`crate::CameraInfo::saturation`]; `None` disables the check).
///
/// ```
/// use ndarray::Array2;
/// use speckle_core::{Border, Window};
/// use speckle_core::contrast::{flags, spatial_contrast};
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
        ContrastOut::new(k.view_mut()).mean(mean.view_mut()).flags(fl.view_mut()),
    )?;
    Ok(ContrastMap { k, mean, flags: fl })
}

/// Spatial contrast written into caller buffers, optionally fused with SFI: the fastest path
/// for streaming (one pass over the frame, no large allocation).
///
/// ```
/// use ndarray::Array2;
/// use speckle_core::{Border, Window};
/// use speckle_core::contrast::{ContrastOut, spatial_contrast_into};
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
    let sat = Saturation::new(saturation)?;
    let (rows, inv_2t) = out.into_slices(g.h_out, g.w_out)?;
    let frame = frame.as_standard_layout();
    let data = frame.as_slice().expect("standard layout is contiguous");
    let src = Pixels { data, w: g.w, sat };
    let fin = Finish::new(window.area() as u64, max_value::<T>(), inv_2t);
    if T::INTEGER {
        run_int_bands(&src, &g, &fin, rows);
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
            spatial_contrast_into(frame, window, border, saturation, ContrastOut::new(k).mean(m).flags(f))
        })?;
    Ok(ContrastStack { k, mean, flags: fl })
}

// ---------------------------------------------------------------------------------------
// Shared machinery (also used by the temporal and spatio-temporal paths).
// ---------------------------------------------------------------------------------------

/// Largest value of an integer pixel type (u8: 255, u16: 65535), used to prove that sums fit.
pub(crate) fn max_value<T: Pixel>() -> u64 {
    if T::INTEGER { (1u64 << (8 * std::mem::size_of::<T>())) - 1 } else { u64::MAX }
}

/// Output geometry of a spatial window over an `h x w` frame.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Geom {
    pub r: usize,
    pub border: Border,
    pub h: usize,
    pub w: usize,
    pub h_out: usize,
    pub w_out: usize,
}

impl Geom {
    pub fn new(h: usize, w: usize, window: Window, border: Border) -> Result<Self> {
        let r = window.radius();
        if h == 0 || w == 0 {
            return Err(Error::InvalidParameter {
                name: "frame",
                value: format!("{w}x{h}"),
                why: "the frame is empty".into(),
            });
        }
        let (h_out, w_out) = if border == Border::Valid {
            if h < 2 * r + 1 || w < 2 * r + 1 {
                return Err(Error::ImageTooSmall { width: w, height: h, window: window.size() });
            }
            (h - 2 * r, w - 2 * r)
        } else {
            (h, w)
        };
        Ok(Self { r, border, h, w, h_out, w_out })
    }

    /// Offset from an output index to the source index of the window centre.
    fn off(&self) -> usize {
        if self.border == Border::Valid { self.r } else { 0 }
    }

    /// The source row for (possibly outside) row index `i`, or `None` for a zero row.
    fn src_row(&self, i: isize) -> Option<usize> {
        match self.border {
            Border::Reflect => Some(reflect_index(i, self.h)),
            Border::Zero | Border::Valid => (i >= 0 && (i as usize) < self.h).then_some(i as usize),
        }
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
            None => Ok(Self { int: None, float: None }),
            Some(l) if l.is_nan() => Err(Error::InvalidParameter {
                name: "saturation",
                value: "NaN".into(),
                why: "give the saturation level in counts, e.g. 4095 for 12-bit data, or none".into(),
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
                Ok(Self { int, float: Some(l) })
            }
        }
    }

    pub fn enabled(self) -> bool {
        self.float.is_some()
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

/// Exact conversion of an integer below 2^52 to f64 with vectorisable bit operations.
#[inline(always)]
fn exact_f64(v: u64) -> f64 {
    const MAGIC: f64 = 4503599627370496.0; // 2^52
    f64::from_bits(v | MAGIC.to_bits()) - MAGIC
}

/// K (and mean, SFI, flags) from exact integer window sums `s1`, `s2` and saturated counts.
pub(crate) fn finish_int(f: &Finish, s1: &[u64], s2: &[u64], sat: Option<&[u32]>, o: RowsOut<'_>) {
    let len = o.k.len();
    let (s1, s2) = (&s1[..len], &s2[..len]);
    let n = f.n as f64;
    let c = n / (n - 1.0);
    let k = o.k;
    if f.exact {
        // a = S1, b = S2 exact in f64; N b - a^2 exact (integer below 2^52).
        if let Some(sfi) = o.sfi {
            let sfi = &mut sfi[..len];
            for j in 0..len {
                let a = exact_f64(s1[j]);
                let v = (n * exact_f64(s2[j]) - a * a) * c;
                k[j] = (v.sqrt() / a) as f32;
                sfi[j] = (f.inv_2t * (a * a) / v) as f32;
            }
        } else {
            for j in 0..len {
                let a = exact_f64(s1[j]);
                let v = (n * exact_f64(s2[j]) - a * a) * c;
                k[j] = (v.sqrt() / a) as f32;
            }
        }
    } else {
        // Very long temporal windows: exact numerator in u128, rounded once to f64.
        let mut sfi = o.sfi;
        for j in 0..len {
            let num = u128::from(f.n) * u128::from(s2[j]) - u128::from(s1[j]) * u128::from(s1[j]);
            let a = s1[j] as f64;
            let v = num as f64 * c;
            k[j] = (v.sqrt() / a) as f32;
            if let Some(sfi) = sfi.as_deref_mut() {
                sfi[j] = (f.inv_2t * (a * a) / v) as f32;
            }
        }
    }
    if let Some(mean) = o.mean {
        for (m, &a) in mean.iter_mut().zip(s1) {
            *m = (a as f64 / n) as f32;
        }
    }
    if let Some(fl) = o.flags {
        match sat {
            Some(sat) => {
                for ((q, &a), &s) in fl.iter_mut().zip(s1).zip(&sat[..len]) {
                    *q = (u8::from(a == 0) * flags::UNDEFINED) | (u8::from(s > 0) * flags::SATURATED);
                }
            }
            None => {
                for (q, &a) in fl.iter_mut().zip(s1) {
                    *q = u8::from(a == 0) * flags::UNDEFINED;
                }
            }
        }
    }
}

/// K (and mean, SFI, flags) from f64 window sums (f32 input). Undefined where the mean is
/// not positive or anything is not finite.
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
            s[j] = if ok { (f.inv_2t * (m * m) / var) as f32 } else { f32::NAN };
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
    /// Whether row `y` holds any saturated pixel.
    fn row_has_sat(&self, y: usize) -> bool;
    /// Saturated-pixel counts of row `y`, one per column.
    fn sat_row(&self, y: usize, out: &mut [u32]);
}

/// Integer rows: adds `x` to `c1` and `x^2` to `c2` exactly.
pub(crate) trait IntRows: RowSource {
    /// Column accumulator of S1 (u32 where it provably fits).
    type C1: Copy + Default + Send + Sync + Into<u64>;
    fn add(&self, y: usize, c1: &mut [Self::C1], c2: &mut [u64]);
    fn sub(&self, y: usize, c1: &mut [Self::C1], c2: &mut [u64]);
    fn add_sub(&self, ya: usize, ys: usize, c1: &mut [Self::C1], c2: &mut [u64]);
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
    fn row(&self, y: usize) -> &[T] {
        &self.data[y * self.w..(y + 1) * self.w]
    }

    #[inline(always)]
    fn is_sat(&self, v: T) -> bool {
        if T::INTEGER { self.sat.int.is_some_and(|t| v.to_u32() >= t) } else { self.sat.float.is_some_and(|t| v.to_f64() >= t) }
    }
}

impl<T: Pixel> RowSource for Pixels<'_, T> {
    fn tracks_sat(&self) -> bool {
        self.sat.enabled()
    }

    fn row_has_sat(&self, y: usize) -> bool {
        if T::INTEGER {
            let Some(t) = self.sat.int else { return false };
            self.row(y).iter().fold(0u32, |m, v| m.max(v.to_u32())) >= t
        } else {
            self.row(y).iter().any(|&v| self.is_sat(v))
        }
    }

    fn sat_row(&self, y: usize, out: &mut [u32]) {
        for (o, &v) in out.iter_mut().zip(self.row(y)) {
            *o = u32::from(self.is_sat(v));
        }
    }
}

impl<T: Pixel> IntRows for Pixels<'_, T> {
    // For u8 and u16 with windows up to 31 rows, a column sum of S1 is below 2^32.
    type C1 = u32;

    #[inline]
    fn add(&self, y: usize, c1: &mut [u32], c2: &mut [u64]) {
        for ((a, b), &v) in c1.iter_mut().zip(c2.iter_mut()).zip(self.row(y)) {
            let v = v.to_u32();
            *a += v;
            *b += u64::from(v * v);
        }
    }

    #[inline]
    fn sub(&self, y: usize, c1: &mut [u32], c2: &mut [u64]) {
        for ((a, b), &v) in c1.iter_mut().zip(c2.iter_mut()).zip(self.row(y)) {
            let v = v.to_u32();
            *a -= v;
            *b -= u64::from(v * v);
        }
    }

    #[inline]
    fn add_sub(&self, ya: usize, ys: usize, c1: &mut [u32], c2: &mut [u64]) {
        let (ra, rs) = (self.row(ya), self.row(ys));
        for (((a, b), &va), &vs) in c1.iter_mut().zip(c2.iter_mut()).zip(ra).zip(rs) {
            let (va, vs) = (va.to_u32(), vs.to_u32());
            *a = *a + va - vs;
            *b = *b + u64::from(va * va) - u64::from(vs * vs);
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

/// Rows of a band: enough rows per task to amortise the band start-up (2r + 1 rows), and
/// about four tasks per thread for balance.
fn band_rows(h_out: usize, r: usize) -> usize {
    let tasks = 4 * rayon::current_num_threads();
    h_out.div_ceil(tasks).max(4 * (2 * r + 1)).max(16).min(h_out.max(1))
}

/// Run `f(first_output_row, band_outputs)` over row bands in parallel.
fn run_bands<F>(g: &Geom, out: RowsOut<'_>, f: F)
where
    F: Fn(usize, RowsOut<'_>) + Sync,
{
    let band = band_rows(g.h_out, g.r);
    out.split(band * g.w_out).into_par_iter().enumerate().for_each(|(b, o)| f(b * band, o));
}

pub(crate) fn run_int_bands<S: IntRows>(src: &S, g: &Geom, fin: &Finish, out: RowsOut<'_>) {
    run_bands(g, out, |j0, o| int_band(src, g, fin, j0, o));
}

pub(crate) fn run_float_bands<S: FloatRows>(src: &S, g: &Geom, fin: &Finish, out: RowsOut<'_>) {
    run_bands(g, out, |j0, o| float_band(src, g, fin, j0, o));
}

/// Mirror the column sums into the `r` padding cells on each side (reflect border); zero and
/// valid borders leave the padding at zero / unused.
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

/// Horizontal running window sums: `out[j] = sum(c[base + j ..= base + j + span - 1])`.
fn hrun<A: Copy + Into<u64>>(c: &[A], base: usize, span: usize, out: &mut [u64]) {
    let n = out.len();
    let mut s: u64 = c[base..base + span].iter().map(|&v| v.into()).sum();
    let add = &c[base + span..base + span + n - 1];
    let sub = &c[base..base + n - 1];
    let (last, head) = out.split_last_mut().expect("at least one output column");
    for ((o, &a), &d) in head.iter_mut().zip(add).zip(sub) {
        *o = s;
        s = s + a.into() - d.into();
    }
    *last = s;
}

fn hrun_u32(c: &[u32], base: usize, span: usize, out: &mut [u32]) {
    let n = out.len();
    let mut s: u32 = c[base..base + span].iter().sum();
    for (j, o) in out.iter_mut().enumerate() {
        *o = s;
        if j + 1 < n {
            s = s + c[base + span + j] - c[base + j];
        }
    }
}

/// Horizontal direct window sums in a fixed order (f64 path): `out[j] = sum over t of c[base + j + t]`.
fn hdirect(c: &[f64], base: usize, span: usize, out: &mut [f64]) {
    let n = out.len();
    out.copy_from_slice(&c[base..base + n]);
    for t in 1..span {
        for (o, &v) in out.iter_mut().zip(&c[base + t..base + t + n]) {
            *o += v;
        }
    }
}

fn add_counts(c: &mut [u32], v: &[u32]) {
    for (a, &b) in c.iter_mut().zip(v) {
        *a += b;
    }
}

fn sub_counts(c: &mut [u32], v: &[u32]) {
    for (a, &b) in c.iter_mut().zip(v) {
        *a -= b;
    }
}

/// Whether any source row that the band's windows touch holds a saturated pixel.
fn band_tracks_sat<S: RowSource>(src: &S, g: &Geom, j0: usize, rows: usize) -> bool {
    if !src.tracks_sat() {
        return false;
    }
    let off = g.off() as isize;
    let (r, j0) = (g.r as isize, j0 as isize);
    let lo = j0 + off - r;
    let hi = j0 + rows as isize - 1 + off + r;
    let mut seen = vec![false; g.h];
    (lo..=hi).filter_map(|i| g.src_row(i)).any(|y| !std::mem::replace(&mut seen[y], true) && src.row_has_sat(y))
}

/// Integer band kernel: running column sums down the band, running row sums across.
fn int_band<S: IntRows>(src: &S, g: &Geom, fin: &Finish, j0: usize, mut out: RowsOut<'_>) {
    let (r, w, w_out) = (g.r, g.w, g.w_out);
    let span = 2 * r + 1;
    let rows = out.k.len() / w_out;
    let pw = w + 2 * r;
    let off = g.off();
    let mut c1 = vec![S::C1::default(); pw];
    let mut c2 = vec![0u64; pw];
    let mut hs1 = vec![0u64; w_out];
    let mut hs2 = vec![0u64; w_out];
    let track = band_tracks_sat(src, g, j0, rows);
    let (mut cs, mut hss, mut ind) =
        if track { (vec![0u32; pw], vec![0u32; w_out], vec![0u32; w]) } else { (Vec::new(), Vec::new(), Vec::new()) };

    let (ri, c0) = (r as isize, (j0 + off) as isize);
    for i in c0 - ri..=c0 + ri {
        if let Some(y) = g.src_row(i) {
            src.add(y, &mut c1[r..r + w], &mut c2[r..r + w]);
            if track {
                src.sat_row(y, &mut ind);
                add_counts(&mut cs[r..r + w], &ind);
            }
        }
    }
    for jl in 0..rows {
        if jl > 0 {
            let c = (j0 + jl + off) as isize;
            let (ya, ys) = (g.src_row(c + ri), g.src_row(c - ri - 1));
            let (d1, d2) = (&mut c1[r..r + w], &mut c2[r..r + w]);
            match (ya, ys) {
                (Some(a), Some(s)) => src.add_sub(a, s, d1, d2),
                (Some(a), None) => src.add(a, d1, d2),
                (None, Some(s)) => src.sub(s, d1, d2),
                (None, None) => {}
            }
            if track {
                if let Some(a) = ya {
                    src.sat_row(a, &mut ind);
                    add_counts(&mut cs[r..r + w], &ind);
                }
                if let Some(s) = ys {
                    src.sat_row(s, &mut ind);
                    sub_counts(&mut cs[r..r + w], &ind);
                }
            }
        }
        fill_edges(&mut c1, g);
        fill_edges(&mut c2, g);
        hrun(&c1, off, span, &mut hs1);
        hrun(&c2, off, span, &mut hs2);
        if track {
            fill_edges(&mut cs, g);
            hrun_u32(&cs, off, span, &mut hss);
        }
        finish_int(fin, &hs1, &hs2, track.then_some(&hss[..]), out.sub(jl * w_out, w_out));
    }
}

/// Float band kernel: direct (non-running) f64 window sums, fixed summation order.
fn float_band<S: FloatRows>(src: &S, g: &Geom, fin: &Finish, j0: usize, mut out: RowsOut<'_>) {
    let (r, w, w_out) = (g.r, g.w, g.w_out);
    let span = 2 * r + 1;
    let rows = out.k.len() / w_out;
    let pw = w + 2 * r;
    let off = g.off();
    let mut c1 = vec![0f64; pw];
    let mut c2 = vec![0f64; pw];
    let mut hs1 = vec![0f64; w_out];
    let mut hs2 = vec![0f64; w_out];
    let track = band_tracks_sat(src, g, j0, rows);
    let (mut cs, mut hss, mut ind) =
        if track { (vec![0u32; pw], vec![0u32; w_out], vec![0u32; w]) } else { (Vec::new(), Vec::new(), Vec::new()) };
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
                    src.sat_row(y, &mut ind);
                    add_counts(&mut cs[r..r + w], &ind);
                }
            }
        }
        fill_edges(&mut c1, g);
        fill_edges(&mut c2, g);
        hdirect(&c1, off, span, &mut hs1);
        hdirect(&c2, off, span, &mut hs2);
        if track {
            fill_edges(&mut cs, g);
            hrun_u32(&cs, off, span, &mut hss);
        }
        finish_f64(fin, &hs1, &hs2, track.then_some(&hss[..]), out.sub(jl * w_out, w_out));
    }
}
