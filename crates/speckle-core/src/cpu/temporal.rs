//! Temporal and spatio-temporal speckle contrast.
//!
//! **Temporal** K: for each pixel, K = sigma / mean over `N` consecutive frames, sliding
//! along the stack: output frame `t` covers input frames `t ..= t + N - 1`, so a stack of
//! `F` frames gives `F - N + 1` output frames (`2 <= N <= F`). **Spatio-temporal** K pools
//! a `(2r + 1) x (2r + 1)` window in x, y over the same `N` frames (N = area x frames pixels
//! per estimate), with the spatial border modes of [`crate::cpu::spatial`].
//!
//! Both use the estimator of [`crate::cpu::spatial`] (sample variance, N - 1) and the same flags.
//!
//! Exactness: integer stacks keep per-pixel running sums S1, S2 in u64, adding the frame
//! that enters and subtracting the frame that leaves the window, so every sum is exact for
//! any stack length; `N S2 - S1^2` is exact in f64 when below 2^52 and otherwise formed in
//! u128. f32 stacks keep running f64 sums that are recomputed from scratch every `N` output
//! frames, so each sum is built from at most `3 N` additions: its rounding error is at most
//! `3 N u` times the sum of the absolute values over those `2 N` frames (u = 2^-53), and the
//! spatio-temporal sums add `2 (2r + 1) u` on top; K then carries three times that relative
//! error times `(1 + 1 / K^2)`, as for spatial f32 contrast.
//!
//! For live cameras, [`TemporalStream`] keeps the window's frames and running sums between
//! calls and writes each new K frame (optionally fused with SFI) into caller buffers.
//!
//! Each new K frame of a stream costs one frame added and one removed from the running sums,
//! whatever the window length (measured figures: docs/benchmarks.md).

// ndarray views are cheap handles, taken by value as ndarray's own APIs do.
#![allow(clippy::needless_pass_by_value)]

use ndarray::{Array3, ArrayView2, ArrayView3, ArrayViewMut2, Axis};
use rayon::prelude::*;

use crate::cpu::spatial::{
    ContrastStack, Finish, FloatRows, IntRows, RowSource, RowsOut, Saturation, finish_f64,
    finish_int, max_value, run_float_bands, run_int_bands,
};
use crate::error::{Error, Result};
use crate::model::types::Pixel;
use crate::model::window::{Border, Geom, Window};

/// Pixels per parallel task of the per-pixel passes: the running sums of one task (u64
/// S1 and S2, 16 bytes a pixel) stay in L2.
const CHUNK: usize = 16 * 1024;

fn check_frames(frames: usize, available: usize) -> Result<()> {
    if frames < 2 {
        return Err(Error::InvalidTemporalWindow {
            frames,
            why: "a variance needs at least 2 frames; use 2 or more (e.g. 25)".into(),
        });
    }
    if frames > available {
        return Err(Error::InvalidTemporalWindow {
            frames,
            why: format!("the stack has only {available} frames; use at most {available}"),
        });
    }
    Ok(())
}

/// Bound of every value of an integer stack, used to prove that sums fit and whether the
/// f64 steps are exact for `n` values per window: the type's maximum when that suffices
/// (no extra pass over the data), else the bitwise OR of the data (>= its maximum).
fn value_bound<T: Pixel>(data: &[T], n: u64) -> u64 {
    let type_max = max_value::<T>();
    if !T::INTEGER || Finish::new(n, type_max, f64::NAN).exact {
        return type_max;
    }
    u64::from(
        data.par_chunks(1 << 16)
            .map(|c| c.iter().fold(0u32, |m, v| m | v.to_u32()))
            .reduce(|| 0, |a, b| a | b),
    )
}

/// Sums of `n` values up to `bound` must fit u64 (they always do for u8/u16 and any
/// realistic window); reject absurd windows rather than overflow.
fn check_sum_range(n: u64, bound: u64, frames: usize) -> Result<()> {
    if bound != u64::MAX && u128::from(n) * u128::from(bound) * u128::from(bound) >= 1u128 << 64 {
        return Err(Error::InvalidTemporalWindow {
            frames,
            why: "too many pixels per window for exact 64-bit sums".into(),
        });
    }
    Ok(())
}

fn alloc_stack(n: usize, h: usize, w: usize) -> ContrastStack {
    ContrastStack {
        k: Array3::zeros((n, h, w)),
        mean: Array3::zeros((n, h, w)),
        flags: Array3::zeros((n, h, w)),
    }
}

