//! Reading raw speckle frames: TIFF, PNG, raw binary and live streams.
//!
//! [`load_stack`] reads a whole file, choosing the reader by extension; [`open_frames`]
//! returns a [`FrameSource`] that reads one frame at a time (TIFF and raw files are never
//! loaded whole); [`frame_channel`] lets a live camera feed the same pipeline.
//! [`load_frame`] reads a dark or static-scatter calibration frame. [`output`] writes maps
//! (float TIFF, PNG colour maps, GIF previews); ROI masks and tables are read and written
//! here too.

pub mod output;
mod png;
mod raw;
mod roi;
mod stream;
#[cfg(test)]
pub(crate) mod test_util;
mod tiff;

use std::path::{Path, PathBuf};

use ndarray::Array2;

pub use self::png::read_png;
pub use self::raw::{
    ByteOrder, RawDtype, RawFrameReader, RawSpec, RawStreamReader, read_raw, write_raw,
};
pub use self::stream::{
    FrameReceiver, FrameSender, FrameSource, collect_stack, frame_channel, stack_frames,
};
pub use self::tiff::{StackPick, TiffFrameReader, read_tiff};
pub use crate::model::frame::Frame;

use crate::error::{Error, Result};
use crate::model::types::{CameraInfo, RawStack};

/// How to read an input file; the defaults suit self-describing TIFF and PNG files.
///
/// ```
/// use speckle_core::io::{LoadOptions, RawDtype, RawSpec};
/// let opts = LoadOptions::default()
///     .with_raw(RawSpec::new(640, 480, RawDtype::U16))
///     .with_bit_depth(12);
/// assert_eq!(opts.bit_depth, Some(12));
/// ```
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LoadOptions {
    /// Significant bits of integer data (e.g. 12 for a 12-bit camera writing 16-bit
    /// files); `None` takes the stored depth. Checked against every pixel.
    pub bit_depth: Option<u32>,
    /// Layout of raw binary files; required for raw files.
    pub raw: Option<RawSpec>,
    /// PNG only: split a vertically stacked image into frames of this many rows.
    pub frame_height: Option<usize>,
    /// TIFF hyperstacks only: the channel and slice to read as frames.
    pub pick: StackPick,
}

impl LoadOptions {
    /// State the camera's significant bits.
    pub fn with_bit_depth(mut self, bits: u32) -> Self {
        self.bit_depth = Some(bits);
        self
    }

    /// Describe a raw binary file.
    pub fn with_raw(mut self, spec: RawSpec) -> Self {
        self.raw = Some(spec);
        self
    }

    /// Split a vertically stacked PNG into frames of `rows` rows.
    pub fn with_frame_height(mut self, rows: usize) -> Self {
        self.frame_height = Some(rows);
        self
    }
}

/// File formats [`load_stack`] recognises.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Format {
    Tiff,
    Png,
    Raw,
}

/// Pick the reader: `.tif`/`.tiff`, `.png`, and `.raw`/`.bin`/`.dat` (or any other
/// extension when a [`RawSpec`] is given); reject options that do not fit the format.
fn format_of(path: &Path, opts: &LoadOptions) -> Result<Format> {
    let ext = path
        .extension()
        .and_then(|e| e.to_str())
        .unwrap_or("")
        .to_ascii_lowercase();
    let fail = |why: String| {
        Err(Error::Format {
            path: path.to_path_buf(),
            why,
        })
    };
    let format = match ext.as_str() {
        "tif" | "tiff" => Format::Tiff,
        "png" => Format::Png,
        "raw" | "bin" | "dat" => Format::Raw,
        _ if opts.raw.is_some() => Format::Raw,
        _ => {
            return fail(format!(
                "unknown extension `{ext}`; expected .tif, .tiff, .png, or .raw/.bin/.dat with a raw spec (width, height, dtype)"
            ));
        }
    };
    match format {
        Format::Raw if opts.raw.is_none() => fail(
            "raw binary files do not describe themselves; give a raw spec such as width=640,height=480,dtype=u16".into(),
        ),
        Format::Tiff | Format::Png if opts.raw.is_some() => fail(format!(
            "a raw spec was given for a .{ext} file, which describes itself; drop the raw spec"
        )),
        Format::Tiff | Format::Raw if opts.frame_height.is_some() => {
            fail("frame_height splits stacked PNG images only; drop it for this file".into())
        }
        _ => Ok(format),
    }
}

