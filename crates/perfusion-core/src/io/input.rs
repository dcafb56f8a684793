//! A job's input assembled from files: tissue curves from a 4-D NIfTI series or a DICOM
//! series (a folder, [`super::dicom`]) with a mask, or a CSV of curves; times from a file, an
//! interval, the series' header (NIfTI: the frame interval; DICOM: the acquisition times) or
//! the CSV's time column; input functions from CSV files or ROI masks over the series; signal
//! converted to concentration. Masks, ROIs and T1 maps are NIfTI volumes on the series' grid.
//! Messages name the `biogpu perfusion fit` options the fields stand for, and the file at
//! fault.

use super::dicom::{self, Acquisition};
use super::{csv as pcsv, nifti as pnii};
use crate::error::{Error, Result};
use crate::model::convert::{Conversion, T10};
use crate::model::population::{Compartment, PopulationInput};
use crate::model::{Model, Problem};
use ndarray::{Array2, Array3, Axis};
use std::path::{Path, PathBuf};

/// Where a job's curves, times and inputs come from (the options of `biogpu perfusion fit`).
#[derive(Debug, Clone)]
pub struct InputSpec {
    /// The model to fit (whether a portal-venous input is needed).
    pub model: Model,
    /// DCE series (`--dce`): a 4-D NIfTI file (x, y, z, time), or DICOM: a folder of one
    /// series' files (read recursively) or one file of the series; else `curves`.
    pub dce: Option<PathBuf>,
    /// Which of several DICOM series under `dce` to read (`--series`): its number in the
    /// list that the error for a folder of several series gives (1, 2, ...) or its
    /// SeriesInstanceUID ([`dicom::read_series_choice`]); refused for a NIfTI series.
    pub series: Option<String>,
    /// Voxels of the series to fit (non-zero) (`--mask`); default every voxel.
    pub mask: Option<PathBuf>,
    /// CSV of curves, one column per curve, optional `time` column (`--curves`).
    pub curves: Option<PathBuf>,
    /// Arterial input: CSV `FILE` or `FILE:COLUMN` (`--aif`), or an ROI over the series
    /// (`--aif-mask`).
    pub aif: Option<String>,
    pub aif_mask: Option<PathBuf>,
    /// Portal-venous input, as the arterial (`--pv`, `--pv-mask`).
    pub pv: Option<String>,
    pub pv_mask: Option<PathBuf>,
    /// Times (s): a CSV with a `time` column or one column of times (`--times`).
    pub times: Option<PathBuf>,
    /// Frame interval (s) (`--dt`).
    pub dt: Option<f64>,
    /// Inputs divided by 1 - hematocrit (`--hematocrit`).
    pub hematocrit: Option<f64>,
    /// Signal to concentration of tissue curves and ROI inputs (`--convert`).
    pub conversion: Conversion,
    /// Pre-contrast T1 (s) (`--t10`) or T1 map on the series' grid (`--t1-map`), for the
    /// tissue voxels and, voxel by voxel, for ROI inputs (default 1 s).
    pub t10: Option<f64>,
    pub t1_map: Option<PathBuf>,
    /// Relative flip angle (actual / nominal) on the series' grid, for spgr (`--b1-map`):
    /// each tissue voxel, and each voxel of an ROI input before the ROI's mean, converted
    /// with its actual angle.
    pub b1_map: Option<PathBuf>,
}

/// Where NIfTI voxels came from: indices, grid shape, header, mean image (for overlays).
#[derive(Debug, Clone)]
pub struct VolumeGrid {
    pub index: Vec<[usize; 3]>,
    pub shape: (usize, usize, usize),
    pub header: pnii::NiftiHeader,
    pub mean: Array3<f32>,
}

