//! 32-bit float TIFF output for quantitative maps (K, SFI, tau_c): one page per map,
//! uncompressed, NaN stored as NaN, readable by [`crate::io::read_tiff`], ImageJ/Fiji and
//! tifffile. Also integer stacks, to save simulated or cropped raw frames.

use std::fs::File;
use std::io::{BufWriter, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use ndarray::{ArrayView2, ArrayView3, Axis};
use tiff::TiffError;
use tiff::encoder::{TiffEncoder, TiffKind, TiffKindBig, TiffKindStandard, colortype};

use crate::error::{Error, Result};
use crate::types::RawStack;

/// Data size above which [`write_stack_tiff`] switches to BigTIFF (classic TIFF offsets
/// stop at 4 GiB; the margin leaves room for the directories).
const BIG_TIFF_BYTES: u64 = 3_900_000_000;

/// A buffered file shared with the encoder, so that the final flush (which the `tiff`
/// encoder never does) can report its error instead of losing it in `Drop`.
#[derive(Debug, Clone)]
struct Sink(Arc<Mutex<BufWriter<File>>>);

impl Sink {
    fn create(path: &Path) -> Result<Self> {
        let file = File::create(path).map_err(|source| Error::Io {
            path: path.to_path_buf(),
            source,
        })?;
        Ok(Self(Arc::new(Mutex::new(BufWriter::new(file)))))
    }

    fn with<T>(
        &self,
        f: impl FnOnce(&mut BufWriter<File>) -> std::io::Result<T>,
    ) -> std::io::Result<T> {
        let mut guard = self
            .0
            .lock()
            .map_err(|_| std::io::Error::other("TIFF writer poisoned by a panic"))?;
        f(&mut guard)
    }

    fn flush_to(&self, path: &Path) -> Result<()> {
        self.with(Write::flush).map_err(|source| Error::Io {
            path: path.to_path_buf(),
            source,
        })
    }
}

impl Write for Sink {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.with(|w| w.write(buf))
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.with(Write::flush)
    }
}

impl Seek for Sink {
    fn seek(&mut self, pos: SeekFrom) -> std::io::Result<u64> {
        self.with(|w| w.seek(pos))
    }
}

enum Enc {
    Standard(TiffEncoder<Sink, TiffKindStandard>),
    Big(TiffEncoder<Sink, TiffKindBig>),
}

impl std::fmt::Debug for Enc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Enc::Standard(_) => "TiffEncoder(standard)",
            Enc::Big(_) => "TiffEncoder(BigTIFF)",
        })
    }
}

/// Writes float maps page by page, so a long result stack (e.g. from a live stream) is
/// never held in memory. All pages must have the size of the first.
///
/// ```no_run
/// use ndarray::Array2;
/// use speckle_core::output::TiffStackWriter;
/// let mut w = TiffStackWriter::create("k.tif")?;
/// for _ in 0..3 {
///     w.write_page(Array2::<f32>::zeros((64, 64)).view())?;
/// }
/// w.finish()?;
/// # Ok::<_, speckle_core::Error>(())
/// ```
#[derive(Debug)]
pub struct TiffStackWriter {
    path: PathBuf,
    sink: Sink,
    enc: Option<Enc>,
    dim: Option<(usize, usize)>,
    pages: usize,
}

impl TiffStackWriter {
    /// Create (or overwrite) a classic TIFF at exactly `path`; limited to 4 GiB in all.
    pub fn create(path: impl AsRef<Path>) -> Result<Self> {
        Self::open(path.as_ref(), false)
    }

    /// Create a BigTIFF, for stacks that may exceed 4 GiB.
    pub fn create_big(path: impl AsRef<Path>) -> Result<Self> {
        Self::open(path.as_ref(), true)
    }

    fn open(path: &Path, big: bool) -> Result<Self> {
        let sink = Sink::create(path)?;
        let w = sink.clone();
        let enc = if big {
            Enc::Big(TiffEncoder::new_big(w).map_err(|e| write_error(path, e))?)
        } else {
            Enc::Standard(TiffEncoder::new(w).map_err(|e| write_error(path, e))?)
        };
        Ok(Self {
            path: path.to_path_buf(),
            sink,
            enc: Some(enc),
            dim: None,
            pages: 0,
        })
    }

