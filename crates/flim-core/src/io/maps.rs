//! Results to files: float32 TIFF maps, lifetime images coloured by lifetime with brightness
//! by intensity (as SPCImage shows them) with a colour bar, lifetime histograms (PNG and CSV),
//! the phasor plot (a 2-D histogram with the universal semicircle) and CSV/JSON summaries.
//!
//! Maps are named float planes ([`MapSet`]) plus a mask of the analysed pixels. Masked and
//! failed (non-finite) pixels never enter a statistic, a histogram or a colour range; they
//! are NaN in TIFF maps and black in images. A map's name says what it holds
//! ([`quantity`](crate::io::quantity)): images carry it as the colour-bar title
//! ("tau_m (ns)") and TIFF maps as ImageJ metadata (value unit, label, pixel size). Images
//! are drawn with the shared `imaging-io` canvas. Writers write exactly the path given;
//! choosing paths (and never overwriting inputs) is the caller's job.
//!
//! ```
//! use flim_core::{Analysis, analyse, sim::mono_exponential};
//! use flim_core::io::{MapSet, map_stats};
//! let cube = mono_exponential(&[2.0, 4.0], 8, 8, 128, 0.1, 12.8, 2_000.0, 3)?;
//! let (maps, _) = analyse(&cube, &Analysis::default(), &gpu_runtime::Device::cpu())?;
//! let maps = MapSet::from_lifetimes(&maps);
//! let tau = maps.get("tau_cmm_ns").unwrap();
//! let stats = map_stats(tau.view(), maps.mask.view());
//! assert_eq!(stats.valid, 64);
//! assert!((stats.median - 3.0).abs() < 1.1);
//! # Ok::<(), flim_core::Error>(())
//! ```

use super::figure::{Shade, axis_label, draw_map_figure, write_imagej_tiff};
use crate::error::{Error, Result};
use crate::model::fit::{FitMaps, FitStatus};
use crate::model::fret::{FRET_PLANES, FretMaps};
use crate::model::lifetimes::{LifetimeMaps, PLANES, STATUS_OK};
use imaging_io::{Colormap, Range};
use ndarray::{Array2, ArrayView2};
use std::path::Path;

/// Named float maps of one image and the pixels that were analysed.
#[derive(Debug, Clone, PartialEq)]
pub struct MapSet {
    /// (name, map) in output order; names are file stems, e.g. `tau_iem_ns`.
    pub maps: Vec<(String, Array2<f32>)>,
    /// True where the pixel was analysed (enough photons).
    pub mask: Array2<bool>,
}

impl MapSet {
    /// Maps of a per-pixel or global fit named after `method` (e.g. `mle`):
    /// `tau_<method>_ns` (the lifetime, or the amplitude-weighted mean lifetime of bi and
    /// tri), intensity, per component `tau<i>_ns`, `a<i>` (amplitude) and `f<i>` (amplitude
    /// fraction), the mean lifetimes, offset and shift where fitted, `chi2_red`, `iterations`
    /// and `status` (0 converged, 1 masked, 2 failed). The main lifetime is NaN where the fit
    /// failed, so that no statistic counts it.
    pub fn from_fit(
        method: &str,
        offset_fitted: bool,
        shift_fitted: bool,
        m: &FitMaps,
    ) -> Result<Self> {
        let mut set = MapSet {
            maps: Vec::new(),
            mask: m.status.mapv(|s| s != FitStatus::Masked),
        };
        let k = m.tau.len();
        let mut main = if k == 1 {
            m.tau[0].clone()
        } else {
            m.tau_amp_mean.clone()
        };
        ndarray::Zip::from(&mut main)
            .and(&m.status)
            .for_each(|t, &s| {
                if s != FitStatus::Converged {
                    *t = f32::NAN;
                }
            });
        set.push(format!("tau_{method}_ns"), main)?;
        set.push("intensity", m.intensity.clone())?;
        for i in 0..k {
            if k > 1 {
                set.push(format!("tau{}_ns", i + 1), m.tau[i].clone())?;
            }
            set.push(format!("a{}", i + 1), m.amplitude[i].clone())?;
            if k > 1 {
                set.push(format!("f{}", i + 1), m.fraction[i].clone())?;
            }
        }
        if k > 1 {
            set.push("tau_amp_mean_ns", m.tau_amp_mean.clone())?;
            set.push("tau_int_mean_ns", m.tau_int_mean.clone())?;
        }
        if offset_fitted {
            set.push("offset", m.offset.clone())?;
        }
        if shift_fitted {
            set.push("irf_shift_fit_bins", m.shift.clone())?;
        }
        set.push("chi2_red", m.chi2_red.clone())?;
        set.push("iterations", m.iterations.mapv(|v| v as f32))?;
        set.push("status", m.status.mapv(|s| f32::from(s as u8)))?;
        Ok(set)
    }

