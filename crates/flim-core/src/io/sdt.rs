//! Becker & Hickl SPC `.sdt` files: the file header, the setup text (image size, time bins,
//! TAC range and gain, routing channels), and the chain of data blocks, each raw or a zip
//! archive of one member (`DATA_ZIPPED`), holding u16 or u32 counts (or f64), laid out as
//! (channel, y, x, bin). Every block and channel becomes one [`SdtImage`]; nothing is
//! flattened or dropped.
//!
//! No maintained Rust crate reads `.sdt`; the layout follows B&H's "SPC file format" notes
//! and cgohlke's `sdtfile`. The bin width is `TAC_R / (TAC_G x ADC_RE)`.

use super::AnyCube;
use crate::cube::Cube;
use crate::error::{Error, Result};
use ndarray::Array3;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

/// One image of a `.sdt` file.
#[derive(Debug, Clone)]
pub struct SdtImage {
    /// Data block index (measurement, z-plane or time point, in file order).
    pub block: usize,
    /// Routing channel within the block.
    pub channel: usize,
    /// The counts, with the bin width from the setup.
    pub cube: AnyCube,
}

const FILE_HEADER: usize = 42;
const BLOCK_HEADER: usize = 22;
const HEADER_VALID: u16 = 0x5555;
const ZIPPED: u16 = 0x1000;

struct Reader {
    file: File,
    path: PathBuf,
    len: u64,
}

impl Reader {
    fn err(&self, what: impl Into<String>) -> Error {
        Error::Format {
            path: self.path.clone(),
            what: what.into(),
        }
    }

