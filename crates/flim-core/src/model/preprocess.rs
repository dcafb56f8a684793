//! Preprocessing of TCSPC cubes before lifetime analysis: spatial binning (square and
//! circular), the photon-count mask, fit-range selection, background (offset) estimation,
//! and the instrument response (IRF): loaded from a file, summed from a reference measurement,
//! or estimated from the data, with a global or per-pixel shift.
//!
//! Units: time in ns, counts in photons. Every function leaves its input untouched.
//!
//! ```
//! use flim_core::{Binning, bin_spatial, estimate_offset};
//! use flim_core::{AnyCube, sim::DecaySim};
//! let sim = DecaySim::new(128, 0.1, 500.0)?.with_irf(0.1, 1.5).with_background(0.2);
//! let cube: AnyCube = sim.cube(8, 8, |_, _| vec![(1.0, 1.0)])?.into();
//! let offset = estimate_offset(&cube)?;
//! assert!((offset.counts_per_bin - 0.2).abs() < 0.05, "{offset:?}");
//! // 3 x 3 binning: an inner pixel holds the photons of its neighbourhood.
//! let binned = bin_spatial(&cube, Binning::Square(1))?;
//! let nine: f64 = cube.photons().slice(ndarray::s![3..6, 3..6]).sum();
//! assert_eq!(binned.photons()[[4, 4]], nine);
//! # Ok::<(), flim_core::Error>(())
//! ```

use crate::error::{Error, Result, invalid};
use crate::model::cube::{AnyCube, Cube, with_cube};
use crate::model::lifetimes::Analysis;
use ndarray::{Array2, Array3, ArrayView3, Axis, Zip};
use rayon::prelude::*;

/// Which neighbours are summed into each pixel.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Binning {
    /// The (2b+1) x (2b+1) square around the pixel (SPCImage's "bin b").
    Square(usize),
    /// Every pixel whose centre lies within `r` pixels of the pixel's centre.
    Circular(f64),
}

impl Binning {
    /// (dy, dx) of the neighbours, the pixel itself included.
    pub(crate) fn offsets(self) -> Result<Vec<(isize, isize)>> {
        let (reach, inside): (isize, Box<dyn Fn(isize, isize) -> bool>) = match self {
            Binning::Square(b) => {
                if b > 64 {
                    return Err(invalid("binning", b, "at most 64 (a 129 x 129 square)"));
                }
                (b as isize, Box::new(|_, _| true))
            }
            Binning::Circular(r) => {
                if !(r.is_finite() && (0.0..=64.0).contains(&r)) {
                    return Err(invalid("binning radius", r, "must be 0 to 64 pixels"));
                }
                let r2 = r * r + 1e-9;
                (
                    r.floor() as isize,
                    Box::new(move |dy, dx| ((dy * dy + dx * dx) as f64) <= r2),
                )
            }
        };
        Ok((-reach..=reach)
            .flat_map(|dy| (-reach..=reach).map(move |dx| (dy, dx)))
            .filter(|&(dy, dx)| inside(dy, dx))
            .collect())
    }
}

/// Sum every pixel's decay with its neighbours (`kernel`); at the edges only the neighbours
/// inside the image count. Integer counts come back as u32 (no overflow for any kernel of u16
/// data), float counts as f32. Bin width and period are kept.
pub fn bin_spatial(cube: &AnyCube, kernel: Binning) -> Result<AnyCube> {
    let offsets = kernel.offsets()?;
    if offsets.len() == 1 {
        return Ok(cube.clone());
    }
    let (bin, period) = (cube.bin_ns(), cube.period_ns());
    let out: AnyCube = match cube {
        AnyCube::F32(c) => Cube::new(neighbour_sum(c.counts(), &offsets, |v| v), bin)?.into(),
        _ => with_cube!(cube, |c| Cube::new(
            neighbour_sum(c.counts(), &offsets, |v| Into::<f64>::into(v) as u32),
            bin
        )?
        .into()),
    };
    out.with_period_ns(period)
}

