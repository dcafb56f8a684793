//! PicoQuant `.ptu` files: the tagged header and T3 time-tagged records, histogrammed into
//! decay images while the records stream through a buffered reader (the file is never held
//! in memory: only the histograms and one scan line of photons are).
//!
//! Header: the magic `PQTTTR`, an 8-byte version, then 48-byte tags (32-byte name, i32 index,
//! u32 type, 8-byte value) of every PicoQuant type (empty, bool, int, bit set, colour, float,
//! date, float array, ANSI and wide strings, binary blobs; the last five store their data after
//! the tag) up to `Header_End`; the records follow.
//!
//! Records (32 bits), T3 only (T2 records carry no decay time):
//! - PicoHarp 300 (`0x00010303`): sync count 16 bits, decay time 12, channel 4 (1..4; 15 is
//!   special: decay-time bits 0 = sync overflow of 65536, else marker bits).
//! - HydraHarp V1 (`0x00010304`), HydraHarp V2, TimeHarp 260 N/P, MultiHarp and PicoHarp 330
//!   (`0x01010304`, `0x00010305`, `0x00010306`, `0x00010307`): sync 10 bits, decay time 15,
//!   channel 6, special 1 (channel 63 = overflow of 1024 syncs, V2 and later: times the sync
//!   field; channels 1..15 = marker bits).
//!
//! Images: the `ImgHdr_LineStart`, `ImgHdr_LineStop` and `ImgHdr_Frame` tags name the marker
//! bits. Photons between a line's start and stop are spread over `ImgHdr_PixX` pixels in
//! proportion to their sync count (bidirectional scans reverse every other line); lines past
//! `ImgHdr_PixY` and photons outside lines are dropped and counted in the metadata. Files
//! without image headers (point measurements, e.g. an IRF) give a 1 x 1 image.
//!
//! No maintained Rust crate reads PTU T3 images (`tttr-toolbox` reads T2 and HydraHarp T3
//! only, without image markers, and pulls in Python bindings), hence this parser.

use crate::error::Result;
use crate::io::recording::{
    Format, Image, ReadOptions, Recording, check_bin_ns, check_period_ns, format_error, in_file,
    io_error, narrow_counts,
};
use ndarray::Array3;
use std::fs::File;
use std::io::{BufReader, Read};
use std::path::Path;

const MAGIC: &[u8; 8] = b"PQTTTR\0\0";
const TAG_LEN: u64 = 48;
/// Records decoded per read from the buffered file.
const CHUNK_RECORDS: usize = 1 << 16;
/// Most histogram cells (pixels x bins, summed over every (frame, channel) image of one
/// read) the PTU reader fills: 2^28 counts, 1 GiB as u32. A PTU file's images are not
/// bounded by its length (photons are sparse), so the header's image size is checked against
/// this cap before anything is reserved; larger recordings need `--binning`, `--bins`,
/// `--frames`, `--channel` or `--sum-frames`. (A 512 x 512 scan of 256 bins is 2^26 cells.)
pub const MAX_PTU_HISTOGRAM_CELLS: usize = 1 << 28;

/// A tag's value, by PicoQuant tag type.
#[derive(Debug, Clone, PartialEq)]
pub enum TagValue {
    /// `tyEmpty8`: no value (e.g. section markers).
    Empty,
    /// `tyBool8`.
    Bool(bool),
    /// `tyInt8`.
    Int(i64),
    /// `tyBitSet64`.
    BitSet(u64),
    /// `tyColor8`.
    Color(u64),
    /// `tyFloat8`.
    Float(f64),
    /// `tyTDateTime`: days since 1899-12-30.
    DateTime(f64),
    /// `tyFloat8Array`.
    FloatArray(Vec<f64>),
    /// `tyAnsiString` or `tyWideString`.
    Text(String),
    /// `tyBinaryBlob`: its length in bytes (the content is skipped).
    Blob(u64),
}

impl std::fmt::Display for TagValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TagValue::Empty => f.write_str("<empty>"),
            TagValue::Bool(b) => write!(f, "{b}"),
            TagValue::Int(v) => write!(f, "{v}"),
            TagValue::BitSet(v) | TagValue::Color(v) => write!(f, "{v:#x}"),
            TagValue::Float(v) | TagValue::DateTime(v) => write!(f, "{v}"),
            TagValue::FloatArray(v) => write!(f, "{v:?}"),
            TagValue::Text(s) => f.write_str(s),
            TagValue::Blob(n) => write!(f, "<{n} bytes>"),
        }
    }
}

