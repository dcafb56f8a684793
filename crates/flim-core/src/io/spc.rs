//! Becker & Hickl FIFO photon streams: a `.spc` file of 32-bit records and the `.set` setup
//! file SPCM writes beside it ([`set`]), histogrammed while they stream
//! ([`crate::io::photons`]). Layouts from B&H's `SPC_data_file_structure.h` and the TCSPC
//! handbook; phconvert's `bhreader.load_spc` is the reference decoder of the tests.
//!
//! - **Setup** (`X.set` or `X.SET` beside `X.spc`, required): the module type (`revision`
//!   field of the `.set` header) gives the record layout; `SP_TAC_R` (s), `SP_TAC_G` and
//!   `SP_ADC_RE` give the bin width `TAC_R / (TAC_G x ADC_RE)`; `SP_MODE` 5 (FIFO imaging,
//!   `FIFO_32M`) makes an image of `SP_IMG_X` x `SP_IMG_Y` pixels, any other mode a point
//!   measurement (one pixel per routing channel). The `.set` holds no laser repetition rate:
//!   the period is the TAC window `TAC_R / TAC_G` (the metadata says so; `--period-ns`
//!   overrides it).
//! - **Records** (SPC-130/134/140/144/150/154/160/180/830, little-endian u32): the first is
//!   a header: macro-time clock in 0.1 ns (bits 0-23), markers recorded (bit 25), raw
//!   diagnostic dump (bit 26, refused), routing bits (27-30), bit 31 set. Then per record:
//!   macro time MT (bits 0-11), routing ROUT (12-15), ADC (16-27), MARK (28), GAP (29),
//!   MTOV (30), INVALID (31).
//!   - INVALID + MTOV without MARK: bits 0-27 count macro-time overflows (of 4096 ticks).
//!   - MTOV on any other record: one overflow before it.
//!   - MARK: a marker; ROUT holds its bits (0 pixel, 1 line, 2 frame, 3 user). B&H sets
//!     INVALID on markers too. (phconvert 0.10 drops markers with INVALID and reads one with
//!     MTOV as a multiple-overflow record; the B&H layout says MTOV is a single overflow.)
//!   - INVALID otherwise: no photon (counted).
//!   - GAP: the FIFO overflowed before this record; photons were lost (counted; the record
//!     itself is read as usual).
//!   - A photon's decay-time channel is `4095 - ADC` (start-stop reversed), reduced to
//!     `SP_ADC_RE` bins by dropping the low `12 - log2(ADC_RE)` bits: `(4095 - ADC) >>
//!     (12 - log2 ADC_RE)`. The record's ADC field is always 12 bits wide; with a coarser
//!     ADC the module either fills or zeroes the low bits, and the shift maps both to the
//!     same bin. Routing channel = ROUT.
//! - **Images**: a line runs from one line marker to the next line or frame marker; its
//!   photons are spread over `SP_IMG_X` pixels in proportion to their macro time (no pixel
//!   markers needed; pixel markers are counted only). A frame marker ends the frame (and the
//!   line in progress); lines past `SP_IMG_Y` in a frame are dropped and counted, as are
//!   photons before the first line marker and after the last. So a scan whose line period
//!   includes the fly-back spreads it over the line's last pixels, and a stream whose frame
//!   starts with an extra line marker shifts that frame by one row: compare with SPCImage
//!   when that matters.
//!
//! Refused by name: SPC-600/630 streams (48-bit and 32-bit layouts of their own), SPC-QC
//! streams (channel bits and a femtosecond clock), DPC-230 and modules without a FIFO mode,
//! unknown module codes, raw diagnostic dumps, a first record without bit 31, a `.set` whose
//! TAC range, gain or ADC resolution is missing or out of range, and FIFO imaging whose
//! `.spc` records no markers.

mod set;

use self::set::{Layout, SetFile, find_set, read_set};
use crate::error::Result;
use crate::io::photons::{Decode, Event, Scan, StreamSpec, histogram_records, open};
use crate::io::recording::{
    Format, ReadOptions, Recording, check_bin_ns, check_period_ns, format_error,
};
use std::io::Read;
use std::path::Path;