fn neighbour_sum<T, A>(
    counts: ArrayView3<'_, T>,
    offsets: &[(isize, isize)],
    to: impl Fn(T) -> A + Sync,
) -> Array3<A>
where
    T: Copy + Sync,
    A: Copy + Default + Send + Sync + std::ops::AddAssign,
{
    let (h, w, bins) = counts.dim();
    let mut out = Array3::<A>::default((h, w, bins));
    out.axis_iter_mut(Axis(0))
        .into_par_iter()
        .enumerate()
        .for_each(|(y, mut row)| {
            for x in 0..w {
                let mut acc = row.index_axis_mut(Axis(0), x);
                for &(dy, dx) in offsets {
                    let (yy, xx) = (y as isize + dy, x as isize + dx);
                    if yy < 0 || xx < 0 || yy >= h as isize || xx >= w as isize {
                        continue;
                    }
                    let src = counts.index_axis(Axis(0), yy as usize);
                    let src = src.index_axis(Axis(0), xx as usize);
                    Zip::from(&mut acc).and(&src).for_each(|a, &v| *a += to(v));
                }
            }
        });
    out
}

/// Pixels with at least `threshold` photons (all bins): the pixels worth analysing. Pixels
/// without photons are always masked, whatever the threshold.
pub fn photon_mask(cube: &AnyCube, threshold: f64) -> Array2<bool> {
    cube.photons().mapv(|n| n > 0.0 && n >= threshold)
}

/// A fit range: bins `first .. first + bins` of the decay.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FitRange {
    /// First bin.
    pub first: usize,
    /// Number of bins.
    pub bins: usize,
}

impl FitRange {
    /// Bins `first .. end` (end exclusive) of a cube of `total` bins.
    pub fn from_bins(first: usize, end: usize, total: usize) -> Result<Self> {
        if first >= end || end > total || end - first < 4 {
            return Err(invalid(
                "fit range",
                format!("bins {first}..{end}"),
                format!("needs at least 4 of the {total} bins, first < end <= {total}"),
            ));
        }
        Ok(Self {
            first,
            bins: end - first,
        })
    }

    /// The bins whose centres lie in `[start_ns, end_ns]`, bins `bin_ns` wide.
    pub fn from_ns(start_ns: f64, end_ns: f64, bin_ns: f64, total: usize) -> Result<Self> {
        if !(start_ns.is_finite() && end_ns.is_finite() && start_ns < end_ns) {
            return Err(invalid(
                "fit range",
                format!("{start_ns}..{end_ns} ns"),
                "needs finite start < end",
            ));
        }
        let first = (start_ns / bin_ns - 0.5).ceil().max(0.0) as usize;
        let end = ((end_ns / bin_ns - 0.5).floor() + 1.0).clamp(0.0, total as f64) as usize;
        Self::from_bins(first, end.max(first), total)
    }

    /// The bins whose start lies within the first laser period (`period_ns`) of a cube of
    /// `total` bins `bin_ns` wide: bins `0..ceil(period / bin)`, the phasor's default (its
    /// harmonic frequency is 1 / period, so it must see one period, not a window that runs
    /// past it). `None` when that is every bin (no bin starts past the period).
    pub fn one_period(total: usize, bin_ns: f64, period_ns: f64) -> Result<Option<Self>> {
        if !(bin_ns.is_finite() && bin_ns > 0.0 && period_ns.is_finite() && period_ns > 0.0) {
            return Err(invalid(
                "bin width / period",
                format!("{bin_ns} / {period_ns} ns"),
                "must be finite and > 0",
            ));
        }
        // A bin that starts within rounding of the period's end starts the next period.
        let starts = (period_ns / bin_ns * (1.0 - 1e-9)).ceil();
        if starts >= total as f64 {
            return Ok(None);
        }
        Self::from_bins(0, starts as usize, total).map(Some)
    }

    /// From the peak of the summed decay to the last bin: the tail that tail-fitting methods
    /// (RLD, IEM, CMM) assume starts at the window's first bin.
    pub fn from_peak(cube: &AnyCube) -> Result<Self> {
        let peak = argmax(&summed_decay(cube));
        Self::from_bins(peak, cube.bins(), cube.bins())
    }

