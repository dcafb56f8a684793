//! Becker & Hickl SPC `.sdt` files.
//!
//! Layout (little-endian; B&H "SPC data file structure", cross-checked with cgohlke's
//! `sdtfile`): a 42-byte file header (offsets of the info text, the setup section, the
//! measurement description blocks and the first data block; `header_valid` = 0x5555 and a
//! checksum), an info text (`*IDENTIFICATION ... *END`), the setup section (text
//! `[KEY,TYPE,VALUE]` entries plus binary panels), one measurement description block per
//! setup used (TAC range and gain, ADC resolution, scan and image sizes, routing channels, the
//! sync rate measured), and a chain of data blocks, each with a 22-byte header (data offset,
//! next block offset, block type, measurement description index, length) and its data, raw or
//! as a zip archive of one member (block type bit 0x1000, `block_length` then being the
//! unzipped size). Block data are u16, u32 or f64 counts laid out (routing channel, y, x, bin).
//!
//! Each data block (a measurement, a z-plane or a time point) and each routing channel in it
//! becomes one [`Image`]; nothing is flattened. Blocks that hold no decay histograms (FCS,
//! FIDA, MCS, moments...) are skipped and listed in the metadata. The bin width is
//! `TAC_R / (TAC_G x ADC_RE)`; the laser period is `1 / sync rate` when the file measured it.
//!
//! Checks before anything is reserved: the block count against the file's length (one
//! 22-byte header each); every block header and data range inside the file and not
//! overlapping another block's (a next-block offset that loops back is a cycle, refused);
//! ADC resolution 1..=[`MAX_BINS`], a nonzero TAC gain, the bin width and the measured sync
//! rate in physical ranges ([`check_bin_ns`], [`check_period_ns`]; a sync rate of 0 means
//! "not measured"); the block's size equal to the header's scan or image size (a header
//! declaring no image, at most 1 x 1, reads a block as a row of decays), with checked
//! products; a zipped block's unzipped size at most [`MAX_ZIP_RATIO`] times its stored size,
//! and never unzipped past the size its header gives.
//!
//! No maintained Rust crate reads `.sdt`, hence this parser.

use crate::error::{Error, Result};
use crate::io::recording::{
    Format, Image, MAX_BINS, Recording, check_bin_ns, check_period_ns, format_error, in_file,
    io_error,
};
use crate::model::cube::AnyCube;
use crate::model::cube::Cube;
use ndarray::Array3;
use rayon::prelude::*;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

const FILE_HEADER: usize = 42;
const BLOCK_HEADER: usize = 22;
const HEADER_VALID: u16 = 0x5555;
const CHECKSUM_BASE: u16 = 0x55AA;
const ZIPPED: u16 = 0x1000;
/// Size of the measurement description block written by [`write_sdt`] (as SPCM writes it).
const MEAS_DESC_LEN: usize = 2048;
/// Largest ratio of a zipped data block's unzipped size to its stored size that the reader
/// believes (1032: deflate's own maximum). A block header claiming more is corrupt; the
/// unzipping itself never produces more than the header's size either.
pub const MAX_ZIP_RATIO: u64 = 1032;

/// Offsets of the measurement description (`MeasureInfo`) fields used here.
mod mi {
    pub const TIME: usize = 0; // S9
    pub const DATE: usize = 9; // S11
    pub const MOD_SER_NO: usize = 20; // S16
    pub const TAC_R: usize = 64; // f32, s
    pub const TAC_G: usize = 68; // i16
    pub const ADC_RE: usize = 82; // i16
    pub const MOD_TYPE: usize = 117; // S16
    pub const SCAN_X: usize = 173; // i32 (then scan_y, scan_rx, scan_ry)
    pub const MAX_SYNC_RATE: usize = 247; // f32, Hz (StopInfo)
    pub const IMAGE_X: usize = 309; // i32 (then image_y, image_rx, image_ry)
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// The reader's view of the file: every read is bounds-checked and errors name the part.
struct SdtFile<'p> {
    file: File,
    path: &'p Path,
    len: u64,
}

impl SdtFile<'_> {
    fn err(&self, what: impl Into<String>) -> Error {
        format_error(self.path, what)
    }

    /// `n` bytes at `offset`, or an error naming `what` when the file is too short.
    fn bytes(&mut self, offset: u64, n: u64, what: &str) -> Result<Vec<u8>> {
        if offset.checked_add(n).is_none_or(|end| end > self.len) {
            return Err(self.err(format!(
                "{what}: needs {n} bytes at byte offset {offset}, but the file has {} bytes (truncated?)",
                self.len
            )));
        }
        let mut buf = vec![0u8; n as usize];
        self.file
            .seek(SeekFrom::Start(offset))
            .and_then(|_| self.file.read_exact(&mut buf))
            .map_err(|e| self.err(format!("{what} at byte offset {offset}: {e}")))?;
        Ok(buf)
    }
}

