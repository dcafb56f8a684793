//! Reading and writing TCSPC data: Becker & Hickl `.sdt`, PicoQuant `.ptu` (T3 records,
//! histogrammed while streaming), multi-page TIFF (time bins as pages) and NumPy `.npy`.
//!
//! Every reader returns a [`Recording`]: one [`Image`] per data block, frame and channel, each
//! a cube of the stored count type ([`AnyCube`]), kept apart (never flattened), with the
//! facts from the file's header. Bad input gives [`Error::Format`] naming the file, the part
//! (block, record, tag, page) and the byte offset where it went wrong.
//!
//! ```
//! use flim_core::io::{ReadOptions, read, write_npy};
//! use flim_core::sim::mono_exponential;
//! let dir = std::env::temp_dir().join(format!("flim-io-doc-{}", std::process::id()));
//! std::fs::create_dir_all(&dir).unwrap();
//! let path = dir.join("cube.npy");
//! let cube = mono_exponential(&[2.0], 4, 4, 64, 0.2, 12.8, 500.0, 1)?;
//! write_npy(&path, &cube.clone().into())?;
//! // .npy holds no bin width: the caller gives it.
//! let rec = read(&path, &ReadOptions::default().with_bin_ns(0.2))?;
//! assert_eq!(rec.images.len(), 1);
//! assert_eq!(rec.images[0].cube.shape(), (4, 4));
//! # std::fs::remove_dir_all(&dir).ok();
//! # Ok::<(), flim_core::Error>(())
//! ```

mod npy;
mod ptu;
mod sdt;
mod tiff;

pub use npy::{read_npy, write_npy};
pub use ptu::{PtuHeader, PtuTag, TagValue, read_ptu, read_ptu_header};
pub use sdt::{read_sdt, write_sdt};
pub use tiff::{read_tiff, write_tiff};

use crate::cube::Cube;
use crate::error::{Error, Result, invalid};
use crate::methods::{Analysis, LifetimeMaps};
use ndarray::{Array3, Zip};
use std::ops::Range;
use std::path::{Path, PathBuf};

/// A cube of whichever count type the file held.
#[derive(Debug, Clone)]
pub enum AnyCube {
    /// 16-bit counts (B&H, most TCSPC cards).
    U16(Cube<u16>),
    /// 32-bit counts.
    U32(Cube<u32>),
    /// Floating point (processed data).
    F32(Cube<f32>),
}

/// Apply `$body` to the cube inside an [`AnyCube`], whatever its type.
macro_rules! with_cube {
    ($any:expr, |$c:ident| $body:expr) => {
        match $any {
            AnyCube::U16($c) => $body,
            AnyCube::U32($c) => $body,
            AnyCube::F32($c) => $body,
        }
    };
}
pub(crate) use with_cube;

impl From<Cube<u16>> for AnyCube {
    fn from(c: Cube<u16>) -> Self {
        AnyCube::U16(c)
    }
}

impl From<Cube<u32>> for AnyCube {
    fn from(c: Cube<u32>) -> Self {
        AnyCube::U32(c)
    }
}

impl From<Cube<f32>> for AnyCube {
    fn from(c: Cube<f32>) -> Self {
        AnyCube::F32(c)
    }
}

impl AnyCube {
    /// (rows, columns).
    pub fn shape(&self) -> (usize, usize) {
        with_cube!(self, |c| c.shape())
    }

    /// Time bins per pixel.
    pub fn bins(&self) -> usize {
        with_cube!(self, |c| c.bins())
    }

    /// Bin width (ns).
    pub fn bin_ns(&self) -> f64 {
        with_cube!(self, |c| c.bin_ns())
    }

    /// Laser period (ns).
    pub fn period_ns(&self) -> f64 {
        with_cube!(self, |c| c.period_ns())
    }

    /// Set the laser period (ns).
    pub fn with_period_ns(self, period_ns: f64) -> Result<Self> {
        Ok(match self {
            AnyCube::U16(c) => AnyCube::U16(c.with_period_ns(period_ns)?),
            AnyCube::U32(c) => AnyCube::U32(c.with_period_ns(period_ns)?),
            AnyCube::F32(c) => AnyCube::F32(c.with_period_ns(period_ns)?),
        })
    }

