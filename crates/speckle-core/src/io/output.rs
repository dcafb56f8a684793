//! Writing results: 32-bit float TIFF stacks, PNG colour maps with a colour bar, and
//! animated GIF previews, from the shared `imaging-io` crate; raw frame stacks in their own
//! pixel type. Writers write exactly the path given (overwriting it); choosing paths, and
//! refusing to overwrite inputs, is the caller's job.

pub(crate) use imaging_io::draw;
pub use imaging_io::{
    Colormap, Figure, GifLimits, GifPreview, Lut, NAN_COLOUR, Range, RgbImage, Scale,
    TiffStackWriter, render, render_figure, render_figure_png, render_png, write_gif,
    write_gif_preview, write_map_tiff, write_stack_tiff,
};

use crate::error::Result;
use crate::model::types::RawStack;
use std::path::Path;

/// Write raw frames (u8, u16 or f32) as a multi-page greyscale TIFF in their own pixel
/// type, e.g. to save simulated camera frames for the CLI or other tools.
pub fn write_raw_stack_tiff(path: impl AsRef<Path>, stack: &RawStack) -> Result<()> {
    let path = path.as_ref();
    match stack {
        RawStack::U8(a) => imaging_io::write_gray_stack(path, a.view()),
        RawStack::U16(a) => imaging_io::write_gray_stack(path, a.view()),
        RawStack::F32(a) => imaging_io::write_gray_stack(path, a.view()),
    }?;
    Ok(())
}

/// What ImageJ/Fiji should know about a float map stack ([`write_imagej_tiff`]).
#[derive(Debug, Clone, PartialEq)]
pub struct ImageJMeta {
    /// Quantity, e.g. "tau_c" (stored as `biogpu_quantity`).
    pub quantity: String,
    /// Unit of the values, e.g. "ms" (stored as `biogpu_unit`; ImageJ has no value unit
    /// for 32-bit images).
    pub unit: String,
    /// Display range ImageJ opens the stack with (`min=`, `max=`), e.g. the 1st-99th
    /// percentiles.
    pub min: f32,
    pub max: f32,
    /// Pixel size in micrometres (`unit=micron` and the X/Y resolution tags); `None`: pixels.
    pub pixel_um: Option<f64>,
}

impl ImageJMeta {
    /// The ImageJ ImageDescription for `frames` pages.
    pub fn description(&self, frames: usize) -> String {
        let finite = |v: f32| if v.is_finite() { v } else { 0.0 };
        format!(
            "ImageJ=1.54f\nimages={frames}\n{}unit={}\nmin={}\nmax={}\nloop=false\n\
             biogpu_quantity={}\nbiogpu_unit={}\n",
            if frames > 1 {
                format!("frames={frames}\nhyperstack=true\n")
            } else {
                String::new()
            },
            if self.pixel_um.is_some() {
                "micron"
            } else {
                "pixel"
            },
            finite(self.min),
            finite(self.max),
            self.quantity,
            self.unit
        )
    }
}

/// Write a float map stack (frame, row, column) as a 32-bit TIFF that ImageJ/Fiji opens as
/// a calibrated stack: ImageDescription with `ImageJ=`, `images=`, `frames=` (stacks),
/// `unit=`, the display range `min=`/`max=` and the quantity and its unit; X/Y resolution
/// from the pixel size. Stacks over 3.9 GB fall back to a plain BigTIFF.
#[allow(clippy::needless_pass_by_value)] // views are passed by value throughout the crate
pub fn write_imagej_tiff(
    path: impl AsRef<Path>,
    stack: ndarray::ArrayView3<'_, f32>,
    meta: &ImageJMeta,
) -> Result<()> {
    use tiff::encoder::TiffEncoder;
    let path = path.as_ref();
    let (n, h, w) = stack.dim();
    if n == 0 || h == 0 || w == 0 || u32::try_from(w).is_err() || u32::try_from(h).is_err() {
        return Err(crate::error::Error::InvalidParameter {
            name: "map size",
            value: format!("{n} frames of {w}x{h}"),
            why: format!(
                "cannot write an empty or oversized TIFF to {}",
                path.display()
            ),
        });
    }
    if stack.len() as u64 * 4 > 3_900_000_000 {
        write_stack_tiff(path, stack)?;
        return Ok(());
    }
    let io = |source| crate::error::Error::Io {
        path: path.to_path_buf(),
        source,
    };
    let fail = |e: tiff::TiffError| match e {
        tiff::TiffError::IoError(source) => io(source),
        other => crate::error::Error::Format {
            path: path.to_path_buf(),
            why: format!("cannot write TIFF: {other}"),
        },
    };
    let mut bytes = std::io::Cursor::new(Vec::with_capacity(stack.len() * 4 + 4096));
    let mut enc = TiffEncoder::new(&mut bytes).map_err(fail)?;
    let description = meta.description(n);
    for (i, page) in stack.axis_iter(ndarray::Axis(0)).enumerate() {
        imagej_page(&mut enc, i, page, &description, meta.pixel_um).map_err(fail)?;
    }
    let _ = enc;
    std::fs::write(path, bytes.into_inner()).map_err(io)
}