/// Geometry and timing of one measurement description block.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Geometry {
    bins: usize,
    scan: (usize, usize, usize, usize),
    image: (usize, usize, usize, usize),
    bin_ns: f64,
    period_ns: Option<f64>,
}

impl Geometry {
    /// The geometry of a measurement description block `b` (`what`, at byte `at`), its
    /// values checked: ADC resolution 1..=[`MAX_BINS`], a nonzero TAC gain, a bin width and
    /// (when the sync rate was measured, i.e. is nonzero) a laser period in the physical
    /// ranges of [`check_bin_ns`] and [`check_period_ns`].
    fn from_meas_desc(path: &Path, what: &str, b: &[u8]) -> Result<Self> {
        let err = |msg: String| format_error(path, format!("{what}: {msg}"));
        if b.len() < mi::ADC_RE + 2 {
            return Err(err(format!(
                "only {} bytes, too short for the TAC settings (needs {})",
                b.len(),
                mi::ADC_RE + 2
            )));
        }
        let i32_at = |at: usize| -> usize {
            if at + 4 <= b.len() {
                usize::try_from(u32_at(b, at) as i32).unwrap_or(0)
            } else {
                0
            }
        };
        let tac_r = f64::from(f32::from_bits(u32_at(b, mi::TAC_R)));
        let tac_g = f64::from(u16_at(b, mi::TAC_G) as i16);
        let adc_re = u16_at(b, mi::ADC_RE) as i16;
        let bins = usize::try_from(adc_re)
            .ok()
            .filter(|n| (1..=MAX_BINS).contains(n))
            .ok_or_else(|| {
                err(format!(
                    "ADC resolution (adc_re, byte {} of the block) is {adc_re}: expected 1..={MAX_BINS} time bins",
                    mi::ADC_RE
                ))
            })?;
        if tac_g == 0.0 {
            return Err(err(format!(
                "TAC gain (tac_g, byte {} of the block) is 0: expected a nonzero gain",
                mi::TAC_G
            )));
        }
        let bin_ns = check_bin_ns(
            path,
            &format!(
                "{what}: TAC range {tac_r} s (byte {}) / TAC gain {tac_g} / ADC resolution {bins}",
                mi::TAC_R
            ),
            tac_r / (tac_g * bins as f64) * 1e9,
        )?;
        let q = |at: usize| (i32_at(at), i32_at(at + 4), i32_at(at + 8), i32_at(at + 12));
        let sync = if b.len() >= mi::MAX_SYNC_RATE + 4 {
            f64::from(f32::from_bits(u32_at(b, mi::MAX_SYNC_RATE)))
        } else {
            0.0
        };
        // 0: the sync rate was not measured (no period); anything else must be physical.
        let period_ns = if sync == 0.0 {
            None
        } else {
            Some(check_period_ns(
                path,
                &format!(
                    "{what}: sync rate {sync} Hz (max_sync_rate, byte {} of the block)",
                    mi::MAX_SYNC_RATE
                ),
                1e9 / sync,
            )?)
        };
        Ok(Self {
            bins,
            scan: q(mi::SCAN_X),
            image: q(mi::IMAGE_X),
            bin_ns,
            period_ns,
        })
    }

    /// Geometry from the setup text, for files without measurement description blocks;
    /// `None` when an entry is missing, an error when one is out of range.
    fn from_setup(path: &Path, setup: &str) -> Result<Option<Self>> {
        let int = |k: &str| setup_value(setup, k).and_then(|v| v.parse::<usize>().ok());
        let float = |k: &str| setup_value(setup, k).and_then(|v| v.parse::<f64>().ok());
        let one = |k: &str| int(k).unwrap_or(1).max(1);
        let (Some(bins), Some(ix), Some(iy), Some(tac_r), Some(tac_g)) = (
            int("SP_ADC_RE"),
            int("SP_IMG_X"),
            int("SP_IMG_Y"),
            float("SP_TAC_R"),
            float("SP_TAC_G"),
        ) else {
            return Ok(None);
        };
        if !(1..=MAX_BINS).contains(&bins) {
            return Err(format_error(
                path,
                format!("setup section: SP_ADC_RE is {bins}: expected 1..={MAX_BINS} time bins"),
            ));
        }
        let bin_ns = check_bin_ns(
            path,
            &format!("setup section: SP_TAC_R {tac_r} s / SP_TAC_G {tac_g} / SP_ADC_RE {bins}"),
            tac_r / (tac_g * bins as f64) * 1e9,
        )?;
        Ok(Some(Self {
            bins,
            scan: (
                int("SP_SCAN_X").unwrap_or(0),
                int("SP_SCAN_Y").unwrap_or(0),
                one("SP_SCAN_RX"),
                one("SP_SCAN_RY"),
            ),
            image: (ix, iy, one("SP_IMG_RX"), one("SP_IMG_RY")),
            bin_ns,
            period_ns: None,
        }))
    }