    /// `n` bytes at `offset`, or an error naming `what` when the file is too short.
    fn bytes(&mut self, offset: u64, n: usize, what: &str) -> Result<Vec<u8>> {
        if offset
            .checked_add(n as u64)
            .is_none_or(|end| end > self.len)
        {
            return Err(self.err(format!(
                "{what}: needs {n} bytes at offset {offset}, the file has {} (truncated?)",
                self.len
            )));
        }
        let mut buf = vec![0u8; n];
        self.file
            .seek(SeekFrom::Start(offset))
            .and_then(|_| self.file.read_exact(&mut buf))
            .map_err(|e| self.err(format!("{what}: {e}")))?;
        Ok(buf)
    }
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// Values of the setup's `[KEY,TYPE,VALUE]` entries.
fn setup_value(setup: &str, key: &str) -> Option<String> {
    let pat = format!("[{key},");
    let start = setup.find(&pat)? + pat.len();
    let rest = &setup[start..];
    let end = rest.find(']')?;
    let (_, value) = rest[..end].split_once(',')?;
    Some(value.trim().to_string())
}

/// Read every image of a `.sdt` file.
pub fn read_sdt(path: &Path) -> Result<Vec<SdtImage>> {
    let file = File::open(path).map_err(|e| Error::Io {
        path: path.to_path_buf(),
        source: e,
    })?;
    let len = file.metadata().map_or(0, |m| m.len());
    let mut r = Reader {
        file,
        path: path.to_path_buf(),
        len,
    };
    let h = r.bytes(0, FILE_HEADER, "file header")?;
    if u16_at(&h, 34) != HEADER_VALID {
        return Err(r.err(format!(
            "not a Becker & Hickl .sdt file: header_valid is {:#06x}, expected 0x5555",
            u16_at(&h, 34)
        )));
    }
    let setup_offset = u64::from(u32_at(&h, 8));
    let setup_len = usize::from(u16_at(&h, 12));
    let mut block_offset = u64::from(u32_at(&h, 14));
    let mut blocks = usize::from(u16_at(&h, 18));
    if blocks == 0x7fff {
        blocks = u32_at(&h, 36) as usize; // large files keep the count in reserved1
    }
    let setup_bytes = r.bytes(setup_offset, setup_len, "setup section")?;
    let setup: String = setup_bytes.iter().map(|&b| char::from(b)).collect();
    let int = |r: &Reader, key: &str| -> Result<usize> {
        let v =
            setup_value(&setup, key).ok_or_else(|| r.err(format!("setup section lacks {key}")))?;
        v.parse::<usize>()
            .ok()
            .filter(|&n| n > 0)
            .ok_or_else(|| r.err(format!("setup {key} = {v:?}: expected a positive integer")))
    };
    let float = |r: &Reader, key: &str| -> Result<f64> {
        let v =
            setup_value(&setup, key).ok_or_else(|| r.err(format!("setup section lacks {key}")))?;
        v.parse::<f64>()
            .ok()
            .filter(|x| x.is_finite() && *x > 0.0)
            .ok_or_else(|| r.err(format!("setup {key} = {v:?}: expected a positive number")))
    };
    let (w, hgt, bins) = (
        int(&r, "SP_IMG_X")?,
        int(&r, "SP_IMG_Y")?,
        int(&r, "SP_ADC_RE")?,
    );
    let channels = int(&r, "SP_SCAN_RX").unwrap_or(1) * int(&r, "SP_SCAN_RY").unwrap_or(1);
    let bin_ns = float(&r, "SP_TAC_R")? / float(&r, "SP_TAC_G")? / bins as f64 * 1e9;
    let per_channel = w * hgt * bins;

    let mut images = Vec::new();
    for block in 0..blocks {
        let what = format!("data block {block}");
        let bh = r.bytes(block_offset, BLOCK_HEADER, &format!("{what} header"))?;
        let data_offset = u64::from(u32_at(&bh, 2));
        let next = u64::from(u32_at(&bh, 6));
        let block_type = u16_at(&bh, 10);
        let length = u32_at(&bh, 18) as usize;
        let stored = r.bytes(data_offset, length, &what)?;
        let raw = if block_type & ZIPPED != 0 {
            unzip(&stored).map_err(|e| r.err(format!("{what}: compressed data: {e}")))?
        } else {
            stored
        };
        let (size, kind) = match block_type & 0x0f00 {
            0x000 => (2, "u16"),
            0x100 => (4, "u32"),
            0x200 => (8, "f64"),
            other => {
                return Err(r.err(format!(
                    "{what}: unknown data type bits {other:#x} in block type {block_type:#x}"
                )));
            }
        };
        let values = raw.len() / size;
        if raw.len() % size != 0 || values != channels * per_channel {
            return Err(r.err(format!(
                "{what}: holds {} bytes, expected {channels} channel(s) x {hgt} x {w} pixels x {bins} bins of {kind} = {} bytes",
                raw.len(),
                channels * per_channel * size
            )));
        }
        for channel in 0..channels {
            let bytes = &raw[channel * per_channel * size..(channel + 1) * per_channel * size];
            let cube = match kind {
                "u16" => AnyCube::U16(Cube::new(
                    shape(
                        bytes
                            .chunks_exact(2)
                            .map(|b| u16::from_le_bytes([b[0], b[1]])),
                        hgt,
                        w,
                        bins,
                    ),
                    bin_ns,
                )?),
                "u32" => AnyCube::U32(Cube::new(
                    shape(
                        bytes
                            .chunks_exact(4)
                            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]])),
                        hgt,
                        w,
                        bins,
                    ),
                    bin_ns,
                )?),
                _ => AnyCube::F32(Cube::new(
                    shape(
                        bytes
                            .chunks_exact(8)
                            .map(|b| f64::from_le_bytes(b.try_into().expect("8 bytes")) as f32),
                        hgt,
                        w,
                        bins,
                    ),
                    bin_ns,
                )?),
            };
            images.push(SdtImage {
                block,
                channel,
                cube,
            });
        }
        block_offset = next;
    }
    Ok(images)
}

fn shape<T>(values: impl Iterator<Item = T>, h: usize, w: usize, bins: usize) -> Array3<T> {
    Array3::from_shape_vec((h, w, bins), values.collect()).expect("length checked")
}

/// The one member of a zipped data block.
fn unzip(stored: &[u8]) -> std::result::Result<Vec<u8>, String> {
    let mut archive =
        zip::ZipArchive::new(std::io::Cursor::new(stored)).map_err(|e| e.to_string())?;
    if archive.is_empty() {
        return Err("empty zip archive".into());
    }
    let mut member = archive.by_index(0).map_err(|e| e.to_string())?;
    let mut out = Vec::with_capacity(usize::try_from(member.size()).unwrap_or(0));
    member.read_to_end(&mut out).map_err(|e| e.to_string())?;
    Ok(out)
}

