//! What the readers return: recordings of images, read options, and the readers' shared helpers.

use crate::error::{Error, Result, invalid};
use crate::model::cube::{AnyCube, Cube};
use ndarray::Array3;
use std::ops::Range;
use std::path::{Path, PathBuf};

/// Which file format a path holds, by extension.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Becker & Hickl SPC `.sdt`.
    Sdt,
    /// PicoQuant `.ptu` (T3 or T2 records).
    Ptu,
    /// PicoQuant `.pt3` (PicoHarp 300 T3, file format 2.0).
    Pt3,
    /// PicoQuant `.ht3` (HydraHarp T3, file formats 1.0 and 2.0).
    Ht3,
    /// PicoQuant `.phu` (histograms of the unified format).
    Phu,
    /// Becker & Hickl `.spc` FIFO photon stream, with its `.set` file beside it.
    Spc,
    /// Multi-page TIFF, one page per time bin.
    Tiff,
    /// NumPy `.npy`, (y, x, bin) or (frame, y, x, bin).
    Npy,
}

impl Format {
    /// The format of `path` from its extension.
    pub fn of(path: &Path) -> Result<Self> {
        let ext = path
            .extension()
            .and_then(|e| e.to_str())
            .unwrap_or("")
            .to_ascii_lowercase();
        match ext.as_str() {
            "sdt" => Ok(Format::Sdt),
            "ptu" => Ok(Format::Ptu),
            "pt3" => Ok(Format::Pt3),
            "ht3" => Ok(Format::Ht3),
            "phu" => Ok(Format::Phu),
            "spc" => Ok(Format::Spc),
            "tif" | "tiff" => Ok(Format::Tiff),
            "npy" => Ok(Format::Npy),
            _ => Err(Error::Format {
                path: path.to_path_buf(),
                what: format!(
                    "unknown extension {ext:?}: expected .sdt or .spc (Becker & Hickl), .ptu, .pt3, .ht3 or .phu (PicoQuant), .tif/.tiff or .npy"
                ),
            }),
        }
    }

    /// True for time-tagged photon streams, which the reader histograms itself (and so
    /// applies frame selection and summing while streaming).
    pub fn is_photon_stream(self) -> bool {
        matches!(self, Format::Ptu | Format::Pt3 | Format::Ht3 | Format::Spc)
    }

    /// True where the file states its bin width (everything but TIFF and `.npy`).
    pub fn stores_bin_width(self) -> bool {
        !matches!(self, Format::Tiff | Format::Npy)
    }

    /// Lower-case name.
    pub fn name(self) -> &'static str {
        match self {
            Format::Sdt => "sdt",
            Format::Ptu => "ptu",
            Format::Pt3 => "pt3",
            Format::Ht3 => "ht3",
            Format::Phu => "phu",
            Format::Spc => "spc",
            Format::Tiff => "tiff",
            Format::Npy => "npy",
        }
    }
}

/// One decay image of a file, labelled by where it came from.
#[derive(Debug, Clone)]
pub struct Image {
    /// Data block (B&H: measurement, z-plane or time point, in file order; 0 elsewhere).
    pub block: usize,
    /// Frame of a time series (PTU, 4-D `.npy`); with frames summed, the first frame summed.
    pub frame: usize,
    /// Detector or routing channel.
    pub channel: usize,
    /// The counts with their bin width and laser period.
    pub cube: AnyCube,
}

impl Image {
    /// A short label for file names: `b0_f0_c0`, leaving out what the recording does not vary.
    pub fn label(&self, rec: &Recording) -> String {
        let vary = |f: fn(&Image) -> usize| rec.images.iter().any(|i| f(i) != f(&rec.images[0]));
        let mut parts = Vec::new();
        if vary(|i| i.block) {
            parts.push(format!("b{}", self.block));
        }
        if vary(|i| i.frame) {
            parts.push(format!("f{}", self.frame));
        }
        if vary(|i| i.channel) {
            parts.push(format!("c{}", self.channel));
        }
        parts.join("_")
    }
}

/// Everything a reader found in a file.
#[derive(Debug, Clone)]
pub struct Recording {
    /// The file read.
    pub path: PathBuf,
    /// Its format.
    pub format: Format,
    /// The decay images, in file order (block, then frame, then channel).
    pub images: Vec<Image>,
    /// Facts from the header and the reading (instrument, sync rate, photons dropped, ...),
    /// as (name, value) in the order found.
    pub metadata: Vec<(String, String)>,
}