    /// (channels, rows, columns) of a block of `values` counts, as `sdtfile` shapes them:
    /// the scan or the image size of the header (with or without routing channels) when one
    /// matches. A block of a header that declares no image (every size at most 1 x 1) is a
    /// row of decays (1, 1, values / bins). Otherwise the header and the data disagree: an
    /// error (`None`), never a reinterpretation. Products that overflow match nothing.
    fn layout(&self, values: usize) -> Option<(usize, usize, usize)> {
        let m = self.bins;
        let (sx, sy, srx, sry) = self.scan;
        let (ix, iy, irx, iry) = self.image;
        let candidates = [
            (Some(1), sy, sx),
            (Some(1), iy, ix),
            (srx.checked_mul(sry), sy, sx),
            (irx.checked_mul(iry), iy, ix),
        ];
        let total = |c: usize, h: usize, w: usize| {
            c.checked_mul(h)
                .and_then(|v| v.checked_mul(w))
                .filter(|&v| v > 0)
                .and_then(|v| v.checked_mul(m))
        };
        if let Some((c, h, w)) = candidates
            .iter()
            .filter_map(|&(c, h, w)| Some((c?, h, w)))
            .find(|&(c, h, w)| total(c, h, w) == Some(values))
        {
            return Some((c, h, w));
        }
        let declares_image = candidates.iter().any(|&(_, h, w)| h.saturating_mul(w) > 1);
        (!declares_image && m > 0 && values.is_multiple_of(m) && values > 0).then_some((
            1,
            1,
            values / m,
        ))
    }
}

/// Value of the setup text's `[KEY,TYPE,VALUE]` entry.
fn setup_value(setup: &str, key: &str) -> Option<String> {
    let pat = format!("[{key},");
    let start = setup.find(&pat)? + pat.len();
    let rest = &setup[start..];
    let end = rest.find(']')?;
    let (_, value) = rest[..end].split_once(',')?;
    Some(value.trim().to_string())
}

/// Name of a block's content (block type bits 0x00f0).
fn content_name(block_type: u16) -> &'static str {
    match block_type & 0x00f0 {
        0x00 => "DECAY_BLOCK",
        0x10 => "PAGE_BLOCK",
        0x20 => "FCS_BLOCK",
        0x30 => "FIDA_BLOCK",
        0x40 => "FILDA_BLOCK",
        0x50 => "MCS_BLOCK",
        0x60 => "IMG_BLOCK",
        0x70 => "MCSTA_BLOCK",
        0x80 => "IMG_MCS_BLOCK",
        0x90 => "MOM_BLOCK",
        0xa0 => "IMG_INT_BLOCK",
        0xb0 => "IMG_WF_BLOCK",
        _ => "IMG_LIFE_BLOCK",
    }
}

fn text(b: &[u8]) -> String {
    b.iter()
        .take_while(|&&c| c != 0)
        .map(|&c| char::from(c))
        .collect::<String>()
        .trim()
        .to_string()
}