    /// BCMM maps (and PM's where the donor lifetime was known): main map the mean lifetime
    /// `tau_avg_bcmm_ns`, then intensity, `tau_f_bcmm_ns`, `tau_d_bcmm_ns`, `f_d_bcmm` (and
    /// `tau_avg_pm_ns`, `tau_f_pm_ns`, `f_d_pm`).
    pub fn from_fret(maps: &FretMaps, donor_known: bool) -> Result<Self> {
        let mut set = MapSet {
            maps: Vec::new(),
            mask: maps.status.mapv(|s| s == STATUS_OK),
        };
        let planes = maps.planes();
        let get = |n: &str| -> Array2<f32> {
            planes[FRET_PLANES
                .iter()
                .position(|x| *x == n)
                .expect("a FRET plane")]
            .clone()
        };
        let mut wanted = vec![
            "tau_avg_bcmm_ns",
            "intensity",
            "tau_f_bcmm_ns",
            "tau_d_bcmm_ns",
            "f_d_bcmm",
        ];
        if donor_known {
            wanted.extend(["tau_avg_pm_ns", "tau_f_pm_ns", "f_d_pm"]);
        }
        for n in wanted {
            set.push(n, get(n))?;
        }
        Ok(set)
    }

    /// The maps `names` of `self` (in that order) with the same mask.
    pub fn select(&self, names: &[&str]) -> Result<Self> {
        let mut out = MapSet {
            maps: Vec::new(),
            mask: self.mask.clone(),
        };
        for &name in names {
            let map = self
                .get(name)
                .ok_or_else(|| Error::Shape(format!("no map named {name}")))?;
            out.push(name, map.clone())?;
        }
        Ok(out)
    }
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

/// Write map `name` as a single-page float32 TIFF (NaN where nothing was computed) with
/// ImageJ metadata, so that Fiji shows what it holds: the value unit and label from the
/// name ([`quantity`](crate::io::quantity)), the pixel size in µm when known
/// (`pixel_um`), and a display range of the 1st to 99th percentile.
pub fn write_map_tiff(
    path: &Path,
    name: &str,
    map: ArrayView2<'_, f32>,
    pixel_um: Option<f64>,
) -> Result<()> {
    write_imagej_tiff(path, name, map, pixel_um)
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
/// `intensity` ([`brightness`]), masked and failed pixels black, enlarged to a readable
/// size, with a colour bar titled with the quantity and unit of map `name` (e.g.
/// `tau_mle_ns` gives "tau_mle (ns)"). Percentile ranges are taken over the pixels shown
/// (analysed, finite, with photons). Returns the lifetime limits used.
pub fn write_lifetime_png(
    path: &Path,
    name: &str,
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
    write_shaded(path, name, tau, weight.view(), cmap, range)
}

/// Write a plain map (e.g. intensity, chi2_r) as a PNG enlarged to a readable size, with a
/// colour bar titled with the quantity and unit of map `name`; masked and non-finite pixels
/// black. Percentile ranges are taken over the analysed finite pixels. Returns the limits.
pub fn write_map_png(
    path: &Path,
    name: &str,
    map: ArrayView2<'_, f32>,
    mask: ArrayView2<'_, bool>,
    cmap: Colormap,
    range: Range,
) -> Result<(f32, f32)> {
    if map.dim() != mask.dim() {
        return Err(Error::Shape(format!(
            "map {:?} and mask {:?} differ in size",
            map.dim(),
            mask.dim()
        )));
    }
    let weight = mask.mapv(|m| if m { 1.0f32 } else { 0.0 });
    write_shaded(path, name, map, weight.view(), cmap, range)
}

/// Colour by `map` over `range` (resolved over the finite values of positive weight, as
/// `imaging-io`'s weighted render does), brightness by `weight`, and draw the figure.
fn write_shaded(
    path: &Path,
    name: &str,
    map: ArrayView2<'_, f32>,
    weight: ArrayView2<'_, f32>,
    cmap: Colormap,
    range: Range,
) -> Result<(f32, f32)> {
    let (lo, hi) = range.resolve_weighted(map, weight)?;
    let span = f64::from(hi) - f64::from(lo);
    let mut shades = Array2::<Shade>::from_elem(map.dim(), None);
    ndarray::Zip::from(&mut shades)
        .and(map)
        .and(weight)
        .for_each(|s, &v, &w| {
            if v.is_finite() && w.is_finite() && w > 0.0 {
                *s = Some(((f64::from(v) - f64::from(lo)) / span, f64::from(w)));
            }
        });
    let img = draw_map_figure(shades.view(), cmap, lo, hi, &axis_label(name))?;
    img.write_png(path)?;
    Ok((lo, hi))
}