/// ADC bits of a 32-bit FIFO record.
const ADC_BITS: u32 = 12;
/// Macro-time ticks between overflows (12 bits).
const MT_PERIOD: u64 = 1 << 12;
/// Largest TAC gain of a B&H module.
const MAX_TAC_GAIN: i64 = 15;
/// Widest image side accepted from `SP_IMG_X` / `SP_IMG_Y`.
const MAX_IMAGE_SIDE: i64 = 65_536;
/// `SP_MODE` of FIFO imaging (`FIFO_32M`: markers are the scan clocks).
const MODE_FIFO_IMAGE: i64 = 5;

/// Header (first record) flags.
const HDR_INVALID: u32 = 1 << 31;
const HDR_RAW: u32 = 1 << 26;
const HDR_MARKERS: u32 = 1 << 25;

/// Record flags.
const INVALID: u32 = 1 << 31;
const MTOV: u32 = 1 << 30;
const GAP: u32 = 1 << 29;
const MARK: u32 = 1 << 28;

/// Marker bits (ROUT of a marker record).
const MARK_LINE: u32 = 2;
const MARK_FRAME: u32 = 4;

/// Bin width and window from the setup.
#[derive(Debug, Clone, Copy)]
struct Timing {
    tac_r: f64,
    tac_g: i64,
    adc_re: usize,
    shift: u32,
    bin_ns: f64,
    period_ns: f64,
}

fn timing(s: &SetFile) -> Result<Timing> {
    let err = |what: String| format_error(&s.path, what);
    let need = |key: &str, what: &str| {
        err(format!(
            "the setup lacks {key} ({what}), which the bin width TAC_R / (TAC_G x ADC_RE) needs"
        ))
    };
    let tac_r = s
        .float("SP_TAC_R")?
        .ok_or_else(|| need("SP_TAC_R", "the TAC range in s"))?;
    if !(tac_r.is_finite() && tac_r > 0.0) {
        return Err(err(format!(
            "{}: expected a TAC range > 0 s (SPCM writes e.g. 5.00032e-08)",
            s.describe("SP_TAC_R")
        )));
    }
    let tac_g = s
        .int("SP_TAC_G")?
        .ok_or_else(|| need("SP_TAC_G", "the TAC gain"))?;
    if !(1..=MAX_TAC_GAIN).contains(&tac_g) {
        return Err(err(format!(
            "{}: expected a TAC gain of 1..={MAX_TAC_GAIN}",
            s.describe("SP_TAC_G")
        )));
    }
    let adc = s
        .int("SP_ADC_RE")?
        .ok_or_else(|| need("SP_ADC_RE", "the ADC resolution in time bins"))?;
    let adc_re = usize::try_from(adc)
        .ok()
        .filter(|&a| a.is_power_of_two() && a <= 1 << ADC_BITS)
        .ok_or_else(|| {
            err(format!(
                "{}: expected a power of two from 1 to 4096 time bins (the records' {ADC_BITS}-bit ADC value is reduced to it by dropping low bits)",
                s.describe("SP_ADC_RE")
            ))
        })?;
    let shift = ADC_BITS - adc_re.trailing_zeros();
    let what =
        format!("setup entries SP_TAC_R = {tac_r} s, SP_TAC_G = {tac_g}, SP_ADC_RE = {adc_re}");
    let bin_ns = check_bin_ns(&s.path, &what, tac_r * 1e9 / (tac_g as f64 * adc_re as f64))?;
    let period_ns = check_period_ns(
        &s.path,
        &format!("the TAC window TAC_R / TAC_G ({what})"),
        tac_r * 1e9 / tac_g as f64,
    )?;
    if let Some(z) = s.int("SP_ADC_ZOOM")?
        && z != 0
    {
        return Err(err(format!(
            "{}: a zoomed ADC range is not supported (the bin width and offset of a zoomed range are not recorded in a form biogpu reads)",
            s.describe("SP_ADC_ZOOM")
        )));
    }
    Ok(Timing {
        tac_r,
        tac_g,
        adc_re,
        shift,
        bin_ns,
        period_ns,
    })
}

