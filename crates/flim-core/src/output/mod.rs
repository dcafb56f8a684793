//! Results to files: float32 TIFF maps, lifetime images coloured by lifetime with brightness
//! by intensity (as SPCImage shows them) with a colour bar, lifetime histograms (PNG and CSV),
//! the phasor plot (a 2-D histogram with the universal semicircle) and CSV/JSON summaries.
//!
//! Maps are named float planes ([`MapSet`]) plus a mask of the analysed pixels. Masked and
//! failed (non-finite) pixels never enter a statistic, a histogram or a colour range; they
//! are NaN in TIFF maps and black in images. TIFF and PNG drawing come from the shared
//! `imaging-io` crate. Writers write exactly the path given; choosing paths (and never
//! overwriting inputs) is the caller's job.
//!
//! ```
//! use flim_core::{Analysis, analyse, sim::mono_exponential};
//! use flim_core::output::{MapSet, map_stats};
//! let cube = mono_exponential(&[2.0, 4.0], 8, 8, 128, 0.1, 12.8, 2_000.0, 3)?;
//! let maps = MapSet::from_lifetimes(&analyse(&cube, &Analysis::default())?);
//! let tau = maps.get("tau_cmm_ns").unwrap();
//! let stats = map_stats(tau.view(), maps.mask.view());
//! assert_eq!(stats.valid, 64);
//! assert!((stats.median - 3.0).abs() < 1.1);
//! # Ok::<(), flim_core::Error>(())
//! ```

mod plots;
mod stats;

pub use plots::{
    Histogram, lifetime_histogram, write_histogram_csv, write_histogram_png, write_phasor_png,
};
pub use stats::{MapStats, map_stats, write_summary_csv};

use crate::error::{Error, Result};
use crate::methods::{LifetimeMaps, PLANES, STATUS_OK};
use imaging_io::{Colormap, Range};
use ndarray::{Array2, ArrayView2};
use std::path::Path;

impl From<imaging_io::Error> for Error {
    fn from(e: imaging_io::Error) -> Self {
        use imaging_io::Error as E;
        match e {
            E::InvalidParameter { name, value, why } => {
                Error::InvalidParameter { name, value, why }
            }
            E::FrameSizeMismatch { .. } => Error::Shape(e.to_string()),
            E::Format { path, why } => Error::Format { path, what: why },
            E::Io { path, source } => Error::Io { path, source },
        }
    }
}

/// Named float maps of one image and the pixels that were analysed.
#[derive(Debug, Clone, PartialEq)]
pub struct MapSet {
    /// (name, map) in output order; names are file stems, e.g. `tau_iem_ns`.
    pub maps: Vec<(String, Array2<f32>)>,
    /// True where the pixel was analysed (enough photons).
    pub mask: Array2<bool>,
}

impl MapSet {
    /// An empty set for images of `shape`, every pixel analysed.
    pub fn new(shape: (usize, usize)) -> Self {
        Self {
            maps: Vec::new(),
            mask: Array2::from_elem(shape, true),
        }
    }

    /// The maps of the non-iterative methods ([`PLANES`]), the mask from their status.
    pub fn from_lifetimes(m: &LifetimeMaps) -> Self {
        Self {
            maps: PLANES
                .iter()
                .zip(m.planes())
                .map(|(n, p)| ((*n).to_string(), p.clone()))
                .collect(),
            mask: m.status.mapv(|s| s == STATUS_OK),
        }
    }

    /// Add (or replace) map `name`.
    pub fn push(&mut self, name: impl Into<String>, map: Array2<f32>) -> Result<()> {
        if map.dim() != self.mask.dim() {
            return Err(Error::Shape(format!(
                "map of {:?} pixels in a set of {:?}",
                map.dim(),
                self.mask.dim()
            )));
        }
        let name = name.into();
        self.maps.retain(|(n, _)| *n != name);
        self.maps.push((name, map));
        Ok(())
    }

    /// Map `name`, if present.
    pub fn get(&self, name: &str) -> Option<&Array2<f32>> {
        self.maps.iter().find(|(n, _)| n == name).map(|(_, m)| m)
    }

    /// Map `name` with every masked pixel set to NaN (what TIFF maps store), so that no
    /// tool reading the file mistakes an unanalysed pixel for a value.
    pub fn masked(&self, name: &str) -> Option<Array2<f32>> {
        let m = self.get(name)?;
        let mut out = m.clone();
        ndarray::Zip::from(&mut out)
            .and(&self.mask)
            .for_each(|v, &ok| {
                if !ok {
                    *v = f32::NAN;
                }
            });
        Some(out)
    }
}

/// Write one map as a single-page float32 TIFF (NaN where nothing was computed).
pub fn write_map_tiff(path: &Path, map: ArrayView2<'_, f32>) -> Result<()> {
    Ok(imaging_io::write_map_tiff(path, map)?)
}

/// Brightness of each pixel for lifetime images: its intensity over the 99th percentile of
/// the analysed pixels' intensities, clamped to 1; 0 where masked.
pub fn brightness(intensity: ArrayView2<'_, f32>, mask: ArrayView2<'_, bool>) -> Array2<f32> {
    let mut v: Vec<f32> = intensity
        .iter()
        .zip(mask.iter())
        .filter(|(i, m)| **m && i.is_finite() && **i > 0.0)
        .map(|(i, _)| *i)
        .collect();
    let top = if v.is_empty() {
        1.0
    } else {
        let k = ((v.len() - 1) as f64 * 0.99).round() as usize;
        *v.select_nth_unstable_by(k, f32::total_cmp).1
    };
    let mut out = Array2::<f32>::zeros(intensity.dim());
    ndarray::Zip::from(&mut out)
        .and(intensity)
        .and(mask)
        .for_each(|o, &i, &m| {
            *o = if m && i.is_finite() && i > 0.0 {
                (i / top).min(1.0)
            } else {
                0.0
            };
        });
    out
}

/// Write a lifetime image as PNG: colour by `tau` (ns) over `range`, brightness by
/// `intensity` ([`brightness`]), masked and failed pixels black, with a colour bar. Returns
/// the lifetime limits used.
pub fn write_lifetime_png(
    path: &Path,
    tau: ArrayView2<'_, f32>,
    intensity: ArrayView2<'_, f32>,
    mask: ArrayView2<'_, bool>,
    cmap: Colormap,
    range: Range,
) -> Result<(f32, f32)> {
    if tau.dim() != intensity.dim() || tau.dim() != mask.dim() {
        return Err(Error::Shape(format!(
            "lifetime {:?}, intensity {:?} and mask {:?} differ in size",
            tau.dim(),
            intensity.dim(),
            mask.dim()
        )));
    }
    let weight = brightness(intensity, mask);
    let (img, limits) = imaging_io::render_weighted(tau, weight.view(), cmap, range)?;
    img.write_png(path)?;
    Ok(limits)
}

/// Write a plain map (e.g. intensity) as a PNG with a colour bar; masked pixels black.
pub fn write_map_png(
    path: &Path,
    map: ArrayView2<'_, f32>,
    mask: ArrayView2<'_, bool>,
    cmap: Colormap,
    range: Range,
) -> Result<(f32, f32)> {
    let weight = mask.mapv(|m| if m { 1.0f32 } else { 0.0 });
    let (img, limits) = imaging_io::render_weighted(map, weight.view(), cmap, range)?;
    img.write_png(path)?;
    Ok(limits)
}