/// Write a minimal `.sdt` (header, setup text, one block per cube, optionally zipped), for
/// tests and for handing data to tools that read B&H files.
pub fn write_sdt(path: &Path, cubes: &[Cube<u16>], zipped: bool) -> Result<()> {
    let first = cubes
        .first()
        .ok_or_else(|| Error::Shape("write_sdt needs at least one cube".into()))?;
    let (h, w) = first.shape();
    let bins = first.bins();
    if cubes
        .iter()
        .any(|c| c.shape() != (h, w) || c.bins() != bins)
    {
        return Err(Error::Shape(
            "write_sdt: every cube must have the same shape".into(),
        ));
    }
    let tac_r = first.bin_ns() * bins as f64 * 1e-9;
    let setup = format!(
        "*SETUP\r\n  SYS_PARA_BEGIN:\r\n  #SP [SP_IMG_X,I,{w}]\r\n  #SP [SP_IMG_Y,I,{h}]\r\n  #SP [SP_ADC_RE,I,{bins}]\r\n  #SP [SP_TAC_R,F,{tac_r:e}]\r\n  #SP [SP_TAC_G,I,1]\r\n  #SP [SP_SCAN_RX,I,1]\r\n  #SP [SP_SCAN_RY,I,1]\r\n  SYS_PARA_END:\r\n*END\r\n"
    );
    let io = |e: std::io::Error| Error::Io {
        path: path.to_path_buf(),
        source: e,
    };
    let mut payloads = Vec::new();
    for c in cubes {
        let raw: Vec<u8> = c.counts().iter().flat_map(|v| v.to_le_bytes()).collect();
        payloads.push(if zipped {
            zip_member(&raw).map_err(|e| Error::Format {
                path: path.to_path_buf(),
                what: e,
            })?
        } else {
            raw
        });
    }
    let setup_offset = FILE_HEADER;
    let mut offset = setup_offset + setup.len();
    let mut out = vec![0u8; FILE_HEADER];
    out[0..2].copy_from_slice(&0x2bfu16.to_le_bytes());
    out[8..12].copy_from_slice(&(setup_offset as u32).to_le_bytes());
    out[12..14].copy_from_slice(&(setup.len() as u16).to_le_bytes());
    out[14..18].copy_from_slice(&(offset as u32).to_le_bytes());
    out[18..20].copy_from_slice(&(cubes.len() as u16).to_le_bytes());
    out[34..36].copy_from_slice(&HEADER_VALID.to_le_bytes());
    out.extend_from_slice(setup.as_bytes());
    for (i, p) in payloads.iter().enumerate() {
        let data = offset + BLOCK_HEADER;
        let next = data + p.len();
        let mut bh = vec![0u8; BLOCK_HEADER];
        bh[2..6].copy_from_slice(&(data as u32).to_le_bytes());
        bh[6..10].copy_from_slice(
            &(if i + 1 < payloads.len() {
                next as u32
            } else {
                0
            })
            .to_le_bytes(),
        );
        bh[10..12].copy_from_slice(&(if zipped { ZIPPED } else { 0 }).to_le_bytes());
        bh[14..18].copy_from_slice(&(i as u32).to_le_bytes());
        bh[18..22].copy_from_slice(&(p.len() as u32).to_le_bytes());
        out.extend_from_slice(&bh);
        out.extend_from_slice(p);
        offset = next;
    }
    std::fs::write(path, out).map_err(io)
}

fn zip_member(raw: &[u8]) -> std::result::Result<Vec<u8>, String> {
    use std::io::Write;
    let mut buf = std::io::Cursor::new(Vec::new());
    let mut z = zip::ZipWriter::new(&mut buf);
    let opts = zip::write::SimpleFileOptions::default()
        .compression_method(zip::CompressionMethod::Deflated);
    z.start_file("data_block", opts)
        .map_err(|e| e.to_string())?;
    z.write_all(raw).map_err(|e| e.to_string())?;
    z.finish().map_err(|e| e.to_string())?;
    Ok(buf.into_inner())
}