/// The scan of a FIFO imaging setup (`SP_MODE` 5), else `None`.
fn scan_of(s: &SetFile) -> Result<Option<Scan>> {
    if s.int("SP_MODE")? != Some(MODE_FIFO_IMAGE) {
        return Ok(None);
    }
    let dim = |key: &str| -> Result<usize> {
        s.int(key)?
            .filter(|v| (1..=MAX_IMAGE_SIDE).contains(v))
            .map(|v| v as usize)
            .ok_or_else(|| {
                format_error(
                    &s.path,
                    format!(
                        "{}: SP_MODE {MODE_FIFO_IMAGE} (FIFO imaging) needs an image size of 1..={MAX_IMAGE_SIDE} pixels",
                        s.describe(key)
                    ),
                )
            })
    };
    Ok(Some(Scan {
        pix_x: dim("SP_IMG_X")?,
        pix_y: dim("SP_IMG_Y")?,
        start: MARK_LINE,
        stop: MARK_LINE | MARK_FRAME,
        frame: MARK_FRAME,
        bidirectional: false,
    }))
}

/// Decoder of SPC-130/140/150/160/830 32-bit FIFO records.
#[derive(Debug, Default)]
struct Fifo32 {
    shift: u32,
    overflows: u64,
    overflow_records: u64,
    gaps: u64,
    invalid: u64,
    markers: [u64; 4],
}

impl Fifo32 {
    fn add_overflows(&mut self, n: u64) -> std::result::Result<(), String> {
        self.overflows = self
            .overflows
            .checked_add(n)
            .filter(|&o| o.checked_mul(MT_PERIOD).is_some())
            .ok_or_else(|| {
                format!(
                    "macro-time overflows sum past {} (corrupt overflow counts?)",
                    u64::MAX / MT_PERIOD
                )
            })?;
        Ok(())
    }
}

impl Decode for Fifo32 {
    fn decode(&mut self, rec: u32) -> std::result::Result<Event, String> {
        if rec & (INVALID | MTOV | MARK) == INVALID | MTOV {
            self.overflow_records += 1;
            self.add_overflows(u64::from(rec & 0x0fff_ffff))?;
            return Ok(Event::Nothing);
        }
        if rec & GAP != 0 {
            self.gaps += 1;
        }
        if rec & MTOV != 0 {
            self.add_overflows(1)?;
        }
        let sync = self.overflows * MT_PERIOD + u64::from(rec & 0xfff);
        let rout = (rec >> 12) & 0xf;
        if rec & MARK != 0 {
            for (bit, n) in self.markers.iter_mut().enumerate() {
                if rout & (1 << bit) != 0 {
                    *n += 1;
                }
            }
            return Ok(Event::Marker { sync, bits: rout });
        }
        if rec & INVALID != 0 {
            self.invalid += 1;
            return Ok(Event::Nothing);
        }
        let adc = (rec >> 16) & 0xfff;
        Ok(Event::Photon {
            sync,
            dtime: (0xfff - adc) >> self.shift,
            channel: rout,
        })
    }

    fn metadata(&self) -> Vec<(String, String)> {
        vec![
            (
                "macro-time overflows".into(),
                format!(
                    "{} ({} multiple-overflow records)",
                    self.overflows, self.overflow_records
                ),
            ),
            ("invalid photons".into(), self.invalid.to_string()),
            (
                "GAP records (photons lost before them)".into(),
                self.gaps.to_string(),
            ),
            (
                "markers pixel/line/frame/3".into(),
                format!(
                    "{}/{}/{}/{}",
                    self.markers[0], self.markers[1], self.markers[2], self.markers[3]
                ),
            ),
        ]
    }
}