/// One header tag.
#[derive(Debug, Clone, PartialEq)]
pub struct PtuTag {
    /// Tag name, e.g. `MeasDesc_Resolution`.
    pub name: String,
    /// Index of an array tag, -1 for a scalar.
    pub index: i32,
    /// The value.
    pub value: TagValue,
    /// Byte offset of the tag in the file.
    pub offset: u64,
}

/// The header of a `.ptu` file.
#[derive(Debug, Clone, PartialEq)]
pub struct PtuHeader {
    /// Format version string, e.g. `1.0.00`.
    pub version: String,
    /// Every tag in file order.
    pub tags: Vec<PtuTag>,
    /// Byte offset of the first record.
    pub records_offset: u64,
}

impl PtuHeader {
    /// The value of tag `name` (the scalar, or element 0 of an array).
    pub fn get(&self, name: &str) -> Option<&TagValue> {
        self.tags
            .iter()
            .find(|t| t.name == name && t.index <= 0)
            .map(|t| &t.value)
    }

    /// Tag `name` as an integer (int, bool or bit set).
    pub fn int(&self, name: &str) -> Option<i64> {
        match self.get(name)? {
            TagValue::Int(v) => Some(*v),
            TagValue::Bool(b) => Some(i64::from(*b)),
            TagValue::BitSet(v) => Some(*v as i64),
            _ => None,
        }
    }

    /// Tag `name` as a float (float or int).
    pub fn float(&self, name: &str) -> Option<f64> {
        match self.get(name)? {
            TagValue::Float(v) => Some(*v),
            TagValue::Int(v) => Some(*v as f64),
            _ => None,
        }
    }

    /// Tag `name` as text.
    pub fn text(&self, name: &str) -> Option<&str> {
        match self.get(name)? {
            TagValue::Text(s) => Some(s),
            _ => None,
        }
    }
}

/// Counts bytes read, so that errors can name the byte offset.
struct Counted<R> {
    inner: R,
    pos: u64,
}

impl<R: Read> Read for Counted<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.pos += n as u64;
        Ok(n)
    }
}

fn open(path: &Path) -> Result<(Counted<BufReader<File>>, u64)> {
    let file = File::open(path).map_err(|e| io_error(path, e))?;
    let len = file.metadata().map_err(|e| io_error(path, e))?.len();
    Ok((
        Counted {
            inner: BufReader::with_capacity(1 << 20, file),
            pos: 0,
        },
        len,
    ))
}

/// Read the header (the tags) of a `.ptu` file.
pub fn read_ptu_header(path: &Path) -> Result<PtuHeader> {
    let (mut r, len) = open(path)?;
    read_header(path, &mut r, len)
}

