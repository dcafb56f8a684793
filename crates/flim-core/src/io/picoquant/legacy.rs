//! The older PicoQuant T3 files with fixed binary headers: `.pt3` (PicoHarp 300, file format
//! 2.0) and `.ht3` (HydraHarp, formats 1.0 and 2.0), as PicoQuant's file demos and
//! phconvert's `pqreader` lay them out (packed little-endian structs):
//!
//! - Both start with 328 bytes of text: ident (16), format version (6), creator name (18) and
//!   version (12), file time (18), CR LF (2), comment (256).
//! - `.pt3`: 18 i32 (measurement mode at byte 348) .. display curves, parameters and repeat
//!   settings (to byte 536), board header with the TCSPC resolution in ns as f32 at byte
//!   584, router settings, then the TTTR header at byte 692: the sync rate (Hz) at 704, the
//!   record count at 720, the image-header length (i32 words) at 724; records from byte 728
//!   plus the image header.
//! - `.ht3`: measurement mode at byte 340, resolution in ps as f64 at 352, the number of
//!   input channels at 664, 20 bytes per input from 696, then the sync rate (i32, Hz), stop
//!   after, stop reason, the image-header length (i32 words) and the record count (u64).
//!
//! Records are PicoHarp T3 (`.pt3`), HydraHarp V1 T3 (`.ht3` 1.0) or V2 T3 (`.ht3` 2.0):
//! [`super::records`]. Point measurements read as one pixel per channel. Images need the
//! instrument-specific image header of SymPhoTime 32, which is not documented publicly:
//! such files are refused with a way out (SymPhoTime 64 exports them as `.ptu`).

use super::records::{RecordKind, T3Decoder};
use crate::error::Result;
use crate::io::photons::{StreamSpec, announced_records, histogram_records, open};
use crate::io::recording::{
    Format, ReadOptions, Recording, check_bin_ns, check_period_ns, format_error,
};
use std::io::Read;
use std::path::Path;

/// Longest fixed header (`.ht3` with 64 inputs), bytes.
const MAX_HEADER: usize = 696 + 20 * MAX_INPUTS + 24;
/// Most input channels an `.ht3` header may list (8 modules of 8 inputs).
const MAX_INPUTS: usize = 64;

/// A little-endian field reader over the header bytes, naming the field on failure.
struct Fields<'a> {
    path: &'a Path,
    bytes: &'a [u8],
}

impl Fields<'_> {
    fn slice(&self, at: usize, n: usize, name: &str) -> Result<&[u8]> {
        self.bytes.get(at..at + n).ok_or_else(|| {
            format_error(
                self.path,
                format!(
                    "header field {name} at byte {at}: the file ends at byte {} (truncated?)",
                    self.bytes.len()
                ),
            )
        })
    }
    fn i32(&self, at: usize, name: &str) -> Result<i32> {
        Ok(i32::from_le_bytes(
            self.slice(at, 4, name)?.try_into().expect("4 bytes"),
        ))
    }
    fn f32(&self, at: usize, name: &str) -> Result<f32> {
        Ok(f32::from_le_bytes(
            self.slice(at, 4, name)?.try_into().expect("4 bytes"),
        ))
    }
    fn f64(&self, at: usize, name: &str) -> Result<f64> {
        Ok(f64::from_le_bytes(
            self.slice(at, 8, name)?.try_into().expect("8 bytes"),
        ))
    }
    fn u64(&self, at: usize, name: &str) -> Result<u64> {
        Ok(u64::from_le_bytes(
            self.slice(at, 8, name)?.try_into().expect("8 bytes"),
        ))
    }
    fn text(&self, at: usize, n: usize) -> String {
        self.bytes
            .get(at..at + n)
            .unwrap_or_default()
            .iter()
            .take_while(|&&c| c != 0)
            .map(|&c| char::from(c))
            .collect::<String>()
            .trim()
            .to_string()
    }
}

/// What the fixed header says, in the units the stream needs.
struct Header {
    kind: RecordKind,
    kind_name: &'static str,
    version: String,
    resolution_ns: f64,
    period_ns: f64,
    records: i64,
    image_words: i32,
    records_offset: u64,
    creator: String,
    comment: String,
}