    /// `opts` restricted to this range.
    pub fn apply(self, opts: Analysis) -> Analysis {
        opts.with_range(self.first, Some(self.bins))
    }

    /// The cube cut to this range (e.g. to write or fit only these bins).
    pub fn crop(self, cube: &AnyCube) -> Result<AnyCube> {
        if self.first + self.bins > cube.bins() {
            return Err(invalid(
                "fit range",
                format!("bins {}..{}", self.first, self.first + self.bins),
                format!("the cube has {} bins", cube.bins()),
            ));
        }
        let period = cube.period_ns();
        let r = self.first..self.first + self.bins;
        let out: AnyCube = with_cube!(cube, |c| Cube::new(
            c.counts().slice(ndarray::s![.., .., r]).to_owned(),
            c.bin_ns()
        )?
        .into());
        out.with_period_ns(period)
    }
}

/// The decay summed over all pixels, per bin (photons).
pub fn summed_decay(cube: &AnyCube) -> Vec<f64> {
    with_cube!(cube, |c| {
        let bins = c.bins();
        let counts = c.counts();
        let add = |mut sum: Vec<f64>, px: &[_]| {
            for (s, &v) in sum.iter_mut().zip(px) {
                *s += Into::<f64>::into(v);
            }
            sum
        };
        // Blocks of 1024 pixels summed on every core (a 512x512x256 cube is 134 MB), then
        // the partial sums added in block order: the same result on any number of cores.
        match counts.as_slice() {
            Some(all) if bins > 0 => all
                .par_chunks(bins * 1024)
                .map(|rows| rows.chunks_exact(bins).fold(vec![0.0f64; bins], add))
                .collect::<Vec<_>>()
                .into_iter()
                .fold(vec![0.0f64; bins], |mut sum, part| {
                    sum.iter_mut().zip(&part).for_each(|(s, p)| *s += p);
                    sum
                }),
            _ => counts
                .lanes(Axis(2))
                .into_iter()
                .fold(vec![0.0f64; bins], |sum, px| {
                    add(sum, px.to_vec().as_slice())
                }),
        }
    })
}

/// A background estimate.
#[derive(Debug, Clone, PartialEq)]
pub struct Offset {
    /// Background counts per bin per pixel.
    pub counts_per_bin: f64,
    /// The pre-rise bins it was taken from.
    pub bins: std::ops::Range<usize>,
}

/// The background per bin per pixel, from the pre-rise bins of the summed decay: the bins
/// before the rise whose counts stay within noise of the lowest level before the peak. For
/// lifetimes near the laser period these bins also hold the previous pulse's tail, which is
/// then counted as background too (as in SPCImage's offset). An
/// error when fewer than 3 such bins exist (the rise starts at the window's first bin; give
/// the offset by hand then).
pub fn estimate_offset(cube: &AnyCube) -> Result<Offset> {
    let (h, w) = cube.shape();
    let pixels = (h * w).max(1) as f64;
    let s = summed_decay(cube);
    let peak = argmax(&s);
    let floor = s[..=peak].iter().copied().fold(f64::INFINITY, f64::min);
    // Within 3 Poisson sigmas of the floor (at least 2% of the rise).
    let limit = floor + (3.0 * floor.max(1.0).sqrt()).max(0.02 * (s[peak] - floor));
    let end = s[..peak].iter().position(|&v| v > limit).unwrap_or(peak);
    // Stop 2 bins short of the rise, where the IRF's foot may begin.
    let end = end.saturating_sub(2);
    if end < 3 {
        return Err(invalid(
            "offset",
            "auto",
            format!(
                "the decay rises at bin {} of {}: too few pre-rise bins to estimate the background; give --offset",
                end + 2,
                s.len()
            ),
        ));
    }
    let mean = s[..end].iter().sum::<f64>() / end as f64;
    Ok(Offset {
        counts_per_bin: mean / pixels,
        bins: 0..end,
    })
}

fn argmax(v: &[f64]) -> usize {
    v.iter()
        .enumerate()
        .fold((0, f64::NEG_INFINITY), |(bi, bv), (i, &x)| {
            if x > bv { (i, x) } else { (bi, bv) }
        })
        .0
}

