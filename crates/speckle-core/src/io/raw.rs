//! Raw binary frames: headerless (or fixed-header) pixel dumps described by a [`RawSpec`].
//!
//! The file is `header_bytes` of ignored header followed by frames of
//! `width * height * dtype.bytes()` bytes each, rows top to bottom, pixels left to right.
//! The file size is checked against the spec before any pixel is read, so a wrong width,
//! dtype or header size shows up as a clear error with exact byte counts, not as garbage.

use std::fmt;
use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::str::FromStr;

use ndarray::Array2;

use super::stream::FrameGuard;
use crate::error::{Error, Result};
use crate::model::frame::Frame;
use crate::model::types::{CameraInfo, RawStack};

/// Pixel type of a raw file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RawDtype {
    U8,
    U16,
    F32,
}

impl RawDtype {
    /// Bytes per pixel.
    pub fn bytes(self) -> usize {
        match self {
            RawDtype::U8 => 1,
            RawDtype::U16 => 2,
            RawDtype::F32 => 4,
        }
    }

    /// Name as used in specs and messages ("u8", "u16", "f32").
    pub fn name(self) -> &'static str {
        match self {
            RawDtype::U8 => "u8",
            RawDtype::U16 => "u16",
            RawDtype::F32 => "f32",
        }
    }
}

impl fmt::Display for RawDtype {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for RawDtype {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "u8" | "uint8" => Ok(RawDtype::U8),
            "u16" | "uint16" => Ok(RawDtype::U16),
            "f32" | "float32" | "float" => Ok(RawDtype::F32),
            _ => Err(Error::InvalidParameter {
                name: "dtype",
                value: s.to_string(),
                why: "expected u8, u16 or f32".into(),
            }),
        }
    }
}

/// Byte order of multi-byte pixels in a raw file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum ByteOrder {
    /// Least significant byte first (x86, most cameras).
    #[default]
    Little,
    /// Most significant byte first.
    Big,
}

impl FromStr for ByteOrder {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "le" | "little" => Ok(ByteOrder::Little),
            "be" | "big" => Ok(ByteOrder::Big),
            _ => Err(Error::InvalidParameter {
                name: "byte_order",
                value: s.to_string(),
                why: "expected le (little-endian) or be (big-endian)".into(),
            }),
        }
    }
}

/// Layout of a raw binary file, given by the user because the file does not say.
///
/// Parsed from `key=value` pairs separated by commas; `width`, `height` and `dtype` are
/// required, `frames` (default: as many as the file holds), `order` (`le`/`be`, default
/// `le`) and `header` (bytes to skip, default 0) are optional.
///
/// ```
/// use speckle_core::io::{ByteOrder, RawDtype, RawSpec};
/// let spec: RawSpec = "width=640,height=480,dtype=u16,order=be,header=512".parse().unwrap();
/// assert_eq!((spec.width, spec.height, spec.dtype), (640, 480, RawDtype::U16));
/// assert_eq!((spec.byte_order, spec.header_bytes, spec.frames), (ByteOrder::Big, 512, None));
/// assert!("width=0,height=4,dtype=u8".parse::<RawSpec>().is_err());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RawSpec {
    /// Pixels per row.
    pub width: usize,
    /// Rows per frame.
    pub height: usize,
    /// Frames to read; `None` reads all, and the data size must then be a whole number of
    /// frames. With `Some(n)` the file must hold at least `n` frames; extra data is ignored.
    pub frames: Option<usize>,
    /// Pixel type.
    pub dtype: RawDtype,
    /// Byte order of u16 and f32 pixels.
    pub byte_order: ByteOrder,
    /// Bytes to skip at the start of the file.
    pub header_bytes: u64,
}

impl RawSpec {
    /// A little-endian, headerless spec reading every frame in the file.
    pub fn new(width: usize, height: usize, dtype: RawDtype) -> Self {
        Self {
            width,
            height,
            frames: None,
            dtype,
            byte_order: ByteOrder::Little,
            header_bytes: 0,
        }
    }

    /// Read exactly `frames` frames.
    pub fn with_frames(mut self, frames: usize) -> Self {
        self.frames = Some(frames);
        self
    }

