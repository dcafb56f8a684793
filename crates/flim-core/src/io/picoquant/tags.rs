//! PicoQuant's tagged header, shared by `.ptu` (time tags) and `.phu` (histograms): the
//! magic, an 8-byte version, then 48-byte tags (32-byte name, i32 index, u32 type, 8-byte
//! value) of every PicoQuant type (empty, bool, int, bit set, colour, float, date, float
//! array, ANSI and wide strings, binary blobs; the last five store their data after the tag)
//! up to `Header_End`.

use crate::error::Result;
use crate::io::photons::{Counted, open};
use crate::io::recording::format_error;
use std::fs::File;
use std::io::{BufReader, Read};
use std::path::Path;

/// Magic of `.ptu` files.
pub(crate) const PTU_MAGIC: &[u8; 8] = b"PQTTTR\0\0";
/// Magic of `.phu` files.
pub(crate) const PHU_MAGIC: &[u8; 8] = b"PQHISTO\0";
const TAG_LEN: u64 = 48;

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

    /// The value of element `index` of array tag `name`.
    pub fn get_at(&self, name: &str, index: i32) -> Option<&TagValue> {
        self.tags
            .iter()
            .find(|t| t.name == name && t.index == index)
            .map(|t| &t.value)
    }

    /// Element `index` of array tag `name` as an integer.
    pub fn int_at(&self, name: &str, index: i32) -> Option<i64> {
        match self.get_at(name, index)? {
            TagValue::Int(v) => Some(*v),
            _ => None,
        }
    }

    /// Element `index` of array tag `name` as a float (float or int).
    pub fn float_at(&self, name: &str, index: i32) -> Option<f64> {
        match self.get_at(name, index)? {
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

/// Read the header (the tags) of a `.ptu` (time tags) or `.phu` (histograms) file.
pub fn read_ptu_header(path: &Path) -> Result<PtuHeader> {
    let (mut r, len) = open(path)?;
    read_header(path, &mut r, len, &[PTU_MAGIC, PHU_MAGIC])
}

/// The tags of a file whose magic is one of `magics`; `r` is left at the first record.
pub(crate) fn read_header(
    path: &Path,
    r: &mut Counted<BufReader<File>>,
    len: u64,
    magics: &[&[u8; 8]],
) -> Result<PtuHeader> {
    let err = |what: String| format_error(path, what);
    let mut head = [0u8; 16];
    r.read_exact(&mut head).map_err(|_| {
        err(format!(
            "file header: needs 16 bytes, the file has {len} (truncated?)"
        ))
    })?;
    if !magics.iter().any(|m| head[..8] == m[..]) {
        let kind = |m: &&[u8; 8]| if *m == PHU_MAGIC { ".phu" } else { ".ptu" };
        let names: Vec<&str> = magics.iter().map(kind).collect();
        let want: Vec<String> = magics
            .iter()
            .map(|m| {
                format!(
                    "{:?}",
                    String::from_utf8_lossy(&m[..]).trim_end_matches('\0')
                )
            })
            .collect();
        return Err(err(format!(
            "not a PicoQuant {} file: magic {:?} at byte 0, expected {}",
            names.join(" or "),
            String::from_utf8_lossy(&head[..8]).trim_end_matches('\0'),
            want.join(" or ")
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

impl PtuHeader {
    /// ` (tag at byte N)` for tag `name`, or nothing if absent: for error messages.
    pub(crate) fn tag_at(&self, name: &str) -> String {
        self.tags
            .iter()
            .find(|t| t.name == name)
            .map_or(String::new(), |t| format!(" (tag at byte {})", t.offset))
    }
}