/// Everything a fit needs, read and converted.
#[derive(Debug, Clone)]
pub struct Job {
    /// Concentration curves, one per row.
    pub curves: Array2<f32>,
    /// A name per curve: "x,y,z" (NIfTI) or the CSV column.
    pub names: Vec<String>,
    pub problem: Problem,
    /// For NIfTI input: voxel indices, grid shape, header, mean image for overlays.
    pub volume: Option<VolumeGrid>,
    /// Every file read.
    pub inputs: Vec<PathBuf>,
    /// For DICOM input: the flip angle, TR and field strength of the headers (the defaults
    /// of an SPGR conversion; see [`dce_acquisition`]).
    pub acquisition: Option<Acquisition>,
}

fn input(why: impl Into<String>) -> Error {
    Error::Input(why.into())
}

/// Column `c` of a table read from `path`, every value finite; NaN (an empty field) is an
/// error naming the line, for columns where a number is required (times, input functions).
fn finite_column(path: &Path, table: &pcsv::Table, c: usize, what: &str) -> Result<Vec<f64>> {
    let col = &table.columns[c];
    if let Some(r) = col.iter().position(|v| !v.is_finite()) {
        return Err(Error::Csv {
            path: path.to_path_buf(),
            line: table.lines.get(r).copied().unwrap_or(r + 2),
            why: format!(
                "column `{}`: {} where {what} needs a number",
                table.names[c], col[r]
            ),
        });
    }
    Ok(col.clone())
}

/// Times read from column `c` of `path`: finite and strictly increasing, with the line of
/// the first bad one.
fn times_column(path: &Path, table: &pcsv::Table, c: usize) -> Result<Vec<f64>> {
    let t = finite_column(path, table, c, "a time")?;
    if let Some(i) = (1..t.len()).find(|&i| t[i] <= t[i - 1]) {
        return Err(Error::Csv {
            path: path.to_path_buf(),
            line: table.lines.get(i).copied().unwrap_or(i + 2),
            why: format!(
                "column `{}`: {} s does not follow {} s; times must increase strictly",
                table.names[c],
                t[i],
                t[i - 1]
            ),
        });
    }
    Ok(t)
}

/// A 3-D volume used as a mask: its voxels, non-zero = inside; NaN or infinite voxels are
/// refused (they would be silently taken as inside).
fn read_mask(path: &Path) -> Result<(Array3<bool>, pnii::NiftiHeader)> {
    let (m, header) = pnii::read_volume(path)?;
    if let Some((idx, v)) = m.indexed_iter().find(|(_, v)| !v.is_finite()) {
        return Err(Error::File {
            path: path.to_path_buf(),
            why: format!(
                "mask voxel {},{},{} is {v}; a mask holds finite values (non-zero = inside)",
                idx.0, idx.1, idx.2
            ),
        });
    }
    Ok((m.mapv(|v| v != 0.0), header))
}

/// A DCE series as read, before any mask or conversion.
#[derive(Debug, Clone)]
pub struct DceSeries {
    /// Signal `(x, y, z, t)` with the NIfTI header (made from the DICOM geometry for DICOM).
    pub series: pnii::Series,
    /// Frame times (s): DICOM acquisition times from the first frame; for NIfTI the header's
    /// frame interval times the frame index, `None` where the header has none.
    pub times: Option<Vec<f64>>,
    /// Flip angle, TR and field strength of DICOM headers (`None` for NIfTI).
    pub acquisition: Option<Acquisition>,
}

/// Read a DCE series as `perfusion fit --dce` does: a 4-D NIfTI file, or DICOM (a folder of
/// one series, read recursively, or one file of it; `series` chooses among several as
/// [`dicom::read_series_choice`]).
pub fn read_dce_series(path: &Path, series: Option<&str>) -> Result<DceSeries> {
    let (s, dicom_times, acquisition) = read_dce(path, series)?;
    let times = dicom_times.or_else(|| {
        let nt = s.data.dim().3;
        pnii::frame_interval_s(&s.header).map(|dt| (0..nt).map(|i| i as f64 * dt).collect())
    });
    Ok(DceSeries {
        series: s,
        times,
        acquisition,
    })
}