    /// Set the byte order.
    pub fn with_byte_order(mut self, byte_order: ByteOrder) -> Self {
        self.byte_order = byte_order;
        self
    }

    /// Skip `header_bytes` at the start of the file.
    pub fn with_header_bytes(mut self, header_bytes: u64) -> Self {
        self.header_bytes = header_bytes;
        self
    }

    /// Reject zero sizes and frame sizes that overflow.
    pub fn validate(&self) -> Result<()> {
        let bad = |name, value: usize, why: &str| {
            Err(Error::InvalidParameter {
                name,
                value: value.to_string(),
                why: why.into(),
            })
        };
        if self.width == 0 {
            return bad("width", 0, "a raw frame needs at least one pixel per row");
        }
        if self.height == 0 {
            return bad("height", 0, "a raw frame needs at least one row");
        }
        if self.frames == Some(0) {
            return bad(
                "frames",
                0,
                "ask for at least one frame, or leave frames unset to read all",
            );
        }
        self.frame_bytes().map(|_| ())
    }

    /// Bytes per frame, `width * height * dtype.bytes()`.
    pub fn frame_bytes(&self) -> Result<u64> {
        (self.width as u64)
            .checked_mul(self.height as u64)
            .and_then(|n| n.checked_mul(self.dtype.bytes() as u64))
            .filter(|&n| usize::try_from(n).is_ok())
            .ok_or_else(|| Error::InvalidParameter {
                name: "width x height",
                value: format!("{}x{}", self.width, self.height),
                why: "the frame size overflows the address space".into(),
            })
    }

    /// Number of frames to read from a file of `file_len` bytes, or the exact size error.
    fn frames_in(&self, path: &Path, file_len: u64) -> Result<usize> {
        self.validate()?;
        if file_len == 0 {
            return Err(Error::EmptyFile {
                path: path.to_path_buf(),
            });
        }
        let frame_bytes = self.frame_bytes()?;
        let layout = format!(
            "{}x{} {} ({frame_bytes} bytes each) after a {}-byte header",
            self.width, self.height, self.dtype, self.header_bytes
        );
        let truncated = |expected: u64, what: String| Error::Truncated {
            path: path.to_path_buf(),
            expected,
            found: file_len,
            what: format!("{what}; check width, height, dtype and header size"),
        };
        let data = file_len.saturating_sub(self.header_bytes);
        let Some(n) = self.frames else {
            if data < frame_bytes {
                return Err(truncated(
                    self.header_bytes + frame_bytes,
                    format!("at least one frame of {layout}"),
                ));
            }
            let whole = data / frame_bytes;
            if !data.is_multiple_of(frame_bytes) {
                let expected = self.header_bytes + (whole + 1) * frame_bytes;
                return Err(truncated(
                    expected,
                    format!(
                        "{} whole frames of {layout} (the last frame is cut short after {} bytes)",
                        whole + 1,
                        data % frame_bytes
                    ),
                ));
            }
            return usize::try_from(whole).map_err(|_| Error::Format {
                path: path.to_path_buf(),
                why: format!("{whole} frames is too many for this platform"),
            });
        };
        let need = (n as u64)
            .checked_mul(frame_bytes)
            .and_then(|b| b.checked_add(self.header_bytes))
            .ok_or_else(|| Error::InvalidParameter {
                name: "frames",
                value: n.to_string(),
                why: "the requested data size overflows".into(),
            })?;
        if file_len < need {
            return Err(truncated(need, format!("{n} frames of {layout}")));
        }
        if file_len > need {
            tracing::debug!(
                path = %path.display(),
                extra = file_len - need,
                "raw file holds more data than the requested frames; the rest is ignored"
            );
        }
        Ok(n)
    }
}

impl fmt::Display for RawSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "width={},height={},dtype={}",
            self.width, self.height, self.dtype
        )?;
        if let Some(n) = self.frames {
            write!(f, ",frames={n}")?;
        }
        let order = match self.byte_order {
            ByteOrder::Little => "le",
            ByteOrder::Big => "be",
        };
        write!(f, ",order={order},header={}", self.header_bytes)
    }
}