/// Read every decay image of a `.sdt` file, block by block (compressed blocks unzipped one
/// at a time).
pub fn read_sdt(path: &Path) -> Result<Recording> {
    let file = File::open(path).map_err(|e| io_error(path, e))?;
    let len = file.metadata().map_err(|e| io_error(path, e))?.len();
    let mut f = SdtFile { file, path, len };
    let h = f.bytes(0, FILE_HEADER as u64, "file header")?;
    let words: u16 = (0..20).fold(0u16, |s, i| s.wrapping_add(u16_at(&h, 2 * i)));
    let checksum_ok = CHECKSUM_BASE.wrapping_sub(words) == u16_at(&h, 40);
    if u16_at(&h, 32) != HEADER_VALID && !checksum_ok {
        return Err(f.err(format!(
            "not a Becker & Hickl .sdt file: file header (byte 0) has header_valid {:#06x} (expected 0x5555) and a wrong checksum",
            u16_at(&h, 32)
        )));
    }
    let revision = u16_at(&h, 0);
    let info = f.bytes(
        u64::from(u32_at(&h, 2)),
        u64::from(u16_at(&h, 6)),
        "info section",
    )?;
    let info = String::from_utf8_lossy(&info).replace('\u{4}', "");
    let setup_len = u64::from(u16_at(&h, 12));
    let setup = f.bytes(u64::from(u32_at(&h, 8)), setup_len, "setup section")?;
    let setup_text = {
        // The text part ends where the binary part starts (B&H: "*END").
        let end = setup
            .windows(4)
            .position(|w| w == b"*END")
            .map_or(setup.len(), |p| p + 4);
        String::from_utf8_lossy(&setup[..end]).into_owned()
    };
    let mut block_offset = u64::from(u32_at(&h, 14));
    let mut blocks = usize::from(u16_at(&h, 18));
    if blocks == 0x7fff {
        blocks = u32_at(&h, 34) as usize; // large files keep the count in reserved1
    }
    // Every block needs its own 22-byte header inside the file.
    let max_blocks = usize::try_from(len / BLOCK_HEADER as u64).unwrap_or(usize::MAX);
    if blocks > max_blocks {
        return Err(f.err(format!(
            "file header (byte 18): announces {blocks} data blocks, but its {len} bytes hold at most {max_blocks} block headers of {BLOCK_HEADER} bytes"
        )));
    }
    let meas_offset = u64::from(u32_at(&h, 24));
    let meas_count = usize::from(u16_at(&h, 28));
    let meas_len = u64::from(u16_at(&h, 30));
    let mut geometries = Vec::new();
    let mut metadata = vec![
        ("format".to_string(), "Becker & Hickl SPC .sdt".to_string()),
        ("revision".into(), format!("{revision:#x}")),
    ];
    for line in info.lines() {
        if let Some((k, v)) = line.split_once(':') {
            let (k, v) = (k.trim(), v.trim());
            if matches!(k, "ID" | "Title" | "Date" | "Time") && !v.is_empty() {
                metadata.push((format!("info {}", k.to_ascii_lowercase()), v.to_string()));
            }
        }
    }
    for i in 0..meas_count {
        let at = meas_offset.saturating_add(i as u64 * meas_len);
        let what = format!("measurement description block {i} (byte {at})");
        let b = f.bytes(at, meas_len, &what)?;
        let g = Geometry::from_meas_desc(path, &what, &b)?;
        if i == 0 && b.len() >= mi::MOD_TYPE + 16 {
            metadata.push(("module".into(), text(&b[mi::MOD_TYPE..mi::MOD_TYPE + 16])));
            metadata.push((
                "module serial".into(),
                text(&b[mi::MOD_SER_NO..mi::MOD_SER_NO + 16]),
            ));
            metadata.push((
                "measured".into(),
                format!(
                    "{} {}",
                    text(&b[mi::DATE..mi::DATE + 11]),
                    text(&b[mi::TIME..mi::TIME + 9])
                ),
            ));
        }
        geometries.push(g);
    }
    let setup_geometry = if geometries.is_empty() {
        Geometry::from_setup(path, &setup_text)?
    } else {
        None
    };

    // Byte ranges of the block headers and data read so far: a block that points back into
    // one of them is a loop in the chain (or data counted twice), never followed.
    let mut claimed = Claimed::default();
    let mut images = Vec::new();
    for block in 0..blocks {
        let what = format!("data block {block} (header at byte {block_offset})");
        let bh = f.bytes(block_offset, BLOCK_HEADER as u64, &what)?;
        claimed
            .claim(block, block_offset, BLOCK_HEADER as u64, "header")
            .map_err(|e| f.err(format!("{what}: {e}")))?;
        // Revision 15+ headers carry bits 32..39 of the offsets in bytes 0 and 1.
        let ext = |b: u8| {
            if revision & 0xf >= 15 {
                u64::from(b) << 32
            } else {
                0
            }
        };
        let data_offset = ext(bh[0]) | u64::from(u32_at(&bh, 2));
        let next = ext(bh[1]) | u64::from(u32_at(&bh, 6));
        let block_type = u16_at(&bh, 10);
        let meas = u16_at(&bh, 12) as i16;
        let length = u64::from(u32_at(&bh, 18));
        let content = content_name(block_type);
        if !matches!(content, "DECAY_BLOCK" | "PAGE_BLOCK" | "IMG_BLOCK") {
            metadata.push((
                format!("block {block}"),
                format!("{content}: skipped (not decay histograms)"),
            ));
            block_offset = next;
            continue;
        }
        let g = match usize::try_from(meas).ok().and_then(|m| geometries.get(m)) {
            Some(g) => *g,
            None if geometries.is_empty() => setup_geometry.ok_or_else(|| {
                f.err(format!(
                    "{what}: the file has no measurement description block and the setup lacks SP_IMG_X/SP_IMG_Y/SP_ADC_RE/SP_TAC_R/SP_TAC_G"
                ))
            })?,
            None => {
                return Err(f.err(format!(
                    "{what}: refers to measurement description block {meas}, the file has {}",
                    geometries.len()
                )));
            }
        };
        let (size, kind) = match block_type & 0x0f00 {
            0x000 => (2, "u16"),
            0x100 => (4, "u32"),
            0x200 => (8, "f64"),
            other => {
                return Err(f.err(format!(
                    "{what}: unknown data type bits {other:#x} in block type {block_type:#06x}"
                )));
            }
        };
        if length % size != 0 {
            return Err(f.err(format!(
                "{what}: block length {length} (byte {}) is not a whole number of {kind} values",
                block_offset + 18
            )));
        }
        let values = usize::try_from(length / size).unwrap_or(usize::MAX);
        let (channels, hgt, w) = g.layout(values).ok_or_else(|| {
            f.err(format!(
                "{what}: {values} {kind} values (block length {length}) fit neither the scan ({:?}) nor the image ({:?}) size of the header with {} bins: the header and the data disagree",
                g.scan, g.image, g.bins
            ))
        })?;
        let values = if block_type & ZIPPED != 0 {
            // The stored (compressed) size is the distance to the next block.
            let stored_len = if next > data_offset {
                next - data_offset
            } else {
                len.saturating_sub(data_offset)
            };
            if length > stored_len.saturating_mul(MAX_ZIP_RATIO) {
                return Err(f.err(format!(
                    "{what}: block length {length} (byte {}) says the {stored_len} compressed bytes at byte {data_offset} unzip to more than {MAX_ZIP_RATIO} times their size (deflate's limit)",
                    block_offset + 18
                )));
            }
            let stored = f.bytes(data_offset, stored_len, &what)?;
            claimed
                .claim(block, data_offset, stored_len, "data")
                .map_err(|e| f.err(format!("{what}: {e}")))?;
            unzip(&stored, length, kind).map_err(|e| {
                f.err(format!(
                    "{what}: compressed data at byte {data_offset}: {e}"
                ))
            })?
        } else {
            let raw = f.bytes(data_offset, length, &what)?;
            claimed
                .claim(block, data_offset, length, "data")
                .map_err(|e| f.err(format!("{what}: {e}")))?;
            Values::read(&mut raw.as_slice(), length, kind)
                .map_err(|e| f.err(format!("{what}: {e}")))?
        };
        let per_channel = hgt * w * g.bins;
        let dim = (hgt, w, g.bins);
        for (channel, values) in values.into_channels(channels, per_channel).enumerate() {
            let cube: AnyCube = match values {
                Values::U16(v) => Cube::new(shaped(dim, v), g.bin_ns)
                    .map_err(|e| in_file(path, &what, e))?
                    .into(),
                Values::U32(v) => Cube::new(shaped(dim, v), g.bin_ns)
                    .map_err(|e| in_file(path, &what, e))?
                    .into(),
                Values::F64(v) => Cube::new(
                    shaped(dim, v.into_iter().map(|x| x as f32).collect()),
                    g.bin_ns,
                )
                .map_err(|e| in_file(path, &what, e))?
                .into(),
            };
            let cube = match g.period_ns {
                Some(p) => cube
                    .with_period_ns(p)
                    .map_err(|e| in_file(path, &what, e))?,
                None => cube,
            };
            images.push(Image {
                block,
                frame: 0,
                channel,
                cube,
            });
        }
        block_offset = next;
    }
    if let Some(g) = geometries.first() {
        metadata.push(("bin width ns".into(), format!("{}", g.bin_ns)));
        if let Some(p) = g.period_ns {
            metadata.push(("sync rate MHz".into(), format!("{:.4}", 1e3 / p)));
        }
    }
    metadata.push(("data blocks".into(), blocks.to_string()));
    if images.is_empty() {
        return Err(f.err(format!(
            "none of its {blocks} data block(s) holds decay histograms"
        )));
    }
    Ok(Recording {
        path: path.to_path_buf(),
        format: Format::Sdt,
        images,
        metadata,
    })
}

