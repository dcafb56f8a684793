//! The `.set` setup file SPCM writes beside every `.spc` photon stream (B&H
//! `SPC_data_file_structure.h`; phconvert's `bhreader.load_set` reads it the same way):
//!
//! - a 42-byte file header: `revision` (i16 at byte 0: bits 0-3 the software revision, bits
//!   4-11 the module type from software revision 12 on), the offsets and lengths of the
//!   parts, `header_valid`, a checksum;
//! - the file information, text between `*IDENTIFICATION` and `*END` (`Key : value` lines);
//! - the setup, text between `*SETUP` and `*END`: between `SYS_PARA_BEGIN:` and
//!   `SYS_PARA_END:` one `#XX [KEY,TYPE,VALUE]` entry per line (TYPE `I`, `U`, `L` integer,
//!   `F` float, `B` boolean, `S` string), then (software 8.1 on) a binary part after
//!   `BIN_PARA_BEGIN:` that holds display settings only and is skipped.
//!
//! The setup offsets of the header are 16-bit lengths that SPCM lets overflow, so the parts
//! are found by their `*IDENTIFICATION` / `*SETUP` lines, as phconvert and SPCM do. The first
//! entry of a key counts (multi-module systems repeat module entries in later subsections).

use crate::error::Result;
use crate::io::recording::{format_error, io_error};
use std::io::Read;
use std::path::{Path, PathBuf};

/// Largest `.set` file read (16 MiB): SPCM's are tens of KiB.
pub(crate) const MAX_SET_BYTES: u64 = 16 << 20;
/// Length of the binary file header.
const HEADER_BYTES: usize = 42;
/// First software revision whose `revision` field carries the module type (bits 4-11).
const REV_WITH_MODULE: u16 = 12;

/// How a B&H module lays out its FIFO records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Layout {
    /// 32-bit records of SPC-130/134/140/144/150/154/160/180/830: read.
    Fifo32,
    /// SPC-600/630: 48-bit (4096 channels) or 32-bit (256 channels) records, another layout.
    Spc6xx,
    /// SPC-QC-004/006/104/106: QC records (channel bits, femtosecond clock).
    Qc,
    /// DPC-230: a TDC stream of its own.
    Dpc230,
    /// Modules without a FIFO photon stream (SPC-700/730/930).
    NoFifo,
}

/// Module type codes of the `revision` field (bits 4-11), as `SPC_data_file_structure.h`
/// and phconvert list them.
const MODULES: &[(u8, &str, Layout)] = &[
    (0x20, "SPC-130", Layout::Fifo32),
    (0x21, "SPC-600", Layout::Spc6xx),
    (0x22, "SPC-630", Layout::Spc6xx),
    (0x23, "SPC-700", Layout::NoFifo),
    (0x24, "SPC-730", Layout::NoFifo),
    (0x25, "SPC-830", Layout::Fifo32),
    (0x26, "SPC-140", Layout::Fifo32),
    (0x27, "SPC-930", Layout::NoFifo),
    (0x28, "SPC-150", Layout::Fifo32),
    (0x29, "DPC-230", Layout::Dpc230),
    (0x2a, "SPC-130EM", Layout::Fifo32),
    (0x2b, "SPC-160", Layout::Fifo32),
    (0x2e, "SPC-150N", Layout::Fifo32),
    (0x80, "SPC-150NX", Layout::Fifo32),
    (0x81, "SPC-160X", Layout::Fifo32),
    (0x82, "SPC-160PCIE", Layout::Fifo32),
    (0x83, "SPC-130EMN", Layout::Fifo32),
    (0x84, "SPC-180N", Layout::Fifo32),
    (0x85, "SPC-180NX", Layout::Fifo32),
    (0x86, "SPC-180NXX", Layout::Fifo32),
    (0x87, "SPC-180N-USB", Layout::Fifo32),
    (0x88, "SPC-130IN", Layout::Fifo32),
    (0x89, "SPC-130INX", Layout::Fifo32),
    (0x8a, "SPC-130INXX", Layout::Fifo32),
    (0x8b, "SPC-QC-104", Layout::Qc),
    (0x8c, "SPC-QC-004", Layout::Qc),
    (0x8d, "SPC-QC-106", Layout::Qc),
    (0x8e, "SPC-QC-006", Layout::Qc),
];

