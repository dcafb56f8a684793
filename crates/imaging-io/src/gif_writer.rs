//! Animated GIF preview of a stack of maps, one colour range for all frames so that
//! changes over time are visible as colour changes.

use std::fs::File;
use std::io::BufWriter;
use std::path::Path;
use std::time::Duration;

use gif::{Encoder, Repeat};
use ndarray::{ArrayView3, Axis};

use crate::colormap::{Colormap, Indexed, Range, render_indexed};
use crate::error::{Error, Result};

/// Write `stack` (frame, row, column) as a looping animated GIF with a colour bar.
///
/// The colour range is resolved once over the whole stack (percentiles over all frames),
/// so colours mean the same value in every frame. `delay` is the time each frame is shown;
/// GIF stores it in 10 ms units, so it is rounded to the nearest 10 ms and must lie in
/// 10 ms ..= 655.35 s. Returns the value limits used.
///
/// ```no_run
/// use std::time::Duration;
/// use ndarray::Array3;
/// use imaging_io::{Colormap, Range, write_gif};
/// let k = Array3::<f32>::zeros((10, 64, 64));
/// write_gif("k.gif", k.view(), Colormap::Inferno, Range::Fixed(0.0, 0.5), Duration::from_millis(100))?;
/// # Ok::<_, imaging_io::Error>(())
/// ```
#[allow(clippy::needless_pass_by_value)] // views are passed by value throughout the crate
pub fn write_gif(
    path: impl AsRef<Path>,
    stack: ArrayView3<'_, f32>,
    cmap: Colormap,
    range: Range,
    delay: Duration,
) -> Result<(f32, f32)> {
    let path = path.as_ref();
    let (n, h, w) = stack.dim();
    if n == 0 || h == 0 || w == 0 {
        return Err(Error::InvalidParameter {
            name: "stack",
            value: format!("{n} frames of {w}x{h}"),
            why: "an animation needs at least one non-empty frame".into(),
        });
    }
    let centis = delay_centis(delay)?;
    let (lo, hi) = range.resolve(&stack)?;
    let show_nan = stack.iter().any(|v| v.is_nan());
    let first = render_indexed(stack.index_axis(Axis(0), 0), cmap, lo, hi, show_nan);
    let rest = stack
        .axis_iter(Axis(0))
        .skip(1)
        .map(|map| render_indexed(map, cmap, lo, hi, show_nan).canvas.pixels);
    encode(path, (w, h), first, rest, centis)?;
    Ok((lo, hi))
}

/// Caps on an animated preview ([`write_gif_preview`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GifLimits {
    /// Most frames shown: longer stacks are shown every n-th frame.
    pub max_frames: usize,
    /// Longest map side in pixels: larger maps are averaged down by an integer factor.
    pub max_side: usize,
    /// Most rendered pixels in all (frames x canvas): one byte each before compression,
    /// so the file stays below this many bytes.
    pub max_pixels: usize,
}

impl Default for GifLimits {
    /// 100 frames, 512 pixels per side, 8 Mi rendered pixels (a file of a few MB at most).
    fn default() -> Self {
        Self {
            max_frames: 100,
            max_side: 512,
            max_pixels: 8 << 20,
        }
    }
}

/// What [`write_gif_preview`] wrote.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GifPreview {
    /// Frames written, and the stride between them in the stack (1: every frame).
    pub frames: usize,
    pub stride: usize,
    /// Map pixels averaged into one preview pixel per side (1: full size).
    pub downscale: usize,
    /// Value limits of the colour bar.
    pub limits: (f32, f32),
}

/// Mean of `f x f` blocks, ignoring NaN (NaN where a block has no finite value; infinities
/// count as values): the preview's reduction of a map, `f` >= 1.
pub fn downscale(map: ndarray::ArrayView2<'_, f32>, f: usize) -> ndarray::Array2<f32> {
    let (h, w) = map.dim();
    ndarray::Array2::from_shape_fn((h.div_ceil(f), w.div_ceil(f)), |(r, c)| {
        let block = map.slice(ndarray::s![
            r * f..((r + 1) * f).min(h),
            c * f..((c + 1) * f).min(w)
        ]);
        let (s, n) = block
            .iter()
            .filter(|v| !v.is_nan())
            .fold((0f64, 0usize), |(s, n), &v| (s + f64::from(v), n + 1));
        if n == 0 {
            f32::NAN
        } else {
            (s / n as f64) as f32
        }
    })
}