/// Read a whole file of raw frames, choosing the reader by extension.
///
/// Returns the frames (frame, row, column) in the stored pixel type, and the camera facts
/// (bit depth as stated in `opts`, else as stored).
pub fn load_stack(path: impl AsRef<Path>, opts: &LoadOptions) -> Result<(RawStack, CameraInfo)> {
    let path = path.as_ref();
    match format_of(path, opts)? {
        Format::Tiff => {
            let reader = TiffFrameReader::open_picked(path, opts.bit_depth, opts.pick)?;
            let camera = reader.camera();
            Ok((collect_stack(reader)?, camera))
        }
        Format::Png => read_png(path, opts.frame_height, opts.bit_depth),
        Format::Raw => {
            let spec = opts.raw.as_ref().expect("checked by format_of");
            let (source, camera) = open_raw(path, spec, opts.bit_depth)?;
            Ok((collect_stack(source)?, camera))
        }
    }
}

/// Open a file as a frame-by-frame source. TIFF and raw files are read one frame at a
/// time; a PNG is decoded whole (the format cannot be read in parts) and then split.
pub fn open_frames(
    path: impl AsRef<Path>,
    opts: &LoadOptions,
) -> Result<(Box<dyn FrameSource + Send>, CameraInfo)> {
    let path = path.as_ref();
    match format_of(path, opts)? {
        Format::Tiff => {
            let r = TiffFrameReader::open_picked(path, opts.bit_depth, opts.pick)?;
            let camera = r.camera();
            Ok((Box::new(r), camera))
        }
        Format::Raw => {
            let spec = opts.raw.as_ref().expect("checked by format_of");
            open_raw(path, spec, opts.bit_depth)
        }
        Format::Png => {
            let (stack, camera) = read_png(path, opts.frame_height, opts.bit_depth)?;
            let frames: Vec<_> = stack_frames(&stack).collect();
            Ok((Box::new(frames.into_iter()), camera))
        }
    }
}

/// [`open_frames`] that also says how many frames the source will deliver (TIFF: by walking
/// the page directories without decoding; raw: from the file size; PNG: after decoding), so
/// that a writer can describe a stack before its first frame is computed.
pub fn open_frames_counted(
    path: impl AsRef<Path>,
    opts: &LoadOptions,
) -> Result<(Box<dyn FrameSource + Send>, CameraInfo, usize)> {
    let path = path.as_ref();
    match format_of(path, opts)? {
        Format::Tiff => {
            let r = TiffFrameReader::open_picked(path, opts.bit_depth, opts.pick)?;
            let (camera, n) = (r.camera(), r.frame_count()?);
            Ok((Box::new(r), camera, n))
        }
        Format::Raw => {
            let spec = opts.raw.as_ref().expect("checked by format_of");
            let n = RawFrameReader::open(path, spec)?.frames();
            let (source, camera) = open_raw(path, spec, opts.bit_depth)?;
            Ok((source, camera, n))
        }
        Format::Png => {
            let (stack, camera) = read_png(path, opts.frame_height, opts.bit_depth)?;
            let frames: Vec<_> = stack_frames(&stack).collect();
            let n = frames.len();
            Ok((Box::new(frames.into_iter()), camera, n))
        }
    }
}

/// A raw reader, wrapped in a per-frame check when a bit depth is stated.
fn open_raw(
    path: &Path,
    spec: &RawSpec,
    bits: Option<u32>,
) -> Result<(Box<dyn FrameSource + Send>, CameraInfo)> {
    let reader = RawFrameReader::open(path, spec)?;
    let Some(bits) = bits else {
        let camera = reader.camera();
        return Ok((Box::new(reader), camera));
    };
    check_stated_bits(path, spec.dtype, bits)?;
    let checked = BitDepthCheck {
        inner: reader,
        bits,
        path: path.to_path_buf(),
        index: 0,
        done: false,
    };
    Ok((
        Box::new(checked),
        CameraInfo {
            bit_depth: Some(bits),
        },
    ))
}