/// Page `i` of an ImageJ stack: the description on page 0, the resolution on every page.
fn imagej_page<W: std::io::Write + std::io::Seek>(
    enc: &mut tiff::encoder::TiffEncoder<W>,
    i: usize,
    page: ndarray::ArrayView2<'_, f32>,
    description: &str,
    pixel_um: Option<f64>,
) -> tiff::TiffResult<()> {
    use tiff::encoder::{Rational, colortype};
    use tiff::tags::{ResolutionUnit, Tag};
    let (h, w) = page.dim();
    let data: std::borrow::Cow<'_, [f32]> = match page.as_slice() {
        Some(s) => s.into(),
        None => page.iter().copied().collect::<Vec<_>>().into(),
    };
    let mut image = enc.new_image::<colortype::Gray32Float>(w as u32, h as u32)?;
    if i == 0 {
        image
            .encoder()
            .write_tag(Tag::ImageDescription, description)?;
    }
    image
        .encoder()
        .write_tag(Tag::Software, imaging_io::software_note())?;
    if let Some(um) = pixel_um {
        // Pixels per micrometre, to 1e-6.
        let per_um = (1e6 / um).round().clamp(1.0, f64::from(u32::MAX)) as u32;
        image.resolution(
            ResolutionUnit::None,
            Rational {
                n: per_um,
                d: 1_000_000,
            },
        );
    }
    image.write_data(&data)
}

/// A buffered file shared with the encoder, so that the last flush reports its error.
#[derive(Debug, Clone)]
struct SharedFile(std::sync::Arc<std::sync::Mutex<std::io::BufWriter<std::fs::File>>>);

impl SharedFile {
    fn with<T>(
        &self,
        f: impl FnOnce(&mut std::io::BufWriter<std::fs::File>) -> std::io::Result<T>,
    ) -> std::io::Result<T> {
        let mut g = self
            .0
            .lock()
            .map_err(|_| std::io::Error::other("TIFF writer poisoned by a panic"))?;
        f(&mut g)
    }
}

impl std::io::Write for SharedFile {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.with(|w| w.write(buf))
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.with(std::io::Write::flush)
    }
}

impl std::io::Seek for SharedFile {
    fn seek(&mut self, pos: std::io::SeekFrom) -> std::io::Result<u64> {
        self.with(|w| w.seek(pos))
    }
}

enum StreamEnc {
    ImageJ(tiff::encoder::TiffEncoder<SharedFile>, SharedFile),
    Big(TiffStackWriter),
}

/// [`write_imagej_tiff`] page by page: the same bytes, without holding the stack. The
/// number of pages and the display range are stated up front (they are in page 0's
/// description); stacks over 3.9 GB become a plain BigTIFF, as with [`write_imagej_tiff`].
///
/// ```no_run
/// use ndarray::Array2;
/// use speckle_core::io::output::{ImageJMeta, ImageJTiffWriter};
/// let meta = ImageJMeta { quantity: "K".into(), unit: "1".into(), min: 0.0, max: 1.0, pixel_um: None };
/// let mut w = ImageJTiffWriter::create("k.tif", 3, (64, 64), &meta)?;
/// for _ in 0..3 {
///     w.write_page(Array2::<f32>::zeros((64, 64)).view())?;
/// }
/// w.finish()?;
/// # Ok::<(), speckle_core::Error>(())
/// ```
pub struct ImageJTiffWriter {
    path: std::path::PathBuf,
    enc: Option<StreamEnc>,
    description: String,
    pixel_um: Option<f64>,
    frames: usize,
    dim: (usize, usize),
    written: usize,
}