/// An instrument response: a histogram on the data's time bins, normalised to sum 1.
///
/// ```
/// use flim_core::preprocess::Irf;
/// let irf = Irf::new(vec![0.0, 1.0, 4.0, 1.0, 0.0, 0.0], 0.1)?;
/// assert!((irf.centroid_ns() - 0.25).abs() < 1e-12); // bin 2's centre
/// let later = irf.shifted(0.1);
/// assert!((later.centroid_ns() - 0.35).abs() < 1e-12);
/// # Ok::<(), flim_core::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Irf {
    values: Vec<f64>,
    bin_ns: f64,
}

impl Irf {
    /// An IRF from counts per bin (any scale; negative values are an error).
    pub fn new(values: Vec<f64>, bin_ns: f64) -> Result<Self> {
        if !(bin_ns.is_finite() && bin_ns > 0.0) {
            return Err(invalid(
                "IRF bin width",
                bin_ns,
                "must be finite and > 0 ns",
            ));
        }
        if values.iter().any(|v| !v.is_finite() || *v < 0.0) {
            return Err(invalid("IRF", "values", "must be finite and >= 0"));
        }
        let sum: f64 = values.iter().sum();
        if values.len() < 2 || sum <= 0.0 {
            return Err(invalid(
                "IRF",
                format!("{} bins summing to {sum}", values.len()),
                "needs at least 2 bins and some counts",
            ));
        }
        Ok(Self {
            values: values.iter().map(|v| v / sum).collect(),
            bin_ns,
        })
    }

    /// The normalised values per bin.
    pub fn values(&self) -> &[f64] {
        &self.values
    }

    /// Bin width (ns).
    pub fn bin_ns(&self) -> f64 {
        self.bin_ns
    }

    /// Mean time (ns), bin centres at `(j + 1/2) h`.
    pub fn centroid_ns(&self) -> f64 {
        self.values
            .iter()
            .enumerate()
            .map(|(j, v)| (j as f64 + 0.5) * self.bin_ns * v)
            .sum()
    }

    /// Full width at half maximum (ns), interpolated between bins.
    pub fn fwhm_ns(&self) -> f64 {
        let p = argmax(&self.values);
        let half = self.values[p] / 2.0;
        let cross = |range: &mut dyn Iterator<Item = usize>, step: isize| -> f64 {
            for j in range {
                let k = (j as isize + step) as usize;
                let (a, b) = (self.values[j], self.values[k]);
                if b < half {
                    return j as f64 + step as f64 * (a - half) / (a - b);
                }
            }
            if step < 0 {
                0.0
            } else {
                (self.values.len() - 1) as f64
            }
        };
        let left = cross(&mut (1..=p).rev(), -1);
        let right = cross(&mut (p..self.values.len() - 1), 1);
        (right - left) * self.bin_ns
    }

    /// The IRF moved later by `shift_ns` (earlier when negative), by linear interpolation
    /// between bins; what moves out of the window is lost, and the result is renormalised.
    pub fn shifted(&self, shift_ns: f64) -> Irf {
        let s = shift_ns / self.bin_ns;
        let n = self.values.len();
        let at = |x: f64| -> f64 {
            let i = x.floor();
            let f = x - i;
            let get = |k: f64| {
                if k < 0.0 || k >= n as f64 {
                    0.0
                } else {
                    self.values[k as usize]
                }
            };
            get(i) * (1.0 - f) + get(i + 1.0) * f
        };
        let values: Vec<f64> = (0..n).map(|j| at(j as f64 - s)).collect();
        let sum: f64 = values.iter().sum();
        Irf {
            values: if sum > 0.0 {
                values.iter().map(|v| v / sum).collect()
            } else {
                values
            },
            bin_ns: self.bin_ns,
        }
    }

    /// The IRF on `bins` bins (cut or zero-padded), e.g. to match the data's window.
    pub fn fitted_to(&self, bins: usize) -> Result<Irf> {
        let mut v = self.values.clone();
        v.resize(bins, 0.0);
        Irf::new(v, self.bin_ns)
    }

