//! TIFF input through the `tiff` crate: greyscale 8-bit, 16-bit (including 12- or 14-bit
//! camera data in 16-bit containers) and 32-bit float; single images and multi-page stacks,
//! read page by page. Bit-packed depths (BitsPerSample = 12 etc.) are refused with advice,
//! because the `tiff` crate cannot decode them.

use std::collections::HashSet;
use std::fs::File;
use std::io::{BufReader, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use ndarray::Array2;
use tiff::decoder::{Decoder, Limits};
use tiff::tags::SampleFormat;
use tiff::{ColorType, TiffError};

use super::stream::{FrameGuard, collect_stack};
use crate::error::{Error, Result};
use crate::model::frame::Frame;
use crate::model::types::{CameraInfo, RawStack};

/// Largest page the decoder may allocate: 4 GiB (the `tiff` default of 256 MiB is too small
/// for large sCMOS frames in float). Checked, with overflow-checked arithmetic, before the
/// page buffer is allocated.
const MAX_PAGE_BYTES: usize = 1 << 32;

/// Most decoded bytes per stored byte of a compressed page: 4096 (LZW's worst case is about
/// 2730, DEFLATE's 1032, PackBits' 64). An uncompressed page must fit in the file itself.
const MAX_COMPRESSION_RATIO: u64 = 4096;

/// Most values one IFD tag may hold: 2^24 (a page of 16 million strips).
const MAX_TAG_VALUES: u64 = 1 << 24;

/// Most entries in one IFD: 4096 (a page has 10 to 30).
const MAX_IFD_ENTRIES: u64 = 4096;

/// Largest tag value the decoder may read into memory (`Limits::ifd_value_size`): 64 MiB.
const MAX_IFD_VALUE_BYTES: usize = 64 << 20;

/// Most pages in one file: 2^24.
const MAX_PAGES: usize = 1 << 24;

/// Checks each IFD (page directory) against the file before the `tiff` crate reads it: the
/// entry count, every tag's value size and offset against the file's length, and the chain
/// of pages for loops. The crate reserves memory from these counts, so they are checked
/// first.
#[derive(Debug)]
struct IfdScan {
    file: BufReader<File>,
    len: u64,
    little: bool,
    big: bool,
    seen: HashSet<u64>,
}

/// What the scan learned of one page.
#[derive(Debug, Clone, Copy)]
struct IfdFacts {
    /// Offset of the next page's IFD, 0 at the last page.
    next: u64,
    /// The Compression tag (1 = none).
    compression: u32,
}

impl IfdScan {
    /// Read the file header; returns the scanner and the offset of the first IFD.
    fn open(path: &Path) -> Result<(Self, u64)> {
        let io_err = |source| Error::Io {
            path: path.to_path_buf(),
            source,
        };
        let file = File::open(path).map_err(io_err)?;
        let len = file.metadata().map_err(io_err)?.len();
        if len == 0 {
            return Err(Error::EmptyFile {
                path: path.to_path_buf(),
            });
        }
        let mut scan = IfdScan {
            file: BufReader::new(file),
            len,
            little: true,
            big: false,
            seen: HashSet::new(),
        };
        let not_tiff = || Error::Format {
            path: path.to_path_buf(),
            why: "not a TIFF file (no II/MM signature at the start)".into(),
        };
        let mut head = [0u8; 16];
        let got = scan.read_at(0, &mut head).map_err(io_err)?;
        if got < 8 {
            return Err(if head.starts_with(b"II") || head.starts_with(b"MM") {
                Error::Format {
                    path: path.to_path_buf(),
                    why: format!(
                        "the file ends before the data it describes (truncated TIFF): {len} bytes, the header needs 8"
                    ),
                }
            } else {
                not_tiff()
            });
        }
        scan.little = match &head[..2] {
            b"II" => true,
            b"MM" => false,
            _ => return Err(not_tiff()),
        };
        let first = match scan.u16(&head[2..4]) {
            42 => u64::from(scan.u32(&head[4..8])),
            43 if got >= 16 && scan.u16(&head[4..6]) == 8 => {
                scan.big = true;
                scan.u64(&head[8..16])
            }
            v => {
                return Err(Error::Format {
                    path: path.to_path_buf(),
                    why: format!(
                        "TIFF version field (byte 2) is {v}, expected 42 (TIFF) or 43 (BigTIFF); not a TIFF file or a corrupt header"
                    ),
                });
            }
        };
        Ok((scan, first))
    }

    fn u16(&self, b: &[u8]) -> u16 {
        let b = [b[0], b[1]];
        if self.little {
            u16::from_le_bytes(b)
        } else {
            u16::from_be_bytes(b)
        }
    }

    fn u32(&self, b: &[u8]) -> u32 {
        let b = [b[0], b[1], b[2], b[3]];
        if self.little {
            u32::from_le_bytes(b)
        } else {
            u32::from_be_bytes(b)
        }
    }

    fn u64(&self, b: &[u8]) -> u64 {
        let b: [u8; 8] = b[..8].try_into().expect("8 bytes");
        if self.little {
            u64::from_le_bytes(b)
        } else {
            u64::from_be_bytes(b)
        }
    }

    /// Read up to `buf.len()` bytes at `offset`; returns how many were read.
    fn read_at(&mut self, offset: u64, buf: &mut [u8]) -> std::io::Result<usize> {
        self.file.seek(SeekFrom::Start(offset))?;
        let mut n = 0;
        while n < buf.len() {
            match self.file.read(&mut buf[n..])? {
                0 => break,
                k => n += k,
            }
        }
        Ok(n)
    }

    /// Check the IFD of page `page` at `offset`.
    fn check(&mut self, path: &Path, page: usize, offset: u64) -> Result<IfdFacts> {
        let fail = |why: String| Error::Format {
            path: path.to_path_buf(),
            why: format!("page {page}: IFD at byte {offset}: {why}"),
        };
        if page >= MAX_PAGES {
            return Err(fail(format!("more than {MAX_PAGES} pages")));
        }
        if !self.seen.insert(offset) {
            return Err(fail(
                "an earlier page points here too: the chain of pages loops (corrupt file)".into(),
            ));
        }
        let (count_bytes, entry_bytes, inline) = if self.big { (8, 20, 8) } else { (2, 12, 4) };
        let header_end = if self.big { 16 } else { 8 };
        if offset < header_end || offset.saturating_add(count_bytes) > self.len {
            return Err(fail(format!(
                "outside the file ({} bytes): the file is truncated or the offset corrupt",
                self.len
            )));
        }
        let io_err = |source| Error::Io {
            path: path.to_path_buf(),
            source,
        };
        let mut b = [0u8; 8];
        self.read_at(offset, &mut b[..count_bytes as usize])
            .map_err(io_err)?;
        let entries = if self.big {
            self.u64(&b)
        } else {
            u64::from(self.u16(&b))
        };
        if entries == 0 || entries > MAX_IFD_ENTRIES {
            return Err(fail(format!(
                "{entries} entries, expected 1 to {MAX_IFD_ENTRIES}"
            )));
        }
        let table = entries * entry_bytes;
        let end = offset + count_bytes + table + inline;
        if end > self.len {
            return Err(fail(format!(
                "{entries} entries need bytes up to {end}, but the file has {} (truncated or corrupt)",
                self.len
            )));
        }
        let mut raw = vec![0u8; (table + inline) as usize];
        self.read_at(offset + count_bytes, &mut raw)
            .map_err(io_err)?;
        let mut compression = 1;
        for e in raw[..table as usize].chunks_exact(entry_bytes as usize) {
            let tag = self.u16(&e[0..2]);
            let ty = self.u16(&e[2..4]);
            let (count, value) = if self.big {
                (self.u64(&e[4..12]), &e[12..20])
            } else {
                (u64::from(self.u32(&e[4..8])), &e[8..12])
            };
            let size = match ty {
                1 | 2 | 6 | 7 => 1,
                3 | 8 => 2,
                4 | 9 | 11 | 13 => 4,
                5 | 10 | 12 | 16 | 17 | 18 => 8,
                _ => continue, // unknown types are skipped by the decoder too
            };
            if count > MAX_TAG_VALUES {
                return Err(fail(format!(
                    "tag {tag} holds {count} values, more than the {MAX_TAG_VALUES} allowed"
                )));
            }
            let bytes = count * size;
            if bytes > inline {
                let at = if self.big {
                    self.u64(value)
                } else {
                    u64::from(self.u32(value))
                };
                if at.checked_add(bytes).is_none_or(|e| e > self.len) {
                    return Err(fail(format!(
                        "tag {tag}: {count} values ({bytes} bytes) at byte {at} run past the end of the file ({} bytes)",
                        self.len
                    )));
                }
            }
            if tag == 259 && count == 1 {
                compression = match ty {
                    3 => u32::from(self.u16(value)),
                    4 => self.u32(value),
                    _ => compression,
                };
            }
        }
        let tail = &raw[table as usize..];
        let next = if self.big {
            self.u64(tail)
        } else {
            u64::from(self.u32(tail))
        };
        Ok(IfdFacts { next, compression })
    }
}

/// The pages to read as frames. A stack whose ImageJ or OME metadata leaves more than one
/// axis (channels, slices, frames) longer than 1 after `pick` is refused with its axes named:
/// read page after page, it would mix them.
fn page_filter(
    path: &Path,
    decoder: &mut Decoder<BufReader<File>>,
    pick: StackPick,
) -> Result<Option<PageFilter>> {
    let fail = |why: String| Error::Format {
        path: path.to_path_buf(),
        why,
    };
    let axes = decoder
        .get_tag_ascii_string(tiff::tags::Tag::ImageDescription)
        .ok()
        .and_then(|d| imaging_io::StackAxes::parse(&d));
    let Some(axes) = axes else {
        if pick != StackPick::default() {
            return Err(fail(
                "--channel/--slice: the file has no ImageJ or OME axis metadata, so its pages \
                 are all frames"
                    .into(),
            ));
        }
        return Ok(None);
    };
    for (name, len, chosen) in [
        ("channel", axes.channels, pick.channel),
        ("slice", axes.slices, pick.slice),
    ] {
        if let Some(i) = chosen.filter(|&i| i >= len) {
            return Err(fail(format!(
                "--{name} {i}: {axes} has {len} {name}(s), numbered from 0"
            )));
        }
    }
    let free = [
        (axes.channels, pick.channel),
        (axes.slices, pick.slice),
        (axes.frames, None),
    ]
    .iter()
    .filter(|(len, chosen)| *len > 1 && chosen.is_none())
    .count();
    if free > 1 {
        return Err(fail(format!(
            "{axes}: speckle reads the pages as one axis of frames, which would mix them; \
             pick one channel and one slice with --channel N and --slice N (from 0), or keep \
             one channel and one slice first (Fiji: Image > Hyperstacks > Reduce \
             Dimensionality)"
        )));
    }
    if pick == StackPick::default() {
        return Ok(None);
    }
    let order = axes.page_order().map_err(fail)?;
    Ok(Some(PageFilter {
        order,
        channel: pick.channel,
        slice: pick.slice,
    }))
}

/// Run calls into the `tiff` crate, turning a panic inside it into an error naming the file.
fn no_panic<T>(path: &Path, page: usize, f: impl FnOnce() -> Result<T>) -> Result<T> {
    gpu_runtime::contain_panic(f).unwrap_or_else(|msg| {
        Err(Error::Format {
            path: path.to_path_buf(),
            why: format!(
                "page {page}: the TIFF decoder failed (internal panic: {msg}); the file is corrupt"
            ),
        })
    })
}

/// How the samples of a page are stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PageKind {
    U8,
    U16,
    F32,
}

