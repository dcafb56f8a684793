//! PicoQuant `.ptu` files: the tagged header ([`super::tags`]) and T3 or T2 records
//! ([`super::records`]), histogrammed while they stream ([`crate::io::photons`]).
//!
//! Images: the `ImgHdr_LineStart`, `ImgHdr_LineStop` and `ImgHdr_Frame` tags name the marker
//! bits, `ImgHdr_PixX`/`ImgHdr_PixY` the size; files without image headers (point
//! measurements, e.g. an IRF) give a 1 x 1 image. T3: the decay-time channel is
//! `MeasDesc_Resolution` wide and the laser period is `MeasDesc_GlobalResolution` (else
//! `1 / TTResult_SyncRate`). T2: time tags are `MeasDesc_GlobalResolution` wide, decay times
//! are counted in them from the last sync, and the period is `1 / TTResult_SyncRate`.
//!
//! No maintained Rust crate reads PTU T3 images (`tttr-toolbox` reads T2 and HydraHarp T3
//! only, without image markers, and pulls in Python bindings), hence this parser.

use super::records::{RecordKind, SyncSource, T2Decoder, T3Decoder};
use super::tags::{PTU_MAGIC, PtuHeader, read_header};
use crate::error::Result;
use crate::io::photons::{Decode, Scan, StreamSpec, announced_records, histogram_records, open};
use crate::io::recording::{
    Format, ReadOptions, Recording, check_bin_ns, check_period_ns, format_error,
};
use std::path::Path;

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

/// A time in seconds from tag `name`, checked with `check` (which takes ns).
fn seconds_tag(
    h: &PtuHeader,
    path: &Path,
    name: &str,
    check: fn(&Path, &str, f64) -> Result<f64>,
) -> Result<Option<f64>> {
    h.float(name)
        .map(|v| {
            check(
                path,
                &format!("header: {name} = {v} s{}", h.tag_at(name)),
                v * 1e9,
            )
        })
        .transpose()
}

/// The laser period in ns from `TTResult_SyncRate`.
fn sync_period_ns(h: &PtuHeader, path: &Path) -> Result<Option<f64>> {
    h.float("TTResult_SyncRate")
        .map(|rate| {
            check_period_ns(
                path,
                &format!(
                    "header: TTResult_SyncRate = {rate} Hz{}",
                    h.tag_at("TTResult_SyncRate")
                ),
                1e9 / rate,
            )
        })
        .transpose()
}

/// Histogram a `.ptu` file's records into decay images (see the module docs), one per frame
/// and channel, or one per channel with frames summed (`opts`).
pub fn read_ptu(path: &Path, opts: &ReadOptions) -> Result<Recording> {
    let (mut r, len) = open(path)?;
    let h = read_header(path, &mut r, len, &[PTU_MAGIC])?;
    let err = |what: String| format_error(path, what);
    let code = h
        .int("TTResultFormat_TTTRRecType")
        .ok_or_else(|| err("header lacks TTResultFormat_TTTRRecType".into()))?;
    let (kind, kind_name) = RecordKind::of(code).map_err(|e| err(format!("header: {e}")))?;
    let (channel_ns, period_ns, mut dec): (f64, f64, Box<dyn Decode>) = if kind.is_t2() {
        let sync = match (opts.sync_channel, kind) {
            (Some(c), _) => SyncSource::Input(c),
            (None, RecordKind::PicoHarpT2) => {
                return Err(err(format!(
                    "{kind_name} records: a decay time is the time from the laser pulse to the photon, and a PicoHarp 300 in T2 mode records no sync event, only its inputs' time tags: name the input that received the laser sync (--sync-channel 0 on the usual set-up)"
                )));
            }
            (None, _) => SyncSource::Recorded,
        };
        let tick =
            seconds_tag(&h, path, "MeasDesc_GlobalResolution", check_bin_ns)?.ok_or_else(|| {
                err("header lacks MeasDesc_GlobalResolution (the T2 time-tag unit)".into())
            })?;
        let period = sync_period_ns(&h, path)?.ok_or_else(|| {
            err("header lacks TTResult_SyncRate (the laser period of a T2 file)".into())
        })?;
        (tick, period, Box::new(T2Decoder::new(kind, sync)))
    } else {
        if let Some(c) = opts.sync_channel {
            return Err(err(format!(
                "--sync-channel {c} pairs T2 time tags with a sync; this file has {kind_name} records, which carry decay times already"
            )));
        }
        let res = seconds_tag(&h, path, "MeasDesc_Resolution", check_bin_ns)?
            .ok_or_else(|| err("header lacks MeasDesc_Resolution (the TCSPC bin width)".into()))?;
        let period = match seconds_tag(&h, path, "MeasDesc_GlobalResolution", check_period_ns)? {
            Some(p) => p,
            None => sync_period_ns(&h, path)?.ok_or_else(|| {
                err("header lacks MeasDesc_GlobalResolution and TTResult_SyncRate (the laser period)".into())
            })?,
        };
        (res, period, Box::new(T3Decoder::new(kind)))
    };
    let period_channels = ((period_ns / channel_ns).ceil() as usize).max(1);
    let spec = StreamSpec {
        expected_records: announced_records(
            path,
            h.int("TTResult_NumberOfRecords"),
            &format!(
                "header: TTResult_NumberOfRecords{}",
                h.tag_at("TTResult_NumberOfRecords")
            ),
            len,
            h.records_offset,
        )?,
        dtime_channels: if kind.is_t2() {
            period_channels
        } else {
            kind.t3_dtime_channels()
        },
        channel_ns,
        period_ns,
        period_channels,
        scan: scan_of(&h, path)?,
        size_fields: "ImgHdr_PixX x ImgHdr_PixY",
    };
    let streamed = histogram_records(path, &mut r, &spec, dec.as_mut(), opts)?;
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
    metadata.extend(streamed.metadata);
    Ok(Recording {
        path: path.to_path_buf(),
        format: Format::Ptu,
        images: streamed.images,
        metadata,
    })
}
