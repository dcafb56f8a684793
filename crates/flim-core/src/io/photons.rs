//! Photon streams (time-tagged TCSPC records) histogrammed into decay images while the
//! records stream through a buffered reader: the file is never held in memory, only the
//! histograms and one scan line of photons. Shared by the PicoQuant (`.ptu`, `.pt3`, `.ht3`)
//! and Becker & Hickl (`.spc`) readers, which differ only in their headers and record layouts.
//!
//! A format's [`Decode`] turns each 32-bit little-endian record into an [`Event`]: a photon
//! (its macro time in sync periods or clock ticks, its decay-time channel and detector), a
//! marker (bits) or nothing (overflows and the like). Images: photons between a line's start
//! and stop markers are spread over [`Scan::pix_x`] pixels in proportion to their macro time
//! (bidirectional scans reverse every other line); lines past [`Scan::pix_y`] and photons
//! outside lines are dropped and counted in the metadata. Without a scan (point
//! measurements, e.g. an IRF) every photon goes to a 1 x 1 image.

use crate::error::Result;
use crate::io::recording::{Image, ReadOptions, format_error, in_file, io_error, narrow_counts};
use ndarray::Array3;
use std::fs::File;
use std::io::{BufReader, Read};
use std::path::Path;

/// Records decoded per read from the buffered file.
const CHUNK_RECORDS: usize = 1 << 16;
/// Most histogram cells (pixels x bins, summed over every (frame, channel) image of one
/// read) a photon-stream reader fills: 2^28 counts, 1 GiB as u32. A photon stream's images
/// are not bounded by its length (photons are sparse), so the header's image size is checked
/// against this cap before anything is reserved; larger recordings need `--binning`,
/// `--bins`, `--frames`, `--channel` or `--sum-frames`. (A 512 x 512 scan of 256 bins is
/// 2^26 cells.)
pub const MAX_PTU_HISTOGRAM_CELLS: usize = 1 << 28;

/// Counts bytes read, so that errors can name the byte offset.
pub(crate) struct Counted<R> {
    inner: R,
    pub pos: u64,
}

impl<R> Counted<R> {
    /// The reader, for formats that seek (histogram files).
    pub(crate) fn into_inner(self) -> R {
        self.inner
    }
}

impl<R: Read> Read for Counted<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.pos += n as u64;
        Ok(n)
    }
}

/// Open `path` for streaming: a buffered reader that counts bytes, and the file's length.
pub(crate) fn open(path: &Path) -> Result<(Counted<BufReader<File>>, u64)> {
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

/// Turns a format's records into events.
pub(crate) trait Decode {
    /// The event of record `rec`, or why it is invalid.
    fn decode(&mut self, rec: u32) -> std::result::Result<Event, String>;

    /// Facts the decoder gathered, reported after the reading's counters.
    fn metadata(&self) -> Vec<(String, String)> {
        Vec::new()
    }

    /// Called after the last record: why the stream cannot give decays, if so.
    fn finish(&self) -> std::result::Result<(), String> {
        Ok(())
    }
}

/// One decoded record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Event {
    Photon {
        sync: u64,
        dtime: u32,
        channel: u32,
    },
    Marker {
        sync: u64,
        bits: u32,
    },
    /// A record with no photon or marker (overflow, sync, or anything the format skips).
    Nothing,
}

/// Scan geometry: the image size and which marker bits start and stop a line and start a
/// frame (`frame` 0: frames end with their last line).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Scan {
    pub pix_x: usize,
    pub pix_y: usize,
    pub start: u32,
    pub stop: u32,
    pub frame: u32,
    pub bidirectional: bool,
}