fn read_header(path: &Path, r: &mut Counted<BufReader<File>>, len: u64) -> Result<PtuHeader> {
    let err = |what: String| format_error(path, what);
    let mut head = [0u8; 16];
    r.read_exact(&mut head).map_err(|_| {
        err(format!(
            "file header: needs 16 bytes, the file has {len} (truncated?)"
        ))
    })?;
    if &head[..8] != MAGIC {
        return Err(err(format!(
            "not a PicoQuant .ptu file: magic {:?} at byte 0, expected \"PQTTTR\"",
            String::from_utf8_lossy(&head[..8]).trim_end_matches('\0')
        )));
    }
    let version = String::from_utf8_lossy(&head[8..])
        .trim_end_matches('\0')
        .to_string();
    let mut tags = Vec::new();
    loop {
        let offset = r.pos;
        let mut t = [0u8; TAG_LEN as usize];
        r.read_exact(&mut t).map_err(|_| {
            err(format!(
                "tag {} at byte {offset}: the file ends before Header_End (truncated header?)",
                tags.len()
            ))
        })?;
        let name: String = t[..32]
            .iter()
            .take_while(|&&c| c != 0)
            .map(|&c| char::from(c))
            .collect();
        let index = i32::from_le_bytes(t[32..36].try_into().expect("4 bytes"));
        let kind = u32::from_le_bytes(t[36..40].try_into().expect("4 bytes"));
        let raw: [u8; 8] = t[40..48].try_into().expect("8 bytes");
        let int = i64::from_le_bytes(raw);
        let mut payload = |what: &str| -> Result<Vec<u8>> {
            let n = u64::try_from(int)
                .ok()
                .filter(|&n| r.pos.checked_add(n).is_some_and(|end| end <= len))
                .ok_or_else(|| {
                    err(format!(
                        "tag {name:?} at byte {offset}: {what} of {int} bytes runs past the end of the file ({len} bytes)"
                    ))
                })?;
            let mut buf = vec![0u8; n as usize];
            r.read_exact(&mut buf)
                .map_err(|e| err(format!("tag {name:?} at byte {offset}: {e}")))?;
            Ok(buf)
        };
        let value = match kind {
            0xFFFF_0008 => TagValue::Empty,
            0x0000_0008 => TagValue::Bool(int != 0),
            0x1000_0008 => TagValue::Int(int),
            0x1100_0008 => TagValue::BitSet(int as u64),
            0x1200_0008 => TagValue::Color(int as u64),
            0x2000_0008 => TagValue::Float(f64::from_le_bytes(raw)),
            0x2100_0008 => TagValue::DateTime(f64::from_le_bytes(raw)),
            0x2001_FFFF => TagValue::FloatArray(
                payload("float array")?
                    .chunks_exact(8)
                    .map(|b| f64::from_le_bytes(b.try_into().expect("8 bytes")))
                    .collect(),
            ),
            0x4001_FFFF => {
                let b = payload("string")?;
                TagValue::Text(
                    b.iter()
                        .take_while(|&&c| c != 0)
                        .map(|&c| char::from(c))
                        .collect(),
                )
            }
            0x4002_FFFF => {
                let b = payload("wide string")?;
                let units: Vec<u16> = b
                    .chunks_exact(2)
                    .map(|c| u16::from_le_bytes([c[0], c[1]]))
                    .take_while(|&u| u != 0)
                    .collect();
                TagValue::Text(String::from_utf16_lossy(&units))
            }
            0xFFFF_FFFF => TagValue::Blob(payload("binary blob")?.len() as u64),
            other => {
                return Err(err(format!(
                    "tag {name:?} at byte {offset}: unknown tag type {other:#010x} (corrupt header?)"
                )));
            }
        };
        if name == "Header_End" {
            break;
        }
        tags.push(PtuTag {
            name,
            index,
            value,
            offset,
        });
    }
    Ok(PtuHeader {
        version,
        tags,
        records_offset: r.pos,
    })
}

/// The T3 record layouts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RecordKind {
    PicoHarp,
    HydraHarpV1,
    /// HydraHarp V2, TimeHarp 260 N/P, MultiHarp, PicoHarp 330.
    HydraHarpV2,
}

impl RecordKind {
    fn of(code: i64) -> std::result::Result<(Self, &'static str), String> {
        Ok(match code {
            0x0001_0303 => (Self::PicoHarp, "PicoHarp 300 T3"),
            0x0001_0304 => (Self::HydraHarpV1, "HydraHarp V1 T3"),
            0x0101_0304 => (Self::HydraHarpV2, "HydraHarp V2 T3"),
            0x0001_0305 => (Self::HydraHarpV2, "TimeHarp 260N T3"),
            0x0001_0306 => (Self::HydraHarpV2, "TimeHarp 260P T3"),
            0x0001_0307 => (Self::HydraHarpV2, "MultiHarp / PicoHarp 330 T3"),
            0x0001_0203 | 0x0001_0204 | 0x0101_0204 | 0x0001_0205 | 0x0001_0206 | 0x0001_0207 => {
                return Err(format!(
                    "record type {code:#010x} is T2 (no decay times): lifetime imaging needs T3 records"
                ));
            }
            other => return Err(format!("unknown record type {other:#010x}")),
        })
    }

    /// Largest decay-time channel + 1.
    fn dtime_channels(self) -> usize {
        match self {
            Self::PicoHarp => 1 << 12,
            _ => 1 << 15,
        }
    }
}

/// One decoded record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Event {
    Photon { sync: u64, dtime: u32, channel: u32 },
    Marker { sync: u64, bits: u32 },
    Overflow,
}

#[derive(Debug)]
struct Decoder {
    kind: RecordKind,
    overflow: u64,
}