/// Histogram a B&H `.spc` photon stream with its `.set` file into decay images (see the
/// module docs): one per frame and routing channel, or one per channel with frames summed
/// (`opts`); a point measurement gives one pixel per channel.
pub fn read_spc(path: &Path, opts: &ReadOptions) -> Result<Recording> {
    let err = |what: String| format_error(path, what);
    if let Some(c) = opts.sync_channel {
        return Err(err(format!(
            "--sync-channel {c} pairs PicoQuant T2 time tags with a sync; B&H .spc records carry decay times already"
        )));
    }
    let set_path = find_set(path)?;
    let setup = read_set(&set_path)?;
    let module = setup.module;
    let code = module
        .code
        .map_or_else(|| "named in the text".to_string(), |c| format!("{c:#04x}"));
    let refuse = |why: &str| {
        Err(format_error(
            &set_path,
            format!(
                "the setup file of {} names module {} (type {code}, file header revision {:#06x}): {why}",
                path.display(),
                module.name,
                setup.revision
            ),
        ))
    };
    match module.layout {
        Layout::Fifo32 => {}
        Layout::Spc6xx => {
            return refuse(
                "SPC-600/630 FIFO streams use 48-bit or 32-bit records of their own layout, which biogpu does not read (SPC-130/140/150/160/830 streams only)",
            );
        }
        Layout::Qc => {
            return refuse(
                "SPC-QC streams use the QC record layout (channel bits, femtosecond clock), which biogpu does not read (SPC-130/140/150/160/830 streams only)",
            );
        }
        Layout::Dpc230 => {
            return refuse(
                "DPC-230 streams are TDC records of their own layout, which biogpu does not read (SPC-130/140/150/160/830 streams only)",
            );
        }
        Layout::NoFifo => {
            return refuse(
                "the module has no FIFO photon stream that biogpu reads (SPC-130/140/150/160/830 streams only)",
            );
        }
    }
    let t = timing(&setup)?;
    let scan = scan_of(&setup)?;

    let (mut r, len) = open(path)?;
    let mut head = [0u8; 4];
    (&mut r).take(4).read_exact(&mut head).map_err(|_| {
        err(format!(
            "the file ends at byte {len}, inside its 4-byte header record (the macro-time clock)"
        ))
    })?;
    let header = u32::from_le_bytes(head);
    if header & HDR_INVALID == 0 {
        return Err(err(format!(
            "header record at byte 0 = {header:#010x}: bit 31 is 0, expected 1 (the first record of an SPC-130/140/150/160/830 FIFO stream is marked invalid and holds the macro-time clock): not the FIFO stream of the {} the .set names, or not a .spc file",
            module.name
        )));
    }
    if header & HDR_RAW != 0 {
        return Err(err(format!(
            "header record at byte 0 = {header:#010x}: bit 26 marks a raw diagnostic FIFO dump, whose overflow and invalid entries have no defined meaning: record the data in a normal FIFO mode"
        )));
    }
    let has_markers = header & HDR_MARKERS != 0;
    if let Some(s) = scan
        && !has_markers
    {
        return Err(err(format!(
            "header record at byte 0 = {header:#010x}: bit 25 (markers recorded) is 0, but the setup (SP_MODE {MODE_FIFO_IMAGE}, FIFO imaging of {} x {} pixels) needs line and frame markers to build the image",
            s.pix_x, s.pix_y
        )));
    }
    let clock_ns = f64::from(header & 0x00ff_ffff) * 0.1;
    let routing_bits = (header >> 27) & 0xf;

    let spec = StreamSpec {
        expected_records: None,
        dtime_channels: t.adc_re,
        channel_ns: t.bin_ns,
        period_ns: t.period_ns,
        period_channels: t.adc_re,
        scan,
        size_fields: "SP_IMG_X x SP_IMG_Y",
    };
    let mut dec = Fifo32 {
        shift: t.shift,
        ..Fifo32::default()
    };
    let streamed = histogram_records(path, &mut r, &spec, &mut dec, opts)?;

    let mut metadata = vec![
        (
            "format".to_string(),
            "Becker & Hickl .spc FIFO stream, 32-bit records".to_string(),
        ),
        ("module".into(), module.name.into()),
        ("setup file".into(), set_path.display().to_string()),
        (
            "SP_MODE".into(),
            setup
                .int("SP_MODE")?
                .map_or_else(|| "absent".into(), |m| m.to_string()),
        ),
        ("TAC range ns".into(), format!("{}", t.tac_r * 1e9)),
        ("TAC gain".into(), t.tac_g.to_string()),
        ("ADC resolution".into(), t.adc_re.to_string()),
        (
            "macro-time clock ns".into(),
            if clock_ns > 0.0 {
                format!("{clock_ns:.1}")
            } else {
                "0 (not recorded)".into()
            },
        ),
        ("routing bits".into(), routing_bits.to_string()),
        (
            "markers recorded".into(),
            if has_markers { "yes" } else { "no" }.into(),
        ),
        (
            "laser period".into(),
            format!(
                "not in the .set file: the TAC window TAC_R / TAC_G = {} ns is used (give --period-ns for the laser's)",
                t.period_ns
            ),
        ),
    ];
    for key in ["Title", "Date", "Time", "Contents"] {
        if let Some((_, v)) = setup.ident.iter().find(|(k, _)| k == key)
            && !v.is_empty()
        {
            metadata.push((key.into(), v.clone()));
        }
    }
    metadata.extend(streamed.metadata);
    Ok(Recording {
        path: path.to_path_buf(),
        format: Format::Spc,
        images: streamed.images,
        metadata,
    })
}
