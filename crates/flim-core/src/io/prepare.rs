//! Preparation of a recording's image for the methods: spatial binning, the fit range, the
//! background offset, the instrument response (from a file or estimated) and its shift, and
//! the phasor calibration from a reference; what `biogpu flim fit` and `phasor` do before
//! they analyse.

use crate::error::{Error, Result, invalid};
use crate::io::read::read;
use crate::io::recording::{Format, Image, ReadOptions, Recording};
use crate::model::cube::AnyCube;
use crate::model::lifetimes::{Analysis, Calibration, decay_phasor};
use crate::model::preprocess::{
    Binning, FitRange, Irf, bin_spatial, estimate_offset, photon_mask, rise_shift_map, summed_decay,
};
use crate::model::tuning::GpuTuning;
use ndarray::Array2;
use std::path::{Path, PathBuf};

/// Which bins the methods use.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum RangeSpec {
    /// Every bin.
    All,
    /// The bins whose start lies within the first laser period ([`FitRange::one_period`]):
    /// the phasor's default.
    Period,
    /// From the peak of the summed decay to the end.
    Peak,
    /// Bins `first..end` (end exclusive).
    Bins(usize, usize),
    /// From `start` to `end` ns.
    Ns(f64, f64),
}

impl RangeSpec {
    /// The range in `cube`'s bins (`None`: every bin).
    pub fn resolve(self, cube: &AnyCube) -> Result<Option<FitRange>> {
        Ok(match self {
            RangeSpec::All => None,
            RangeSpec::Period => {
                FitRange::one_period(cube.bins(), cube.bin_ns(), cube.period_ns())?
            }
            RangeSpec::Peak => Some(FitRange::from_peak(cube)?),
            RangeSpec::Bins(a, b) => Some(FitRange::from_bins(a, b, cube.bins())?),
            RangeSpec::Ns(x, y) => Some(FitRange::from_ns(x, y, cube.bin_ns(), cube.bins())?),
        })
    }
}

/// Background per bin in each (binned) pixel.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum OffsetSpec {
    /// This many counts per bin.
    Fixed(f64),
    /// Estimated from the pre-rise bins.
    Auto,
}

/// Where the instrument response comes from.
#[derive(Debug, Clone, PartialEq)]
pub enum IrfSource {
    /// A file ([`Irf::from_file`]).
    File(PathBuf),
    /// Estimated from the data ([`Irf::estimate`]).
    Estimate,
}

/// How the IRF is shifted.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum IrfShift {
    /// Globally, fitted to the rising edge.
    Auto,
    /// Globally, plus a per-pixel rise-time map (the shift is then fitted per pixel).
    Pixel,
    /// By this many ns.
    Ns(f64),
}

/// Settings of [`prepare`].
#[derive(Debug, Clone, PartialEq)]
pub struct PrepOptions {
    /// Spatial binning.
    pub binning: Binning,
    /// Pixels with fewer photons (in the fit range, after the offset) are masked.
    pub threshold: f64,
    /// The fit range; `None`: the caller's default.
    pub range: Option<RangeSpec>,
    /// Background per bin.
    pub offset: OffsetSpec,
    /// The instrument response, if any.
    pub irf: Option<IrfSource>,
    /// Its shift, if any (needs an IRF).
    pub irf_shift: Option<IrfShift>,
    /// How the GPU path runs.
    pub tuning: GpuTuning,
}

impl Default for PrepOptions {
    fn default() -> Self {
        Self {
            binning: Binning::Square(0),
            threshold: 100.0,
            range: None,
            offset: OffsetSpec::Fixed(0.0),
            irf: None,
            irf_shift: None,
            tuning: GpuTuning::default(),
        }
    }
}

/// One image after preparation, ready for a method.
#[derive(Debug, Clone)]
pub struct Prepared {
    /// The image's label in file names (empty for a single image).
    pub label: String,
    /// The binned cube.
    pub cube: AnyCube,
    /// Range, threshold, offset (and tuning) of the non-iterative methods and BCMM.
    pub analysis: Analysis,
    /// The fit range (`None`: every bin).
    pub range: Option<FitRange>,
    /// Background per bin.
    pub offset: f64,
    /// Photon threshold.
    pub threshold: f64,
    /// The instrument response, already shifted by the global shift.
    pub irf: Option<Irf>,
    /// The global IRF shift (ns), if any.
    pub irf_shift_ns: Option<f64>,
    /// The per-pixel rise-time map, if asked for: the shift is then fitted per pixel.
    pub shift_map: Option<Array2<f32>>,
}