impl std::fmt::Debug for ImageJTiffWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ImageJTiffWriter")
            .field("path", &self.path)
            .field("frames", &self.frames)
            .field("written", &self.written)
            .finish_non_exhaustive()
    }
}

impl ImageJTiffWriter {
    /// Create `path` for `frames` pages of `(height, width)`.
    pub fn create(
        path: impl AsRef<Path>,
        frames: usize,
        (h, w): (usize, usize),
        meta: &ImageJMeta,
    ) -> Result<Self> {
        let path = path.as_ref();
        if frames == 0 || h == 0 || w == 0 || u32::try_from(w).is_err() || u32::try_from(h).is_err()
        {
            return Err(crate::error::Error::InvalidParameter {
                name: "map size",
                value: format!("{frames} frames of {w}x{h}"),
                why: format!(
                    "cannot write an empty or oversized TIFF to {}",
                    path.display()
                ),
            });
        }
        let enc = if (frames * h * w) as u64 * 4 > 3_900_000_000 {
            StreamEnc::Big(TiffStackWriter::create_big(path)?)
        } else {
            let file = std::fs::File::create(path).map_err(|source| crate::error::Error::Io {
                path: path.to_path_buf(),
                source,
            })?;
            let sink = SharedFile(std::sync::Arc::new(std::sync::Mutex::new(
                std::io::BufWriter::with_capacity(1 << 20, file),
            )));
            let enc =
                tiff::encoder::TiffEncoder::new(sink.clone()).map_err(|e| tiff_fail(path, e))?;
            StreamEnc::ImageJ(enc, sink)
        };
        Ok(Self {
            path: path.to_path_buf(),
            enc: Some(enc),
            description: meta.description(frames),
            pixel_um: meta.pixel_um,
            frames,
            dim: (h, w),
            written: 0,
        })
    }

    /// Append the next page; it must have the stated size, and at most the stated number
    /// of pages may be written.
    #[allow(clippy::needless_pass_by_value)] // views are passed by value throughout the crate
    pub fn write_page(&mut self, page: ndarray::ArrayView2<'_, f32>) -> Result<()> {
        let (h, w) = page.dim();
        if (h, w) != self.dim || self.written >= self.frames {
            return Err(crate::error::Error::InvalidParameter {
                name: "page",
                value: format!("page {} of {w}x{h}", self.written),
                why: format!(
                    "{} was created for {} pages of {}x{}",
                    self.path.display(),
                    self.frames,
                    self.dim.1,
                    self.dim.0
                ),
            });
        }
        match self.enc.as_mut().expect("encoder present until finish") {
            StreamEnc::ImageJ(enc, _) => {
                imagej_page(enc, self.written, page, &self.description, self.pixel_um)
                    .map_err(|e| tiff_fail(&self.path, e))?;
            }
            StreamEnc::Big(wr) => wr.write_page(page)?,
        }
        self.written += 1;
        Ok(())
    }

    /// Flush and close; an error unless exactly the stated number of pages was written.
    pub fn finish(mut self) -> Result<()> {
        if self.written != self.frames {
            return Err(crate::error::Error::InvalidParameter {
                name: "pages",
                value: self.written.to_string(),
                why: format!(
                    "{} was created for {} pages",
                    self.path.display(),
                    self.frames
                ),
            });
        }
        match self.enc.take().expect("encoder present until finish") {
            StreamEnc::ImageJ(enc, sink) => {
                drop(enc);
                sink.with(std::io::Write::flush)
                    .map_err(|source| crate::error::Error::Io {
                        path: self.path.clone(),
                        source,
                    })
            }
            StreamEnc::Big(wr) => wr.finish().map(|_| ()).map_err(Into::into),
        }
    }
}