impl PageKind {
    fn container_bits(self) -> Option<u32> {
        match self {
            PageKind::U8 => Some(8),
            PageKind::U16 => Some(16),
            PageKind::F32 => None,
        }
    }
}

/// Reads a TIFF one page at a time, so a long stack never has to fit in memory.
///
/// Every page must be greyscale with the size and pixel type of page 0; otherwise the page
/// yields [`Error::FrameSizeMismatch`] or [`Error::PixelTypeMismatch`] naming its index and
/// the reader stops.
#[derive(Debug)]
pub struct TiffFrameReader {
    path: PathBuf,
    decoder: Decoder<BufReader<File>>,
    page: usize,
    camera: CameraInfo,
    /// Largest valid value when the user stated fewer bits than the container holds.
    check_max: Option<u32>,
    guard: FrameGuard,
    done: bool,
    /// The IFD checker, and what it found for the current page.
    scan: IfdScan,
    facts: IfdFacts,
    /// The pages of one channel and slice of a hyperstack; `None`: every page.
    filter: Option<PageFilter>,
}

/// Which channel and slice of a hyperstack (ImageJ or OME metadata) to read as frames,
/// counted from 0. Unset axes of length 1 need no choice.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StackPick {
    pub channel: Option<usize>,
    pub slice: Option<usize>,
}