impl Decoder {
    fn decode(&mut self, rec: u32) -> std::result::Result<Event, String> {
        match self.kind {
            RecordKind::PicoHarp => {
                let nsync = u64::from(rec & 0xFFFF);
                let chan = rec >> 28;
                let dtime = (rec >> 16) & 0xFFF;
                match chan {
                    15 => {
                        let bits = dtime & 0xF;
                        if bits == 0 {
                            self.overflow += 1 << 16;
                            Ok(Event::Overflow)
                        } else {
                            Ok(Event::Marker {
                                sync: self.overflow + nsync,
                                bits,
                            })
                        }
                    }
                    1..=4 => Ok(Event::Photon {
                        sync: self.overflow + nsync,
                        dtime,
                        channel: chan - 1,
                    }),
                    c => Err(format!(
                        "channel field {c} is neither a detector (1-4) nor special (15)"
                    )),
                }
            }
            RecordKind::HydraHarpV1 | RecordKind::HydraHarpV2 => {
                let nsync = u64::from(rec & 0x3FF);
                let dtime = (rec >> 10) & 0x7FFF;
                let chan = (rec >> 25) & 0x3F;
                if rec >> 31 == 0 {
                    return Ok(Event::Photon {
                        sync: self.overflow + nsync,
                        dtime,
                        channel: chan,
                    });
                }
                match chan {
                    63 => {
                        let n = if self.kind == RecordKind::HydraHarpV1 || nsync == 0 {
                            1
                        } else {
                            nsync
                        };
                        self.overflow += 1024 * n;
                        Ok(Event::Overflow)
                    }
                    1..=15 => Ok(Event::Marker {
                        sync: self.overflow + nsync,
                        bits: chan,
                    }),
                    c => Err(format!(
                        "special record with channel field {c}: neither a marker (1-15) nor an overflow (63)"
                    )),
                }
            }
        }
    }
}

/// Scan geometry from the image header tags; `None` for point measurements.
#[derive(Debug, Clone, Copy)]
struct Scan {
    pix_x: usize,
    pix_y: usize,
    start: u32,
    stop: u32,
    frame: u32,
    bidirectional: bool,
}

fn scan_of(h: &PtuHeader, path: &Path) -> Result<Option<Scan>> {
    let is_image = h.int("Measurement_SubMode") == Some(3) || h.get("ImgHdr_PixX").is_some();
    if !is_image {
        return Ok(None);
    }
    let err = |what: String| format_error(path, what);
    let dim = |name: &str| -> Result<usize> {
        h.int(name)
            .and_then(|v| usize::try_from(v).ok())
            .filter(|&v| (1..=65536).contains(&v))
            .ok_or_else(|| {
                err(format!(
                    "image header: tag {name} is missing or not 1..65536"
                ))
            })
    };
    let bit = |name: &str, required: bool| -> Result<u32> {
        match h.int(name) {
            Some(v @ 1..=15) => Ok(1 << (v - 1)),
            None if !required => Ok(0),
            other => Err(err(format!(
                "image header: tag {name} = {other:?}, expected a marker bit 1..15"
            ))),
        }
    };
    if h.int("ImgHdr_SinCorrection").unwrap_or(0) != 0 {
        return Err(err(
            "image header: sinusoidal scan correction (ImgHdr_SinCorrection) is not supported"
                .into(),
        ));
    }
    Ok(Some(Scan {
        pix_x: dim("ImgHdr_PixX")?,
        pix_y: dim("ImgHdr_PixY")?,
        start: bit("ImgHdr_LineStart", true)?,
        stop: bit("ImgHdr_LineStop", true)?,
        frame: bit("ImgHdr_Frame", false)?,
        bidirectional: h.int("ImgHdr_BiDirect").unwrap_or(0) != 0,
    }))
}

/// Histograms of the (frame, channel) images, grown in bins as later photons appear.
#[derive(Debug)]
struct Histograms {
    pixels: usize,
    cap: usize,
    fixed: bool,
    limit: usize,
    max_bin: usize,
    slots: Vec<((usize, usize), Vec<u32>)>,
}

impl Histograms {
    /// Cells of `slots` images of `cap` bins, if within [`MAX_PTU_HISTOGRAM_CELLS`].
    fn cells(&self, slots: usize, cap: usize) -> std::result::Result<usize, String> {
        slots
            .checked_mul(self.pixels)
            .and_then(|c| c.checked_mul(cap))
            .filter(|&c| c <= MAX_PTU_HISTOGRAM_CELLS)
            .ok_or_else(|| {
                format!(
                    "{slots} (frame, channel) images of {} pixels x {cap} bins exceed the reader's cap of {MAX_PTU_HISTOGRAM_CELLS} histogram cells (select or sum frames: --frames, --sum-frames, --channel; or fewer bins: --binning, --bins)",
                    self.pixels
                )
            })
    }

