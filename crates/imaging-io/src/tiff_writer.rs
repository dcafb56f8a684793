//! 32-bit float TIFF output for quantitative maps (contrast, flow, lifetimes): one page per
//! map, uncompressed, NaN stored as NaN, readable by ImageJ/Fiji and tifffile. Also greyscale
//! integer stacks (u8, u16, u32), to save raw frames or photon counts.

use std::fs::File;
use std::io::{BufWriter, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use ndarray::{ArrayView2, ArrayView3, Axis};
use tiff::TiffError;
use tiff::encoder::{TiffEncoder, TiffKind, TiffKindBig, TiffKindStandard, colortype};

use crate::error::{Error, Result};

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
/// use imaging_io::TiffStackWriter;
/// let mut w = TiffStackWriter::create("k.tif")?;
/// for _ in 0..3 {
///     w.write_page(Array2::<f32>::zeros((64, 64)).view())?;
/// }
/// w.finish()?;
/// # Ok::<_, imaging_io::Error>(())
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
    let mut image = e.new_image::<C>(w as u32, h as u32)?;
    image
        .encoder()
        .write_tag(tiff::tags::Tag::Software, crate::software_note())?;
    image.write_data(data)
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
/// imaging_io::write_map_tiff("k.tif", Array2::<f32>::zeros((4, 4)).view())?;
/// # Ok::<_, imaging_io::Error>(())
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

/// A greyscale sample type the TIFF encoder writes as is.
pub trait GraySample: Copy {
    /// Write one page of these samples.
    fn write_page<W: Write + Seek, K: TiffKind>(
        e: &mut TiffEncoder<W, K>,
        w: usize,
        h: usize,
        data: &[Self],
    ) -> tiff::TiffResult<()>;
}

macro_rules! gray_sample {
    ($t:ty, $c:ty) => {
        impl GraySample for $t {
            fn write_page<W: Write + Seek, K: TiffKind>(
                e: &mut TiffEncoder<W, K>,
                w: usize,
                h: usize,
                data: &[Self],
            ) -> tiff::TiffResult<()> {
                page::<_, _, $c>(e, w, h, data)
            }
        }
    };
}

gray_sample!(u8, colortype::Gray8);
gray_sample!(u16, colortype::Gray16);
gray_sample!(u32, colortype::Gray32);
gray_sample!(f32, colortype::Gray32Float);

/// Write a stack (frame, row, column) as a multi-page greyscale TIFF in its own sample type
/// (u8, u16, u32 or f32), e.g. to save simulated camera frames or photon counts.
///
/// ```no_run
/// use ndarray::Array3;
/// imaging_io::write_gray_stack("frames.tif", Array3::<u16>::zeros((3, 8, 8)).view())?;
/// # Ok::<_, imaging_io::Error>(())
/// ```
#[allow(clippy::needless_pass_by_value)] // views are passed by value throughout the crate
pub fn write_gray_stack<T: GraySample>(
    path: impl AsRef<Path>,
    stack: ArrayView3<'_, T>,
) -> Result<()> {
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
    for f in stack.axis_iter(Axis(0)) {
        let data: Vec<T> = f.iter().copied().collect();
        T::write_page(&mut enc, w, h, &data).map_err(|e| write_error(path, e))?;
    }
    drop(enc);
    sink.flush_to(path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::TempDir;
    use ndarray::{Array2, Array3, s};
    use tiff::decoder::{Decoder, DecodingResult};

    /// Every page of a TIFF, as decoded by the `tiff` crate, and the page size.
    fn pages(path: &Path) -> (Vec<DecodingResult>, (u32, u32)) {
        let mut d = Decoder::new(std::io::BufReader::new(File::open(path).unwrap())).unwrap();
        let dims = d.dimensions().unwrap();
        let mut out = vec![d.read_image().unwrap()];
        while d.more_images() {
            d.next_image().unwrap();
            out.push(d.read_image().unwrap());
        }
        (out, dims)
    }

    fn floats(p: &DecodingResult) -> &[f32] {
        match p {
            DecodingResult::F32(v) => v,
            _ => panic!("f32 pages expected"),
        }
    }

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
        let (back, dims) = pages(&path);
        assert_eq!((back.len(), dims), (3, (7, 5)));
        assert!(
            back.iter()
                .flat_map(|p| floats(p).iter())
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
        let (back, _) = pages(&path);
        assert_eq!(floats(&back[0]), view.iter().copied().collect::<Vec<_>>());
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
        let a8 = Array3::from_shape_fn((2, 3, 4), |(f, r, c)| (f * 50 + r * 4 + c) as u8);
        write_gray_stack(dir.path("a.tif"), a8.view()).unwrap();
        let (p, _) = pages(&dir.path("a.tif"));
        assert!(
            matches!(&p[1], DecodingResult::U8(v) if v[..] == a8.index_axis(Axis(0), 1).iter().copied().collect::<Vec<_>>()[..])
        );
        let a16 = Array3::from_shape_fn((3, 2, 2), |(f, r, c)| (f * 20000 + r * 2 + c) as u16);
        write_gray_stack(dir.path("b.tif"), a16.view()).unwrap();
        let (p, _) = pages(&dir.path("b.tif"));
        assert!(matches!(&p[2], DecodingResult::U16(v) if v[..] == [40000, 40001, 40002, 40003]));
        let a32 = Array3::from_shape_fn((1, 2, 2), |(_, r, c)| (r * 2 + c) as u32 * 100_000);
        write_gray_stack(dir.path("c.tif"), a32.view()).unwrap();
        let (p, _) = pages(&dir.path("c.tif"));
        assert!(matches!(&p[0], DecodingResult::U32(v) if v[..] == [0, 100_000, 200_000, 300_000]));
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
        let (back, dims) = pages(&path);
        assert_eq!((back.len(), dims), (2, (3, 3)));
    }
}