impl Prepared {
    /// The fit range as (first bin, bins).
    pub fn fit_range(&self) -> (usize, usize) {
        self.range
            .map_or((0, self.cube.bins()), |r| (r.first, r.bins))
    }
}

/// Prepare `image` of `rec` by `opts`; `default_range` where `opts.range` is `None`.
pub fn prepare(
    image: &Image,
    rec: &Recording,
    opts: &PrepOptions,
    default_range: RangeSpec,
) -> Result<Prepared> {
    let cube = if opts.binning.offsets()?.len() == 1 {
        image.cube.clone()
    } else {
        bin_spatial(&image.cube, opts.binning)?
    };
    prepare_binned(cube, image.label(rec), opts, default_range)
}

/// [`prepare`] for a cube the caller gives up (labelled `label`, see [`Image::label`]):
/// without binning the cube is used as it is, not copied (a 512x512x256 cube is 134 MB).
pub fn prepare_cube(
    cube: AnyCube,
    label: String,
    opts: &PrepOptions,
    default_range: RangeSpec,
) -> Result<Prepared> {
    let cube = if opts.binning.offsets()?.len() == 1 {
        cube
    } else {
        bin_spatial(&cube, opts.binning)?
    };
    prepare_binned(cube, label, opts, default_range)
}

fn prepare_binned(
    cube: AnyCube,
    label: String,
    opts: &PrepOptions,
    default_range: RangeSpec,
) -> Result<Prepared> {
    let mut analysis = Analysis::default()
        .with_threshold(opts.threshold)
        .with_tuning(opts.tuning);
    let range = opts.range.unwrap_or(default_range).resolve(&cube)?;
    if let Some(r) = range {
        analysis = r.apply(analysis);
    }
    let offset = match opts.offset {
        OffsetSpec::Auto => estimate_offset(&cube)?.counts_per_bin,
        OffsetSpec::Fixed(v) => v,
    };
    analysis = analysis.with_offset(offset);
    let irf = match &opts.irf {
        None => None,
        Some(IrfSource::Estimate) => Some(Irf::estimate(&cube)?),
        Some(IrfSource::File(file)) => {
            Some(Irf::from_file(file, Some(cube.bin_ns()))?.fitted_to(cube.bins())?)
        }
    };
    let (irf_shift_ns, shift_map) = match (opts.irf_shift, &irf) {
        (None, _) => (None, None),
        (Some(_), None) => {
            return Err(invalid(
                "IRF shift",
                match opts.irf_shift {
                    Some(IrfShift::Ns(v)) => format!("{v} ns"),
                    Some(IrfShift::Pixel) => "per pixel".into(),
                    _ => "auto".into(),
                },
                "needs an IRF (--irf)",
            ));
        }
        (Some(IrfShift::Auto), Some(i)) => (Some(i.global_shift(&cube, 2.0)?), None),
        (Some(IrfShift::Pixel), Some(i)) => {
            let mask = photon_mask(&cube, opts.threshold);
            (
                Some(i.global_shift(&cube, 2.0)?),
                Some(rise_shift_map(&cube, &mask)?),
            )
        }
        (Some(IrfShift::Ns(v)), Some(_)) => (Some(v), None),
    };
    let irf = match (irf, irf_shift_ns) {
        (Some(i), Some(s)) => Some(i.shifted(s)),
        (i, _) => i,
    };
    Ok(Prepared {
        label,
        cube,
        analysis,
        range,
        offset,
        threshold: opts.threshold,
        irf,
        irf_shift_ns,
        shift_map,
    })
}

/// The phasor's angular frequency (rad/ns) of `p` at `harmonic`.
pub fn phasor_omega(p: &Prepared, harmonic: u32) -> f64 {
    2.0 * std::f64::consts::PI * f64::from(harmonic) / p.cube.period_ns()
}