/// The module a `.set` file names.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Module {
    pub name: &'static str,
    pub layout: Layout,
    /// The type code, or `None` when the module was found by name in the text (software
    /// revisions below 12).
    pub code: Option<u8>,
}

/// One `[KEY,TYPE,VALUE]` entry of the setup and where it stands.
#[derive(Debug, Clone)]
struct Entry {
    key: String,
    kind: String,
    value: String,
    at: usize,
}

/// What a `.set` file says.
#[derive(Debug)]
pub(crate) struct SetFile {
    pub path: PathBuf,
    pub revision: u16,
    pub module: Module,
    /// `Key : value` lines of the file information.
    pub ident: Vec<(String, String)>,
    entries: Vec<Entry>,
}

impl SetFile {
    fn entry(&self, key: &str) -> Option<&Entry> {
        self.entries.iter().find(|e| e.key == key)
    }

    /// Where the entry `key` stands, for messages.
    pub fn describe(&self, key: &str) -> String {
        match self.entry(key) {
            Some(e) => format!("setup entry {key} = {:?} at byte {}", e.value, e.at),
            None => format!("setup entry {key}"),
        }
    }

    /// The integer entry `key` (`None` when absent); an error when it is no integer.
    pub fn int(&self, key: &str) -> Result<Option<i64>> {
        let Some(e) = self.entry(key) else {
            return Ok(None);
        };
        // `B` entries are 0/1; some SPCM versions write integers as `1.000`.
        let v = e.value.trim();
        if let Ok(i) = v.parse::<i64>() {
            return Ok(Some(i));
        }
        match v.parse::<f64>() {
            Ok(f) if f.is_finite() && f.fract() == 0.0 && f.abs() < 9.0e15 => Ok(Some(f as i64)),
            _ => Err(format_error(
                &self.path,
                format!(
                    "{} (type {}): expected an integer",
                    self.describe(key),
                    e.kind
                ),
            )),
        }
    }

    /// The numeric entry `key` (`None` when absent); an error when it is no number.
    pub fn float(&self, key: &str) -> Result<Option<f64>> {
        let Some(e) = self.entry(key) else {
            return Ok(None);
        };
        e.value.trim().parse::<f64>().map(Some).map_err(|_| {
            format_error(
                &self.path,
                format!(
                    "{} (type {}): expected a number",
                    self.describe(key),
                    e.kind
                ),
            )
        })
    }
}

/// The `.set` file beside `spc` (same stem, `.set` or `.SET`), or why there is none.
pub(crate) fn find_set(spc: &Path) -> Result<PathBuf> {
    let candidates = [spc.with_extension("set"), spc.with_extension("SET")];
    if let Some(p) = candidates.iter().find(|p| p.is_file()) {
        return Ok(p.clone());
    }
    Err(format_error(
        spc,
        format!(
            "no setup file beside it: looked for {} and {}. SPCM writes a .set file with every .spc stream; it holds the TAC range and gain and the ADC resolution (which give the width of a time bin), the module type (which gives the record layout) and the image size, none of which the .spc records carry: put it next to the .spc under the same name",
            candidates[0].display(),
            candidates[1].display()
        ),
    ))
}

/// Position of `needle` in `hay` from `from`.
fn find(hay: &[u8], needle: &[u8], from: usize) -> Option<usize> {
    hay.get(from..)?
        .windows(needle.len())
        .position(|w| w == needle)
        .map(|p| p + from)
}

/// The module a `revision` field names, or (software revisions before 12) the first module
/// name in the text.
fn module_of(path: &Path, revision: u16, text: &[u8]) -> Result<Module> {
    if revision & 0xf >= REV_WITH_MODULE {
        let code = ((revision >> 4) & 0xff) as u8;
        return MODULES
            .iter()
            .find(|m| m.0 == code)
            .map(|&(code, name, layout)| Module {
                name,
                layout,
                code: Some(code),
            })
            .ok_or_else(|| {
                format_error(
                    path,
                    format!(
                        "file header field revision at byte 0 = {revision:#06x}: module type {code:#04x} (bits 4-11) is not a known B&H module, so the record layout of the .spc is unknown"
                    ),
                )
            });
    }
    // Older files: the module appears in the text (e.g. "... with module SPC-830").
    let mut best: Option<(usize, &(u8, &str, Layout))> = None;
    for m in MODULES {
        if let Some(at) = find(text, m.1.as_bytes(), 0) {
            // The longest name at the earliest place ("SPC-130EM" over "SPC-130").
            let better = match best {
                None => true,
                Some((b, bm)) => at < b || (at == b && m.1.len() > bm.1.len()),
            };
            if better {
                best = Some((at, m));
            }
        }
    }
    best.map(|(_, &(_, name, layout))| Module {
        name,
        layout,
        code: None,
    })
    .ok_or_else(|| {
        format_error(
            path,
            format!(
                "file header field revision at byte 0 = {revision:#06x}: software revision {} predates the module type field (12) and the file names no B&H module, so the record layout of the .spc is unknown",
                revision & 0xf
            ),
        )
    })
}