    /// The same counts with another bin width (ns), e.g. to override a file's header.
    pub fn with_bin_ns(self, bin_ns: f64) -> Result<Self> {
        Ok(match self {
            AnyCube::U16(c) => AnyCube::U16(c.with_bin_ns(bin_ns)?),
            AnyCube::U32(c) => AnyCube::U32(c.with_bin_ns(bin_ns)?),
            AnyCube::F32(c) => AnyCube::F32(c.with_bin_ns(bin_ns)?),
        })
    }

    /// Name of the stored count type.
    pub fn dtype(&self) -> &'static str {
        match self {
            AnyCube::U16(_) => "u16",
            AnyCube::U32(_) => "u32",
            AnyCube::F32(_) => "f32",
        }
    }

    /// Photons per pixel (sum over all bins), as f64.
    pub fn photons(&self) -> ndarray::Array2<f64> {
        with_cube!(self, |c| c.counts().map_axis(ndarray::Axis(2), |d| d
            .iter()
            .map(|&v| Into::<f64>::into(v))
            .sum()))
    }

    /// The counts as f32 (exact for counts below 2^24).
    pub fn to_f32(&self) -> Cube<f32> {
        let (counts, bin, period) = with_cube!(self, |c| (
            c.counts().mapv(|v| Into::<f64>::into(v) as f32),
            c.bin_ns(),
            c.period_ns()
        ));
        Cube::new(counts, bin)
            .and_then(|c| c.with_period_ns(period))
            .expect("a valid cube stays valid")
    }

    /// Page-lock the counts for `device` ([`Cube::pin_on`]).
    pub fn pin_on(&mut self, device: &gpu_runtime::Device) -> Result<bool> {
        with_cube!(self, |c| c.pin_on(device))
    }

    /// [`crate::gpu::analyse_on`] for the cube inside.
    pub fn analyse_on(
        &self,
        opts: &Analysis,
        device: &gpu_runtime::Device,
    ) -> Result<LifetimeMaps> {
        with_cube!(self, |c| crate::gpu::analyse_on(c, opts, device))
    }

    /// [`crate::analyse`] (CPU, f64) for the cube inside.
    pub fn analyse(&self, opts: &Analysis) -> Result<LifetimeMaps> {
        with_cube!(self, |c| crate::analyse(c, opts))
    }

    /// The sum of cubes of one shape and bin width (e.g. frames of a time series): u16 and u32
    /// counts add up as u32, anything with floats as f32.
    pub fn sum(cubes: &[&AnyCube]) -> Result<AnyCube> {
        let first = cubes
            .first()
            .ok_or_else(|| Error::Shape("nothing to sum".into()))?;
        let dim = (first.shape().0, first.shape().1, first.bins());
        if let Some(bad) = cubes
            .iter()
            .find(|c| (c.shape().0, c.shape().1, c.bins()) != dim || c.bin_ns() != first.bin_ns())
        {
            return Err(Error::Shape(format!(
                "cannot sum cubes of different shapes or bin widths: {:?} x {} ns and {:?} x {} ns",
                dim,
                first.bin_ns(),
                (bad.shape().0, bad.shape().1, bad.bins()),
                bad.bin_ns()
            )));
        }
        let period = first.period_ns();
        if cubes.iter().any(|c| matches!(c, AnyCube::F32(_))) {
            let mut acc = Array3::<f32>::zeros(dim);
            for c in cubes {
                with_cube!(c, |c| Zip::from(&mut acc)
                    .and(c.counts())
                    .for_each(|a, &v| *a += Into::<f64>::into(v) as f32));
            }
            return Ok(Cube::new(acc, first.bin_ns())?
                .with_period_ns(period)?
                .into());
        }
        let mut acc = Array3::<u32>::zeros(dim);
        for c in cubes {
            with_cube!(c, |c| Zip::from(&mut acc).and(c.counts()).for_each(
                |a, &v| *a = a.saturating_add(Into::<f64>::into(v) as u32)
            ));
        }
        Ok(Cube::new(acc, first.bin_ns())?
            .with_period_ns(period)?
            .into())
    }
}