/// A DCE series read from `path`: NIfTI, or DICOM where [`dicom::is_dicom`] says so; with
/// the frame times of a DICOM series (a NIfTI series gives its frame interval in its
/// header) and its acquisition parameters.
fn read_dce(
    path: &Path,
    series: Option<&str>,
) -> Result<(pnii::Series, Option<Vec<f64>>, Option<Acquisition>)> {
    if dicom::is_dicom(path) {
        let d = dicom::read_series_choice(path, series)?;
        return Ok((d.series, Some(d.times), Some(d.acquisition)));
    }
    no_series_for_nifti(path, series)?;
    Ok((pnii::read_series(path)?, None, None))
}

/// `--series` names one of several DICOM series; a NIfTI file holds one.
fn no_series_for_nifti(path: &Path, series: Option<&str>) -> Result<()> {
    match series {
        Some(s) => Err(Error::File {
            path: path.to_path_buf(),
            why: format!(
                "--series {s} chooses among the DICOM series of a folder; this is a NIfTI file, \
                 which holds one series"
            ),
        }),
        None => Ok(()),
    }
}

/// The acquisition parameters in the headers of the DICOM series at `dce` (the one `series`
/// chooses where the folder holds several; read without the pixel data, so that the
/// options of a conversion can be settled before [`load`]); `None` for a NIfTI series,
/// which has none.
pub fn dce_acquisition(dce: &Path, series: Option<&str>) -> Result<Option<Acquisition>> {
    if dicom::is_dicom(dce) {
        dicom::read_acquisition_choice(dce, series).map(Some)
    } else {
        no_series_for_nifti(dce, series)?;
        Ok(None)
    }
}

/// Check that a volume read from `path` (a mask, an ROI, a T1 map) lies on the series'
/// grid: the same shape (an error naming both files), and the same affine (a warning: the
/// voxels are matched by index).
fn check_grid(
    path: &Path,
    what: &str,
    shape: &[usize],
    header: &pnii::NiftiHeader,
    (grid_shape, g): ((usize, usize, usize), &pnii::NiftiHeader),
    dce: &Path,
) -> Result<()> {
    let want = [grid_shape.0, grid_shape.1, grid_shape.2];
    if shape != want {
        return Err(Error::File {
            path: path.to_path_buf(),
            why: format!(
                "{what} of shape {shape:?}, but the DCE series {} is {want:?} (x, y, z; for DICOM x \
                 runs along the rows (columns), y down the columns (rows), z over the slices \
                 along the normal); the {what} must be on the series' grid",
                dce.display()
            ),
        });
    }
    let rows = |h: &pnii::NiftiHeader| [h.srow_x, h.srow_y, h.srow_z];
    let apart = rows(header)
        .iter()
        .zip(rows(g).iter())
        .flat_map(|(a, b)| a.iter().zip(b).map(|(x, y)| (x - y).abs()))
        .fold(0.0f32, f32::max);
    if header.sform_code > 0 && g.sform_code > 0 && apart > 1e-2 {
        tracing::warn!(
            "{}: the {what}'s affine (sform) differs from the series' ({}) by up to {apart} mm; \
             its voxels are taken by index, on the series' grid",
            path.display(),
            dce.display()
        );
    }
    Ok(())
}

/// A population input function named by `spec` (`NAME` or `NAME:ARRIVAL_S`, e.g.
/// `parker:12`) where no file of that name exists: `None` for a file, else the input and
/// its bolus arrival time (s), or an error for a bad arrival.
fn population_spec(spec: &str) -> Option<Result<(PopulationInput, Option<f64>)>> {
    let (name, arrival) = match spec.split_once(':') {
        Some((n, a)) => (n, Some(a)),
        None => (spec, None),
    };
    if Path::new(name).exists() {
        return None;
    }
    let which: PopulationInput = name.parse().ok()?;
    Some(match arrival.map(|a| a.trim().parse::<f64>()) {
        None => Ok((which, None)),
        Some(Ok(t)) if t.is_finite() => Ok((which, Some(t))),
        _ => Err(input(format!(
            "`{spec}`: expected {name} or {name}:ARRIVAL with the bolus arrival time in seconds"
        ))),
    })
}