/// Read and parse the `.set` file `path`.
pub(crate) fn read_set(path: &Path) -> Result<SetFile> {
    let err = |what: String| format_error(path, what);
    let file = std::fs::File::open(path).map_err(|e| io_error(path, e))?;
    let len = file.metadata().map_err(|e| io_error(path, e))?.len();
    if len > MAX_SET_BYTES {
        return Err(err(format!(
            "{len} bytes: a setup file is at most {MAX_SET_BYTES} bytes (SPCM writes tens of KiB); is this a .set file?"
        )));
    }
    let mut bytes = Vec::with_capacity(len as usize);
    file.take(MAX_SET_BYTES)
        .read_to_end(&mut bytes)
        .map_err(|e| io_error(path, e))?;
    if bytes.len() < HEADER_BYTES {
        return Err(err(format!(
            "the file ends at byte {}, inside its {HEADER_BYTES}-byte header (truncated?)",
            bytes.len()
        )));
    }
    let revision = u16::from_le_bytes([bytes[0], bytes[1]]);
    let ident = match find(&bytes, b"*IDENTIFICATION", HEADER_BYTES) {
        Some(start) => {
            let end = find(&bytes, b"*END", start).unwrap_or(bytes.len());
            String::from_utf8_lossy(&bytes[start + 15..end])
                .lines()
                .filter_map(|l| l.split_once(':'))
                .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
                .filter(|(k, _)| !k.is_empty())
                .collect()
        }
        None => Vec::new(),
    };
    let setup = find(&bytes, b"*SETUP", HEADER_BYTES).ok_or_else(|| {
        err(format!(
            "no *SETUP section after the {HEADER_BYTES}-byte header: not a B&H setup file (the TAC range, TAC gain and ADC resolution are read from it)"
        ))
    })?;
    let mut entries: Vec<Entry> = Vec::new();
    let mut at = setup;
    for line in bytes[setup..].split(|&b| b == b'\n') {
        let line_at = at;
        at += line.len() + 1;
        let trimmed = line.trim_ascii();
        if trimmed.starts_with(b"SYS_PARA_END")
            || trimmed.starts_with(b"BIN_PARA_BEGIN")
            || (trimmed.starts_with(b"*END") && line_at > setup)
        {
            break;
        }
        if !trimmed.starts_with(b"#") {
            continue;
        }
        let Ok(text) = std::str::from_utf8(trimmed) else {
            continue;
        };
        let (Some(open), Some(close)) = (text.find('['), text.rfind(']')) else {
            continue;
        };
        if close <= open {
            continue;
        }
        let mut fields = text[open + 1..close].splitn(3, ',');
        let (Some(key), Some(kind), Some(value)) = (fields.next(), fields.next(), fields.next())
        else {
            continue;
        };
        let key = key.trim();
        if key.is_empty() || entries.iter().any(|e| e.key == key) {
            continue;
        }
        entries.push(Entry {
            key: key.to_string(),
            kind: kind.trim().to_string(),
            value: value.trim().to_string(),
            at: line_at + (line.len() - line.trim_ascii_start().len()),
        });
    }
    if entries.is_empty() {
        return Err(err(format!(
            "the *SETUP section at byte {setup} holds no [KEY,TYPE,VALUE] entry (the TAC range, TAC gain and ADC resolution are read from it)"
        )));
    }
    let module = module_of(path, revision, &bytes)?;
    Ok(SetFile {
        path: path.to_path_buf(),
        revision,
        module,
        ident,
        entries,
    })
}