/// Pages of one channel and slice: a page's index decomposed by the stored axis order.
#[derive(Debug)]
struct PageFilter {
    /// (axis `C`, `Z` or `T`, its length), fastest-varying first.
    order: Vec<(char, usize)>,
    channel: Option<usize>,
    slice: Option<usize>,
}

impl PageFilter {
    fn keeps(&self, page: usize) -> bool {
        let mut rest = page;
        let mut keep = true;
        for &(axis, len) in &self.order {
            let i = rest % len;
            rest /= len;
            let want = match axis {
                'C' => self.channel,
                'Z' => self.slice,
                _ => None,
            };
            keep &= want.is_none_or(|w| w == i);
        }
        keep
    }
}

impl TiffFrameReader {
    /// Open `path` and inspect page 0.
    ///
    /// `bit_depth` states the significant bits of integer data (e.g. `Some(12)` for a 12-bit
    /// camera that writes 16-bit TIFFs). It must not exceed the stored bits, and every pixel
    /// is checked against it, so a wrong statement is an error rather than a wrong
    /// saturation level. It is an error for float data.
    pub fn open(path: impl AsRef<Path>, bit_depth: Option<u32>) -> Result<Self> {
        Self::open_picked(path, bit_depth, StackPick::default())
    }

    /// [`open`](Self::open), reading only the pages of one channel and slice of a hyperstack.
    /// A stack with ImageJ or OME metadata must leave at most one axis longer than 1 after
    /// the pick; that axis gives the frames.
    pub fn open_picked(
        path: impl AsRef<Path>,
        bit_depth: Option<u32>,
        pick: StackPick,
    ) -> Result<Self> {
        let path = path.as_ref();
        let (mut scan, first) = IfdScan::open(path)?;
        let facts = scan.check(path, 0, first)?;
        let file = File::open(path).map_err(|source| Error::Io {
            path: path.to_path_buf(),
            source,
        })?;
        // Set every limit: pages up to the cap, compressed chunks no larger than the file.
        let mut limits = Limits::default();
        limits.decoding_buffer_size = MAX_PAGE_BYTES;
        limits.intermediate_buffer_size = usize::try_from(scan.len)
            .unwrap_or(usize::MAX)
            .min(MAX_PAGE_BYTES);
        limits.ifd_value_size = MAX_IFD_VALUE_BYTES;
        let (decoder, kind, filter) = no_panic(path, 0, || {
            let mut decoder = Decoder::new(BufReader::new(file))
                .map_err(|e| tiff_error(path, None, e))?
                .with_limits(limits);
            let kind = page_kind(path, 0, &mut decoder)?;
            let filter = page_filter(path, &mut decoder, pick)?;
            Ok((decoder, kind, filter))
        })?;
        let container = kind.container_bits();
        let (camera, check_max) = match (bit_depth, container) {
            (None, bits) => (CameraInfo { bit_depth: bits }, None),
            (Some(b), None) => {
                return Err(Error::InvalidParameter {
                    name: "bit_depth",
                    value: b.to_string(),
                    why: format!(
                        "{} holds 32-bit float pixels, which have no bit depth; leave the bit depth unset",
                        path.display()
                    ),
                });
            }
            (Some(b), Some(c)) if b == 0 || b > c => {
                return Err(Error::InvalidParameter {
                    name: "bit_depth",
                    value: b.to_string(),
                    why: format!(
                        "{} stores {c}-bit pixels; the stated depth must be 1..={c}",
                        path.display()
                    ),
                });
            }
            (Some(b), Some(c)) => (
                CameraInfo { bit_depth: Some(b) },
                (b < c).then(|| (1u32 << b) - 1),
            ),
        };
        Ok(Self {
            path: path.to_path_buf(),
            decoder,
            page: 0,
            camera,
            check_max,
            guard: FrameGuard::default(),
            done: false,
            scan,
            facts,
            filter,
        })
    }