impl FromStr for RawSpec {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        let bad = |why: String| Error::InvalidParameter {
            name: "raw spec",
            value: s.to_string(),
            why,
        };
        let number = |key: &str, v: &str| -> Result<u64> {
            v.trim().parse::<u64>().map_err(|_| {
                bad(format!(
                    "`{key}` must be a non-negative whole number, got `{v}`"
                ))
            })
        };
        let (mut width, mut height, mut dtype) = (None, None, None);
        let mut spec = RawSpec::new(0, 0, RawDtype::U8);
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let Some((key, value)) = part.split_once('=') else {
                return Err(bad(format!("`{part}` is not key=value")));
            };
            match key.trim().to_ascii_lowercase().as_str() {
                "width" | "w" => width = Some(number(key, value)? as usize),
                "height" | "h" => height = Some(number(key, value)? as usize),
                "frames" | "n" => spec.frames = Some(number(key, value)? as usize),
                "dtype" | "type" => dtype = Some(value.parse()?),
                "order" | "byte_order" | "endian" => spec.byte_order = value.parse()?,
                "header" | "header_bytes" => spec.header_bytes = number(key, value)?,
                other => {
                    return Err(bad(format!(
                        "unknown key `{other}`; use width, height, dtype, frames, order, header"
                    )));
                }
            }
        }
        spec.width = width.ok_or_else(|| bad("`width` is required".into()))?;
        spec.height = height.ok_or_else(|| bad("`height` is required".into()))?;
        spec.dtype = dtype.ok_or_else(|| bad("`dtype` (u8, u16 or f32) is required".into()))?;
        spec.validate()?;
        Ok(spec)
    }
}

/// Reads a raw file one frame at a time, holding one frame in memory.
///
/// The file size is checked when opening; a file that shrinks while being read gives
/// [`Error::Truncated`] with the byte offset of the missing frame.
#[derive(Debug)]
pub struct RawFrameReader {
    path: PathBuf,
    spec: RawSpec,
    reader: BufReader<File>,
    frames: usize,
    index: usize,
    frame_bytes: usize,
    buf: Vec<u8>,
    guard: FrameGuard,
    done: bool,
}

impl RawFrameReader {
    /// Open `path` and check its size against `spec`.
    pub fn open(path: impl AsRef<Path>, spec: &RawSpec) -> Result<Self> {
        let path = path.as_ref();
        let io_err = |source| Error::Io {
            path: path.to_path_buf(),
            source,
        };
        let mut file = File::open(path).map_err(io_err)?;
        let len = file.metadata().map_err(io_err)?.len();
        let frames = spec.frames_in(path, len)?;
        file.seek(SeekFrom::Start(spec.header_bytes))
            .map_err(io_err)?;
        let frame_bytes = spec.frame_bytes()? as usize;
        Ok(Self {
            path: path.to_path_buf(),
            spec: *spec,
            reader: BufReader::with_capacity(frame_bytes.clamp(8192, 1 << 22), file),
            frames,
            index: 0,
            frame_bytes,
            buf: vec![0; frame_bytes],
            guard: FrameGuard::default(),
            done: false,
        })
    }

    /// Number of frames this reader will deliver.
    pub fn frames(&self) -> usize {
        self.frames
    }

    /// Camera facts implied by the spec: 8 or 16 bits for integers, none for f32.
    pub fn camera(&self) -> CameraInfo {
        CameraInfo {
            bit_depth: match self.spec.dtype {
                RawDtype::U8 => Some(8),
                RawDtype::U16 => Some(16),
                RawDtype::F32 => None,
            },
        }
    }

    fn read_frame(&mut self) -> Result<Frame> {
        let offset = self.spec.header_bytes + self.index as u64 * self.frame_bytes as u64;
        if let Err(e) = self.reader.read_exact(&mut self.buf) {
            return Err(if e.kind() == std::io::ErrorKind::UnexpectedEof {
                let len = std::fs::metadata(&self.path).map_or(0, |m| m.len());
                Error::Truncated {
                    path: self.path.clone(),
                    expected: offset + self.frame_bytes as u64,
                    found: len,
                    what: format!(
                        "frame {} starting at byte offset {offset} (the file shrank while being read)",
                        self.index
                    ),
                }
            } else {
                Error::Io {
                    path: self.path.clone(),
                    source: e,
                }
            });
        }
        let shape = (self.spec.height, self.spec.width);
        let frame = decode(&self.buf, self.spec.dtype, self.spec.byte_order, shape);
        let index = self.index;
        let path = &self.path;
        self.guard
            .check(&frame, || format!("frame {index} of {}", path.display()))?;
        Ok(frame)
    }
}