/// Write a size-capped animated preview of `stack` as a figure ([`crate::Figure`]: scale
/// and title): maps larger than `limits.max_side` are averaged down by an integer factor,
/// and frames are taken with a stride so that at most `limits.max_frames` frames and
/// `limits.max_pixels` rendered pixels are written. One colour range for all frames, from
/// the frames shown. Returns what was written.
///
/// ```no_run
/// use std::time::Duration;
/// use ndarray::Array3;
/// use imaging_io::{Colormap, Figure, GifLimits, Range, Scale, write_gif_preview};
/// let k = Array3::<f32>::from_elem((1000, 64, 64), 0.2);
/// let p = write_gif_preview("k.gif", k.view(), Colormap::Inferno, Range::Percentile(1.0, 99.0),
///     &Figure::new("K", Scale::Linear), Duration::from_millis(100), &GifLimits::default())?;
/// assert_eq!(p.frames, 100);
/// # Ok::<_, imaging_io::Error>(())
/// ```
#[allow(clippy::needless_pass_by_value)] // views are passed by value throughout the crate
pub fn write_gif_preview(
    path: impl AsRef<Path>,
    stack: ArrayView3<'_, f32>,
    cmap: Colormap,
    range: Range,
    fig: &crate::Figure,
    delay: Duration,
    limits: &GifLimits,
) -> Result<GifPreview> {
    use crate::colormap::{figure_indexed, figure_limits};
    let path = path.as_ref();
    let (n, h, w) = stack.dim();
    if n == 0 || h == 0 || w == 0 {
        return Err(Error::InvalidParameter {
            name: "stack",
            value: format!("{n} frames of {w}x{h}"),
            why: "an animation needs at least one non-empty frame".into(),
        });
    }
    if limits.max_frames == 0 || limits.max_side == 0 || limits.max_pixels == 0 {
        return Err(Error::InvalidParameter {
            name: "GIF limits",
            value: format!("{limits:?}"),
            why: "every limit must be at least 1".into(),
        });
    }
    let centis = delay_centis(delay)?;
    let factor = h.max(w).div_ceil(limits.max_side).max(1);
    let shrink = |m: ndarray::ArrayView2<'_, f32>| {
        if factor == 1 {
            m.to_owned()
        } else {
            downscale(m, factor)
        }
    };
    let first_small = shrink(stack.index_axis(Axis(0), 0));
    // Canvas size of one frame (fixed by the map size), for the pixel budget.
    let probe = figure_indexed(first_small.view(), cmap, (0.0, 1.0), true, fig);
    let per_frame = probe.canvas.width * probe.canvas.height;
    let frames_cap = (limits.max_pixels / per_frame.max(1)).clamp(1, limits.max_frames);
    let stride = n.div_ceil(frames_cap).max(1);
    let picked: Vec<usize> = (0..n).step_by(stride).collect();
    let frames: Vec<ndarray::Array2<f32>> = picked
        .iter()
        .map(|&i| shrink(stack.index_axis(Axis(0), i)))
        .collect();
    let lim = figure_limits(frames.iter().flat_map(|f| f.iter()), range, fig.scale)?;
    let show_nan = frames.iter().any(|f| {
        f.iter()
            .any(|v| v.is_nan() || (fig.scale == crate::Scale::Log && *v <= 0.0))
    });
    let render = |m: &ndarray::Array2<f32>| figure_indexed(m.view(), cmap, lim, show_nan, fig);
    let first = render(&frames[0]);
    let rest = frames.iter().skip(1).map(|m| render(m).canvas.pixels);
    encode(path, (w, h), first, rest, centis)?;
    Ok(GifPreview {
        frames: frames.len(),
        stride,
        downscale: factor,
        limits: lim,
    })
}

/// A frame delay in GIF's 10 ms units (10 ms ..= 655.35 s).
fn delay_centis(delay: Duration) -> Result<u16> {
    let centis = (delay.as_secs_f64() * 100.0).round();
    if !(1.0..=f64::from(u16::MAX)).contains(&centis) {
        return Err(Error::InvalidParameter {
            name: "delay",
            value: format!("{delay:?}"),
            why: "GIF frame delays run from 10 ms to 655.35 s in 10 ms steps".into(),
        });
    }
    Ok(centis as u16)
}