fn tiff_fail(path: &Path, e: tiff::TiffError) -> crate::error::Error {
    match e {
        tiff::TiffError::IoError(source) => crate::error::Error::Io {
            path: path.to_path_buf(),
            source,
        },
        other => crate::error::Error::Format {
            path: path.to_path_buf(),
            why: format!("cannot write TIFF: {other}"),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::test_util::TempDir;
    use crate::io::tiff::read_tiff;
    use ndarray::Array3;

    #[test]
    fn float_maps_read_back_bit_exactly_with_nan() {
        let dir = TempDir::new("out_tiff_stack");
        let path = dir.path("k.tif");
        let mut stack = Array3::from_shape_fn((3, 5, 7), |(f, r, c)| {
            (f as f32 + 1.0) / (r * 7 + c + 1) as f32
        });
        stack[[1, 2, 3]] = f32::NAN;
        stack[[0, 4, 6]] = -0.0;
        write_stack_tiff(&path, stack.view()).unwrap();
        let (back, cam) = read_tiff(&path, None).unwrap();
        assert_eq!(cam.bit_depth, None);
        let RawStack::F32(b) = back else {
            panic!("f32 expected")
        };
        assert!(
            b.iter()
                .zip(&stack)
                .all(|(x, y)| x.to_bits() == y.to_bits())
        );
    }

    #[test]
    fn raw_stacks_round_trip() {
        let dir = TempDir::new("out_tiff_int");
        for stack in [
            RawStack::U8(Array3::from_shape_fn((2, 3, 4), |(f, r, c)| {
                (f * 50 + r * 4 + c) as u8
            })),
            RawStack::U16(Array3::from_shape_fn((3, 2, 2), |(f, r, c)| {
                (f * 20000 + r * 2 + c) as u16
            })),
            RawStack::F32(Array3::from_shape_fn((2, 2, 2), |(f, r, c)| {
                (f + r + c) as f32 / 3.0
            })),
        ] {
            let path = dir.path(&format!("{}.tif", stack.dtype()));
            write_raw_stack_tiff(&path, &stack).unwrap();
            assert_eq!(read_tiff(&path, None).unwrap().0, stack);
        }
    }

    #[test]
    fn the_streaming_imagej_writer_writes_the_same_bytes() {
        let dir = TempDir::new("out_imagej_stream");
        let stack = Array3::from_shape_fn((4, 6, 5), |(f, r, c)| (f * 30 + r * 5 + c) as f32 / 7.0);
        for pixel_um in [None, Some(1.5)] {
            let meta = ImageJMeta {
                quantity: "K".into(),
                unit: "1".into(),
                min: 0.1,
                max: 3.0,
                pixel_um,
            };
            let (whole, streamed) = (dir.path("whole.tif"), dir.path("streamed.tif"));
            write_imagej_tiff(&whole, stack.view(), &meta).unwrap();
            let mut w = ImageJTiffWriter::create(&streamed, 4, (6, 5), &meta).unwrap();
            for page in stack.outer_iter() {
                w.write_page(page).unwrap();
            }
            assert!(w.write_page(stack.index_axis(ndarray::Axis(0), 0)).is_err());
            w.finish().unwrap();
            assert_eq!(
                std::fs::read(&whole).unwrap(),
                std::fs::read(&streamed).unwrap()
            );
        }
        let mut short = ImageJTiffWriter::create(
            dir.path("short.tif"),
            2,
            (6, 5),
            &ImageJMeta {
                quantity: "K".into(),
                unit: "1".into(),
                min: 0.0,
                max: 1.0,
                pixel_um: None,
            },
        )
        .unwrap();
        short
            .write_page(stack.index_axis(ndarray::Axis(0), 0))
            .unwrap();
        assert!(short.finish().is_err(), "one page of two stated");
    }

    #[test]
    fn imagej_tiffs_carry_the_description_and_read_back() {
        let dir = TempDir::new("out_imagej");
        let path = dir.path("tau.tif");
        let stack = Array3::from_shape_fn((3, 4, 5), |(f, r, c)| (f * 20 + r * 5 + c) as f32);
        let meta = ImageJMeta {
            quantity: "tau_c".into(),
            unit: "ms".into(),
            min: 0.5,
            max: 40.0,
            pixel_um: Some(2.5),
        };
        write_imagej_tiff(&path, stack.view(), &meta).unwrap();
        let (back, _) = read_tiff(&path, None).unwrap();
        assert_eq!(back, RawStack::F32(stack));
        let mut dec = tiff::decoder::Decoder::new(std::fs::File::open(&path).unwrap()).unwrap();
        let desc = dec
            .get_tag_ascii_string(tiff::tags::Tag::ImageDescription)
            .unwrap();
        for key in [
            "ImageJ=",
            "images=3",
            "frames=3",
            "unit=micron",
            "min=0.5",
            "max=40",
            "biogpu_quantity=tau_c",
            "biogpu_unit=ms",
        ] {
            assert!(desc.contains(key), "{key} missing from {desc:?}");
        }
    }
}