/// Which file format a path holds, by extension.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Becker & Hickl SPC `.sdt`.
    Sdt,
    /// PicoQuant `.ptu` (T3 records).
    Ptu,
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
            "tif" | "tiff" => Ok(Format::Tiff),
            "npy" => Ok(Format::Npy),
            _ => Err(Error::Format {
                path: path.to_path_buf(),
                what: format!(
                    "unknown extension {ext:?}: expected .sdt (Becker & Hickl), .ptu (PicoQuant), .tif/.tiff or .npy"
                ),
            }),
        }
    }

    /// Lower-case name.
    pub fn name(self) -> &'static str {
        match self {
            Format::Sdt => "sdt",
            Format::Ptu => "ptu",
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
    bin_ns: Option<f64>,
    period_ns: Option<f64>,
    channel: Option<usize>,
    block: Option<usize>,
    frames: Option<Range<usize>>,
    sum_frames: bool,
    binning: usize,
    bins: Option<usize>,
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

    /// PTU: merge this many TCSPC channels (`MeasDesc_Resolution`) into one bin. Default 1.
    pub fn with_binning(mut self, factor: usize) -> Self {
        self.binning = factor;
        self
    }

    /// PTU: histogram this many bins (after binning); photons later than the last bin are
    /// dropped and counted. Default: up to the latest photon of the file.
    pub fn with_bins(mut self, bins: usize) -> Self {
        self.bins = Some(bins);
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

    fn check(&self) -> Result<()> {
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

/// Read a TCSPC file by its extension (see [`Format::of`]) with `opts`.
pub fn read(path: &Path, opts: &ReadOptions) -> Result<Recording> {
    opts.check()?;
    let format = Format::of(path)?;
    let mut rec = match format {
        Format::Sdt => read_sdt(path)?,
        Format::Ptu => read_ptu(path, opts)?,
        Format::Tiff | Format::Npy => {
            let bin = opts.bin_ns.ok_or_else(|| Error::Format {
                path: path.to_path_buf(),
                what: format!(
                    ".{} files carry no bin width: give it (--bin-ns)",
                    format.name()
                ),
            })?;
            if format == Format::Tiff {
                read_tiff(path, bin)?
            } else {
                read_npy(path, bin)?
            }
        }
    };
    // Selections the readers above leave to this common step.
    rec.images.retain(|i| {
        opts.block.is_none_or(|b| b == i.block)
            && opts.channel_wanted(i.channel)
            && (format == Format::Ptu || opts.frame_wanted(i.frame))
    });
    if rec.images.is_empty() {
        return Err(Error::Format {
            path: path.to_path_buf(),
            what: format!(
                "no image left after selecting block {:?}, channel {:?}, frames {:?}",
                opts.block, opts.channel, opts.frames
            ),
        });
    }
    if opts.sum_frames && format != Format::Ptu {
        rec.images = sum_frames(std::mem::take(&mut rec.images))?;
    }
    for image in &mut rec.images {
        if let Some(b) = opts.bin_ns {
            image.cube = image.cube.clone().with_bin_ns(b)?;
        }
        if let Some(p) = opts.period_ns {
            image.cube = image.cube.clone().with_period_ns(p)?;
        }
    }
    Ok(rec)
}

/// One image per (block, channel): the sum of its frames.
fn sum_frames(images: Vec<Image>) -> Result<Vec<Image>> {
    let mut groups: Vec<(usize, usize, Vec<Image>)> = Vec::new();
    for image in images {
        match groups
            .iter_mut()
            .find(|(b, c, _)| *b == image.block && *c == image.channel)
        {
            Some(g) => g.2.push(image),
            None => groups.push((image.block, image.channel, vec![image])),
        }
    }
    groups
        .into_iter()
        .map(|(block, channel, imgs)| {
            let frame = imgs[0].frame;
            let cube = if imgs.len() == 1 {
                imgs.into_iter().next().expect("one").cube
            } else {
                AnyCube::sum(&imgs.iter().map(|i| &i.cube).collect::<Vec<_>>())?
            };
            Ok(Image {
                block,
                frame,
                channel,
                cube,
            })
        })
        .collect()
}

/// Read the first image of a file (block 0, frame 0, channel 0 unless selected otherwise);
/// `bin_ns` as in [`ReadOptions::with_bin_ns`].
pub fn read_cube(path: &Path, bin_ns: Option<f64>) -> Result<AnyCube> {
    let opts = match bin_ns {
        Some(b) => ReadOptions::default().with_bin_ns(b),
        None => ReadOptions::default(),
    };
    Ok(read(path, &opts)?
        .images
        .into_iter()
        .next()
        .expect("read returns at least one image")
        .cube)
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