fn check_stated_bits(path: &Path, dtype: RawDtype, bits: u32) -> Result<()> {
    let container = match dtype {
        RawDtype::U8 => 8,
        RawDtype::U16 => 16,
        RawDtype::F32 => {
            return Err(Error::InvalidParameter {
                name: "bit_depth",
                value: bits.to_string(),
                why: format!(
                    "{} holds f32 pixels, which have no bit depth; leave it unset",
                    path.display()
                ),
            });
        }
    };
    if bits == 0 || bits > container {
        return Err(Error::InvalidParameter {
            name: "bit_depth",
            value: bits.to_string(),
            why: format!(
                "{} holds {dtype} pixels; the stated depth must be 1..={container}",
                path.display()
            ),
        });
    }
    Ok(())
}

/// Checks every frame of a source against a stated bit depth, naming the first frame
/// with a value above `2^bits - 1`; used for raw files, which cannot say their depth.
#[derive(Debug)]
struct BitDepthCheck<I> {
    inner: I,
    bits: u32,
    path: PathBuf,
    index: usize,
    done: bool,
}

impl<I: FrameSource> Iterator for BitDepthCheck<I> {
    type Item = Result<Frame>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let item = self.inner.next()?;
        let index = self.index;
        self.index += 1;
        let max = f64::from((1u32 << self.bits) - 1);
        let checked = item.and_then(|frame| match frame.max_value() {
            Some(v) if v > max => Err(Error::Format {
                path: self.path.clone(),
                why: format!(
                    "frame {index} holds the value {v}, above the {max} maximum of the stated {}-bit depth; \
                     state the camera's real bit depth or leave it unset",
                    self.bits
                ),
            }),
            _ => Ok(frame),
        });
        self.done = checked.is_err();
        Some(checked)
    }
}