    fn slot(&mut self, key: (usize, usize)) -> std::result::Result<usize, String> {
        if let Some(i) = self.slots.iter().position(|(k, _)| *k == key) {
            return Ok(i);
        }
        self.cells(self.slots.len() + 1, self.cap)?;
        self.slots.push((key, vec![0; self.pixels * self.cap]));
        Ok(self.slots.len() - 1)
    }

    /// Add a photon; false if it lies past the last bin.
    fn add(&mut self, slot: usize, pixel: usize, bin: usize) -> std::result::Result<bool, String> {
        if bin >= self.cap {
            if self.fixed || bin >= self.limit {
                return Ok(false);
            }
            self.grow((bin + 1).max(2 * self.cap).min(self.limit))?;
        }
        self.max_bin = self.max_bin.max(bin);
        let h = &mut self.slots[slot].1[pixel * self.cap + bin];
        *h = h.saturating_add(1);
        Ok(true)
    }

    fn grow(&mut self, cap: usize) -> std::result::Result<(), String> {
        self.cells(self.slots.len(), cap)?;
        let old = self.cap;
        for (_, data) in &mut self.slots {
            let mut wider = vec![0u32; self.pixels * cap];
            for (dst, src) in wider.chunks_exact_mut(cap).zip(data.chunks_exact(old)) {
                dst[..old].copy_from_slice(src);
            }
            *data = wider;
        }
        self.cap = cap;
        Ok(())
    }
}

/// Counters reported in the metadata.
#[derive(Debug, Default)]
struct Tally {
    records: u64,
    photons: u64,
    placed: u64,
    outside_lines: u64,
    extra_lines: u64,
    late: u64,
    unselected: u64,
    lines: u64,
    frames: usize,
}

/// State of the scan while records stream by.
#[derive(Debug)]
struct Scanner {
    scan: Option<Scan>,
    frame: usize,
    line: usize,
    in_line: bool,
    line_start: u64,
    /// Photons of the current line: (sync, bin, channel).
    buffer: Vec<(u64, usize, usize)>,
}