    /// Move past the current page without decoding it (a page another channel or slice).
    fn skip_page(&mut self) -> Result<()> {
        let (path, page) = (self.path.as_path(), self.page);
        if page > 0 {
            self.facts = self.scan.check(path, page, self.facts.next)?;
            let decoder = &mut self.decoder;
            no_panic(path, page, || {
                decoder
                    .next_image()
                    .map_err(|e| tiff_error(path, Some(page), e))
            })?;
        }
        Ok(())
    }

    /// Camera facts: the stated bit depth, else the stored one (8 or 16), none for float.
    pub fn camera(&self) -> CameraInfo {
        self.camera
    }

    /// Number of frames this reader delivers (the pages of the picked channel and slice),
    /// counted by walking the chain of page directories with the same checks as reading,
    /// without decoding a page. Lets a writer state the stack length before the first map.
    pub fn frame_count(&self) -> Result<usize> {
        let path = self.path.as_path();
        let (mut scan, mut offset) = IfdScan::open(path)?;
        let (mut page, mut kept) = (0usize, 0usize);
        loop {
            let facts = scan.check(path, page, offset)?;
            if self.filter.as_ref().is_none_or(|f| f.keeps(page)) {
                kept += 1;
            }
            if facts.next == 0 {
                return Ok(kept);
            }
            (offset, page) = (facts.next, page + 1);
        }
    }