    /// The IRF of a reference measurement (scatterer, or a dye of lifetime well below the
    /// bin width): its summed decay, less the pre-rise background when one can be estimated.
    pub fn from_reference(reference: &AnyCube) -> Result<Irf> {
        let mut s = summed_decay(reference);
        if let Ok(off) = estimate_offset(reference) {
            let (h, w) = reference.shape();
            let per_bin = off.counts_per_bin * (h * w) as f64;
            for v in &mut s {
                *v = (*v - per_bin).max(0.0);
            }
        }
        Irf::new(s, reference.bin_ns())
    }

    /// Estimate the IRF from the data when none was measured. The summed decay `D` (less the
    /// background) is `IRF * exp(-t / tau)` for a single exponential, so
    /// `IRF = dD/dt + D / tau`, with `tau` from a log-linear fit of the tail. Exact for one
    /// lifetime; for several, `tau` is their tail average and the estimate slightly too wide.
    /// Only the main lobe around the maximum is kept (values below 1% of it are cut).
    pub fn estimate(cube: &AnyCube) -> Result<Irf> {
        let h = cube.bin_ns();
        let mut d = summed_decay(cube);
        let (py, px) = cube.shape();
        if let Ok(off) = estimate_offset(cube) {
            let per_bin = off.counts_per_bin * (py * px) as f64;
            for v in &mut d {
                *v -= per_bin;
            }
        }
        let tau = tail_lifetime(&d, h)?;
        let n = d.len();
        let mut irf: Vec<f64> = (0..n)
            .map(|j| {
                let slope = match j {
                    0 => (d[1] - d[0]) / h,
                    j if j == n - 1 => (d[j] - d[j - 1]) / h,
                    j => (d[j + 1] - d[j - 1]) / (2.0 * h),
                };
                (slope + d[j] / tau).max(0.0)
            })
            .collect();
        let peak = argmax(&irf);
        let cut = 0.01 * irf[peak];
        let lo = (0..=peak).rev().find(|&j| irf[j] < cut).unwrap_or(0);
        let hi = (peak..n).find(|&j| irf[j] < cut).unwrap_or(n - 1);
        for (j, v) in irf.iter_mut().enumerate() {
            if j <= lo || j >= hi {
                *v = 0.0;
            }
        }
        Irf::new(irf, h)
    }

    /// The global shift (ns) that best aligns this IRF with `cube`'s summed decay: the model
    /// `shifted IRF * exp(-t / tau)` (tau from the tail) is compared with the decay on its
    /// rising edge (from the first bin above 5% of the peak to the peak), for shifts on a
    /// 1/20-bin grid within +-`max_ns`, by least squares.
    pub fn global_shift(&self, cube: &AnyCube, max_ns: f64) -> Result<f64> {
        let h = cube.bin_ns();
        if (h - self.bin_ns).abs() > 1e-6 * h {
            return Err(invalid(
                "IRF bin width",
                self.bin_ns,
                format!("differs from the data's {h} ns"),
            ));
        }
        let d = summed_decay(cube);
        let tau = tail_lifetime(&d, h)?;
        let peak = argmax(&d);
        let start = d[..=peak]
            .iter()
            .position(|&v| v > 0.05 * d[peak])
            .unwrap_or(0);
        let rows = start..(peak + 3).min(d.len());
        let irf = self.fitted_to(d.len())?;
        let steps = (max_ns / h * 20.0).ceil() as i64;
        let mut best = (f64::INFINITY, 0.0);
        for k in -steps..=steps {
            let s = k as f64 * h / 20.0;
            let m = convolve_exp(irf.shifted(s).values(), h, tau);
            // Scale the model to the data over the window (least squares).
            let (num, den) = rows
                .clone()
                .fold((0.0, 0.0), |(a, b), j| (a + m[j] * d[j], b + m[j] * m[j]));
            if den <= 0.0 {
                continue;
            }
            let a = num / den;
            let chi2: f64 = rows
                .clone()
                .map(|j| (d[j] - a * m[j]).powi(2) / d[j].max(1.0))
                .sum();
            if chi2 < best.0 {
                best = (chi2, s);
            }
        }
        Ok(best.1)
    }
}