/// Histogram a `.ptu` file's T3 records into decay images (see the module docs), one per
/// frame and channel, or one per channel with frames summed (`opts`).
pub fn read_ptu(path: &Path, opts: &ReadOptions) -> Result<Recording> {
    let (mut r, len) = open(path)?;
    let h = read_header(path, &mut r, len)?;
    let err = |what: String| format_error(path, what);
    let code = h
        .int("TTResultFormat_TTTRRecType")
        .ok_or_else(|| err("header lacks TTResultFormat_TTTRRecType".into()))?;
    let (kind, kind_name) = RecordKind::of(code).map_err(|e| err(format!("header: {e}")))?;
    let tag_at = |name: &str| {
        h.tags
            .iter()
            .find(|t| t.name == name)
            .map_or(String::new(), |t| format!(" (tag at byte {})", t.offset))
    };
    let resolution = h
        .float("MeasDesc_Resolution")
        .ok_or_else(|| err("header lacks MeasDesc_Resolution (the TCSPC bin width)".into()))?;
    check_bin_ns(
        path,
        &format!(
            "header: MeasDesc_Resolution = {resolution} s{}",
            tag_at("MeasDesc_Resolution")
        ),
        resolution * 1e9,
    )?;
    let period_ns = if let Some(g) = h.float("MeasDesc_GlobalResolution") {
        check_period_ns(
            path,
            &format!(
                "header: MeasDesc_GlobalResolution = {g} s{}",
                tag_at("MeasDesc_GlobalResolution")
            ),
            g * 1e9,
        )?
    } else if let Some(rate) = h.float("TTResult_SyncRate") {
        check_period_ns(
            path,
            &format!(
                "header: TTResult_SyncRate = {rate} Hz{}",
                tag_at("TTResult_SyncRate")
            ),
            1e9 / rate,
        )?
    } else {
        return Err(err(
            "header lacks MeasDesc_GlobalResolution and TTResult_SyncRate (the laser period)"
                .into(),
        ));
    };
    let scan = scan_of(&h, path)?;
    let records_bytes = len.saturating_sub(h.records_offset);
    let expected = match h.int("TTResult_NumberOfRecords") {
        None | Some(0) => None,
        Some(n) => {
            let n = u64::try_from(n).map_err(|_| {
                err(format!(
                    "header: TTResult_NumberOfRecords = {n}{}: expected a record count >= 0",
                    tag_at("TTResult_NumberOfRecords")
                ))
            })?;
            // More records in the file than the header announces: the rest would be ignored.
            if n.checked_mul(4).is_some_and(|b| b < records_bytes) {
                return Err(err(format!(
                    "header: TTResult_NumberOfRecords = {n}{} ({} bytes from byte {}), but {records_bytes} bytes of records follow the header: the header and the data disagree",
                    tag_at("TTResult_NumberOfRecords"),
                    4 * n,
                    h.records_offset
                )));
            }
            Some(n)
        }
    };
    let binning = opts.binning();
    let limit = kind.dtime_channels().div_ceil(binning);
    let pixels = scan.map_or(Some(1), |s| s.pix_x.checked_mul(s.pix_y));
    let cap = opts
        .bins()
        .unwrap_or_else(|| ((period_ns * 1e-9 / resolution).ceil() as usize).div_ceil(binning))
        .clamp(4, limit.max(4));
    // One image of the header's size must fit the cap before anything is reserved.
    let Some(pixels) = pixels.filter(|p| {
        p.checked_mul(cap)
            .is_some_and(|c| c <= MAX_PTU_HISTOGRAM_CELLS)
    }) else {
        let dims = scan.map_or_else(|| "1 x 1".into(), |s| format!("{} x {}", s.pix_x, s.pix_y));
        return Err(err(format!(
            "image header: ImgHdr_PixX x ImgHdr_PixY = {dims} pixels{} of {cap} bins exceed the reader's cap of {MAX_PTU_HISTOGRAM_CELLS} histogram cells (give --binning or --bins for fewer bins)",
            tag_at("ImgHdr_PixX")
        )));
    };
    let mut hist = Histograms {
        pixels,
        cap,
        fixed: opts.bins().is_some(),
        limit,
        max_bin: 0,
        slots: Vec::new(),
    };
    let mut tally = Tally::default();
    let mut st = Scanner {
        scan,
        frame: 0,
        line: 0,
        in_line: false,
        line_start: 0,
        buffer: Vec::new(),
    };
    let frame_slot = |frame: usize| -> usize {
        if opts.sum_frames() {
            opts.frames.as_ref().map_or(0, |r| r.start)
        } else {
            frame
        }
    };
    let mut dec = Decoder { kind, overflow: 0 };
    let mut buf = vec![0u8; 4 * CHUNK_RECORDS];
    let mut index: u64 = 0;
    loop {
        let want = expected.map_or(CHUNK_RECORDS, |n| {
            usize::try_from(n - index)
                .unwrap_or(usize::MAX)
                .min(CHUNK_RECORDS)
        });
        if want == 0 {
            break;
        }
        let at = r.pos;
        let got = read_full(&mut r, &mut buf[..4 * want])
            .map_err(|e| err(format!("record {index} at byte {at}: {e}")))?;
        for (k, word) in buf[..got].chunks_exact(4).enumerate() {
            let rec_index = index + k as u64;
            let rec = u32::from_le_bytes(word.try_into().expect("4 bytes"));
            let event = dec.decode(rec).map_err(|e| {
                err(format!(
                    "record {rec_index} at byte {} ({rec:#010x}): {e} (corrupt data?)",
                    at + 4 * k as u64
                ))
            })?;
            match event {
                Event::Overflow => {}
                Event::Photon {
                    sync,
                    dtime,
                    channel,
                } => {
                    tally.photons += 1;
                    let channel = channel as usize;
                    if !opts.channel_wanted(channel) || !opts.frame_wanted(st.frame) {
                        tally.unselected += 1;
                        continue;
                    }
                    let bin = dtime as usize / binning;
                    match st.scan {
                        None => {
                            let at = at + 4 * k as u64;
                            let placed = hist
                                .slot((0, channel))
                                .and_then(|slot| hist.add(slot, 0, bin))
                                .map_err(|e| {
                                    err(format!("record {rec_index} at byte {at}: {e}"))
                                })?;
                            if placed {
                                tally.placed += 1;
                            } else {
                                tally.late += 1;
                            }
                        }
                        Some(_) if st.in_line => st.buffer.push((sync, bin, channel)),
                        Some(_) => tally.outside_lines += 1,
                    }
                }
                Event::Marker { sync, bits } => {
                    let Some(scan) = st.scan else { continue };
                    if bits & scan.stop != 0 && st.in_line {
                        finish_line(&mut st, &scan, sync, &mut hist, &mut tally, &frame_slot)
                            .map_err(|e| {
                                err(format!(
                                    "record {rec_index} at byte {} (line end): {e}",
                                    at + 4 * k as u64
                                ))
                            })?;
                    }
                    if bits & scan.frame != 0 {
                        if st.line > 0 {
                            st.frame += 1;
                            st.line = 0;
                        }
                        tally.outside_lines += st.buffer.len() as u64;
                        st.buffer.clear();
                        st.in_line = false;
                    }
                    if bits & scan.start != 0 {
                        tally.outside_lines += st.buffer.len() as u64;
                        st.buffer.clear();
                        st.in_line = true;
                        st.line_start = sync;
                    }
                }
            }
        }
        // The records read are decoded first, so a corrupt one is named before a short file.
        if got % 4 != 0 {
            let rec = index + (got / 4) as u64;
            return Err(err(format!(
                "record {rec} at byte {}: the file ends inside a record (truncated?)",
                at + (got / 4 * 4) as u64
            )));
        }
        if got < 4 * want && expected.is_some() {
            let rec = index + (got / 4) as u64;
            return Err(err(format!(
                "record {rec} at byte {}: the file ends after {rec} of the {} records its header announces (truncated?)",
                at + got as u64,
                expected.unwrap_or(0)
            )));
        }
        index += (got / 4) as u64;
        tally.records = index;
        if got < 4 * want {
            break; // end of file (no record count in the header)
        }
    }
    tally.outside_lines += st.buffer.len() as u64;
    tally.frames = st.frame + usize::from(st.line > 0);
    if hist.slots.is_empty() {
        return Err(err(format!(
            "no photon of the {} records fell into an image{}",
            tally.records,
            if tally.unselected > 0 {
                format!(
                    " ({} photons outside the selected channel/frames)",
                    tally.unselected
                )
            } else {
                String::new()
            }
        )));
    }
    let bins = if hist.fixed {
        hist.cap
    } else {
        (hist.max_bin + 1).max(4)
    };
    let (rows, cols) = scan.map_or((1, 1), |s| (s.pix_y, s.pix_x));
    let bin_ns = resolution * binning as f64 * 1e9;
    let cap = hist.cap;
    let mut slots = std::mem::take(&mut hist.slots);
    slots.sort_by_key(|(k, _)| *k);
    let mut images = Vec::with_capacity(slots.len());
    for ((frame, channel), mut data) in slots {
        // Drop the unused bins of each pixel in place (bins <= cap): no second copy.
        if bins < cap {
            for p in 0..rows * cols {
                data.copy_within(p * cap..p * cap + bins, p * bins);
            }
            data.truncate(rows * cols * bins);
            data.shrink_to_fit();
        }
        let counts = Array3::from_shape_vec((rows, cols, bins), data).map_err(|e| {
            err(format!(
                "histogram of frame {frame}, channel {channel}: {e}"
            ))
        })?;
        images.push(Image {
            block: 0,
            frame,
            channel,
            cube: narrow_counts(counts, bin_ns, period_ns).map_err(|e| {
                in_file(
                    path,
                    &format!("image of frame {frame}, channel {channel}"),
                    e,
                )
            })?,
        });
    }
    let mut metadata = vec![
        (
            "format".to_string(),
            format!("PicoQuant .ptu {}", h.version),
        ),
        ("record type".into(), kind_name.into()),
    ];
    for tag in ["HW_Type", "HW_SerialNo", "CreatorSW_Name", "File_Comment"] {
        if let Some(v) = h.text(tag).filter(|v| !v.is_empty()) {
            metadata.push((tag.into(), v.into()));
        }
    }
    metadata.extend([
        (
            "sync rate MHz".to_string(),
            format!("{:.4}", 1e3 / period_ns),
        ),
        (
            "TCSPC resolution ps".into(),
            format!("{:.4}", resolution * 1e12),
        ),
        ("binning".into(), binning.to_string()),
        ("bins".into(), bins.to_string()),
        ("bin width ns".into(), format!("{bin_ns}")),
        ("records".into(), tally.records.to_string()),
        ("photons".into(), tally.photons.to_string()),
        ("photons in images".into(), tally.placed.to_string()),
    ]);
    if let Some(s) = scan {
        metadata.extend([
            (
                "scan".to_string(),
                format!(
                    "{} x {} pixels{}",
                    s.pix_x,
                    s.pix_y,
                    if s.bidirectional {
                        ", bidirectional"
                    } else {
                        ""
                    }
                ),
            ),
            ("frames".into(), tally.frames.to_string()),
            ("lines".into(), tally.lines.to_string()),
            (
                "photons outside lines".into(),
                tally.outside_lines.to_string(),
            ),
            (
                "photons in lines past ImgHdr_PixY".into(),
                tally.extra_lines.to_string(),
            ),
        ]);
    } else {
        metadata.push(("scan".into(), "none (point measurement: one pixel)".into()));
    }
    metadata.push(("photons past the last bin".into(), tally.late.to_string()));
    metadata.push((
        "photons outside the selected channel/frames".into(),
        tally.unselected.to_string(),
    ));
    if opts.sum_frames() {
        metadata.push(("frames summed".into(), "yes".into()));
    }
    Ok(Recording {
        path: path.to_path_buf(),
        format: Format::Ptu,
        images,
        metadata,
    })
}