    fn read_page(&mut self) -> Result<Frame> {
        let (path, page) = (self.path.as_path(), self.page);
        if page > 0 {
            self.facts = self.scan.check(path, page, self.facts.next)?;
        }
        let (file_len, compressed) = (self.scan.len, self.facts.compression != 1);
        let decoder = &mut self.decoder;
        let frame = no_panic(path, page, || {
            if page > 0 {
                decoder
                    .next_image()
                    .map_err(|e| tiff_error(path, Some(page), e))?;
            }
            let kind = page_kind(path, page, decoder)?;
            decode_page(path, page, kind, decoder, (file_len, compressed))
        })?;
        self.guard
            .check(&frame, || format!("page {page} of {}", path.display()))?;
        if let Some(max) = self.check_max
            && let Some(found) = frame.max_value()
            && found > f64::from(max)
        {
            let bits = self.camera.bit_depth.unwrap_or(0);
            return Err(Error::Format {
                path: path.to_path_buf(),
                why: format!(
                    "page {page} holds the value {found}, above the {max} maximum of the stated \
                     {bits}-bit depth; state the camera's real bit depth or leave it unset"
                ),
            });
        }
        Ok(frame)
    }
}

impl Iterator for TiffFrameReader {
    type Item = Result<Frame>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if self.done || (self.page > 0 && self.facts.next == 0) {
                return None;
            }
            if self.filter.as_ref().is_some_and(|f| !f.keeps(self.page)) {
                if let Err(e) = self.skip_page() {
                    self.done = true;
                    return Some(Err(e));
                }
                self.page += 1;
                continue;
            }
            let frame = self.read_page();
            self.page += 1;
            self.done = frame.is_err();
            return Some(frame);
        }
    }
}

/// Read every page of a TIFF into one stack; see [`TiffFrameReader::open`] for `bit_depth`.
pub fn read_tiff(path: impl AsRef<Path>, bit_depth: Option<u32>) -> Result<(RawStack, CameraInfo)> {
    let reader = TiffFrameReader::open(path, bit_depth)?;
    let camera = reader.camera();
    Ok((collect_stack(reader)?, camera))
}

/// Map a `tiff` crate error to ours, naming the page.
fn tiff_error(path: &Path, page: Option<usize>, e: TiffError) -> Error {
    let at = page.map_or_else(String::new, |p| format!("page {p}: "));
    let why = match e {
        TiffError::IoError(io) if io.kind() == std::io::ErrorKind::UnexpectedEof => {
            format!("{at}the file ends before the data it describes (truncated or corrupt TIFF)")
        }
        TiffError::IoError(source) => {
            return Error::Io {
                path: path.to_path_buf(),
                source,
            };
        }
        TiffError::FormatError(tiff::TiffFormatError::TiffSignatureNotFound) => {
            format!("{at}not a TIFF file (no II/MM signature at the start)")
        }
        TiffError::LimitsExceeded => {
            format!(
                "{at}the page or one of its tags exceeds the decoder's limits ({} GiB per page, \
                 the file's size per compressed strip); the file is corrupt, or split the stack",
                MAX_PAGE_BYTES >> 30
            )
        }
        other => {
            let text = other.to_string();
            if text.contains("Unknown(34925)") {
                format!(
                    "{at}LZMA compression (34925) has no decoder here; save the stack \
                     uncompressed or with ZSTD, Deflate or LZW (tifffile: compression='zstd')"
                )
            } else {
                format!("{at}cannot decode TIFF: {text}")
            }
        }
    };
    Error::Format {
        path: path.to_path_buf(),
        why,
    }
}