/// Temporal speckle contrast: per pixel, over `frames` consecutive frames, sliding along the
/// stack (output `F - frames + 1` frames). `saturation` flags estimates that include a pixel
/// at or above this level.
///
/// ```
/// use ndarray::Array3;
/// use speckle_core::cpu::temporal_contrast;
/// let stack = Array3::from_shape_fn((30, 8, 8), |(t, y, x)| ((t * 37 + y * 11 + x * 5) % 50 + 100) as u16);
/// let c = temporal_contrast(stack.view(), 25, Some(4095.0))?;
/// assert_eq!(c.k.dim(), (6, 8, 8));
/// assert!(c.k.iter().all(|k| *k > 0.0 && *k < 1.0));
/// assert!(temporal_contrast(stack.view(), 31, None).is_err());
/// # Ok::<(), speckle_core::Error>(())
/// ```
pub fn temporal_contrast<T: Pixel>(
    stack: ArrayView3<T>,
    frames: usize,
    saturation: Option<f64>,
) -> Result<ContrastStack> {
    let (nf, h, w) = stack.dim();
    check_frames(frames, nf)?;
    if h == 0 || w == 0 {
        return Err(Error::InvalidParameter {
            name: "stack",
            value: format!("{w}x{h}"),
            why: "the frames are empty".into(),
        });
    }
    let sat = Saturation::new(saturation)?;
    let stack = stack.as_standard_layout();
    let data = stack.as_slice().expect("standard layout is contiguous");
    let bound = value_bound(data, frames as u64);
    check_sum_range(frames as u64, bound, frames)?;
    let fin = Finish::new(frames as u64, bound, f64::NAN);
    let (hw, nout) = (h * w, nf - frames + 1);
    let mut out = alloc_stack(nout, h, w);
    {
        let mut k = out
            .k
            .view_mut()
            .into_shape_with_order((nout, hw))
            .expect("contiguous");
        let mut m = out
            .mean
            .view_mut()
            .into_shape_with_order((nout, hw))
            .expect("contiguous");
        let mut f = out
            .flags
            .view_mut()
            .into_shape_with_order((nout, hw))
            .expect("contiguous");
        k.axis_chunks_iter_mut(Axis(1), CHUNK)
            .into_par_iter()
            .zip(m.axis_chunks_iter_mut(Axis(1), CHUNK))
            .zip(f.axis_chunks_iter_mut(Axis(1), CHUNK))
            .enumerate()
            .for_each(|(ci, ((k, m), f))| {
                let run = PixelRun {
                    data,
                    hw,
                    p0: ci * CHUNK,
                    len: k.ncols(),
                    frames,
                };
                if T::INTEGER {
                    temporal_int(&run, sat, &fin, k, m, f);
                } else {
                    temporal_float(&run, sat, &fin, k, m, f);
                }
            });
    }
    Ok(out)
}

/// One task's pixels `p0 .. p0 + len` of every frame of a stack.
struct PixelRun<'a, T> {
    data: &'a [T],
    hw: usize,
    p0: usize,
    len: usize,
    frames: usize,
}

impl<T: Pixel> PixelRun<'_, T> {
    fn at(&self, t: usize) -> &[T] {
        let s = t * self.hw + self.p0;
        &self.data[s..s + self.len]
    }
}

fn row_out<'a>(
    k: &'a mut ArrayViewMut2<f32>,
    m: &'a mut ArrayViewMut2<f32>,
    f: &'a mut ArrayViewMut2<u8>,
    t: usize,
) -> RowsOut<'a> {
    RowsOut {
        k: k.row_mut(t).into_slice().expect("contiguous row"),
        mean: Some(m.row_mut(t).into_slice().expect("contiguous row")),
        flags: Some(f.row_mut(t).into_slice().expect("contiguous row")),
        sfi: None,
    }
}

/// Add (or subtract) one frame's saturated pixels to per-pixel counts (branch-free).
fn count_sat<T: Pixel>(sat: Saturation, px: &[T], cs: &mut [u32], add: bool) {
    let inc = if add { 1u32 } else { u32::MAX };
    let cs = &mut cs[..px.len()];
    if T::INTEGER {
        let Some(t) = sat.int else { return };
        for x in 0..px.len() {
            cs[x] = cs[x].wrapping_add(u32::from(px[x].to_u32() >= t).wrapping_mul(inc));
        }
    } else {
        let Some(t) = sat.float else { return };
        for x in 0..px.len() {
            cs[x] = cs[x].wrapping_add(u32::from(px[x].to_f64() >= t).wrapping_mul(inc));
        }
    }
}

fn temporal_int<T: Pixel>(
    run: &PixelRun<'_, T>,
    sat: Saturation,
    fin: &Finish,
    mut k: ArrayViewMut2<f32>,
    mut m: ArrayViewMut2<f32>,
    mut f: ArrayViewMut2<u8>,
) {
    let (len, n) = (run.len, run.frames);
    let nout = k.nrows();
    // Counting saturated pixels costs little next to reading the frames: no pre-scan.
    let track = sat.enabled();
    let mut s1 = vec![0u64; len];
    let mut s2 = vec![0u64; len];
    let mut cs = vec![0u32; if track { len } else { 0 }];
    let mut tmp = vec![0f32; 2 * len];
    for t in 0..n {
        let px = run.at(t);
        for x in 0..len {
            let v = u64::from(px[x].to_u32());
            s1[x] += v;
            s2[x] += v * v;
        }
        if track {
            count_sat(sat, px, &mut cs, true);
        }
    }
    for to in 0..nout {
        if to > 0 {
            let (pa, ps) = (run.at(to + n - 1), run.at(to - 1));
            for x in 0..len {
                let (a, s) = (u64::from(pa[x].to_u32()), u64::from(ps[x].to_u32()));
                s1[x] = s1[x].wrapping_add(a.wrapping_sub(s));
                s2[x] = s2[x].wrapping_add((a * a).wrapping_sub(s * s));
            }
            if track {
                count_sat(sat, pa, &mut cs, true);
                count_sat(sat, ps, &mut cs, false);
            }
        }
        finish_int(
            fin,
            &s1,
            &s2,
            track.then_some(&cs[..]),
            row_out(&mut k, &mut m, &mut f, to),
            &mut tmp,
        );
    }
}