/// Write a looping GIF of `first` (its canvas and palette) and the canvases of `rest`, each
/// shown `centis` x 10 ms; `(w, h)`, the maps' size, is named in errors.
fn encode(
    path: &Path,
    (w, h): (usize, usize),
    first: Indexed,
    rest: impl Iterator<Item = Vec<u8>>,
    centis: u16,
) -> Result<()> {
    let (cw, ch) = (first.canvas.width, first.canvas.height);
    let too_big = || Error::InvalidParameter {
        name: "stack",
        value: format!("{w}x{h}"),
        why: format!(
            "the rendered frame ({cw}x{ch}) exceeds the GIF limit of 65535 pixels per side"
        ),
    };
    let (gw, gh) = (
        u16::try_from(cw).map_err(|_| too_big())?,
        u16::try_from(ch).map_err(|_| too_big())?,
    );
    let io_err = |source| Error::Io {
        path: path.to_path_buf(),
        source,
    };
    let gif_err = |e: gif::EncodingError| match e {
        gif::EncodingError::Io(source) => Error::Io {
            path: path.to_path_buf(),
            source,
        },
        other => Error::Format {
            path: path.to_path_buf(),
            why: format!("cannot write GIF: {other}"),
        },
    };
    let file = BufWriter::new(File::create(path).map_err(io_err)?);
    let palette: Vec<u8> = first.palette.iter().flatten().copied().collect();
    let mut enc = Encoder::new(file, gw, gh, &palette).map_err(gif_err)?;
    enc.set_repeat(Repeat::Infinite).map_err(gif_err)?;
    let mut write = |pixels: Vec<u8>| {
        let mut frame = gif::Frame::from_indexed_pixels(gw, gh, pixels, None);
        frame.delay = centis;
        enc.write_frame(&frame).map_err(gif_err)
    };
    write(first.canvas.pixels)?;
    for pixels in rest {
        write(pixels)?;
    }
    enc.into_inner()
        .map_err(gif_err)?
        .into_inner()
        .map_err(|e| io_err(e.into_error()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::TempDir;
    use ndarray::Array3;

    #[test]
    fn gif_has_every_frame_with_the_requested_delay() {
        let dir = TempDir::new("gif");
        let path = dir.path("k.gif");
        let stack = Array3::from_shape_fn((4, 20, 30), |(f, r, c)| (f * 100 + r + c) as f32);
        let (lo, hi) = write_gif(
            &path,
            stack.view(),
            Colormap::Viridis,
            Range::Percentile(0.0, 100.0),
            Duration::from_millis(120),
        )
        .unwrap();
        assert_eq!((lo, hi), (0.0, 348.0), "one range over all frames");
        let mut opts = gif::DecodeOptions::new();
        opts.set_color_output(gif::ColorOutput::Indexed);
        let mut dec = opts.read_info(File::open(&path).unwrap()).unwrap();
        let mut frames = 0;
        let mut first_pixel = Vec::new();
        let width = usize::from(dec.width());
        while let Some(f) = dec.read_next_frame().unwrap() {
            assert_eq!(f.delay, 12);
            first_pixel.push(f.buffer[width * 6 * 10 + 6 * 10]);
            frames += 1;
        }
        assert_eq!(frames, 4);
        // The map brightens frame to frame under the fixed range.
        assert!(
            first_pixel.windows(2).all(|p| p[0] < p[1]),
            "{first_pixel:?}"
        );
    }

    #[test]
    fn bad_delay_and_empty_stack_are_refused() {
        let dir = TempDir::new("gif_bad");
        let s = Array3::<f32>::zeros((2, 4, 4));
        let p = dir.path("x.gif");
        assert!(
            write_gif(
                &p,
                s.view(),
                Colormap::Grey,
                Range::default(),
                Duration::from_millis(2)
            )
            .is_err()
        );
        assert!(
            write_gif(
                &p,
                s.view(),
                Colormap::Grey,
                Range::default(),
                Duration::from_secs(1000)
            )
            .is_err()
        );
        let e = Array3::<f32>::zeros((0, 4, 4));
        assert!(
            write_gif(
                &p,
                e.view(),
                Colormap::Grey,
                Range::default(),
                Duration::from_millis(100)
            )
            .is_err()
        );
    }

    #[test]
    fn previews_are_capped_in_frames_size_and_bytes() {
        let dir = TempDir::new("gif_preview");
        let path = dir.path("k.gif");
        let stack = Array3::from_shape_fn((1000, 64, 64), |(t, r, c)| {
            ((t + r * 3 + c * 7) % 50) as f32 / 100.0 + 0.01
        });
        let fig = crate::Figure::new("K", crate::Scale::Linear);
        let limits = GifLimits::default();
        let p = write_gif_preview(
            &path,
            stack.view(),
            Colormap::Viridis,
            Range::Percentile(1.0, 99.0),
            &fig,
            Duration::from_millis(100),
            &limits,
        )
        .unwrap();
        assert!(p.frames <= 100 && p.stride >= 10, "{p:?}");
        let bytes = std::fs::metadata(&path).unwrap().len();
        assert!(bytes <= limits.max_pixels as u64, "{bytes} bytes");
        let big = Array3::from_shape_fn((3, 1500, 900), |(t, r, c)| ((t + r + c) % 9) as f32);
        let p = write_gif_preview(
            &path,
            big.view(),
            Colormap::Grey,
            Range::Percentile(0.0, 100.0),
            &crate::Figure::new("tau_c (ms)", crate::Scale::Log),
            Duration::from_millis(100),
            &limits,
        )
        .unwrap();
        assert_eq!(p.downscale, 3, "{p:?}");
        assert_eq!(p.frames, 3);
    }
}