/// What a reader learned from its header before the records.
#[derive(Debug, Clone, Copy)]
pub(crate) struct StreamSpec {
    /// Records the header announces (`None`: read to the end of the file).
    pub expected_records: Option<u64>,
    /// Decay-time channels the record layout can hold (the histogram never grows past them).
    pub dtime_channels: usize,
    /// Width of one decay-time channel in ns.
    pub channel_ns: f64,
    /// Laser period in ns.
    pub period_ns: f64,
    /// Decay-time channels in one laser period (the initial histogram length before binning).
    pub period_channels: usize,
    /// The scan, or `None` for a point measurement.
    pub scan: Option<Scan>,
    /// Where the header gives the scan size, for messages (e.g. `ImgHdr_PixX x ImgHdr_PixY`).
    pub size_fields: &'static str,
}

/// The record count a header announces (`announced`, from `what`), checked against the
/// `len - offset` bytes of 4-byte records that follow it; `None` (0 or absent): read to the
/// end of the file.
pub(crate) fn announced_records(
    path: &Path,
    announced: Option<i64>,
    what: &str,
    len: u64,
    offset: u64,
) -> Result<Option<u64>> {
    let records_bytes = len.saturating_sub(offset);
    match announced {
        None | Some(0) => Ok(None),
        Some(n) => {
            let n = u64::try_from(n).map_err(|_| {
                format_error(path, format!("{what} = {n}: expected a record count >= 0"))
            })?;
            // More records in the file than the header announces: the rest would be ignored.
            if n.checked_mul(4).is_some_and(|b| b < records_bytes) {
                return Err(format_error(
                    path,
                    format!(
                        "{what} = {n} ({} bytes from byte {offset}), but {records_bytes} bytes of records follow the header: the header and the data disagree",
                        4 * n
                    ),
                ));
            }
            Ok(Some(n))
        }
    }
}

/// Images and the reading's counters, as metadata entries.
pub(crate) struct Streamed {
    pub images: Vec<Image>,
    pub metadata: Vec<(String, String)>,
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

/// Histogram the records that follow the header (`r` stands at the first record) into
/// one decay image per frame and channel, or one per channel with frames summed (`opts`).
pub(crate) fn histogram_records(
    path: &Path,
    r: &mut Counted<BufReader<File>>,
    spec: &StreamSpec,
    dec: &mut dyn Decode,
    opts: &ReadOptions,
) -> Result<Streamed> {
    let err = |what: String| format_error(path, what);
    let scan = spec.scan;
    let expected = spec.expected_records;
    let binning = opts.binning();
    let limit = spec.dtime_channels.div_ceil(binning);
    let pixels = scan.map_or(Some(1), |s| s.pix_x.checked_mul(s.pix_y));
    let cap = opts
        .bins()
        .unwrap_or_else(|| spec.period_channels.div_ceil(binning))
        .clamp(4, limit.max(4));
    // One image of the header's size must fit the cap before anything is reserved.
    let Some(pixels) = pixels.filter(|p| {
        p.checked_mul(cap)
            .is_some_and(|c| c <= MAX_PTU_HISTOGRAM_CELLS)
    }) else {
        let dims = scan.map_or_else(|| "1 x 1".into(), |s| format!("{} x {}", s.pix_x, s.pix_y));
        return Err(err(format!(
            "image header: {} = {dims} pixels of {cap} bins exceed the reader's cap of {MAX_PTU_HISTOGRAM_CELLS} histogram cells (give --binning or --bins for fewer bins)",
            spec.size_fields
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
        let got = read_full(r, &mut buf[..4 * want])
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
                Event::Nothing => {}
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
    dec.finish().map_err(err)?;
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
    let bin_ns = spec.channel_ns * binning as f64;
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
            cube: narrow_counts(counts, bin_ns, spec.period_ns).map_err(|e| {
                in_file(
                    path,
                    &format!("image of frame {frame}, channel {channel}"),
                    e,
                )
            })?,
        });
    }
    let mut metadata = Vec::new();
    metadata.extend([
        ("laser period ns".to_string(), format!("{}", spec.period_ns)),
        (
            "TCSPC resolution ps".into(),
            format!("{:.4}", spec.channel_ns * 1e3),
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
                "photons in lines past the last image row".into(),
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
    metadata.extend(dec.metadata());
    Ok(Streamed { images, metadata })
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