/// Classify the current page, with an actionable error for layouts we do not read.
fn page_kind(path: &Path, page: usize, dec: &mut Decoder<BufReader<File>>) -> Result<PageKind> {
    let fail = |why: String| Error::Format {
        path: path.to_path_buf(),
        why: format!("page {page}: {why}"),
    };
    let terr = |e| tiff_error(path, Some(page), e);
    let color = dec.colortype().map_err(terr)?;
    let ColorType::Gray(bits) = color else {
        let what = match color {
            ColorType::RGB(_) | ColorType::RGBA(_) => "a colour (RGB) image",
            ColorType::GrayA(_) => "greyscale with an alpha channel",
            ColorType::Palette(_) => "a palette (indexed colour) image",
            _ => "a multi-channel image",
        };
        // tifffile.imwrite(path, stack) takes a stack of 3 or 4 frames for RGB(A) planes.
        let planar = dec
            .find_tag_unsigned::<u16>(tiff::tags::Tag::PlanarConfiguration)
            .ok()
            .flatten()
            == Some(2);
        let hint = if planar && matches!(color, ColorType::RGB(_) | ColorType::RGBA(_)) {
            "; if these planes are frames of one greyscale recording (tifffile writes a stack of \
             3 or 4 frames as RGB unless told otherwise), save it again with \
             tifffile.imwrite(path, stack, photometric='minisblack')"
        } else {
            ""
        };
        return Err(fail(format!(
            "{what} ({color:?}); only single-channel greyscale TIFF is supported, so save one channel or convert to greyscale{hint}"
        )));
    };
    let format = dec.image_buffer_layout().map_err(terr)?.sample_format;
    let convert = "convert it to 8-bit, 16-bit or 32-bit float greyscale";
    match (format, bits) {
        (SampleFormat::Uint, 8) => Ok(PageKind::U8),
        (SampleFormat::Uint, 16) => Ok(PageKind::U16),
        (SampleFormat::IEEEFP, 32) => Ok(PageKind::F32),
        (SampleFormat::Uint, b @ (1..=7 | 9..=15)) => Err(fail(format!(
            "bit-packed {b}-bit samples cannot be decoded by the TIFF reader; save the frames as \
             16-bit TIFF ({b}-bit values in 16-bit containers) and state the bit depth as {b}"
        ))),
        (SampleFormat::Int, b) => Err(fail(format!(
            "signed {b}-bit integer samples are not supported; {convert}"
        ))),
        (SampleFormat::IEEEFP, b) => Err(fail(format!(
            "{b}-bit float samples are not supported; {convert}"
        ))),
        (SampleFormat::Uint, b) => Err(fail(format!(
            "{b}-bit unsigned samples are not supported; {convert}"
        ))),
        (other, b) => Err(fail(format!(
            "sample format {other:?} with {b} bits is not supported; {convert}"
        ))),
    }
}

fn decode_page(
    path: &Path,
    page: usize,
    kind: PageKind,
    dec: &mut Decoder<BufReader<File>>,
    (file_len, compressed): (u64, bool),
) -> Result<Frame> {
    let terr = |e| tiff_error(path, Some(page), e);
    let (w, h) = dec.dimensions().map_err(terr)?;
    let (w, h) = (w as usize, h as usize);
    if w == 0 || h == 0 {
        return Err(Error::Format {
            path: path.to_path_buf(),
            why: format!("page {page} is {w}x{h}: it holds no pixel"),
        });
    }
    // The page's size, with checked arithmetic, against the cap and the bytes the file can
    // hold, before anything is allocated.
    let bytes_per_pixel = match kind {
        PageKind::U8 => 1,
        PageKind::U16 => 2,
        PageKind::F32 => 4,
    };
    let fail = |why: String| Error::Format {
        path: path.to_path_buf(),
        why: format!("page {page} is {w}x{h}: {why}"),
    };
    let need = w
        .checked_mul(h)
        .and_then(|n| n.checked_mul(bytes_per_pixel))
        .filter(|&n| n <= MAX_PAGE_BYTES)
        .ok_or_else(|| {
            fail(format!(
                "larger than the {} GiB a page may have (width or height corrupt, or split the stack)",
                MAX_PAGE_BYTES >> 30
            ))
        })?;
    let bound = if compressed {
        file_len.saturating_mul(MAX_COMPRESSION_RATIO)
    } else {
        file_len
    };
    if need as u64 > bound {
        let how = if compressed {
            format!(" at the {MAX_COMPRESSION_RATIO}:1 most a compressed page can expand")
        } else {
            " uncompressed".into()
        };
        return Err(fail(format!(
            "{need} bytes of pixels, more than a {file_len}-byte file can hold{how} \
             (truncated, or a corrupt width or height)"
        )));
    }
    let layout = dec.image_buffer_layout().map_err(terr)?;
    if layout.len != need {
        return Err(fail(format!(
            "the decoder lays the page out in {} bytes, expected {need}",
            layout.len
        )));
    }
    let shape = (h, w);
    let frame = match kind {
        PageKind::U8 => Frame::U8(to_array(shape, read_pixels(dec, w * h).map_err(terr)?)),
        PageKind::U16 => Frame::U16(to_array(shape, read_pixels(dec, w * h).map_err(terr)?)),
        PageKind::F32 => Frame::F32(to_array(shape, read_pixels(dec, w * h).map_err(terr)?)),
    };
    Ok(frame)
}

/// The page's `n` pixels, decoded straight into the frame's own buffer (the decoder writes
/// native-endian values): no second buffer and copy per page.
fn read_pixels<T: bytemuck::Pod + Default>(
    dec: &mut Decoder<BufReader<File>>,
    n: usize,
) -> tiff::TiffResult<Vec<T>> {
    let mut v = vec![T::default(); n];
    dec.read_image_bytes(bytemuck::cast_slice_mut(&mut v))?;
    Ok(v)
}