    /// Append one map as a 32-bit float page.
    #[allow(clippy::needless_pass_by_value)] // views are passed by value throughout the crate
    pub fn write_page(&mut self, map: ArrayView2<'_, f32>) -> Result<()> {
        let (h, w) = map.dim();
        check_size(&self.path, w, h)?;
        match self.dim {
            Some((eh, ew)) if (eh, ew) != (h, w) => {
                return Err(Error::FrameSizeMismatch {
                    what: format!("page {} written to {}", self.pages, self.path.display()),
                    expected_w: ew,
                    expected_h: eh,
                    got_w: w,
                    got_h: h,
                });
            }
            _ => self.dim = Some((h, w)),
        }
        let data: std::borrow::Cow<'_, [f32]> = match map.as_slice() {
            Some(s) => s.into(),
            None => map.iter().copied().collect::<Vec<_>>().into(),
        };
        let path = &self.path;
        match self.enc.as_mut().expect("encoder present until finish") {
            Enc::Standard(e) => page::<_, _, colortype::Gray32Float>(e, w, h, &data),
            Enc::Big(e) => page::<_, _, colortype::Gray32Float>(e, w, h, &data),
        }
        .map_err(|e| write_error(path, e))?;
        self.pages += 1;
        Ok(())
    }

    /// Flush and close; returns the number of pages written (an error if none was).
    pub fn finish(mut self) -> Result<usize> {
        if self.pages == 0 {
            return Err(Error::InvalidParameter {
                name: "pages",
                value: "0".into(),
                why: format!("no page was written to {}", self.path.display()),
            });
        }
        drop(self.enc.take());
        self.sink.flush_to(&self.path)?;
        Ok(self.pages)
    }
}

fn page<W: Write + Seek, K: TiffKind, C: colortype::ColorType>(
    e: &mut TiffEncoder<W, K>,
    w: usize,
    h: usize,
    data: &[C::Inner],
) -> tiff::TiffResult<()>
where
    [C::Inner]: tiff::encoder::TiffValue,
{
    e.write_image::<C>(w as u32, h as u32, data)
}

fn check_size(path: &Path, w: usize, h: usize) -> Result<()> {
    if w == 0 || h == 0 || u32::try_from(w).is_err() || u32::try_from(h).is_err() {
        return Err(Error::InvalidParameter {
            name: "map size",
            value: format!("{w}x{h}"),
            why: format!(
                "cannot write an empty or oversized page to {}",
                path.display()
            ),
        });
    }
    Ok(())
}

fn write_error(path: &Path, e: TiffError) -> Error {
    match e {
        TiffError::IoError(source) => Error::Io {
            path: path.to_path_buf(),
            source,
        },
        other => Error::Format {
            path: path.to_path_buf(),
            why: format!("cannot write TIFF: {other}"),
        },
    }
}

/// Write one map as a single-page 32-bit float TIFF.
///
/// ```no_run
/// use ndarray::Array2;
/// speckle_core::output::write_map_tiff("k.tif", Array2::<f32>::zeros((4, 4)).view())?;
/// # Ok::<_, speckle_core::Error>(())
/// ```
#[allow(clippy::needless_pass_by_value)] // views are passed by value throughout the crate
pub fn write_map_tiff(path: impl AsRef<Path>, map: ArrayView2<'_, f32>) -> Result<()> {
    let mut w = TiffStackWriter::create(path)?;
    w.write_page(map)?;
    w.finish().map(|_| ())
}

/// Write a stack of maps (frame, row, column) as a multi-page 32-bit float TIFF, switching
/// to BigTIFF when the data exceed about 3.9 GB.
#[allow(clippy::needless_pass_by_value)] // views are passed by value throughout the crate
pub fn write_stack_tiff(path: impl AsRef<Path>, stack: ArrayView3<'_, f32>) -> Result<()> {
    let path = path.as_ref();
    let bytes = stack.len() as u64 * 4;
    let mut w = if bytes > BIG_TIFF_BYTES {
        TiffStackWriter::create_big(path)?
    } else {
        TiffStackWriter::create(path)?
    };
    for map in stack.axis_iter(Axis(0)) {
        w.write_page(map)?;
    }
    w.finish().map(|_| ())
}