/// The byte ranges of the file that data blocks have used (headers and data), so that no
/// byte is read as two blocks: a chain whose next-block offset loops back, or blocks sharing
/// data, are refused instead of followed forever or counted twice.
#[derive(Debug, Default)]
struct Claimed {
    /// start -> (end, block, part)
    ranges: std::collections::BTreeMap<u64, (u64, usize, &'static str)>,
}

impl Claimed {
    fn claim(
        &mut self,
        block: usize,
        start: u64,
        len: u64,
        part: &'static str,
    ) -> std::result::Result<(), String> {
        let end = start.saturating_add(len);
        if len == 0 {
            return Ok(());
        }
        let before = self.ranges.range(..=start).next_back();
        let after = self.ranges.range(start..end).next();
        for (&s, &(e, b, p)) in before.into_iter().chain(after) {
            if s < end && start < e {
                return Err(if part == "header" && p == "header" && s == start {
                    format!(
                        "the block chain loops back to data block {b}'s header at byte {s} (a cycle in the next-block offsets)"
                    )
                } else {
                    format!(
                        "its {part} (bytes {start}..{end}) overlaps data block {b}'s {p} (bytes {s}..{e}): the block chain loops back or blocks share bytes (a cycle or corrupt offsets)"
                    )
                });
            }
        }
        self.ranges.insert(start, (end, block, part));
        Ok(())
    }
}

fn shaped<T>(dim: (usize, usize, usize), values: Vec<T>) -> Array3<T> {
    Array3::from_shape_vec(dim, values).expect("length checked against the layout")
}

/// A data block's counts, decoded straight into their own type: a 512x512x256 block is
/// 134 MB, and every extra copy of it costs tens of milliseconds.
enum Values {
    U16(Vec<u16>),
    U32(Vec<u32>),
    F64(Vec<f64>),
}

impl Values {
    /// Exactly `bytes` bytes of little-endian `kind` values from `from` (`bytes` is a whole
    /// number of values, checked by the caller); fewer bytes, or more, is an error.
    fn read(from: &mut impl Read, bytes: u64, kind: &str) -> std::result::Result<Values, String> {
        Self::decode(bytes, kind, |buf| {
            let mut done = 0;
            while done < buf.len() {
                match from.read(&mut buf[done..]) {
                    Ok(0) => {
                        return Err(format!(
                            "ends after {done} bytes, the block header says {bytes}"
                        ));
                    }
                    Ok(k) => done += k,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(format!("reading failed after {done} bytes ({e})")),
                }
            }
            // Never read past what the header promises; one byte more means it lied.
            let mut extra = [0u8; 1];
            match from.read(&mut extra) {
                Ok(0) => Ok(()),
                Ok(_) => Err(format!(
                    "holds more than the {bytes} bytes the block header says"
                )),
                Err(e) => Err(format!("reading failed after {done} bytes ({e})")),
            }
        })
    }

