//! Animated GIF preview of a stack of maps, one colour range for all frames so that
//! changes over time are visible as colour changes.

use std::fs::File;
use std::io::BufWriter;
use std::path::Path;
use std::time::Duration;

use gif::{Encoder, Repeat};
use ndarray::{ArrayView3, Axis};

use crate::colormap::{Colormap, Range, render_indexed};
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
    let centis = (delay.as_secs_f64() * 100.0).round();
    if !(1.0..=f64::from(u16::MAX)).contains(&centis) {
        return Err(Error::InvalidParameter {
            name: "delay",
            value: format!("{delay:?}"),
            why: "GIF frame delays run from 10 ms to 655.35 s in 10 ms steps".into(),
        });
    }
    let (lo, hi) = range.resolve(&stack)?;
    let show_nan = stack.iter().any(|v| v.is_nan());
    let first = render_indexed(stack.index_axis(Axis(0), 0), cmap, lo, hi, show_nan);
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
        frame.delay = centis as u16;
        enc.write_frame(&frame).map_err(gif_err)
    };
    write(first.canvas.pixels)?;
    for map in stack.axis_iter(Axis(0)).skip(1) {
        write(render_indexed(map, cmap, lo, hi, show_nan).canvas.pixels)?;
    }
    enc.into_inner()
        .map_err(gif_err)?
        .into_inner()
        .map_err(|e| io_err(e.into_error()))?;
    Ok((lo, hi))
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
}
