//! PicoQuant `.phu` histogram files: the tagged header ([`super::tags`], magic `PQHISTO`)
//! describes `HistoResult_NumberOfCurves` curves; curve `i` has
//! `HistResDscr_HistogramBins(i)` u32 counts at byte `HistResDscr_DataOffset(i)`, bins
//! `HistResDscr_MDescResolution(i)` seconds wide, and the laser period
//! `1 / HistResDscr_SyncRate(i)`. Each curve reads as a 1 x 1 image whose channel is the
//! curve index (curves are detector channels or repeated measurements).

use super::tags::{PHU_MAGIC, read_header};
use crate::error::Result;
use crate::io::photons::open;
use crate::io::recording::{
    Format, Image, MAX_BINS, Recording, check_bin_ns, check_period_ns, format_error, in_file,
    narrow_counts,
};
use ndarray::Array3;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

/// Most curves a `.phu` file may announce (a MultiHarp 160 has 64 inputs; TRES runs store
/// one curve per step of up to a few hundred).
const MAX_CURVES: usize = 4096;

/// Read every curve of a `.phu` file as a one-pixel decay (see the module docs).
pub fn read_phu(path: &Path) -> Result<Recording> {
    let (mut r, len) = open(path)?;
    let h = read_header(path, &mut r, len, &[PHU_MAGIC])?;
    let err = |what: String| format_error(path, what);
    let n = h
        .int("HistoResult_NumberOfCurves")
        .ok_or_else(|| err("header lacks HistoResult_NumberOfCurves".into()))?;
    let curves = usize::try_from(n)
        .ok()
        .filter(|c| (1..=MAX_CURVES).contains(c))
        .ok_or_else(|| {
            err(format!(
                "header: HistoResult_NumberOfCurves = {n}{}: expected 1..{MAX_CURVES}",
                h.tag_at("HistoResult_NumberOfCurves")
            ))
        })?;
    let mut file = r.into_inner();
    let mut images = Vec::with_capacity(curves);
    for i in 0..curves {
        let idx = i as i32;
        let field = |name: &str| format!("header: {name}({i})");
        let bins = h.int_at("HistResDscr_HistogramBins", idx);
        let bins = bins
            .and_then(|b| usize::try_from(b).ok())
            .filter(|b| (4..=MAX_BINS).contains(b))
            .ok_or_else(|| {
                err(format!(
                    "{} = {bins:?}: expected 4..{MAX_BINS} bins",
                    field("HistResDscr_HistogramBins")
                ))
            })?;
        let offset = h.int_at("HistResDscr_DataOffset", idx);
        let offset = offset
            .and_then(|o| u64::try_from(o).ok())
            .filter(|&o| o >= h.records_offset && o + 4 * bins as u64 <= len)
            .ok_or_else(|| {
                err(format!(
                    "{} = {offset:?}: {} bytes of counts must lie between the header's end (byte {}) and the file's end (byte {len})",
                    field("HistResDscr_DataOffset"),
                    4 * bins,
                    h.records_offset
                ))
            })?;
        let res = h
            .float_at("HistResDscr_MDescResolution", idx)
            .ok_or_else(|| {
                err(format!(
                    "{} is missing",
                    field("HistResDscr_MDescResolution")
                ))
            })?;
        let bin_ns = check_bin_ns(
            path,
            &format!("{} = {res} s", field("HistResDscr_MDescResolution")),
            res * 1e9,
        )?;
        let rate = h.float_at("HistResDscr_SyncRate", idx).ok_or_else(|| {
            err(format!(
                "{} is missing (the laser period)",
                field("HistResDscr_SyncRate")
            ))
        })?;
        let period_ns = check_period_ns(
            path,
            &format!("{} = {rate} Hz", field("HistResDscr_SyncRate")),
            1e9 / rate,
        )?;
        let mut raw = vec![0u8; 4 * bins];
        file.seek(SeekFrom::Start(offset))
            .and_then(|_| file.read_exact(&mut raw))
            .map_err(|e| err(format!("curve {i} at byte {offset}: {e}")))?;
        let counts: Vec<u32> = raw
            .chunks_exact(4)
            .map(|b| u32::from_le_bytes(b.try_into().expect("4 bytes")))
            .collect();
        let counts = Array3::from_shape_vec((1, 1, bins), counts).expect("1 x 1 x bins");
        images.push(Image {
            block: 0,
            frame: 0,
            channel: i,
            cube: narrow_counts(counts, bin_ns, period_ns)
                .map_err(|e| in_file(path, &format!("curve {i}"), e))?,
        });
    }
    let mut metadata = vec![
        (
            "format".to_string(),
            format!("PicoQuant .phu {}", h.version),
        ),
        ("curves".into(), curves.to_string()),
    ];
    for tag in ["HW_Type", "HW_SerialNo", "CreatorSW_Name", "File_Comment"] {
        if let Some(v) = h.text(tag).filter(|v| !v.is_empty()) {
            metadata.push((tag.into(), v.into()));
        }
    }
    Ok(Recording {
        path: path.to_path_buf(),
        format: Format::Phu,
        images,
        metadata,
    })
}