/// `FILE` or `FILE:COLUMN` of a CSV input function, with the file's times if it has them.
fn read_input_csv(spec: &str) -> Result<(PathBuf, Vec<f64>, Option<Vec<f64>>)> {
    let (path, column) = match spec.rsplit_once(':') {
        Some((p, c)) if !c.contains('/') && !c.contains('\\') && Path::new(p).exists() => {
            (p, Some(c))
        }
        _ => (spec, None),
    };
    let path = PathBuf::from(path);
    let table = pcsv::read_table(&path)?;
    let times = table
        .time_index()
        .map(|i| times_column(&path, &table, i))
        .transpose()?;
    let index = match column {
        Some(c) => table
            .names
            .iter()
            .position(|n| n.eq_ignore_ascii_case(c))
            .ok_or_else(|| Error::File {
                path: path.clone(),
                why: format!("no column `{c}` (columns: {})", table.names.join(", ")),
            })?,
        None => (0..table.names.len())
            .find(|&i| Some(i) != table.time_index())
            .ok_or_else(|| Error::File {
                path: path.clone(),
                why: "no value column besides time".into(),
            })?,
    };
    let values = finite_column(&path, &table, index, "an input function")?;
    Ok((path, values, times))
}

/// Read and convert the job `a` describes.
pub fn load(a: &InputSpec) -> Result<Job> {
    let conv = &a.conversion;
    if matches!(conv, Conversion::Spgr(_)) && a.t10.is_none() && a.t1_map.is_none() {
        return Err(input("--convert spgr needs --t10 SECONDS or --t1-map FILE"));
    }
    if let Some(t) = a.t10
        && !(t.is_finite() && t > 0.0)
    {
        return Err(input(format!(
            "--t10 {t}: a pre-contrast T1 in seconds, > 0 (e.g. 1.4)"
        )));
    }
    if a.dce.is_none() {
        // Volumes on the series' grid mean nothing for CSV curves: refuse, not ignore.
        for (given, what) in [
            (a.mask.is_some(), "a mask (--mask)"),
            (a.series.is_some(), "a series choice (--series)"),
            (a.b1_map.is_some(), "a B1 map (--b1-map)"),
            (a.t1_map.is_some(), "a T1 map (--t1-map)"),
        ] {
            if given {
                return Err(input(format!(
                    "{what} needs a DCE series (--dce); CSV curves have no voxel grid"
                )));
            }
        }
    }
    let mut inputs = Vec::new();
    let mut acquisition = None;
    let (curves, names, file_times, volume, series) = if let Some(path) = &a.dce {
        inputs.push(path.clone());
        let (s, dicom_times, acq) = read_dce(path, a.series.as_deref())?;
        acquisition = acq;
        let (nx, ny, nz, _) = s.data.dim();
        let mask = match &a.mask {
            Some(m) => {
                inputs.push(m.clone());
                let (mask, header) = read_mask(m)?;
                check_grid(
                    m,
                    "mask",
                    mask.shape(),
                    &header,
                    ((nx, ny, nz), &s.header),
                    path,
                )?;
                mask
            }
            None => Array3::from_elem((nx, ny, nz), true),
        };
        let (curves, index) = pnii::masked_curves(&s.data, &mask).map_err(|e| {
            input(format!(
                "mask {}: {e}",
                a.mask.as_deref().unwrap_or(Path::new("")).display()
            ))
        })?;
        if index.is_empty() {
            return Err(input("the mask selects no voxel"));
        }
        let names = index
            .iter()
            .map(|[x, y, z]| format!("{x},{y},{z}"))
            .collect();
        let nt = s.data.dim().3;
        if dicom_times.is_none() && nt > 1 && s.header.pixdim[4] < 0.0 {
            return Err(Error::File {
                path: path.clone(),
                why: format!(
                    "header field `pixdim[4]` (byte 92): a frame interval of {} is negative",
                    s.header.pixdim[4]
                ),
            });
        }
        let t = dicom_times.or_else(|| {
            pnii::frame_interval_s(&s.header)
                .map(|dt| (0..nt).map(|i| i as f64 * dt).collect::<Vec<_>>())
        });
        let mean = s.data.mean_axis(Axis(3)).ok_or_else(|| Error::File {
            path: path.clone(),
            why: "the series has no frame".into(),
        })?;
        let grid = VolumeGrid {
            index,
            shape: (nx, ny, nz),
            header: s.header.clone(),
            mean,
        };
        (curves, names, t, Some(grid), Some(s))
    } else {
        let path = a
            .curves
            .as_ref()
            .ok_or_else(|| input("no tissue curves: give --dce SERIES or --curves FILE"))?;
        inputs.push(path.clone());
        let table = pcsv::read_table(path)?;
        let t = table
            .time_index()
            .map(|i| times_column(path, &table, i))
            .transpose()?;
        let cols = table.curves();
        if cols.is_empty() {
            return Err(Error::File {
                path: path.clone(),
                why: "no curve columns".into(),
            });
        }
        let nt = cols[0].1.len();
        let curves = Array2::from_shape_fn((cols.len(), nt), |(v, i)| cols[v].1[i] as f32);
        let names = cols.iter().map(|(n, _)| (*n).to_string()).collect();
        (curves, names, t, None, None)
    };
    let nt = curves.ncols();
    // Times: --times, --dt, the file's, in that order.
    // Where the times came from, for messages about inputs that do not match them.
    let tissue = a
        .dce
        .as_ref()
        .or(a.curves.as_ref())
        .map_or_else(String::new, |p| p.display().to_string());
    let times_from = match (&a.times, a.dt) {
        (Some(p), _) => format!("--times {}", p.display()),
        (None, Some(dt)) => format!("--dt {dt} over the {nt} frames of {tissue}"),
        (None, None) => format!("the times of {tissue}"),
    };
    let times: Vec<f64> = if let Some(p) = &a.times {
        inputs.push(p.clone());
        let t = pcsv::read_table(p)?;
        let t = times_column(p, &t, t.time_index().unwrap_or(0))?;
        if t.len() != nt {
            return Err(Error::File {
                path: p.clone(),
                why: format!(
                    "{} times, but the tissue curves have {nt} time points; give one time per frame",
                    t.len()
                ),
            });
        }
        t
    } else if let Some(dt) = a.dt {
        if !(dt.is_finite() && dt > 0.0) {
            return Err(input(format!(
                "--dt {dt}: a frame interval in seconds, > 0"
            )));
        }
        (0..nt).map(|i| i as f64 * dt).collect()
    } else {
        file_times.ok_or_else(|| input(format!("no time vector for {tissue}: give --dt SECONDS or --times FILE (the NIfTI header has no frame interval, or the CSV no `time` column)")))?
    };
    // Tissue curves to concentration. The T1 and B1 maps are volumes on the series' grid,
    // read once: sampled at the fitted voxels here and at an ROI's voxels below.
    let mut read_map = |path: &Option<PathBuf>, what: &str| -> Result<Option<Array3<f32>>> {
        let Some(p) = path else {
            return Ok(None);
        };
        inputs.push(p.clone());
        let (m, header) = pnii::read_volume(p)?;
        let g = volume
            .as_ref()
            .ok_or_else(|| input(format!("{what} needs --dce")))?;
        check_grid(
            p,
            what,
            m.shape(),
            &header,
            (g.shape, &g.header),
            a.dce.as_deref().unwrap_or(Path::new("")),
        )?;
        Ok(Some(m))
    };
    let t1_volume = read_map(&a.t1_map, "T1 map (--t1-map)")?;
    let b1_volume = read_map(&a.b1_map, "B1 map (--b1-map)")?;
    let sample = |m: &Option<Array3<f32>>, index: &[[usize; 3]]| -> Option<Vec<f64>> {
        m.as_ref().map(|m| {
            index
                .iter()
                .map(|&[x, y, z]| f64::from(m[[x, y, z]]))
                .collect()
        })
    };
    let fitted: &[[usize; 3]] = volume.as_ref().map_or(&[], |g| &g.index);
    let t1_map = sample(&t1_volume, fitted);
    let b1_map = sample(&b1_volume, fitted);
    let t10 = match (&t1_map, a.t10) {
        (Some(m), _) => T10::Map(m),
        (None, Some(t)) => T10::Fixed(t),
        (None, None) => T10::Fixed(1.0),
    };
    let curves = conv.apply_b1(curves.view(), t10, b1_map.as_deref())?;
    // Inputs: CSV (concentration) or ROI over the series, converted like the tissue: each
    // ROI voxel with its own T1 and B1 (the maps' values there, else --t10 and B1 = 1),
    // then averaged (the signal equation is not linear: averaging the signals first and
    // converting at one angle would bias the input where B1 varies across the ROI).
    let roi_input = |mask: &Path, what: &'static str| -> Result<Vec<f64>> {
        let s = series
            .as_ref()
            .ok_or_else(|| input("an ROI input needs --dce"))?;
        let (mask_voxels, header) = read_mask(mask)?;
        if let (Some(g), Some(dce)) = (&volume, &a.dce) {
            check_grid(
                mask,
                &format!("{what} ROI"),
                mask_voxels.shape(),
                &header,
                (g.shape, &g.header),
                dce,
            )?;
        }
        let roi_err = |why: String| Error::File {
            path: mask.to_path_buf(),
            why: format!("as the {what} ROI: {why}"),
        };
        let (roi_curves, index) =
            pnii::masked_curves(&s.data, &mask_voxels).map_err(|e| roi_err(e.to_string()))?;
        if index.is_empty() {
            return Err(roi_err("its ROI mask selects no voxel".into()));
        }
        let t1 = sample(&t1_volume, &index);
        let b1 = sample(&b1_volume, &index);
        let t10 = match (&t1, a.t10) {
            (Some(m), _) => T10::Map(m),
            (None, Some(t)) => T10::Fixed(t),
            (None, None) => T10::Fixed(1.0),
        };
        let conc = conv.apply_b1(roi_curves.view(), t10, b1.as_deref())?;
        // Voxels whose signal has no concentration (above the SPGR model's maximum) are
        // left out of the mean, with a warning.
        let kept: Vec<usize> = (0..conc.nrows())
            .filter(|&v| conc.row(v).iter().all(|c| c.is_finite()))
            .collect();
        if kept.is_empty() {
            return Err(roi_err(format!(
                "none of its {} voxels converts to a concentration at every frame (signal above \
                 the SPGR model's maximum: check --flip-angle, --tr, --t10/--t1-map and --b1-map)",
                index.len()
            )));
        }
        if kept.len() < index.len() {
            let [x, y, z] = index[(0..index.len()).find(|v| !kept.contains(v)).unwrap_or(0)];
            tracing::warn!(
                "{}: {} of the {what} ROI's {} voxels have no concentration at some frame \
                 (e.g. {x},{y},{z}) and are left out of its mean",
                mask.display(),
                index.len() - kept.len(),
                index.len()
            );
        }
        let n = kept.len() as f64;
        Ok((0..conc.ncols())
            .map(|i| kept.iter().map(|&v| f64::from(conc[[v, i]])).sum::<f64>() / n)
            .collect())
    };
    let hct = match a.hematocrit {
        Some(h) if (0.0..1.0).contains(&h) => 1.0 - h,
        Some(h) => {
            return Err(input(format!(
                "--hematocrit {h}: a fraction between 0 and 1 (e.g. 0.45)"
            )));
        }
        None => 1.0,
    };
    // An input function and the file it came from (for messages about its values).
    let mut get_input = |csv: &Option<String>,
                         roi: &Option<PathBuf>,
                         what: &'static str|
     -> Result<Option<(Vec<f64>, PathBuf)>> {
        let population = csv.as_deref().and_then(population_spec).transpose()?;
        let v = match (csv, roi) {
            (Some(_), _) if population.is_some() => {
                let (which, arrival) = population.unwrap_or((PopulationInput::Parker, None));
                // The bolus arrives at the first frame unless told; the fit's delay absorbs
                // the rest (within its bounds).
                let v = which.sample(&times, arrival.unwrap_or(times[0]));
                // Plasma curves are not converted from blood (the division below is undone).
                let undo = if which.compartment() == Compartment::Blood {
                    1.0
                } else {
                    hct
                };
                let v: Vec<f64> = v.into_iter().map(|x| x * undo).collect();
                (v, PathBuf::from(format!("population:{}", which.name())))
            }
            (Some(spec), _) => {
                let (path, v, t) = read_input_csv(spec)?;
                if v.len() != times.len() {
                    return Err(Error::File {
                        path,
                        why: format!(
                            "{} values for the {what} input, but there are {} time points ({times_from}); give one value per time point",
                            v.len(),
                            times.len()
                        ),
                    });
                }
                if let Some(t) = t {
                    let same = t.len() == times.len()
                        && t.iter()
                            .zip(&times)
                            .all(|(a, b)| (a - b).abs() <= 1e-6 * b.abs().max(1.0));
                    if !same {
                        return Err(Error::File {
                            path,
                            why: format!(
                                "its time column differs from the tissue times ({times_from}); resample the input to the tissue times"
                            ),
                        });
                    }
                }
                inputs.push(path.clone());
                (v, path)
            }
            (None, Some(mask)) => {
                inputs.push(mask.clone());
                (roi_input(mask, what)?, mask.clone())
            }
            (None, None) => return Ok(None),
        };
        Ok(Some((v.0.into_iter().map(|x| x / hct).collect(), v.1)))
    };
    let arterial = get_input(&a.aif, &a.aif_mask, "arterial")?.ok_or_else(|| {
        input("missing arterial input function: give --aif FILE.csv or --aif-mask ROI.nii.gz")
    })?;
    let portal = get_input(&a.pv, &a.pv_mask, "portal-venous")?;
    if a.model.dual_input() && portal.is_none() {
        return Err(input(
            "the dual-input model needs a portal-venous input: give --pv FILE.csv or --pv-mask ROI.nii.gz",
        ));
    }
    let portal = if a.model.dual_input() { portal } else { None };
    let problem = Problem::new(&times, &arterial.0, portal.as_ref().map(|p| p.0.as_slice()))
        .map_err(|e| {
            // Name the file at fault: the times' source for the time axis, the input's file for
            // its values.
            // --times, else --dt (no file), else the tissue file.
            let times_file = match (&a.times, a.dt) {
                (Some(p), _) => Some(p),
                (None, Some(_)) => None,
                (None, None) => a.dce.as_ref().or(a.curves.as_ref()),
            };
            match e {
                Error::InvalidTimes { why } => match times_file {
                    Some(p) => Error::File {
                        path: p.clone(),
                        why: format!("as the time vector ({times_from}): {why}"),
                    },
                    None => input(format!("time vector ({times_from}): {why}")),
                },
                Error::InvalidInputFunction { which, why } => {
                    let from = if which == "arterial" {
                        Some(&arterial.1)
                    } else {
                        portal.as_ref().map(|p| &p.1)
                    };
                    match from {
                        Some(p) => Error::File {
                            path: p.clone(),
                            why: format!("as the {which} input function: {why}"),
                        },
                        None => Error::InvalidInputFunction { which, why },
                    }
                }
                e => {
                    let read: Vec<String> =
                        inputs.iter().map(|p| p.display().to_string()).collect();
                    input(format!(
                        "{e} (times: {times_from}; files read: {})",
                        read.join(", ")
                    ))
                }
            }
        })?;
    Ok(Job {
        curves,
        names,
        problem,
        volume,
        inputs,
        acquisition,
    })
}