/// Write raw frames (u8, u16 or f32) as a multi-page greyscale TIFF in their own pixel
/// type, e.g. to save simulated camera frames for the CLI or other tools.
pub fn write_raw_stack_tiff(path: impl AsRef<Path>, stack: &RawStack) -> Result<()> {
    let path = path.as_ref();
    let (n, h, w) = stack.dim();
    check_size(path, w, h)?;
    if n == 0 {
        return Err(Error::InvalidParameter {
            name: "frames",
            value: "0".into(),
            why: "nothing to write".into(),
        });
    }
    let sink = Sink::create(path)?;
    let mut enc = TiffEncoder::new(sink.clone()).map_err(|e| write_error(path, e))?;
    let werr = |e| write_error(path, e);
    match stack {
        RawStack::U8(a) => a.axis_iter(Axis(0)).try_for_each(|f| {
            page::<_, _, colortype::Gray8>(&mut enc, w, h, &f.iter().copied().collect::<Vec<_>>())
        }),
        RawStack::U16(a) => a.axis_iter(Axis(0)).try_for_each(|f| {
            page::<_, _, colortype::Gray16>(&mut enc, w, h, &f.iter().copied().collect::<Vec<_>>())
        }),
        RawStack::F32(a) => a.axis_iter(Axis(0)).try_for_each(|f| {
            page::<_, _, colortype::Gray32Float>(
                &mut enc,
                w,
                h,
                &f.iter().copied().collect::<Vec<_>>(),
            )
        }),
    }
    .map_err(werr)?;
    drop(enc);
    sink.flush_to(path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::read_tiff;
    use crate::io::test_util::TempDir;
    use ndarray::{Array2, Array3, s};

    #[test]
    fn float_stack_round_trips_bit_exactly_with_nan() {
        let dir = TempDir::new("out_tiff_stack");
        let path = dir.path("k.tif");
        let mut stack = Array3::from_shape_fn((3, 5, 7), |(f, r, c)| {
            (f as f32 + 1.0) / (r * 7 + c + 1) as f32
        });
        stack[[1, 2, 3]] = f32::NAN;
        stack[[2, 0, 0]] = f32::INFINITY;
        stack[[0, 4, 6]] = -0.0;
        write_stack_tiff(&path, stack.view()).unwrap();
        let (back, cam) = read_tiff(&path, None).unwrap();
        assert_eq!(cam.bit_depth, None);
        let RawStack::F32(b) = back else {
            panic!("f32 expected")
        };
        assert_eq!(b.dim(), stack.dim());
        assert!(
            b.iter()
                .zip(&stack)
                .all(|(x, y)| x.to_bits() == y.to_bits())
        );
    }

    #[test]
    fn single_map_and_non_contiguous_view_round_trip() {
        let dir = TempDir::new("out_tiff_map");
        let path = dir.path("sfi.tif");
        let big = Array2::from_shape_fn((6, 8), |(r, c)| (r * 10 + c) as f32);
        let view = big.slice(s![1..5;2, ..;3]); // strided
        write_map_tiff(&path, view).unwrap();
        let (back, _) = read_tiff(&path, None).unwrap();
        let RawStack::F32(b) = back else { panic!() };
        assert_eq!(b.index_axis(Axis(0), 0), view);
    }

    #[test]
    fn writer_rejects_page_size_change_and_empty_maps() {
        let dir = TempDir::new("out_tiff_bad");
        let mut w = TiffStackWriter::create(dir.path("x.tif")).unwrap();
        w.write_page(Array2::zeros((4, 4)).view()).unwrap();
        let err = w.write_page(Array2::zeros((4, 5)).view()).unwrap_err();
        assert!(
            matches!(err, Error::FrameSizeMismatch { .. }) && err.to_string().contains("page 1"),
            "{err}"
        );
        assert!(write_map_tiff(dir.path("e.tif"), Array2::zeros((0, 4)).view()).is_err());
        let w = TiffStackWriter::create(dir.path("none.tif")).unwrap();
        assert!(w.finish().is_err());
        let err =
            write_map_tiff("/nonexistent/dir/k.tif", Array2::zeros((2, 2)).view()).unwrap_err();
        assert!(err.to_string().contains("/nonexistent/dir/k.tif"));
    }

    #[test]
    fn integer_stacks_round_trip() {
        let dir = TempDir::new("out_tiff_int");
        for stack in [
            RawStack::U8(Array3::from_shape_fn((2, 3, 4), |(f, r, c)| {
                (f * 50 + r * 4 + c) as u8
            })),
            RawStack::U16(Array3::from_shape_fn((3, 2, 2), |(f, r, c)| {
                (f * 20000 + r * 2 + c) as u16
            })),
        ] {
            let path = dir.path(&format!("{}.tif", stack.dtype()));
            write_raw_stack_tiff(&path, &stack).unwrap();
            assert_eq!(read_tiff(&path, None).unwrap().0, stack);
        }
    }

    #[test]
    fn big_tiff_round_trips() {
        let dir = TempDir::new("out_bigtiff");
        let path = dir.path("big.tif");
        let mut w = TiffStackWriter::create_big(&path).unwrap();
        let m = Array2::from_shape_fn((3, 3), |(r, c)| (r + c) as f32);
        w.write_page(m.view()).unwrap();
        w.write_page(m.view()).unwrap();
        assert_eq!(w.finish().unwrap(), 2);
        let (back, _) = read_tiff(&path, None).unwrap();
        assert_eq!(back.dim(), (2, 3, 3));
    }
}