fn temporal_float<T: Pixel>(
    run: &PixelRun<'_, T>,
    sat: Saturation,
    fin: &Finish,
    mut k: ArrayViewMut2<f32>,
    mut m: ArrayViewMut2<f32>,
    mut f: ArrayViewMut2<u8>,
) {
    let (len, n) = (run.len, run.frames);
    let nout = k.nrows();
    let track = sat.enabled();
    let mut s1 = vec![0f64; len];
    let mut s2 = vec![0f64; len];
    let mut cs = vec![0u32; if track { len } else { 0 }];
    for to in 0..nout {
        if to.is_multiple_of(n) {
            // Fresh sums every N outputs bound the running-sum error (module docs).
            s1.fill(0.0);
            s2.fill(0.0);
            cs.fill(0);
            for t in to..to + n {
                let px = run.at(t);
                for x in 0..len {
                    let v = px[x].to_f64();
                    s1[x] += v;
                    s2[x] += v * v;
                }
                if track {
                    count_sat(sat, px, &mut cs, true);
                }
            }
        } else {
            let (pa, ps) = (run.at(to + n - 1), run.at(to - 1));
            for x in 0..len {
                let (a, s) = (pa[x].to_f64(), ps[x].to_f64());
                s1[x] += a - s;
                s2[x] += a * a - s * s;
            }
            if track {
                count_sat(sat, pa, &mut cs, true);
                count_sat(sat, ps, &mut cs, false);
            }
        }
        finish_f64(
            fin,
            &s1,
            &s2,
            track.then_some(&cs[..]),
            row_out(&mut k, &mut m, &mut f, to),
        );
    }
}

/// Spatio-temporal speckle contrast: a `window` in x, y pooled over `frames` consecutive
/// frames, sliding along the stack; `border` as for spatial contrast. Output
/// `(F - frames + 1, h_out, w_out)`.
///
/// ```
/// use ndarray::Array3;
/// use speckle_core::{Border, Window};
/// use speckle_core::cpu::spatiotemporal_contrast;
/// let stack = Array3::from_shape_fn((10, 16, 16), |(t, y, x)| ((t * 37 + y * 11 + x * 5) % 50 + 100) as u16);
/// let c = spatiotemporal_contrast(stack.view(), Window::new(3)?, 5, Border::Valid, None)?;
/// assert_eq!(c.k.dim(), (6, 14, 14));
/// # Ok::<(), speckle_core::Error>(())
/// ```
pub fn spatiotemporal_contrast<T: Pixel>(
    stack: ArrayView3<T>,
    window: Window,
    frames: usize,
    border: Border,
    saturation: Option<f64>,
) -> Result<ContrastStack> {
    let (nf, h, w) = stack.dim();
    check_frames(frames, nf)?;
    let g = Geom::new(h, w, window, border)?;
    let sat = Saturation::new(saturation)?;
    let stack = stack.as_standard_layout();
    let data = stack.as_slice().expect("standard layout is contiguous");
    let n = (window.area() * frames) as u64;
    let bound = value_bound(data, n);
    check_sum_range(n, bound, frames)?;
    let fin = Finish::new(n, bound, f64::NAN);
    let (hw, nout) = (h * w, nf - frames + 1);
    let mut out = alloc_stack(nout, g.h_out, g.w_out);
    let track = sat.enabled();
    let mut cs = vec![0u32; if track { hw } else { 0 }];
    let outs = out
        .k
        .outer_iter_mut()
        .zip(out.mean.outer_iter_mut())
        .zip(out.flags.outer_iter_mut());
    if T::INTEGER {
        let (mut p1, mut p2) = (vec![0u64; hw], vec![0u64; hw]);
        for (to, ((k, m), f)) in outs.enumerate() {
            temporal_planes_int(data, hw, frames, to, sat, &mut p1, &mut p2, &mut cs);
            let src = Planes {
                s1: &p1,
                s2: &p2,
                sat: track.then_some(&cs[..]),
                w,
            };
            run_int_bands(&src, &g, &fin, frame_out(k, m, f));
        }
    } else {
        let (mut p1, mut p2) = (vec![0f64; hw], vec![0f64; hw]);
        for (to, ((k, m), f)) in outs.enumerate() {
            temporal_planes_float(data, hw, frames, to, sat, &mut p1, &mut p2, &mut cs);
            let src = Planes {
                s1: &p1,
                s2: &p2,
                sat: track.then_some(&cs[..]),
                w,
            };
            run_float_bands(&src, &g, &fin, frame_out(k, m, f));
        }
    }
    Ok(out)
}

fn frame_out<'a>(
    k: ArrayViewMut2<'a, f32>,
    m: ArrayViewMut2<'a, f32>,
    f: ArrayViewMut2<'a, u8>,
) -> RowsOut<'a> {
    RowsOut {
        k: k.into_slice().expect("contiguous"),
        mean: Some(m.into_slice().expect("contiguous")),
        flags: Some(f.into_slice().expect("contiguous")),
        sfi: None,
    }
}