    /// Exactly `bytes` bytes of `kind` values inflated from the raw deflate stream
    /// `deflated`, whose CRC-32 must be `crc`. One call into libdeflate, which knows the
    /// output's size in advance: it inflates the real 134 MB recording in 80 ms against
    /// 131 ms for a streaming inflater (zlib-rs).
    fn inflate(
        deflated: &[u8],
        bytes: u64,
        kind: &str,
        crc: u32,
    ) -> std::result::Result<Values, String> {
        Self::decode(bytes, kind, |buf| {
            let n = libdeflater::Decompressor::new()
                .deflate_decompress(deflated, buf)
                .map_err(|e| match e {
                    libdeflater::DecompressionError::InsufficientSpace => {
                        format!("holds more than the {bytes} bytes the block header says")
                    }
                    libdeflater::DecompressionError::BadData => {
                        "is not valid deflate data".to_string()
                    }
                })?;
            if n < buf.len() {
                return Err(format!(
                    "ends after {n} bytes, the block header says {bytes}"
                ));
            }
            let sum = crc32(buf);
            if sum != crc {
                return Err(format!(
                    "fails its CRC-32 check ({sum:#010x}; the archive says {crc:#010x})"
                ));
            }
            Ok(())
        })
    }

    /// `bytes` bytes of little-endian `kind` values, written in place by `fill` into the
    /// vector that keeps them: a 134 MB block is never copied.
    fn decode(
        bytes: u64,
        kind: &str,
        fill: impl FnOnce(&mut [u8]) -> std::result::Result<(), String>,
    ) -> std::result::Result<Values, String> {
        fn typed<T: bytemuck::Pod + Default>(
            bytes: u64,
            fill: impl FnOnce(&mut [u8]) -> std::result::Result<(), String>,
        ) -> std::result::Result<Vec<T>, String> {
            let n = usize::try_from(bytes).map_err(|_| format!("{bytes} bytes is too large"))?
                / std::mem::size_of::<T>();
            let mut v = vec![T::default(); n];
            prefault(bytemuck::cast_slice_mut(&mut v));
            fill(bytemuck::cast_slice_mut(&mut v))?;
            Ok(v)
        }
        Ok(match kind {
            "u16" => {
                let mut v: Vec<u16> = typed(bytes, fill)?;
                for x in &mut v {
                    *x = u16::from_le(*x);
                }
                Values::U16(v)
            }
            "u32" => {
                let mut v: Vec<u32> = typed(bytes, fill)?;
                for x in &mut v {
                    *x = u32::from_le(*x);
                }
                Values::U32(v)
            }
            _ => {
                let v: Vec<u64> = typed(bytes, fill)?;
                Values::F64(
                    v.into_iter()
                        .map(|x| f64::from_bits(u64::from_le(x)))
                        .collect(),
                )
            }
        })
    }