impl Iterator for RawFrameReader {
    type Item = Result<Frame>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done || self.index >= self.frames {
            return None;
        }
        let frame = self.read_frame();
        self.index += 1;
        self.done = frame.is_err();
        Some(frame)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let left = if self.done {
            0
        } else {
            self.frames - self.index
        };
        (left, Some(left))
    }
}

/// Reads header-less raw frames from any byte stream: stdin, a named pipe, a socket, or a
/// file that is still being written (wrap it in a reader that waits at its end). A camera
/// SDK tool, GStreamer (`filesink location=/dev/stdout`) or ffmpeg (`-f rawvideo`) writes
/// such streams; unlike [`RawFrameReader`] the length is unknown until the stream ends.
///
/// `header_bytes` of the spec are skipped once at the start. The stream may end only
/// between frames: a partial last frame is [`Error::Truncated`] naming the source, the
/// frame and the bytes that came, because it means the width, height or dtype do not
/// match what the writer sends (or the writer died mid-frame).
///
/// ```
/// use speckle_core::io::{Frame, RawDtype, RawSpec, RawStreamReader};
/// let bytes: Vec<u8> = (0..2 * 3 * 4u8).collect(); // two 4x3 u8 frames
/// let spec = RawSpec::new(4, 3, RawDtype::U8);
/// let frames: Vec<Frame> = RawStreamReader::new(&bytes[..], &spec, "stdin")?
///     .collect::<Result<_, _>>()?;
/// assert_eq!(frames.len(), 2);
/// let mut short = RawStreamReader::new(&bytes[..20], &spec, "stdin")?;
/// assert!(short.next().unwrap().is_ok());
/// let err = short.next().unwrap().unwrap_err().to_string();
/// assert!(err.contains("stdin") && err.contains("frame 1"), "{err}");
/// # Ok::<(), speckle_core::Error>(())
/// ```
#[derive(Debug)]
pub struct RawStreamReader<R> {
    reader: R,
    name: PathBuf,
    spec: RawSpec,
    index: usize,
    buf: Vec<u8>,
    header_left: u64,
    done: bool,
}

impl<R: Read> RawStreamReader<R> {
    /// Frames of `spec` (its `frames` is ignored: the stream decides) from `reader`; `name`
    /// ("stdin", a pipe's path) names the source in errors.
    pub fn new(reader: R, spec: &RawSpec, name: impl Into<PathBuf>) -> Result<Self> {
        spec.validate()?;
        let frame_bytes =
            usize::try_from(spec.frame_bytes()?).map_err(|_| Error::InvalidParameter {
                name: "raw frame size",
                value: spec.to_string(),
                why: "a frame does not fit in memory".into(),
            })?;
        Ok(Self {
            reader,
            name: name.into(),
            spec: *spec,
            index: 0,
            buf: vec![0; frame_bytes],
            header_left: spec.header_bytes,
            done: false,
        })
    }

    /// Number of frames delivered so far.
    pub fn frames_read(&self) -> usize {
        self.index
    }

    fn io_err(&self, source: std::io::Error) -> Error {
        Error::Io {
            path: self.name.clone(),
            source,
        }
    }