/// Per-pixel temporal sums of frames `to ..= to + n - 1` (int): fresh at `to = 0`, then one
/// frame in and one out.
fn temporal_planes_int<T: Pixel>(
    data: &[T],
    hw: usize,
    n: usize,
    to: usize,
    sat: Saturation,
    p1: &mut [u64],
    p2: &mut [u64],
    cs: &mut [u32],
) {
    let frame = |t: usize| &data[t * hw..(t + 1) * hw];
    let track = !cs.is_empty();
    p1.par_chunks_mut(CHUNK)
        .zip(p2.par_chunks_mut(CHUNK))
        .enumerate()
        .for_each(|(ci, (a1, a2))| {
            let r = ci * CHUNK..ci * CHUNK + a1.len();
            if to == 0 {
                a1.fill(0);
                a2.fill(0);
                for t in 0..n {
                    for ((s1, s2), &v) in a1.iter_mut().zip(a2.iter_mut()).zip(&frame(t)[r.clone()])
                    {
                        let v = u64::from(v.to_u32());
                        *s1 += v;
                        *s2 += v * v;
                    }
                }
            } else {
                let (pa, ps) = (&frame(to + n - 1)[r.clone()], &frame(to - 1)[r]);
                for x in 0..a1.len() {
                    let (a, s) = (u64::from(pa[x].to_u32()), u64::from(ps[x].to_u32()));
                    a1[x] = a1[x].wrapping_add(a.wrapping_sub(s));
                    a2[x] = a2[x].wrapping_add((a * a).wrapping_sub(s * s));
                }
            }
        });
    if track {
        update_sat_plane(data, hw, n, to, sat, cs);
    }
}

/// Per-pixel temporal sums (f32 input) in f64, recomputed from scratch every `n` outputs.
fn temporal_planes_float<T: Pixel>(
    data: &[T],
    hw: usize,
    n: usize,
    to: usize,
    sat: Saturation,
    p1: &mut [f64],
    p2: &mut [f64],
    cs: &mut [u32],
) {
    let frame = |t: usize| &data[t * hw..(t + 1) * hw];
    let track = !cs.is_empty();
    p1.par_chunks_mut(CHUNK)
        .zip(p2.par_chunks_mut(CHUNK))
        .enumerate()
        .for_each(|(ci, (a1, a2))| {
            let r = ci * CHUNK..ci * CHUNK + a1.len();
            if to.is_multiple_of(n) {
                a1.fill(0.0);
                a2.fill(0.0);
                for t in to..to + n {
                    for ((s1, s2), &v) in a1.iter_mut().zip(a2.iter_mut()).zip(&frame(t)[r.clone()])
                    {
                        let v = v.to_f64();
                        *s1 += v;
                        *s2 += v * v;
                    }
                }
            } else {
                let (pa, ps) = (&frame(to + n - 1)[r.clone()], &frame(to - 1)[r]);
                for x in 0..a1.len() {
                    let (a, s) = (pa[x].to_f64(), ps[x].to_f64());
                    a1[x] += a - s;
                    a2[x] += a * a - s * s;
                }
            }
        });
    if track {
        update_sat_plane(data, hw, n, to, sat, cs);
    }
}

fn update_sat_plane<T: Pixel>(
    data: &[T],
    hw: usize,
    n: usize,
    to: usize,
    sat: Saturation,
    cs: &mut [u32],
) {
    let frame = |t: usize| &data[t * hw..(t + 1) * hw];
    if to == 0 {
        cs.fill(0);
        for t in 0..n {
            count_sat(sat, frame(t), cs, true);
        }
    } else {
        count_sat(sat, frame(to + n - 1), cs, true);
        count_sat(sat, frame(to - 1), cs, false);
    }
}

/// Live temporal contrast for a camera stream: push frames one at a time; once `frames`
/// frames have arrived, every push writes K (and optionally mean, flags, SFI) of the last
/// `frames` frames into caller buffers. Keeps the last frames in a ring and per-pixel
/// running sums, so each push costs O(1) per pixel and allocates nothing. Integer sums are
/// exact forever; f32 sums are re-summed from the ring every `frames` pushes (module docs).
///
/// ```
/// use ndarray::Array2;
/// use speckle_core::cpu::{ContrastOut, TemporalStream};
/// let mut stream = TemporalStream::<u16>::new(4, 6, 3, Some(4095.0))?;
/// let mut k = Array2::zeros((4, 6));
/// for t in 0..5u16 {
///     let frame = Array2::from_shape_fn((4, 6), |(y, x)| 100 + (t * 7 + y as u16 * 3 + x as u16) % 11);
///     let ready = stream.push(frame.view(), ContrastOut::new(k.view_mut()))?;
///     assert_eq!(ready, t >= 2); // K exists from the third frame on
/// }
/// assert!(k.iter().all(|k| *k > 0.0));
/// # Ok::<(), speckle_core::Error>(())
/// ```
#[derive(Debug)]
pub struct TemporalStream<T> {
    frames: usize,
    h: usize,
    w: usize,
    sat: Saturation,
    fin: Finish,
    ring: Vec<T>,
    next: usize,
    seen: usize,
    since_sum: usize,
    s1i: Vec<u64>,
    s2i: Vec<u64>,
    s1f: Vec<f64>,
    s2f: Vec<f64>,
    cs: Vec<u32>,
}