fn parse(path: &Path, bytes: &[u8], format: Format) -> Result<Header> {
    let f = Fields { path, bytes };
    let err = |what: String| format_error(path, what);
    let ident = f.text(0, 16);
    let version = f.text(16, 6);
    let (want_ident, name) = match format {
        Format::Pt3 => ("PicoHarp", ".pt3"),
        _ => ("HydraHarp", ".ht3"),
    };
    if !ident.starts_with(want_ident) {
        return Err(err(format!(
            "not a {name} file: ident {ident:?} at byte 0, expected {want_ident:?}"
        )));
    }
    let (kind, kind_name) = match (format, version.as_str()) {
        (Format::Pt3, "2.0") => (RecordKind::PicoHarpT3, "PicoHarp 300 T3"),
        (Format::Ht3, "1.0") => (RecordKind::HydraHarpV1T3, "HydraHarp V1 T3"),
        (Format::Ht3, "2.0") => (RecordKind::HydraHarpV2T3, "HydraHarp V2 T3"),
        _ => {
            return Err(err(format!(
                "{name} format version {version:?} at byte 16: expected {}",
                if format == Format::Pt3 {
                    "\"2.0\""
                } else {
                    "\"1.0\" or \"2.0\""
                }
            )));
        }
    };
    let (mode_at, bits_at) = if format == Format::Pt3 {
        (348, 332)
    } else {
        (340, 332)
    };
    let bits = f.i32(bits_at, "BitsPerRecord")?;
    if bits != 32 {
        return Err(err(format!(
            "header field BitsPerRecord at byte {bits_at} = {bits}: expected 32"
        )));
    }
    let mode = f.i32(mode_at, "MeasurementMode")?;
    if mode != 3 {
        return Err(err(format!(
            "header field MeasurementMode at byte {mode_at} = {mode}: expected 3 (T3; T2 files have no decay times and are .pt2/.ht2)"
        )));
    }
    let (resolution_ns, rate, records, image_words, image_at) = if format == Format::Pt3 {
        let res = f64::from(f.f32(584, "Resolution")?);
        let res = check_bin_ns(
            path,
            &format!("header field Resolution at byte 584 = {res} ns"),
            res,
        )?;
        (
            res,
            f.i32(704, "InpRate0")?,
            i64::from(f.i32(720, "nRecords")?),
            f.i32(724, "ImgHdrSize")?,
            728,
        )
    } else {
        let res = f.f64(352, "Resolution")?;
        let res = check_bin_ns(
            path,
            &format!("header field Resolution at byte 352 = {res} ps"),
            res * 1e-3,
        )?;
        let inputs = f.i32(664, "InpChansPresent")?;
        let inputs = usize::try_from(inputs)
            .ok()
            .filter(|&n| n <= MAX_INPUTS)
            .ok_or_else(|| {
                err(format!(
                    "header field InpChansPresent at byte 664 = {inputs}: expected 0..{MAX_INPUTS}"
                ))
            })?;
        let tt = 696 + 20 * inputs;
        let n = f.u64(tt + 16, "nRecords")?;
        let n = i64::try_from(n).map_err(|_| {
            err(format!(
                "header field nRecords at byte {} = {n}: not a record count",
                tt + 16
            ))
        })?;
        (
            res,
            f.i32(tt, "SyncRate")?,
            n,
            f.i32(tt + 12, "ImgHdrSize")?,
            tt + 24,
        )
    };
    let period_ns = check_period_ns(
        path,
        &format!("header field SyncRate (InpRate0 in .pt3) = {rate} Hz"),
        1e9 / f64::from(rate),
    )?;
    if image_words != 0 {
        return Err(err(format!(
            "header: an image header of {image_words} words (ImgHdrSize) follows: biogpu reads {name} point measurements only, because SymPhoTime 32's image header is not documented publicly; export the image as .ptu (SymPhoTime 64) and read that"
        )));
    }
    Ok(Header {
        kind,
        kind_name,
        version,
        resolution_ns,
        period_ns,
        records,
        image_words,
        records_offset: image_at as u64,
        creator: format!("{} {}", f.text(22, 18), f.text(40, 12)),
        comment: f.text(72, 256),
    })
}

/// Histogram a `.pt3` or `.ht3` point measurement into one decay per channel (see the module
/// docs); binning, bins, channel and frame options as for `.ptu`.
pub fn read_pt3_ht3(path: &Path, opts: &ReadOptions) -> Result<Recording> {
    let format = Format::of(path)?;
    let err = |what: String| format_error(path, what);
    if !matches!(format, Format::Pt3 | Format::Ht3) {
        return Err(err(format!(
            "read_pt3_ht3 reads .pt3 and .ht3 files, not .{}",
            format.name()
        )));
    }
    if let Some(c) = opts.sync_channel {
        return Err(err(format!(
            "--sync-channel {c} pairs T2 time tags with a sync; .{} files hold T3 records, which carry decay times already",
            format.name()
        )));
    }
    let (mut r, len) = open(path)?;
    let mut head = Vec::with_capacity(MAX_HEADER);
    (&mut r)
        .take(MAX_HEADER as u64)
        .read_to_end(&mut head)
        .map_err(|e| err(format!("header: {e}")))?;
    let h = parse(path, &head, format)?;
    debug_assert_eq!(h.image_words, 0);
    // Back to the first record: reopen and skip the header.
    let (mut r, _) = open(path)?;
    std::io::copy(&mut (&mut r).take(h.records_offset), &mut std::io::sink())
        .map_err(|e| err(format!("header: {e}")))?;
    let spec = StreamSpec {
        expected_records: announced_records(
            path,
            Some(h.records),
            "header field nRecords",
            len,
            h.records_offset,
        )?,
        dtime_channels: h.kind.t3_dtime_channels(),
        channel_ns: h.resolution_ns,
        period_ns: h.period_ns,
        period_channels: ((h.period_ns / h.resolution_ns).ceil() as usize).max(1),
        scan: None,
        size_fields: "the image size",
    };
    let mut dec = T3Decoder::new(h.kind);
    let streamed = histogram_records(path, &mut r, &spec, &mut dec, opts)?;
    let mut metadata = vec![
        (
            "format".to_string(),
            format!("PicoQuant .{} {}", format.name(), h.version),
        ),
        ("record type".into(), h.kind_name.into()),
    ];
    for (k, v) in [("CreatorName", h.creator), ("Comment", h.comment)] {
        if !v.trim().is_empty() {
            metadata.push((k.into(), v));
        }
    }
    metadata.extend(streamed.metadata);
    Ok(Recording {
        path: path.to_path_buf(),
        format,
        images: streamed.images,
        metadata,
    })
}