    /// Fill the buffer; `Ok(0)` at a clean end of stream, else the bytes read (all of them
    /// unless the stream ended mid-frame).
    fn fill(&mut self) -> std::io::Result<usize> {
        let mut got = 0;
        while got < self.buf.len() {
            match self.reader.read(&mut self.buf[got..]) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(got)
    }

    fn read_frame(&mut self) -> Option<Result<Frame>> {
        if self.header_left > 0 {
            let skip = self.header_left;
            self.header_left = 0;
            match std::io::copy(&mut (&mut self.reader).take(skip), &mut std::io::sink()) {
                Ok(n) if n == skip => {}
                Ok(n) => {
                    return Some(Err(Error::Truncated {
                        path: self.name.clone(),
                        expected: skip,
                        found: n,
                        what: "the header".into(),
                    }));
                }
                Err(e) => return Some(Err(self.io_err(e))),
            }
        }
        let got = match self.fill() {
            Ok(0) => return None,
            Ok(n) => n,
            Err(e) => return Some(Err(self.io_err(e))),
        };
        if got < self.buf.len() {
            return Some(Err(Error::Truncated {
                path: self.name.clone(),
                expected: self.buf.len() as u64,
                found: got as u64,
                what: format!(
                    "frame {} ({}x{} {}): the stream ended mid-frame; check --width, \
                     --height and --dtype against what the writer sends",
                    self.index, self.spec.width, self.spec.height, self.spec.dtype
                ),
            }));
        }
        let shape = (self.spec.height, self.spec.width);
        Some(Ok(decode(
            &self.buf,
            self.spec.dtype,
            self.spec.byte_order,
            shape,
        )))
    }
}

impl<R: Read> Iterator for RawStreamReader<R> {
    type Item = Result<Frame>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let item = self.read_frame();
        match &item {
            Some(Ok(_)) => self.index += 1,
            _ => self.done = true,
        }
        item
    }
}

/// Decode one frame of bytes; `bytes.len()` must be `h * w * dtype.bytes()`.
fn decode(bytes: &[u8], dtype: RawDtype, order: ByteOrder, shape: (usize, usize)) -> Frame {
    fn arr<T>(shape: (usize, usize), v: Vec<T>) -> Array2<T> {
        Array2::from_shape_vec(shape, v).expect("frame buffer sized from the spec")
    }
    match dtype {
        RawDtype::U8 => Frame::U8(arr(shape, bytes.to_vec())),
        RawDtype::U16 => {
            let f = match order {
                ByteOrder::Little => u16::from_le_bytes,
                ByteOrder::Big => u16::from_be_bytes,
            };
            Frame::U16(arr(
                shape,
                bytes.chunks_exact(2).map(|c| f([c[0], c[1]])).collect(),
            ))
        }
        RawDtype::F32 => {
            let f = match order {
                ByteOrder::Little => f32::from_le_bytes,
                ByteOrder::Big => f32::from_be_bytes,
            };
            let v = bytes
                .chunks_exact(4)
                .map(|c| f([c[0], c[1], c[2], c[3]]))
                .collect();
            Frame::F32(arr(shape, v))
        }
    }
}

/// Read a whole raw file into a stack.
pub fn read_raw(path: impl AsRef<Path>, spec: &RawSpec) -> Result<(RawStack, CameraInfo)> {
    let reader = RawFrameReader::open(path, spec)?;
    let camera = reader.camera();
    Ok((super::stream::collect_stack(reader)?, camera))
}