impl<T: Pixel> TemporalStream<T> {
    /// A stream of `height x width` frames with a temporal window of `frames` (>= 2).
    pub fn new(
        height: usize,
        width: usize,
        frames: usize,
        saturation: Option<f64>,
    ) -> Result<Self> {
        check_frames(frames, usize::MAX)?;
        if height == 0 || width == 0 {
            return Err(Error::InvalidParameter {
                name: "frame",
                value: format!("{width}x{height}"),
                why: "the frames are empty".into(),
            });
        }
        let n = frames as u64;
        let bound = max_value::<T>();
        check_sum_range(n, bound, frames)?;
        let hw = height * width;
        let (int_len, float_len) = if T::INTEGER { (hw, 0) } else { (0, hw) };
        Ok(Self {
            frames,
            h: height,
            w: width,
            sat: Saturation::new(saturation)?,
            fin: Finish::new(n, bound, f64::NAN),
            ring: Vec::with_capacity(frames * hw),
            next: 0,
            seen: 0,
            since_sum: 0,
            s1i: vec![0; int_len],
            s2i: vec![0; int_len],
            s1f: vec![0.0; float_len],
            s2f: vec![0.0; float_len],
            cs: vec![0; hw],
        })
    }

    /// Forget all frames (e.g. after the camera settings changed).
    pub fn reset(&mut self) {
        self.ring.clear();
        (self.next, self.seen, self.since_sum) = (0, 0, 0);
        self.s1i.fill(0);
        self.s2i.fill(0);
        self.s1f.fill(0.0);
        self.s2f.fill(0.0);
        self.cs.fill(0);
    }

    /// Add a frame; returns `true` when `out` was written (from the `frames`-th frame on).
    pub fn push(
        &mut self,
        frame: ArrayView2<T>,
        out: crate::cpu::spatial::ContrastOut<'_>,
    ) -> Result<bool> {
        let (h, w) = frame.dim();
        if (h, w) != (self.h, self.w) {
            return Err(Error::FrameSizeMismatch {
                what: "temporal stream frame".into(),
                expected_w: self.w,
                expected_h: self.h,
                got_w: w,
                got_h: h,
            });
        }
        let (rows, inv_2t) = out.into_slices(self.h, self.w)?;
        let frame = frame.as_standard_layout();
        let new = frame.as_slice().expect("standard layout is contiguous");
        let hw = self.h * self.w;
        let (sat, track) = (self.sat, self.sat.enabled());
        if self.seen < self.frames {
            // Filling up: add the frame to the sums.
            self.ring.extend_from_slice(new);
            if T::INTEGER {
                add_frame_int(new, &mut self.s1i, &mut self.s2i);
            } else {
                add_frame_float(new, &mut self.s1f, &mut self.s2f);
            }
            if track {
                count_sat(sat, new, &mut self.cs, true);
            }
            self.seen += 1;
            self.next = self.seen % self.frames;
            if self.seen < self.frames {
                return Ok(false);
            }
        } else {
            let slot = self.next * hw..(self.next + 1) * hw;
            self.since_sum += 1;
            if !T::INTEGER && self.since_sum >= self.frames {
                // Re-sum the float window from the ring to bound rounding.
                self.ring[slot].copy_from_slice(new);
                self.since_sum = 0;
                self.s1f.fill(0.0);
                self.s2f.fill(0.0);
                self.cs.fill(0);
                for f in self.ring.chunks(hw) {
                    add_frame_float(f, &mut self.s1f, &mut self.s2f);
                    if track {
                        count_sat(sat, f, &mut self.cs, true);
                    }
                }
            } else {
                let old = &mut self.ring[slot];
                let cs = &mut self.cs;
                if T::INTEGER {
                    let (s1, s2) = (&mut self.s1i, &mut self.s2i);
                    s1.par_chunks_mut(CHUNK)
                        .zip(s2.par_chunks_mut(CHUNK))
                        .zip(old.par_chunks_mut(CHUNK))
                        .zip(new.par_chunks(CHUNK))
                        .zip(cs.par_chunks_mut(CHUNK))
                        .for_each(|((((s1, s2), old), new), cs)| {
                            if track {
                                count_sat(sat, new, cs, true);
                                count_sat(sat, old, cs, false);
                            }
                            for x in 0..s1.len() {
                                let (a, d) =
                                    (u64::from(new[x].to_u32()), u64::from(old[x].to_u32()));
                                s1[x] = s1[x].wrapping_add(a.wrapping_sub(d));
                                s2[x] = s2[x].wrapping_add((a * a).wrapping_sub(d * d));
                            }
                            old.copy_from_slice(new);
                        });
                } else {
                    let (s1, s2) = (&mut self.s1f, &mut self.s2f);
                    s1.par_chunks_mut(CHUNK)
                        .zip(s2.par_chunks_mut(CHUNK))
                        .zip(old.par_chunks_mut(CHUNK))
                        .zip(new.par_chunks(CHUNK))
                        .zip(cs.par_chunks_mut(CHUNK))
                        .for_each(|((((s1, s2), old), new), cs)| {
                            if track {
                                count_sat(sat, new, cs, true);
                                count_sat(sat, old, cs, false);
                            }
                            for x in 0..s1.len() {
                                let (a, d) = (new[x].to_f64(), old[x].to_f64());
                                s1[x] += a - d;
                                s2[x] += a * a - d * d;
                            }
                            old.copy_from_slice(new);
                        });
                }
            }
            self.next = (self.next + 1) % self.frames;
        }
        let fin = Finish { inv_2t, ..self.fin };
        let sat_counts = track.then_some(&self.cs[..]);
        rows.split(CHUNK)
            .into_par_iter()
            .enumerate()
            .for_each(|(ci, o)| {
                let r = ci * CHUNK..ci * CHUNK + o.k.len();
                let sat = sat_counts.map(|c| &c[r.clone()]);
                if T::INTEGER {
                    let mut tmp = vec![0f32; 2 * o.k.len()];
                    finish_int(&fin, &self.s1i[r.clone()], &self.s2i[r], sat, o, &mut tmp);
                } else {
                    finish_f64(&fin, &self.s1f[r.clone()], &self.s2f[r], sat, o);
                }
            });
        Ok(true)
    }
}