/// Convolution of an IRF with a decay `exp(-t / tau)` integrated over bins of `h` (a
/// recursive filter, exact for piecewise-constant IRF bins).
fn convolve_exp(irf: &[f64], h: f64, tau: f64) -> Vec<f64> {
    let q = (-h / tau).exp();
    let mut out = Vec::with_capacity(irf.len());
    let mut acc = 0.0;
    for &v in irf {
        acc = acc * q + v;
        out.push(acc);
    }
    out
}

/// Lifetime (ns) from a weighted log-linear fit of the decay's tail: from 3 bins past the
/// peak to where the counts drop below 2% of it (or to the end).
fn tail_lifetime(d: &[f64], h: f64) -> Result<f64> {
    let peak = argmax(d);
    let start = (peak + 3).min(d.len());
    let end = d[start..]
        .iter()
        .position(|&v| v < 0.02 * d[peak])
        .map_or(d.len(), |p| start + p);
    let pts: Vec<(f64, f64, f64)> = (start..end)
        .filter(|&j| d[j] > 0.0)
        .map(|j| (j as f64 * h, d[j].ln(), d[j]))
        .collect();
    if pts.len() < 3 {
        return Err(invalid(
            "IRF estimate",
            "tail",
            "the decay has fewer than 3 tail bins with photons after its peak",
        ));
    }
    let sw: f64 = pts.iter().map(|p| p.2).sum();
    let mt = pts.iter().map(|p| p.2 * p.0).sum::<f64>() / sw;
    let my = pts.iter().map(|p| p.2 * p.1).sum::<f64>() / sw;
    let stt: f64 = pts.iter().map(|p| p.2 * (p.0 - mt).powi(2)).sum();
    let sty: f64 = pts.iter().map(|p| p.2 * (p.0 - mt) * (p.1 - my)).sum();
    let slope = sty / stt;
    if !(slope.is_finite() && slope < 0.0) {
        return Err(invalid(
            "IRF estimate",
            "tail",
            "the decay does not fall after its peak",
        ));
    }
    Ok(-1.0 / slope)
}

/// Time (ns) at which a decay's rising edge crosses half its maximum, interpolated between
/// bins (bin centres at `(j + 1/2) h`); NaN when the decay has no rise.
pub fn half_rise_ns(decay: &[f64], bin_ns: f64) -> f64 {
    let peak = argmax(decay);
    let half = decay[peak] / 2.0;
    if half.is_nan() || half <= 0.0 {
        return f64::NAN;
    }
    for j in (0..peak).rev() {
        if decay[j] < half {
            let f = (half - decay[j]) / (decay[j + 1] - decay[j]);
            return (j as f64 + 0.5 + f) * bin_ns;
        }
    }
    f64::NAN
}

/// Per-pixel IRF shift (ns): how much later each pixel's rising edge crosses half its maximum
/// than the summed decay's does (rise-time alignment, e.g. for scanners whose timing drifts
/// across the field). NaN where the mask is false or the decay has no rise. Noisy below a few
/// hundred photons per pixel: bin first.
pub fn rise_shift_map(cube: &AnyCube, mask: &Array2<bool>) -> Result<Array2<f32>> {
    if mask.dim() != cube.shape() {
        return Err(Error::Shape(format!(
            "mask {:?} does not match the cube's {:?}",
            mask.dim(),
            cube.shape()
        )));
    }
    let h = cube.bin_ns();
    let reference = half_rise_ns(&summed_decay(cube), h);
    let (rows, cols) = cube.shape();
    let mut out = Array2::<f32>::from_elem((rows, cols), f32::NAN);
    with_cube!(cube, |c| {
        let counts = c.counts();
        out.axis_iter_mut(Axis(0))
            .into_par_iter()
            .enumerate()
            .for_each(|(y, mut row)| {
                for x in 0..cols {
                    if mask[[y, x]] {
                        let d: Vec<f64> = counts
                            .slice(ndarray::s![y, x, ..])
                            .iter()
                            .map(|&v| Into::<f64>::into(v))
                            .collect();
                        row[x] = (half_rise_ns(&d, h) - reference) as f32;
                    }
                }
            });
    });
    Ok(out)
}