/// Spread the buffered photons of the line that ends at sync `stop` over its pixels.
fn finish_line(
    st: &mut Scanner,
    scan: &Scan,
    stop: u64,
    hist: &mut Histograms,
    tally: &mut Tally,
    frame_slot: &dyn Fn(usize) -> usize,
) -> std::result::Result<(), String> {
    st.in_line = false;
    tally.lines += 1;
    let photons = std::mem::take(&mut st.buffer);
    if st.line >= scan.pix_y {
        tally.extra_lines += photons.len() as u64;
    } else if stop > st.line_start {
        let span = stop - st.line_start;
        let reverse = scan.bidirectional && st.line % 2 == 1;
        let mut last: Option<(usize, usize)> = None;
        for &(sync, bin, channel) in &photons {
            let mut x = (((sync - st.line_start) as u128 * scan.pix_x as u128) / span as u128)
                .min(scan.pix_x as u128 - 1) as usize;
            if reverse {
                x = scan.pix_x - 1 - x;
            }
            let key = (frame_slot(st.frame), channel);
            let slot = match last {
                Some((c, s)) if c == channel => s,
                _ => {
                    let s = hist.slot(key)?;
                    last = Some((channel, s));
                    s
                }
            };
            if hist.add(slot, st.line * scan.pix_x + x, bin)? {
                tally.placed += 1;
            } else {
                tally.late += 1;
            }
        }
    } else {
        tally.outside_lines += photons.len() as u64;
    }
    st.buffer = photons;
    st.buffer.clear();
    st.line += 1;
    if scan.frame == 0 && st.line == scan.pix_y {
        // No frame marker in this file: a frame ends with its last line.
        st.frame += 1;
        st.line = 0;
    }
    Ok(())
}