fn add_frame_int<T: Pixel>(px: &[T], s1: &mut [u64], s2: &mut [u64]) {
    s1.par_chunks_mut(CHUNK)
        .zip(s2.par_chunks_mut(CHUNK))
        .zip(px.par_chunks(CHUNK))
        .for_each(|((s1, s2), px)| {
            for x in 0..s1.len() {
                let v = u64::from(px[x].to_u32());
                s1[x] += v;
                s2[x] += v * v;
            }
        });
}

fn add_frame_float<T: Pixel>(px: &[T], s1: &mut [f64], s2: &mut [f64]) {
    s1.par_chunks_mut(CHUNK)
        .zip(s2.par_chunks_mut(CHUNK))
        .zip(px.par_chunks(CHUNK))
        .for_each(|((s1, s2), px)| {
            for x in 0..s1.len() {
                let v = px[x].to_f64();
                s1[x] += v;
                s2[x] += v * v;
            }
        });
}

/// Per-pixel temporal sums seen as rows for the spatial band kernels.
struct Planes<'a, A> {
    s1: &'a [A],
    s2: &'a [A],
    sat: Option<&'a [u32]>,
    w: usize,
}

impl<A: Sync> Planes<'_, A> {
    fn rows(&self, y: usize) -> (&[A], &[A]) {
        let r = y * self.w..(y + 1) * self.w;
        (&self.s1[r.clone()], &self.s2[r])
    }
}

impl<A: Sync> RowSource for Planes<'_, A> {
    fn tracks_sat(&self) -> bool {
        self.sat.is_some()
    }
    fn row_has_sat(&self, y: usize) -> bool {
        self.sat
            .is_some_and(|s| s[y * self.w..(y + 1) * self.w].iter().any(|&c| c > 0))
    }
    fn sat_update(&self, y: usize, cs: &mut [u32], add: bool) {
        if let Some(s) = self.sat {
            for (c, &v) in cs.iter_mut().zip(&s[y * self.w..(y + 1) * self.w]) {
                *c = if add { *c + v } else { *c - v };
            }
        }
    }
}

impl IntRows for Planes<'_, u64> {
    type A1 = u64;
    type A2 = u64;

    #[inline(always)]
    fn add(&self, y: usize, c1: &mut [u64], c2: &mut [u64]) {
        let (r1, r2) = self.rows(y);
        for (c, &v) in c1.iter_mut().zip(r1) {
            *c = c.wrapping_add(v);
        }
        for (c, &v) in c2.iter_mut().zip(r2) {
            *c = c.wrapping_add(v);
        }
    }

    #[inline(always)]
    fn sub(&self, y: usize, c1: &mut [u64], c2: &mut [u64]) {
        let (r1, r2) = self.rows(y);
        for (c, &v) in c1.iter_mut().zip(r1) {
            *c = c.wrapping_sub(v);
        }
        for (c, &v) in c2.iter_mut().zip(r2) {
            *c = c.wrapping_sub(v);
        }
    }

    #[inline(always)]
    fn add_sub(&self, ya: usize, ys: usize, c1: &mut [u64], c2: &mut [u64]) {
        self.add(ya, c1, c2);
        self.sub(ys, c1, c2);
    }
}