/// Read a calibration frame (dark frame, static-scatter reference) as f32.
///
/// A multi-frame file is averaged pixel by pixel (in f64) into one frame, so a recorded
/// series of dark frames gives the mean dark frame directly.
///
/// ```no_run
/// use speckle_core::io::{LoadOptions, load_frame};
/// let dark = load_frame("dark.tif", &LoadOptions::default())?;
/// # Ok::<_, speckle_core::Error>(())
/// ```
pub fn load_frame(path: impl AsRef<Path>, opts: &LoadOptions) -> Result<Array2<f32>> {
    let path = path.as_ref();
    let (source, _) = open_frames(path, opts)?;
    let mut sum: Option<Array2<f64>> = None;
    let mut n = 0usize;
    for (i, frame) in source.enumerate() {
        let f = frame?.to_f32().mapv(f64::from);
        match &mut sum {
            None => sum = Some(f),
            Some(s) if s.dim() != f.dim() => {
                let ((eh, ew), (gh, gw)) = (s.dim(), f.dim());
                return Err(Error::FrameSizeMismatch {
                    what: format!("frame {i} of {}", path.display()),
                    expected_w: ew,
                    expected_h: eh,
                    got_w: gw,
                    got_h: gh,
                });
            }
            Some(s) => *s += &f,
        }
        n += 1;
    }
    let sum = sum.ok_or_else(|| Error::Format {
        path: path.to_path_buf(),
        why: "holds no frame".into(),
    })?;
    Ok(sum.mapv(|v| (v / n as f64) as f32))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::test_util::TempDir;
    use ndarray::Array3;

    #[test]
    fn load_stack_dispatches_on_extension() {
        let dir = TempDir::new("load_dispatch");
        let stack = RawStack::U16(Array3::from_shape_fn((2, 3, 4), |(f, r, c)| {
            (f * 100 + r * 10 + c) as u16
        }));
        let raw = dir.path("frames.dat");
        write_raw(&raw, &stack, ByteOrder::Little).unwrap();
        let opts = LoadOptions::default().with_raw(RawSpec::new(4, 3, RawDtype::U16));
        let (back, cam) = load_stack(&raw, &opts).unwrap();
        assert_eq!(back, stack);
        assert_eq!(cam.bit_depth, Some(16));
        let (_, cam) = load_stack(&raw, &opts.clone().with_bit_depth(10)).unwrap();
        assert_eq!(cam.bit_depth, Some(10));
        // Frame 0 peaks at 23, frame 1 at 123: above the 6-bit maximum 63.
        let err = load_stack(&raw, &opts.clone().with_bit_depth(6))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("frame 1") && err.contains("123") && err.contains("63"),
            "{err}"
        );

        // Any extension is read as raw when a spec is given.
        let odd = dir.path("frames.img");
        write_raw(&odd, &stack, ByteOrder::Little).unwrap();
        assert_eq!(load_stack(&odd, &opts).unwrap().0, stack);
    }

    #[test]
    fn load_stack_rejects_mismatched_options() {
        let raw_opts = LoadOptions::default().with_raw(RawSpec::new(4, 3, RawDtype::U16));
        let cases = [
            ("x.raw", LoadOptions::default(), "raw spec"),
            ("x.tif", raw_opts.clone(), "drop the raw spec"),
            ("x.png", raw_opts, "drop the raw spec"),
            (
                "x.tif",
                LoadOptions::default().with_frame_height(4),
                "frame_height",
            ),
            ("x.jpg", LoadOptions::default(), "unknown extension"),
        ];
        for (name, opts, want) in cases {
            let err = load_stack(name, &opts).unwrap_err().to_string();
            assert!(err.contains(want) && err.contains(name), "{name}: {err}");
        }
    }

    #[test]
    fn load_stack_and_open_frames_read_tiff_and_png() {
        let dir = TempDir::new("load_tiff_png");
        let stack = RawStack::U16(Array3::from_shape_fn((3, 4, 5), |(f, r, c)| {
            (f * 1000 + r * 5 + c) as u16
        }));
        let tif = dir.path("s.TIF");
        crate::io::output::write_raw_stack_tiff(&tif, &stack).unwrap();
        let (back, cam) = load_stack(&tif, &LoadOptions::default()).unwrap();
        assert_eq!((back, cam.bit_depth), (stack.clone(), Some(16)));
        let (src, _) = open_frames(&tif, &LoadOptions::default()).unwrap();
        assert_eq!(collect_stack(src).unwrap(), stack);

        let png = dir.path("s.png");
        let file = std::io::BufWriter::new(std::fs::File::create(&png).unwrap());
        let mut enc = ::png::Encoder::new(file, 5, 12);
        enc.set_color(::png::ColorType::Grayscale);
        enc.set_depth(::png::BitDepth::Sixteen);
        let RawStack::U16(a) = &stack else {
            unreachable!()
        };
        let bytes: Vec<u8> = a.iter().flat_map(|v| v.to_be_bytes()).collect();
        let mut w = enc.write_header().unwrap();
        w.write_image_data(&bytes).unwrap();
        w.finish().unwrap();
        let opts = LoadOptions::default().with_frame_height(4);
        assert_eq!(load_stack(&png, &opts).unwrap().0, stack);
        let (src, _) = open_frames(&png, &opts).unwrap();
        assert_eq!(src.count(), 3);
    }

    #[test]
    fn load_frame_averages_a_multi_frame_file() {
        let dir = TempDir::new("load_frame");
        let stack = RawStack::U8(Array3::from_shape_fn((4, 2, 3), |(f, r, c)| {
            (f * 10 + r * 3 + c) as u8
        }));
        let path = dir.path("dark.raw");
        write_raw(&path, &stack, ByteOrder::Little).unwrap();
        let opts = LoadOptions::default().with_raw(RawSpec::new(3, 2, RawDtype::U8));
        let dark = load_frame(&path, &opts).unwrap();
        assert_eq!(dark.dim(), (2, 3));
        assert_eq!(dark[[1, 2]], 15.0 + 5.0);
    }

    #[test]
    fn open_frames_streams_raw_files() {
        let dir = TempDir::new("open_frames");
        let stack = RawStack::F32(Array3::from_shape_fn((5, 2, 2), |(f, _, _)| f as f32));
        let path = dir.path("f.bin");
        write_raw(&path, &stack, ByteOrder::Big).unwrap();
        let opts = LoadOptions::default()
            .with_raw(RawSpec::new(2, 2, RawDtype::F32).with_byte_order(ByteOrder::Big));
        let (src, cam) = open_frames(&path, &opts).unwrap();
        assert_eq!(cam.bit_depth, None);
        let means: Vec<f32> = src.map(|f| f.unwrap().to_f32().mean().unwrap()).collect();
        assert_eq!(means, vec![0.0, 1.0, 2.0, 3.0, 4.0]);
    }
}