/// Write a stack as a headerless raw file (frame, row, column order), e.g. to hand
/// simulated frames to tools that read raw dumps. Overwrites `path`.
pub fn write_raw(path: impl AsRef<Path>, stack: &RawStack, order: ByteOrder) -> Result<()> {
    let path = path.as_ref();
    let io_err = |source| Error::Io {
        path: path.to_path_buf(),
        source,
    };
    let mut w = BufWriter::new(File::create(path).map_err(io_err)?);
    let result = match stack {
        RawStack::U8(a) => a.iter().try_for_each(|v| w.write_all(&[*v])),
        RawStack::U16(a) => a.iter().try_for_each(|v| {
            w.write_all(&match order {
                ByteOrder::Little => v.to_le_bytes(),
                ByteOrder::Big => v.to_be_bytes(),
            })
        }),
        RawStack::F32(a) => a.iter().try_for_each(|v| {
            w.write_all(&match order {
                ByteOrder::Little => v.to_le_bytes(),
                ByteOrder::Big => v.to_be_bytes(),
            })
        }),
    };
    result.and_then(|()| w.flush()).map_err(io_err)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::test_util::TempDir;
    use ndarray::Array3;

    fn stack_u16() -> RawStack {
        RawStack::U16(Array3::from_shape_fn((3, 4, 5), |(f, r, c)| {
            (1000 * f + 10 * r + c) as u16 * 7
        }))
    }

    #[test]
    fn stream_reader_decodes_big_endian_frames_after_a_header_and_names_a_short_one() {
        let spec = RawSpec::new(2, 2, RawDtype::U16)
            .with_byte_order(ByteOrder::Big)
            .with_header_bytes(3);
        let mut bytes = vec![9u8; 3];
        for v in [1u16, 2, 3, 4, 5, 6, 7, 8] {
            bytes.extend_from_slice(&v.to_be_bytes());
        }
        let frames: Vec<Frame> = RawStreamReader::new(&bytes[..], &spec, "pipe")
            .unwrap()
            .collect::<Result<_>>()
            .unwrap();
        assert_eq!(frames.len(), 2);
        match &frames[1] {
            Frame::U16(a) => assert_eq!(a, &ndarray::array![[5u16, 6], [7, 8]]),
            other => panic!("{other:?}"),
        }
        let mut r = RawStreamReader::new(&bytes[..bytes.len() - 1], &spec, "pipe").unwrap();
        assert!(r.next().unwrap().is_ok());
        let err = r.next().unwrap().unwrap_err().to_string();
        assert!(
            err.contains("pipe") && err.contains("frame 1") && err.contains("found 7"),
            "{err}"
        );
        assert!(r.next().is_none(), "fused after the error");
        assert_eq!(r.frames_read(), 1);
    }

    #[test]
    fn raw_round_trip_every_dtype_and_byte_order() {
        let dir = TempDir::new("raw_round_trip");
        let stacks = [
            (
                RawStack::U8(Array3::from_shape_fn((2, 3, 4), |(f, r, c)| {
                    (f * 12 + r * 4 + c) as u8
                })),
                RawDtype::U8,
            ),
            (stack_u16(), RawDtype::U16),
            (
                RawStack::F32(Array3::from_shape_fn((2, 3, 4), |(f, r, c)| {
                    f as f32 - r as f32 * 0.5 + c as f32 * 1e-3
                })),
                RawDtype::F32,
            ),
        ];
        for (stack, dtype) in stacks {
            for order in [ByteOrder::Little, ByteOrder::Big] {
                let path = dir.path(&format!("{dtype}_{order:?}.raw"));
                write_raw(&path, &stack, order).unwrap();
                let (_, h, w) = stack.dim();
                let spec = RawSpec::new(w, h, dtype).with_byte_order(order);
                let (back, cam) = read_raw(&path, &spec).unwrap();
                assert_eq!(back, stack, "{dtype} {order:?}");
                assert_eq!(
                    cam.bit_depth,
                    match dtype {
                        RawDtype::U8 => Some(8),
                        RawDtype::U16 => Some(16),
                        RawDtype::F32 => None,
                    }
                );
            }
        }
    }

    #[test]
    fn big_endian_u16_is_decoded_most_significant_byte_first() {
        let dir = TempDir::new("raw_be");
        let path = dir.path("be.raw");
        std::fs::write(&path, [0x01, 0x02, 0xff, 0x00]).unwrap();
        let (s, _) = read_raw(
            &path,
            &RawSpec::new(2, 1, RawDtype::U16).with_byte_order(ByteOrder::Big),
        )
        .unwrap();
        assert_eq!(
            s,
            RawStack::U16(Array3::from_shape_vec((1, 1, 2), vec![0x0102, 0xff00]).unwrap())
        );
    }

    #[test]
    fn header_bytes_are_skipped_and_frame_count_respected() {
        let dir = TempDir::new("raw_header");
        let path = dir.path("h.raw");
        let mut bytes = vec![0xAA; 16];
        bytes.extend((0u8..24).collect::<Vec<_>>());
        std::fs::write(&path, &bytes).unwrap();
        let spec = RawSpec::new(4, 2, RawDtype::U8)
            .with_header_bytes(16)
            .with_frames(2);
        let (s, _) = read_raw(&path, &spec).unwrap();
        let RawStack::U8(a) = s else { panic!() };
        assert_eq!(a.dim(), (2, 2, 4));
        assert_eq!(a[[1, 0, 0]], 8);
        let (all, _) = read_raw(
            &path,
            &RawSpec::new(4, 2, RawDtype::U8).with_header_bytes(16),
        )
        .unwrap();
        assert_eq!(all.dim().0, 3);
    }

    #[test]
    fn truncated_file_reports_exact_byte_counts() {
        let dir = TempDir::new("raw_trunc");
        let path = dir.path("t.raw");
        // 2.5 frames of 4x2 u16 (16 bytes each) after a 4-byte header: 44 bytes.
        std::fs::write(&path, vec![0u8; 44]).unwrap();
        let spec = RawSpec::new(4, 2, RawDtype::U16).with_header_bytes(4);
        let err = read_raw(&path, &spec).unwrap_err();
        let msg = err.to_string();
        assert!(
            matches!(
                err,
                Error::Truncated {
                    expected: 52,
                    found: 44,
                    ..
                }
            ),
            "{msg}"
        );
        assert!(
            msg.contains("3 whole frames") && msg.contains("16 bytes each"),
            "{msg}"
        );
        // Asking for more frames than present.
        let err = read_raw(&path, &spec.with_frames(5)).unwrap_err();
        assert!(
            matches!(
                err,
                Error::Truncated {
                    expected: 84,
                    found: 44,
                    ..
                }
            ),
            "{err}"
        );
        // Smaller than one frame.
        std::fs::write(&path, vec![0u8; 10]).unwrap();
        let err = read_raw(&path, &spec).unwrap_err();
        assert!(
            matches!(
                err,
                Error::Truncated {
                    expected: 20,
                    found: 10,
                    ..
                }
            ),
            "{err}"
        );
    }

    #[test]
    fn empty_file_is_reported_as_empty() {
        let dir = TempDir::new("raw_empty");
        let path = dir.path("e.raw");
        std::fs::write(&path, []).unwrap();
        let err = read_raw(&path, &RawSpec::new(4, 4, RawDtype::U8)).unwrap_err();
        assert!(matches!(err, Error::EmptyFile { .. }));
        assert!(err.to_string().contains("e.raw: file is empty"));
    }

    #[test]
    fn missing_file_names_the_path() {
        let err =
            read_raw("/nonexistent/dir/x.raw", &RawSpec::new(4, 4, RawDtype::U8)).unwrap_err();
        assert!(matches!(err, Error::Io { .. }));
        assert!(err.to_string().contains("/nonexistent/dir/x.raw"));
    }

    #[test]
    fn spec_parsing_and_validation() {
        let s: RawSpec = "w=64, h=32, dtype=f32, frames=10, order=little"
            .parse()
            .unwrap();
        assert_eq!(s, RawSpec::new(64, 32, RawDtype::F32).with_frames(10));
        assert_eq!(s.to_string().parse::<RawSpec>().unwrap(), s);
        for bad in [
            "width=0,height=4,dtype=u8",
            "width=4,height=0,dtype=u8",
            "width=4,height=4,dtype=u8,frames=0",
            "width=4,height=4",
            "width=4,height=4,dtype=i64",
            "width=4,height=4,dtype=u8,order=middle",
            "width=-4,height=4,dtype=u8",
            "width=4,height=4,dtype=u8,colour=red",
            "width",
        ] {
            let err = bad.parse::<RawSpec>().unwrap_err();
            assert!(
                matches!(err, Error::InvalidParameter { .. }),
                "{bad}: {err}"
            );
        }
        let huge = RawSpec::new(usize::MAX, 2, RawDtype::F32);
        assert!(huge.validate().is_err());
    }

    #[test]
    fn frame_reader_streams_one_frame_at_a_time() {
        let dir = TempDir::new("raw_stream");
        let path = dir.path("s.raw");
        write_raw(&path, &stack_u16(), ByteOrder::Little).unwrap();
        let mut r = RawFrameReader::open(&path, &RawSpec::new(5, 4, RawDtype::U16)).unwrap();
        assert_eq!(r.size_hint(), (3, Some(3)));
        let f1 = r.nth(1).unwrap().unwrap();
        let Frame::U16(a) = f1 else { panic!() };
        assert_eq!(a[[2, 3]], (1000 + 23) * 7);
        assert!(r.next().unwrap().is_ok());
        assert!(r.next().is_none());
    }
}