impl FloatRows for Planes<'_, f64> {
    fn add(&self, y: usize, c1: &mut [f64], c2: &mut [f64]) {
        let (r1, r2) = self.rows(y);
        for (c, &v) in c1.iter_mut().zip(r1) {
            *c += v;
        }
        for (c, &v) in c2.iter_mut().zip(r2) {
            *c += v;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu::spatial::ContrastOut;
    use crate::cpu::spatial::tests::{Sums, TOL_MEAN, image_u16, splitmix};
    use crate::model::flags;
    use crate::model::window::reflect_index;
    use ndarray::Array2;
    use ndarray::Array3;
    use proptest::prelude::*;

    /// Brute-force spatio-temporal reference (r = 0 gives the temporal one): explicit loops,
    /// two-pass f64. Returns (K, mean, flags) or `None` when the valid output is empty.
    #[allow(clippy::type_complexity)]
    fn reference<T: Pixel>(
        st: &Array3<T>,
        r: usize,
        n: usize,
        border: Border,
        sat: Option<f64>,
    ) -> Option<(Array3<f64>, Array3<f64>, Array3<u8>)> {
        let (nf, h, w) = st.dim();
        let (ho, wo, off) = match border {
            Border::Valid if h < 2 * r + 1 || w < 2 * r + 1 => return None,
            Border::Valid => (h - 2 * r, w - 2 * r, r as isize),
            _ => (h, w, 0),
        };
        let dims = (nf - n + 1, ho, wo);
        let (mut k, mut mm, mut ff) = (
            Array3::zeros(dims),
            Array3::zeros(dims),
            Array3::zeros(dims),
        );
        let ri = r as isize;
        for to in 0..dims.0 {
            for i in 0..ho {
                for j in 0..wo {
                    let mut vals = Vec::new();
                    let mut saturated = false;
                    for t in to..to + n {
                        for dy in -ri..=ri {
                            for dx in -ri..=ri {
                                let (y, x) = (i as isize + off + dy, j as isize + off + dx);
                                let v = match border {
                                    Border::Reflect => {
                                        Some(st[[t, reflect_index(y, h), reflect_index(x, w)]])
                                    }
                                    _ if y < 0 || x < 0 || y >= h as isize || x >= w as isize => {
                                        None
                                    }
                                    _ => Some(st[[t, y as usize, x as usize]]),
                                };
                                saturated |=
                                    v.is_some_and(|v| sat.is_some_and(|s| v.to_f64() >= s));
                                vals.push(v.map_or(0.0, Pixel::to_f64));
                            }
                        }
                    }
                    let c = vals.len() as f64;
                    let mean = vals.iter().sum::<f64>() / c;
                    let var = vals.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / (c - 1.0);
                    let undef = if T::INTEGER {
                        mean == 0.0
                    } else {
                        mean.is_nan() || mean <= 0.0
                    };
                    k[[to, i, j]] = if undef { f64::NAN } else { var.sqrt() / mean };
                    mm[[to, i, j]] = mean;
                    ff[[to, i, j]] = (u8::from(undef) * flags::UNDEFINED)
                        | (u8::from(saturated) * flags::SATURATED);
                }
            }
        }
        Some((k, mm, ff))
    }

    fn assert_stack(
        got: &ContrastStack,
        want: &(Array3<f64>, Array3<f64>, Array3<u8>),
        sums: Sums,
    ) {
        assert_eq!(got.k.dim(), want.0.dim());
        for (idx, &kr) in want.0.indexed_iter() {
            assert_eq!(got.flags[idx], want.2[idx], "flags at {idx:?}");
            let k = f64::from(got.k[idx]);
            if kr.is_nan() {
                assert!(k.is_nan(), "K at {idx:?} = {k}, want NaN");
                continue;
            }
            assert!(
                (k - kr).abs() <= sums.allowed(kr),
                "K at {idx:?} = {k}, want {kr}"
            );
            let (m, mr) = (f64::from(got.mean[idx]), want.1[idx]);
            assert!(
                (m - mr).abs() <= TOL_MEAN * mr.abs() + 1e-30,
                "mean at {idx:?} = {m}, want {mr}"
            );
        }
    }

    fn stack_u16(nf: usize, h: usize, w: usize, mode: u8, seed: u64) -> Array3<u16> {
        let frames: Vec<_> = (0..nf)
            .map(|t| image_u16(h, w, mode, seed ^ (t as u64 * 7919)))
            .collect();
        let views: Vec<_> = frames.iter().map(|f| f.view()).collect();
        ndarray::stack(Axis(0), &views).unwrap()
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

        #[test]
        fn temporal_k_matches_reference(nf in 2usize..12, h in 1usize..9, w in 1usize..9, n in 2usize..12,
                                        mode in 0u8..4, seed in any::<u64>(), sat in prop::option::of(1u32..70_000)) {
            let n = n.min(nf);
            let st = stack_u16(nf, h, w, mode, seed);
            let sat = sat.map(f64::from);
            let want = reference(&st, 0, n, Border::Reflect, sat).unwrap();
            assert_stack(&temporal_contrast(st.view(), n, sat).unwrap(), &want, Sums::Exact);
            let st8 = st.mapv(|v| (v % 256) as u8);
            let want8 = reference(&st8, 0, n, Border::Reflect, sat).unwrap();
            assert_stack(&temporal_contrast(st8.view(), n, sat).unwrap(), &want8, Sums::Exact);
            let stf = st.mapv(|v| f32::from(v) * 0.25 + 0.5);
            let wantf = reference(&stf, 0, n, Border::Reflect, sat).unwrap();
            assert_stack(&temporal_contrast(stf.view(), n, sat).unwrap(), &wantf, Sums::Float { terms: 3 * n });
        }

        #[test]
        fn spatiotemporal_k_matches_reference(nf in 2usize..7, h in 1usize..12, w in 1usize..12, n in 2usize..7,
                                              half in 1usize..5, b in 0u8..3, mode in 0u8..4, seed in any::<u64>(),
                                              sat in prop::option::of(1u32..70_000)) {
            let n = n.min(nf);
            let size = 2 * half + 1;
            let border = [Border::Reflect, Border::Zero, Border::Valid][usize::from(b)];
            let st = stack_u16(nf, h, w, mode, seed);
            let sat = sat.map(f64::from);
            let win = Window::new(size).unwrap();
            match reference(&st, half, n, border, sat) {
                None => {
                    let e = spatiotemporal_contrast(st.view(), win, n, border, sat);
                    let too_small = matches!(e, Err(Error::ImageTooSmall { .. }));
                    prop_assert!(too_small, "valid border must reject a small image");
                }
                Some(want) => {
                    assert_stack(&spatiotemporal_contrast(st.view(), win, n, border, sat).unwrap(), &want, Sums::Exact);
                    let stf = st.mapv(|v| f32::from(v) * 0.25 + 0.5);
                    let wantf = reference(&stf, half, n, border, sat).unwrap();
                    let got = spatiotemporal_contrast(stf.view(), win, n, border, sat).unwrap();
                    assert_stack(&got, &wantf, Sums::Float { terms: 3 * n + 2 * size });
                }
            }
        }
    }

    #[test]
    fn long_bright_stack_is_exact_and_frame_count_is_checked() {
        // 400 frames of mean ~60000, sd ~2 over a 25-frame window: exact integer sums.
        let st = stack_u16(400, 3, 5, 2, 3);
        let c = temporal_contrast(st.view(), 25, None).unwrap();
        assert_eq!(c.k.dim(), (376, 3, 5));
        let want = reference(&st, 0, 25, Border::Reflect, None).unwrap();
        assert_stack(&c, &want, Sums::Exact);
        // f32 version: restarts keep the error at the per-window bound.
        let stf = st.mapv(f32::from);
        assert_stack(
            &temporal_contrast(stf.view(), 25, None).unwrap(),
            &want,
            Sums::Float { terms: 75 },
        );
        for bad in [0, 1, 401] {
            let e = temporal_contrast(st.view(), bad, None).unwrap_err();
            assert!(
                matches!(e, Error::InvalidTemporalWindow { frames, .. } if frames == bad),
                "{e}"
            );
            assert!(
                spatiotemporal_contrast(
                    st.view(),
                    Window::new(3).unwrap(),
                    bad,
                    Border::Reflect,
                    None
                )
                .is_err()
            );
        }
    }

    #[test]
    fn stream_matches_batch_temporal_contrast() {
        let st = stack_u16(40, 13, 9, 3, 21); // exponential speckle, some saturated (4095)
        let n = 7;
        let batch = temporal_contrast(st.view(), n, Some(4095.0)).unwrap();
        let mut stream = TemporalStream::<u16>::new(13, 9, n, Some(4095.0)).unwrap();
        let (mut k, mut m, mut f, mut s) = (
            Array2::zeros((13, 9)),
            Array2::zeros((13, 9)),
            Array2::zeros((13, 9)),
            Array2::zeros((13, 9)),
        );
        for t in 0..40 {
            let out = ContrastOut::new(k.view_mut())
                .mean(m.view_mut())
                .flags(f.view_mut())
                .sfi(s.view_mut(), 1e-3);
            let ready = stream.push(st.index_axis(Axis(0), t), out).unwrap();
            assert_eq!(ready, t + 1 >= n);
            if ready {
                let to = t + 1 - n;
                // Same exact sums and the same final formula: bit-identical to the batch path.
                assert_eq!(k, batch.k.index_axis(Axis(0), to), "K at output {to}");
                assert_eq!(m, batch.mean.index_axis(Axis(0), to));
                assert_eq!(f, batch.flags.index_axis(Axis(0), to));
                for (&kk, &ss) in k.iter().zip(s.iter()) {
                    let want = 1.0 / (2.0 * 1e-3 * f64::from(kk) * f64::from(kk));
                    assert!((f64::from(ss) - want).abs() <= 1e-6 * want);
                }
            }
        }
        assert!(
            f.iter().any(|&x| x & flags::SATURATED != 0),
            "the test data must hold saturated pixels"
        );
        // f32 frames: same values within the float-summation tolerance; reset starts over.
        let stf = st.mapv(|v| f32::from(v) + 0.25);
        let batchf = temporal_contrast(stf.view(), n, None).unwrap();
        let mut sf = TemporalStream::<f32>::new(13, 9, n, None).unwrap();
        for t in 0..40 {
            if sf
                .push(stf.index_axis(Axis(0), t), ContrastOut::new(k.view_mut()))
                .unwrap()
            {
                for (&a, &b) in k.iter().zip(batchf.k.index_axis(Axis(0), t + 1 - n).iter()) {
                    assert!((a - b).abs() <= 1e-6 * b, "{a} vs {b}");
                }
            }
        }
        sf.reset();
        assert!(
            !sf.push(stf.index_axis(Axis(0), 0), ContrastOut::new(k.view_mut()))
                .unwrap()
        );
        let wrong = Array2::<f32>::zeros((13, 8));
        assert!(matches!(
            sf.push(wrong.view(), ContrastOut::new(k.view_mut())),
            Err(Error::FrameSizeMismatch { .. })
        ));
        assert!(TemporalStream::<u16>::new(13, 9, 1, None).is_err());
        assert!(TemporalStream::<u16>::new(0, 9, 3, None).is_err());
    }

    #[test]
    fn zero_pixels_are_undefined_and_saturation_is_flagged_in_time() {
        let mut st = Array3::<u16>::from_elem((6, 2, 2), 100);
        let mut s = 5u64;
        st.mapv_inplace(|v| v + (splitmix(&mut s) % 10) as u16);
        st.slice_mut(ndarray::s![.., 0, 0]).fill(0);
        st[[4, 1, 1]] = 4095;
        let c = temporal_contrast(st.view(), 3, Some(4095.0)).unwrap();
        for t in 0..4 {
            assert!(c.k[[t, 0, 0]].is_nan());
            assert_eq!(c.flags[[t, 0, 0]], flags::UNDEFINED);
            // Output t covers frames t..t+2: frame 4 is in outputs 2 and 3.
            assert_eq!(
                c.flags[[t, 1, 1]],
                if t >= 2 { flags::SATURATED } else { 0 },
                "t = {t}"
            );
            assert_eq!(c.flags[[t, 0, 1]], 0);
        }
    }
}