/// The phasor calibration of `p` at `harmonic`, as phasorpy's `phasor_calibrate` (method
/// `mean`): the mean phasor of a reference is rotated and scaled onto the universal
/// semicircle's point of its known lifetime at the same frequency. The reference is the
/// recording at `reference` of a sample of single-exponential lifetime `ref_tau` ns (> 0),
/// else `p`'s IRF (lifetime 0), else there is none (`Ok(None)`).
///
/// The reference is read with `read_opts` (the data's: photon-stream binning and bins, bin
/// width and period overrides) with every block, channel, frame and pixel summed into one
/// decay, used as recorded (no background subtraction), over `p`'s fit range. A `.npy` or
/// TIFF reference, which stores no bin width, takes the data's bin width and period; a
/// photon stream is histogrammed into the data's number of bins. It must match the data's
/// bins, bin width and laser period (within 0.5%); its spatial shape is free.
pub fn phasor_calibration(
    p: &Prepared,
    reference: Option<&Path>,
    read_opts: &ReadOptions,
    ref_tau: f64,
    harmonic: u32,
) -> Result<Option<Calibration>> {
    let omega = phasor_omega(p, harmonic);
    let (first, m) = p.fit_range();
    let (decay, tau) = match (reference, &p.irf) {
        (Some(path), _) => {
            if !(ref_tau.is_finite() && ref_tau > 0.0) {
                return Err(invalid(
                    "calibration reference lifetime",
                    format!("{ref_tau} ns"),
                    "must be a finite number of ns > 0 (an IRF or scatterer, lifetime 0, \
                     calibrates as the IRF)",
                ));
            }
            (reference_decay(p, path, read_opts)?, ref_tau)
        }
        (None, Some(irf)) => (irf.values().to_vec(), 0.0),
        (None, None) => return Ok(None),
    };
    let counts: f64 = decay.iter().skip(first).take(m).sum();
    if !(counts.is_finite() && counts > 0.0) {
        let range = format!("bins {first}..{} (end exclusive)", first + m);
        return Err(match reference {
            Some(path) => Error::Format {
                path: path.to_path_buf(),
                what: format!("the calibration reference has no counts in the fit range, {range}"),
            },
            None => invalid(
                "IRF",
                format!("{counts} counts in {range}"),
                "needs counts in the fit range to calibrate the phasor",
            ),
        });
    }
    let (g, s) = decay_phasor(&decay, first, m, p.cube.bin_ns(), omega);
    Ok(Some(Calibration::from_reference(g, s, tau, omega)?))
}

/// The summed decay of the calibration reference at `path`, checked against `p`'s bins.
fn reference_decay(p: &Prepared, path: &Path, read_opts: &ReadOptions) -> Result<Vec<f64>> {
    let mut opts = read_opts.clone();
    opts.block = None;
    opts.channel = None;
    opts.frames = None;
    opts.sum_frames = true;
    let format = Format::of(path)?;
    if matches!(format, Format::Npy | Format::Tiff) && opts.bin_ns.is_none() {
        opts.bin_ns = Some(p.cube.bin_ns());
        opts.period_ns = opts.period_ns.or(Some(p.cube.period_ns()));
    }
    if format.is_photon_stream() && opts.bins.is_none() {
        opts.bins = Some(p.cube.bins());
    }
    let r = read(path, &opts)?;
    let mismatch = |what: String| Error::Format {
        path: path.to_path_buf(),
        what: format!("not usable as the calibration reference: {what}"),
    };
    let mut decay = vec![0.0; p.cube.bins()];
    for image in &r.images {
        let c = &image.cube;
        if !(c.bins() == p.cube.bins()
            && (c.bin_ns() - p.cube.bin_ns()).abs() < 1e-6 * p.cube.bin_ns())
        {
            return Err(mismatch(format!(
                "it has {} bins of {} ns, the data {} bins of {} ns (record the reference with \
                 the same TCSPC settings)",
                c.bins(),
                c.bin_ns(),
                p.cube.bins(),
                p.cube.bin_ns()
            )));
        }
        if (c.period_ns() - p.cube.period_ns()).abs() > 5e-3 * p.cube.period_ns() {
            return Err(mismatch(format!(
                "its laser period is {:.4} ns ({:.3} MHz), the data's {:.4} ns ({:.3} MHz)",
                c.period_ns(),
                1e3 / c.period_ns(),
                p.cube.period_ns(),
                1e3 / p.cube.period_ns()
            )));
        }
        for (d, v) in decay.iter_mut().zip(summed_decay(c)) {
            *d += v;
        }
    }
    Ok(decay)
}