    /// The block's `channels` consecutive channels of `per_channel` values each (the block
    /// itself, without a copy, when it holds one channel).
    fn into_channels(self, channels: usize, per_channel: usize) -> impl Iterator<Item = Values> {
        fn split<T: Copy>(v: Vec<T>, channels: usize, per: usize) -> Vec<Vec<T>> {
            if channels == 1 {
                let mut v = v;
                v.truncate(per);
                return vec![v];
            }
            (0..channels)
                .map(|c| v[c * per..(c + 1) * per].to_vec())
                .collect()
        }
        let parts: Vec<Values> = match self {
            Values::U16(v) => split(v, channels, per_channel)
                .into_iter()
                .map(Values::U16)
                .collect(),
            Values::U32(v) => split(v, channels, per_channel)
                .into_iter()
                .map(Values::U32)
                .collect(),
            Values::F64(v) => split(v, channels, per_channel)
                .into_iter()
                .map(Values::F64)
                .collect(),
        };
        parts.into_iter()
    }
}

/// The one member of a zipped data block, which must unzip to exactly `expected` bytes of
/// `kind` values. Never unzips more than the header promises (a corrupt size cannot
/// exhaust memory: the caller bounds `expected` by deflate's ratio). The zip crate finds
/// the member; libdeflate inflates it in one call.
fn unzip(stored: &[u8], expected: u64, kind: &str) -> std::result::Result<Values, String> {
    let mut archive = zip::ZipArchive::new(std::io::Cursor::new(stored))
        .map_err(|e| format!("not a valid zip archive ({e})"))?;
    if archive.is_empty() {
        return Err("empty zip archive".into());
    }
    let member = archive.by_index_raw(0).map_err(|e| e.to_string())?;
    if member.encrypted() {
        return Err("its member is encrypted".into());
    }
    let (method, crc, len) = (
        member.compression(),
        member.crc32(),
        member.compressed_size(),
    );
    let data = member
        .data_start()
        .and_then(|start| {
            let start = usize::try_from(start).ok()?;
            stored.get(start..start.checked_add(usize::try_from(len).ok()?)?)
        })
        .ok_or_else(|| format!("its member's {len} compressed bytes lie outside the block"))?;
    let values = match method {
        zip::CompressionMethod::Deflated => Values::inflate(data, expected, kind, crc),
        zip::CompressionMethod::Stored if crc32(data) != crc => {
            Err("fails its CRC-32 check".to_string())
        }
        zip::CompressionMethod::Stored => Values::read(&mut &data[..], expected, kind),
        other => {
            return Err(format!(
                "its member is compressed with {other}; deflate (or none) expected"
            ));
        }
    };
    values.map_err(|e| format!("unzipped, it {e}"))
}

/// The CRC-32 (IEEE, as zip uses) of `bytes`, in pieces on all cores (10 ms on one core of
/// the H200 host for 134 MB).
fn crc32(bytes: &[u8]) -> u32 {
    bytes
        .par_chunks(4 << 20)
        .map(|piece| {
            let mut crc = crc32fast::Hasher::new();
            crc.update(piece);
            crc
        })
        .reduce(crc32fast::Hasher::new, |mut a, b| {
            a.combine(&b);
            a
        })
        .finalize()
}

/// Touches every page of a freshly allocated buffer from all cores before one thread fills
/// it. The kernel maps a new page at its first write; for a 134 MB block on one thread that
/// costs 55-77 ms on the H200 host (50 ms here), on 16 threads 7-10 ms.
fn prefault(buf: &mut [u8]) {
    const PAGE: usize = 4096;
    buf.par_chunks_mut(1 << 20).for_each(|piece| {
        for at in (0..piece.len()).step_by(PAGE) {
            // An opaque zero: a known zero stored into zeroed memory may be optimised away.
            piece[at] = std::hint::black_box(0);
        }
    });
}

/// Write a `.sdt` file as SPCM does: file header, info, setup text, one measurement
/// description block, and one data block per entry of `blocks` holding its channels (all
/// cubes of one shape and bin width), raw or zipped. The sync rate is written from the first
/// cube's laser period, so [`read_sdt`] gives back the same cubes.
pub fn write_sdt(path: &Path, blocks: &[Vec<Cube<u16>>], zipped: bool) -> Result<()> {
    let first = blocks
        .first()
        .and_then(|b| b.first())
        .ok_or_else(|| Error::Shape("write_sdt needs at least one block with one cube".into()))?;
    let (h, w) = first.shape();
    let bins = first.bins();
    let channels = blocks[0].len();
    if blocks.iter().any(|b| {
        b.len() != channels
            || b.iter()
                .any(|c| c.shape() != (h, w) || c.bins() != bins || c.bin_ns() != first.bin_ns())
    }) {
        return Err(Error::Shape(
            "write_sdt: every block needs the same number of channels, each of the same shape and bin width".into(),
        ));
    }
    if bins > usize::from(u16::MAX) {
        return Err(Error::Shape(format!(
            "write_sdt: {bins} bins exceed the ADC resolution field"
        )));
    }
    let tac_r = (first.bin_ns() * bins as f64 * 1e-9) as f32;
    let info = "*IDENTIFICATION\r\n  ID        : SPC Setup & Data File\r\n  Title     : biogpu\r\n  Version   : 1  985 M\r\n  Revision  : 12 bits ADC\r\n*END\r\n\r\n";
    let setup = format!(
        "*SETUP\r\n  SYS_PARA_BEGIN:\r\n  #SP [SP_ADC_RE,I,{bins}]\r\n  #SP [SP_TAC_R,F,{tac_r:e}]\r\n  #SP [SP_TAC_G,I,1]\r\n  #SP [SP_IMG_X,I,{w}]\r\n  #SP [SP_IMG_Y,I,{h}]\r\n  #SP [SP_IMG_RX,I,{channels}]\r\n  #SP [SP_IMG_RY,I,1]\r\n  SYS_PARA_END:\r\n*END\r\n\r\n"
    );
    let mut meas = vec![0u8; MEAS_DESC_LEN];
    meas[mi::TIME..mi::TIME + 8].copy_from_slice(b"00:00:00");
    meas[mi::DATE..mi::DATE + 10].copy_from_slice(b"2000-01-01");
    meas[mi::MOD_TYPE..mi::MOD_TYPE + 6].copy_from_slice(b"biogpu");
    meas[mi::TAC_R..mi::TAC_R + 4].copy_from_slice(&tac_r.to_le_bytes());
    meas[mi::TAC_G..mi::TAC_G + 2].copy_from_slice(&1i16.to_le_bytes());
    meas[mi::ADC_RE..mi::ADC_RE + 2].copy_from_slice(&(bins as u16).to_le_bytes());
    for (i, v) in [w, h, channels, 1].into_iter().enumerate() {
        let at = mi::IMAGE_X + 4 * i;
        meas[at..at + 4].copy_from_slice(&(v as i32).to_le_bytes());
    }
    let sync = (1e9 / first.period_ns()) as f32;
    meas[mi::MAX_SYNC_RATE..mi::MAX_SYNC_RATE + 4].copy_from_slice(&sync.to_le_bytes());
    meas[mi::MAX_SYNC_RATE - 16..mi::MAX_SYNC_RATE - 12].copy_from_slice(&sync.to_le_bytes());

    let fail = |e: String| format_error(path, e);
    let mut payloads = Vec::new();
    for b in blocks {
        let raw: Vec<u8> = b
            .iter()
            .flat_map(|c| {
                c.counts()
                    .iter()
                    .flat_map(|v| v.to_le_bytes())
                    .collect::<Vec<_>>()
            })
            .collect();
        let stored = if zipped {
            zip_member(&raw).map_err(fail)?
        } else {
            raw.clone()
        };
        payloads.push((raw.len(), stored));
    }
    let info_offset = FILE_HEADER;
    let setup_offset = info_offset + info.len();
    let meas_offset = setup_offset + setup.len();
    let mut offset = meas_offset + MEAS_DESC_LEN;
    let too_big = || Error::Shape("write_sdt: the file would exceed 4 GiB".into());
    let u32_of = |v: usize| u32::try_from(v).map_err(|_| too_big());
    let mut out = vec![0u8; FILE_HEADER];
    let put = |out: &mut Vec<u8>, at: usize, bytes: &[u8]| {
        out[at..at + bytes.len()].copy_from_slice(bytes);
    };
    put(&mut out, 0, &0x28fu16.to_le_bytes()); // SPC-150, revision 15
    put(&mut out, 2, &u32_of(info_offset)?.to_le_bytes());
    put(&mut out, 6, &(info.len() as u16).to_le_bytes());
    put(&mut out, 8, &u32_of(setup_offset)?.to_le_bytes());
    put(&mut out, 12, &(setup.len() as u16).to_le_bytes());
    put(&mut out, 14, &u32_of(offset)?.to_le_bytes());
    put(
        &mut out,
        18,
        &(blocks.len().min(0x7fff) as u16).to_le_bytes(),
    );
    put(&mut out, 20, &u32_of(payloads[0].0)?.to_le_bytes());
    put(&mut out, 24, &u32_of(meas_offset)?.to_le_bytes());
    put(&mut out, 28, &1u16.to_le_bytes());
    put(&mut out, 30, &(MEAS_DESC_LEN as u16).to_le_bytes());
    put(&mut out, 32, &HEADER_VALID.to_le_bytes());
    put(&mut out, 34, &(blocks.len() as u32).to_le_bytes());
    let words: u16 = (0..20).fold(0u16, |s, i| s.wrapping_add(u16_at(&out, 2 * i)));
    put(
        &mut out,
        40,
        &CHECKSUM_BASE.wrapping_sub(words).to_le_bytes(),
    );
    out.extend_from_slice(info.as_bytes());
    out.extend_from_slice(setup.as_bytes());
    out.extend_from_slice(&meas);
    for (i, (raw_len, stored)) in payloads.iter().enumerate() {
        let data = offset + BLOCK_HEADER;
        let next = data + stored.len();
        let mut bh = vec![0u8; BLOCK_HEADER];
        put(&mut bh, 2, &u32_of(data)?.to_le_bytes());
        put(&mut bh, 6, &u32_of(next)?.to_le_bytes());
        let kind = 0x0001 | 0x0060 | if zipped { ZIPPED } else { 0 }; // measured image, u16
        put(&mut bh, 10, &kind.to_le_bytes());
        put(&mut bh, 14, &(i as u32).to_le_bytes());
        put(&mut bh, 18, &u32_of(*raw_len)?.to_le_bytes());
        out.extend_from_slice(&bh);
        out.extend_from_slice(stored);
        offset = next;
    }
    std::fs::write(path, out).map_err(|e| io_error(path, e))
}

fn zip_member(raw: &[u8]) -> std::result::Result<Vec<u8>, String> {
    use std::io::Write;
    let mut buf = std::io::Cursor::new(Vec::new());
    let mut z = zip::ZipWriter::new(&mut buf);
    let opts = zip::write::SimpleFileOptions::default()
        .compression_method(zip::CompressionMethod::Deflated)
        .large_file(raw.len() >= u32::MAX as usize);
    z.start_file("data_block", opts)
        .map_err(|e| e.to_string())?;
    z.write_all(raw).map_err(|e| e.to_string())?;
    z.finish().map_err(|e| e.to_string())?;
    Ok(buf.into_inner())
}