impl Recording {
    /// The value of metadata entry `name`, if present.
    pub fn meta(&self, name: &str) -> Option<&str> {
        self.metadata
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// How to read a file (builder style). The defaults keep every block, frame and channel apart.
#[derive(Debug, Clone, PartialEq)]
pub struct ReadOptions {
    pub(crate) bin_ns: Option<f64>,
    pub(crate) period_ns: Option<f64>,
    pub(crate) channel: Option<usize>,
    pub(crate) block: Option<usize>,
    pub(crate) frames: Option<Range<usize>>,
    pub(crate) sum_frames: bool,
    pub(crate) binning: usize,
    pub(crate) bins: Option<usize>,
    pub(crate) sync_channel: Option<u32>,
}

impl Default for ReadOptions {
    fn default() -> Self {
        Self {
            bin_ns: None,
            period_ns: None,
            channel: None,
            block: None,
            frames: None,
            sum_frames: false,
            binning: 1,
            bins: None,
            sync_channel: None,
        }
    }
}

impl ReadOptions {
    /// Bin width in ns: required for `.npy` and TIFF, which do not store it; overrides the
    /// header of `.sdt` and `.ptu`.
    pub fn with_bin_ns(mut self, bin_ns: f64) -> Self {
        self.bin_ns = Some(bin_ns);
        self
    }

    /// Laser period in ns, overriding the header (or the recorded window where none is stored).
    pub fn with_period_ns(mut self, period_ns: f64) -> Self {
        self.period_ns = Some(period_ns);
        self
    }

    /// Keep only this detector/routing channel (0-based).
    pub fn with_channel(mut self, channel: usize) -> Self {
        self.channel = Some(channel);
        self
    }

    /// Keep only this data block (`.sdt`, 0-based).
    pub fn with_block(mut self, block: usize) -> Self {
        self.block = Some(block);
        self
    }

    /// Keep only frames `range` (0-based, end exclusive) of a time series.
    pub fn with_frames(mut self, range: Range<usize>) -> Self {
        self.frames = Some(range);
        self
    }

    /// Sum the (selected) frames of a time series into one image per block and channel.
    pub fn with_sum_frames(mut self, sum: bool) -> Self {
        self.sum_frames = sum;
        self
    }

    /// Photon streams (`.ptu`, `.pt3`, `.ht3`, `.spc`): merge this many TCSPC channels (`MeasDesc_Resolution`) into one bin. Default 1.
    pub fn with_binning(mut self, factor: usize) -> Self {
        self.binning = factor;
        self
    }

    /// Photon streams: histogram this many bins (after binning); photons later than the last bin are
    /// dropped and counted. Default: up to the latest photon of the file.
    pub fn with_bins(mut self, bins: usize) -> Self {
        self.bins = Some(bins);
        self
    }

    /// PicoQuant T2: time decays from the events of this input (0-based) instead of the
    /// recorded sync events (required for PicoHarp 300 T2, which records none).
    pub fn with_sync_channel(mut self, input: u32) -> Self {
        self.sync_channel = Some(input);
        self
    }

    pub(crate) fn frame_wanted(&self, frame: usize) -> bool {
        self.frames.as_ref().is_none_or(|r| r.contains(&frame))
    }

    pub(crate) fn channel_wanted(&self, channel: usize) -> bool {
        self.channel.is_none_or(|c| c == channel)
    }

    pub(crate) fn binning(&self) -> usize {
        self.binning
    }

    pub(crate) fn bins(&self) -> Option<usize> {
        self.bins
    }

    pub(crate) fn sum_frames(&self) -> bool {
        self.sum_frames
    }

    pub(crate) fn check(&self) -> Result<()> {
        if let Some(b) = self.bin_ns
            && !(b.is_finite() && b > 0.0)
        {
            return Err(invalid("bin width", b, "must be finite and > 0 ns"));
        }
        if let Some(p) = self.period_ns
            && !(p.is_finite() && p > 0.0)
        {
            return Err(invalid("laser period", p, "must be finite and > 0 ns"));
        }
        if self.binning == 0 {
            return Err(invalid("binning", 0, "must be >= 1"));
        }
        if let Some(b) = self.bins
            && b < 4
        {
            return Err(invalid("bins", b, "a decay needs at least 4 bins"));
        }
        if let Some(r) = &self.frames
            && r.is_empty()
        {
            return Err(invalid(
                "frames",
                format!("{r:?}"),
                "select at least one frame",
            ));
        }
        Ok(())
    }
}

/// A cube of `counts` (y, x, bin) with the smallest integer type that holds them: u16 when
/// every count fits, u32 otherwise.
pub(crate) fn narrow_counts(counts: Array3<u32>, bin_ns: f64, period_ns: f64) -> Result<AnyCube> {
    let max = counts.iter().copied().max().unwrap_or(0);
    let cube: AnyCube = if u16::try_from(max).is_ok() {
        Cube::new(counts.mapv(|v| v as u16), bin_ns)?.into()
    } else {
        Cube::new(counts, bin_ns)?.into()
    };
    cube.with_period_ns(period_ns)
}

/// Shortest laser period a reader accepts, in ns (a sync rate of 100 GHz). No pulsed laser
/// used for TCSPC repeats faster (mode-locked sources run at 1-250 MHz); a shorter period in
/// a header is corrupt.
pub const MIN_PERIOD_NS: f64 = 0.01;
/// Longest laser period a reader accepts, in ns (1 ms: a sync rate of 1 kHz). Slower
/// excitation is outside TCSPC FLIM (phosphorescence set-ups gate instead).
pub const MAX_PERIOD_NS: f64 = 1e6;
/// Narrowest TCSPC bin a reader accepts, in ns (1 fs): far below any timing electronics
/// (the finest, about 1 ps).
pub const MIN_BIN_NS: f64 = 1e-6;
/// Widest TCSPC bin a reader accepts, in ns (1 us): as long as the longest laser period
/// would need for a handful of bins.
pub const MAX_BIN_NS: f64 = 1e3;
/// Most time bins per decay a reader accepts (2^16): the largest ADC resolution or TDC range
/// of any TCSPC module (B&H 4096, PicoQuant 32768) with room to spare.
pub const MAX_BINS: usize = 65_536;

/// `value` (ns) as a laser period of `path`, or an error naming `what` and the range
/// [`MIN_PERIOD_NS`]..=[`MAX_PERIOD_NS`].
pub(crate) fn check_period_ns(path: &Path, what: &str, value: f64) -> Result<f64> {
    if value.is_finite() && (MIN_PERIOD_NS..=MAX_PERIOD_NS).contains(&value) {
        Ok(value)
    } else {
        Err(format_error(
            path,
            format!(
                "{what} gives a laser period of {value} ns: expected {MIN_PERIOD_NS} ns .. {MAX_PERIOD_NS} ns (a sync rate of 1 kHz .. 100 GHz)"
            ),
        ))
    }
}

/// `value` (ns) as a TCSPC bin width of `path`, or an error naming `what` and the range
/// [`MIN_BIN_NS`]..=[`MAX_BIN_NS`].
pub(crate) fn check_bin_ns(path: &Path, what: &str, value: f64) -> Result<f64> {
    if value.is_finite() && (MIN_BIN_NS..=MAX_BIN_NS).contains(&value) {
        Ok(value)
    } else {
        Err(format_error(
            path,
            format!(
                "{what} gives a bin width of {value} ns: expected {MIN_BIN_NS} ns (1 fs) .. {MAX_BIN_NS} ns (1 us)"
            ),
        ))
    }
}

/// `e`, from a check below the readers (e.g. a cube's), as an error naming `path` and `what`.
pub(crate) fn in_file(path: &Path, what: &str, e: Error) -> Error {
    match e {
        Error::Format { .. } | Error::Io { .. } => e,
        other => format_error(path, format!("{what}: {other}")),
    }
}

/// Error helper: `{path}: {what}`.
pub(crate) fn format_error(path: &Path, what: impl Into<String>) -> Error {
    Error::Format {
        path: path.to_path_buf(),
        what: what.into(),
    }
}

/// Error helper for `std::io` failures while opening or reading `path`.
pub(crate) fn io_error(path: &Path, source: std::io::Error) -> Error {
    Error::Io {
        path: path.to_path_buf(),
        source,
    }
}