fn to_array<T>(shape: (usize, usize), v: Vec<T>) -> Array2<T> {
    Array2::from_shape_vec(shape, v).expect("buffer length checked against the page size")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::test_util::{TempDir, TinyTiff};
    use ndarray::Array3;
    use tiff::encoder::{TiffEncoder, colortype};

    fn write_pages_u16(path: &Path, pages: &[(u32, u32)]) {
        let mut enc = TiffEncoder::new(std::fs::File::create(path).unwrap()).unwrap();
        for (i, &(w, h)) in pages.iter().enumerate() {
            let data: Vec<u16> = (0..w * h).map(|k| (k + 100 * i as u32) as u16).collect();
            enc.write_image::<colortype::Gray16>(w, h, &data).unwrap();
        }
    }

    #[test]
    fn multi_page_u16_stack_is_read_in_order() {
        let dir = TempDir::new("tiff_multi");
        let path = dir.path("stack.tif");
        write_pages_u16(&path, &[(5, 3), (5, 3), (5, 3)]);
        let (stack, cam) = read_tiff(&path, None).unwrap();
        assert_eq!(cam.bit_depth, Some(16));
        let RawStack::U16(a) = stack else {
            panic!("u16 expected")
        };
        assert_eq!(a.dim(), (3, 3, 5));
        assert_eq!(a[[2, 1, 4]], 200 + 9);
    }

    #[test]
    fn eight_bit_and_float_pages_are_read() {
        let dir = TempDir::new("tiff_types");
        let p8 = dir.path("a.tif");
        let data: Vec<u8> = (0..12).collect();
        TiffEncoder::new(std::fs::File::create(&p8).unwrap())
            .unwrap()
            .write_image::<colortype::Gray8>(4, 3, &data)
            .unwrap();
        let (s, cam) = read_tiff(&p8, None).unwrap();
        assert_eq!(
            s,
            RawStack::U8(Array3::from_shape_vec((1, 3, 4), data).unwrap())
        );
        assert_eq!(cam.bit_depth, Some(8));

        let pf = dir.path("f.tif");
        let data = vec![0.5f32, -1.0, f32::NAN, 3.25];
        TiffEncoder::new(std::fs::File::create(&pf).unwrap())
            .unwrap()
            .write_image::<colortype::Gray32Float>(2, 2, &data)
            .unwrap();
        let (s, cam) = read_tiff(&pf, None).unwrap();
        assert_eq!(cam.bit_depth, None);
        let RawStack::F32(a) = s else { panic!() };
        assert_eq!(a[[0, 0, 1]], -1.0);
        assert!(a[[0, 1, 0]].is_nan());
        let err = read_tiff(&pf, Some(12)).unwrap_err();
        assert!(err.to_string().contains("float"), "{err}");
    }

    #[test]
    fn page_size_mismatch_names_the_page() {
        let dir = TempDir::new("tiff_mismatch");
        let path = dir.path("bad.tif");
        write_pages_u16(&path, &[(8, 8), (8, 8), (8, 7)]);
        let err = read_tiff(&path, None).unwrap_err();
        let msg = err.to_string();
        assert!(
            matches!(
                err,
                Error::FrameSizeMismatch {
                    expected_w: 8,
                    expected_h: 8,
                    got_w: 8,
                    got_h: 7,
                    ..
                }
            ),
            "{msg}"
        );
        assert!(
            msg.contains("page 2 of") && msg.contains("bad.tif"),
            "{msg}"
        );
    }

    #[test]
    fn frame_reader_yields_good_pages_before_the_bad_one() {
        let dir = TempDir::new("tiff_stream");
        let path = dir.path("s.tif");
        write_pages_u16(&path, &[(4, 4), (4, 4), (5, 4), (4, 4)]);
        let items: Vec<_> = TiffFrameReader::open(&path, None).unwrap().collect();
        assert_eq!(items.len(), 3, "the reader stops after the first error");
        assert!(items[0].is_ok() && items[1].is_ok());
        let Ok(Frame::U16(p1)) = &items[1] else {
            panic!("u16 page")
        };
        assert_eq!(p1[[0, 0]], 100);
        assert!(matches!(items[2], Err(Error::FrameSizeMismatch { .. })));
    }

    #[test]
    fn pixel_type_change_between_pages_names_the_page() {
        let dir = TempDir::new("tiff_types_mixed");
        let path = dir.path("mixed.tif");
        let mut enc = TiffEncoder::new(std::fs::File::create(&path).unwrap()).unwrap();
        enc.write_image::<colortype::Gray16>(2, 2, &[1, 2, 3, 4])
            .unwrap();
        enc.write_image::<colortype::Gray8>(2, 2, &[1, 2, 3, 4])
            .unwrap();
        drop(enc);
        let err = read_tiff(&path, None).unwrap_err();
        assert!(
            matches!(
                err,
                Error::PixelTypeMismatch {
                    expected: "u16",
                    got: "u8",
                    ..
                }
            ),
            "{err}"
        );
        assert!(err.to_string().contains("page 1"));
    }

    #[test]
    fn rgb_is_refused_with_a_clear_message() {
        let dir = TempDir::new("tiff_rgb");
        let path = dir.path("rgb.tif");
        TiffEncoder::new(std::fs::File::create(&path).unwrap())
            .unwrap()
            .write_image::<colortype::RGB8>(2, 1, &[1, 2, 3, 4, 5, 6])
            .unwrap();
        let err = read_tiff(&path, None).unwrap_err().to_string();
        assert!(
            err.contains("colour (RGB)") && err.contains("greyscale"),
            "{err}"
        );
    }

    #[test]
    fn stated_bit_depth_is_checked_against_the_data() {
        let dir = TempDir::new("tiff_bits");
        let path = dir.path("twelve.tif");
        let data: Vec<u16> = vec![0, 4095, 17, 4000];
        TiffEncoder::new(std::fs::File::create(&path).unwrap())
            .unwrap()
            .write_image::<colortype::Gray16>(2, 2, &data)
            .unwrap();
        let (_, cam) = read_tiff(&path, Some(12)).unwrap();
        assert_eq!(cam.bit_depth, Some(12));
        assert_eq!(cam.saturation(), Some(4095.0));
        let err = read_tiff(&path, Some(10)).unwrap_err().to_string();
        assert!(
            err.contains("page 0") && err.contains("4095") && err.contains("1023"),
            "{err}"
        );
        assert!(read_tiff(&path, Some(17)).is_err());
        assert!(read_tiff(&path, Some(0)).is_err());
    }

    #[test]
    fn packed_twelve_bit_tiff_is_refused_with_advice() {
        let dir = TempDir::new("tiff_packed");
        let path = dir.path("p12.tif");
        // 3 pixels per row of 12 bits: 36 bits, padded to 5 bytes per row.
        std::fs::write(&path, TinyTiff::gray(3, 2, 12, vec![0; 10]).bytes()).unwrap();
        let err = read_tiff(&path, None).unwrap_err().to_string();
        assert!(err.contains("p12.tif") && err.contains("page 0"), "{err}");
        assert!(
            err.contains("bit-packed 12-bit") && err.contains("16-bit TIFF"),
            "{err}"
        );
    }

    #[test]
    fn signed_samples_are_refused() {
        let dir = TempDir::new("tiff_signed");
        let path = dir.path("s16.tif");
        let mut t = TinyTiff::gray(2, 1, 16, vec![0; 4]);
        t.sample_format = 2;
        std::fs::write(&path, t.bytes()).unwrap();
        let err = read_tiff(&path, None).unwrap_err().to_string();
        assert!(err.contains("signed 16-bit"), "{err}");
    }

    #[test]
    fn empty_truncated_and_foreign_files_give_clear_errors() {
        let dir = TempDir::new("tiff_bad");
        let empty = dir.path("empty.tif");
        std::fs::write(&empty, []).unwrap();
        assert!(matches!(
            read_tiff(&empty, None).unwrap_err(),
            Error::EmptyFile { .. }
        ));

        let png = dir.path("not.tif");
        std::fs::write(&png, b"\x89PNG\r\n\x1a\n0000000000").unwrap();
        let err = read_tiff(&png, None).unwrap_err().to_string();
        assert!(err.contains("not a TIFF"), "{err}");

        let trunc = dir.path("trunc.tif");
        let bytes = TinyTiff::gray(16, 16, 8, vec![7; 256]).bytes();
        std::fs::write(&trunc, &bytes[..bytes.len() - 100]).unwrap();
        let err = read_tiff(&trunc, None).unwrap_err().to_string();
        assert!(
            err.contains("trunc.tif") && err.contains("truncated"),
            "{err}"
        );
    }

    #[test]
    #[ignore = "needs ../shared/data/speckle/spatial.tif"]
    fn real_spatial_tif_reads_as_one_8bit_frame() {
        let path =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/data/speckle/spatial.tif");
        assert!(path.exists(), "{} is absent", path.display());
        let (s, cam) = read_tiff(&path, None).unwrap();
        assert_eq!(s.dim(), (1, 1024, 1280));
        assert_eq!(cam.bit_depth, Some(8));
        let RawStack::U8(a) = s else { panic!() };
        let (lo, hi) = a
            .iter()
            .fold((255u8, 0u8), |(l, h), &v| (l.min(v), h.max(v)));
        assert_eq!((lo, hi), (82, 248));
    }
}