/// Fill `buf` as far as the file allows; the number of bytes read.
fn read_full(r: &mut impl Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn picoharp_records_decode_photons_markers_and_overflows() {
        let mut d = Decoder {
            kind: RecordKind::PicoHarp,
            overflow: 0,
        };
        // Channel 1, dtime 33, nsync 9386 (a photon from the real hazelnut file).
        assert_eq!(
            d.decode(0x1021_24aa),
            Ok(Event::Photon {
                sync: 9386,
                dtime: 33,
                channel: 0
            })
        );
        assert_eq!(d.decode(0xf000_0000), Ok(Event::Overflow));
        assert_eq!(
            d.decode(0xf001_0005),
            Ok(Event::Marker {
                sync: 65536 + 5,
                bits: 1
            })
        );
        assert!(d.decode(0x7000_0000).is_err(), "channel 7 is invalid");
    }

    #[test]
    fn hydraharp_v2_overflow_counts_multiply() {
        let mut d = Decoder {
            kind: RecordKind::HydraHarpV2,
            overflow: 0,
        };
        assert_eq!(d.decode(0xFE00_0003), Ok(Event::Overflow));
        assert_eq!(d.overflow, 3 * 1024);
        let photon = (2 << 25) | (100 << 10) | 7;
        assert_eq!(
            d.decode(photon),
            Ok(Event::Photon {
                sync: 3 * 1024 + 7,
                dtime: 100,
                channel: 2
            })
        );
        assert_eq!(
            d.decode(0x8000_0000 | (4 << 25) | 9),
            Ok(Event::Marker {
                sync: 3 * 1024 + 9,
                bits: 4
            })
        );
        let mut v1 = Decoder {
            kind: RecordKind::HydraHarpV1,
            overflow: 0,
        };
        v1.decode(0xFE00_0003).unwrap();
        assert_eq!(v1.overflow, 1024, "V1 overflows count one period each");
    }

    #[test]
    fn t2_and_unknown_record_types_are_refused() {
        assert!(RecordKind::of(0x0001_0203).unwrap_err().contains("T2"));
        assert!(RecordKind::of(0x1234).is_err());
    }
}
