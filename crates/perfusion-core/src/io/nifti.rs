//! NIfTI-1 volumes (.nii, .nii.gz) through the `nifti` crate: 4-D DCE series in, 3-D maps
//! out with the input's geometry (dimensions, voxel sizes, qform/sform).

use crate::error::{Error, Result};
use ndarray::{Array2, Array3, Array4, ArrayView1, ArrayView3, Axis, Ix3, Ix4, ShapeBuilder};
pub use nifti::NiftiHeader;
use nifti::writer::WriterOptions;
use nifti::{IntoNdArray, NiftiObject, ReaderOptions};
use std::path::{Path, PathBuf};

/// A 4-D series `(x, y, z, t)` with its header.
#[derive(Debug, Clone)]
pub struct Series {
    pub data: Array4<f32>,
    pub header: NiftiHeader,
    pub path: PathBuf,
}

fn file_err(path: &Path, why: impl std::fmt::Display) -> Error {
    Error::File {
        path: path.to_path_buf(),
        why: why.to_string(),
    }
}

fn read(path: &Path) -> Result<(ndarray::ArrayD<f32>, NiftiHeader)> {
    let obj = ReaderOptions::new()
        .read_file(path)
        .map_err(|e| file_err(path, format!("cannot read as NIfTI-1: {e}")))?;
    let header = obj.header().clone();
    let data = obj
        .into_volume()
        .into_ndarray::<f32>()
        .map_err(|e| file_err(path, format!("cannot convert the voxel data: {e}")))?;
    Ok((data, header))
}

/// The header of a NIfTI file.
pub fn read_header(path: &Path) -> Result<NiftiHeader> {
    NiftiHeader::from_file(path)
        .map_err(|e| file_err(path, format!("cannot read a NIfTI-1 header: {e}")))
}

/// Read a 4-D series (a 3-D file is one frame).
pub fn read_series(path: &Path) -> Result<Series> {
    let (data, header) = read(path)?;
    let data = match data.ndim() {
        4 => data.into_dimensionality::<Ix4>(),
        3 => data.insert_axis(Axis(3)).into_dimensionality::<Ix4>(),
        n => {
            return Err(file_err(
                path,
                format!("{n}-D volume; a DCE series is 4-D (x, y, z, time)"),
            ));
        }
    }
    .map_err(|e| file_err(path, e))?;
    Ok(Series {
        data,
        header,
        path: path.to_path_buf(),
    })
}

/// Read a 3-D volume (a mask, a T1 map); a 4-D file with one frame is accepted.
pub fn read_volume(path: &Path) -> Result<(Array3<f32>, NiftiHeader)> {
    let (data, header) = read(path)?;
    let shape = data.shape().to_vec();
    let data = match data.ndim() {
        3 => data
            .into_dimensionality::<Ix3>()
            .map_err(|e| file_err(path, e))?,
        4 if shape[3] == 1 => data
            .index_axis_move(Axis(3), 0)
            .into_dimensionality::<Ix3>()
            .map_err(|e| file_err(path, e))?,
        _ => {
            return Err(file_err(
                path,
                format!("shape {shape:?}; expected a 3-D volume"),
            ));
        }
    };
    Ok((data, header))
}

/// Frame interval (s) from the header's 4th voxel size and time unit, if it gives one.
pub fn frame_interval_s(header: &NiftiHeader) -> Option<f64> {
    let dt = f64::from(header.pixdim[4]);
    if !(dt.is_finite() && dt > 0.0) {
        return None;
    }
    // xyzt_units bits 3-5: 8 s, 16 ms, 24 us; 0 (unknown) is taken as seconds.
    let scale = match header.xyzt_units & 0x38 {
        16 => 1e-3,
        24 => 1e-6,
        _ => 1.0,
    };
    Some(dt * scale)
}

/// The voxels where `mask` is set: their curves `(voxels, t)` and their indices, in x-fastest
/// order (the file's). The curves are stored time-major (column-major), the layout the GPU
/// path uploads without a transpose.
pub fn masked_curves(
    series: &Array4<f32>,
    mask: &Array3<bool>,
) -> Result<(Array2<f32>, Vec<[usize; 3]>)> {
    let (nx, ny, nz, nt) = series.dim();
    if mask.dim() != (nx, ny, nz) {
        return Err(Error::ShapeMismatch {
            what: "mask and DCE series".into(),
            expected: vec![nx, ny, nz],
            got: mask.shape().to_vec(),
        });
    }
    let mut index = Vec::new();
    for z in 0..nz {
        for y in 0..ny {
            for x in 0..nx {
                if mask[[x, y, z]] {
                    index.push([x, y, z]);
                }
            }
        }
    }
    let mut curves = Array2::zeros((index.len(), nt).f());
    for (t, mut col) in curves.columns_mut().into_iter().enumerate() {
        let frame = series.index_axis(Axis(3), t);
        for (c, &[x, y, z]) in col.iter_mut().zip(&index) {
            *c = frame[[x, y, z]];
        }
    }
    Ok((curves, index))
}

/// Mean curve over the voxels of `mask` (an input function from an ROI).
pub fn roi_mean(series: &Array4<f32>, mask: &Array3<bool>, what: &'static str) -> Result<Vec<f64>> {
    let (curves, index) = masked_curves(series, mask)?;
    if index.is_empty() {
        return Err(Error::InvalidInputFunction {
            which: what,
            why: "its ROI mask selects no voxel".into(),
        });
    }
    let n = index.len() as f64;
    Ok(curves
        .columns()
        .into_iter()
        .map(|c| c.iter().map(|&v| f64::from(v)).sum::<f64>() / n)
        .collect())
}

/// A map of `values` (one per masked voxel) on the volume's grid; NaN outside the mask.
pub fn scatter(
    values: ArrayView1<f64>,
    index: &[[usize; 3]],
    shape: (usize, usize, usize),
) -> Array3<f32> {
    let mut out = Array3::from_elem(shape, f32::NAN);
    for (&v, &[x, y, z]) in values.iter().zip(index) {
        out[[x, y, z]] = v as f32;
    }
    out
}

/// Write a 3-D map with the geometry of `reference` (.nii or .nii.gz by the extension).
pub fn write_map<T>(path: &Path, map: ArrayView3<T>, reference: &NiftiHeader) -> Result<()>
where
    T: nifti::DataElement + bytemuck::Pod,
{
    let mut header = reference.clone();
    header.pixdim[4] = 0.0;
    header.xyzt_units &= 0x07; // keep the space unit, drop the time unit
    WriterOptions::new(path)
        .reference_header(&header)
        .write_nifti(&map)
        .map_err(|e| file_err(path, format!("cannot write NIfTI: {e}")))
}

/// Write a 4-D series (used by `biogpu perfusion simulate` and the demo).
pub fn write_series(path: &Path, data: &Array4<f32>, voxel_mm: [f32; 3], dt_s: f32) -> Result<()> {
    let header = NiftiHeader {
        pixdim: [
            1.0,
            voxel_mm[0],
            voxel_mm[1],
            voxel_mm[2],
            dt_s,
            0.0,
            0.0,
            0.0,
        ],
        xyzt_units: 2 | 8, // mm, s
        sform_code: 1,
        srow_x: [voxel_mm[0], 0.0, 0.0, 0.0],
        srow_y: [0.0, voxel_mm[1], 0.0, 0.0],
        srow_z: [0.0, 0.0, voxel_mm[2], 0.0],
        ..NiftiHeader::default()
    };
    WriterOptions::new(path)
        .reference_header(&header)
        .write_nifti(data)
        .map_err(|e| file_err(path, format!("cannot write NIfTI: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn series_round_trip_with_time_step_and_masked_curves() {
        let dir = std::env::temp_dir().join(format!("perfusion-nifti-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let data = Array4::from_shape_fn((3, 4, 2, 5), |(x, y, z, t)| {
            (x + 10 * y + 100 * z) as f32 + 0.5 * t as f32
        });
        for name in ["s.nii", "s.nii.gz"] {
            let path = dir.join(name);
            write_series(&path, &data, [1.5, 1.5, 3.0], 2.37).unwrap();
            let back = read_series(&path).unwrap();
            assert_eq!(back.data, data);
            assert!((frame_interval_s(&back.header).unwrap() - 2.37).abs() < 1e-6);
            let mut mask = Array3::from_elem((3, 4, 2), false);
            mask[[2, 1, 0]] = true;
            mask[[0, 3, 1]] = true;
            let (curves, index) = masked_curves(&back.data, &mask).unwrap();
            assert_eq!(index, vec![[2, 1, 0], [0, 3, 1]]);
            assert_eq!(curves[[1, 2]], 130.0 + 1.0);
            let map = scatter(curves.column(0).mapv(f64::from).view(), &index, (3, 4, 2));
            let mpath = dir.join(format!("m-{name}"));
            write_map(&mpath, map.view(), &back.header).unwrap();
            let (m, h) = read_volume(&mpath).unwrap();
            assert_eq!(m[[2, 1, 0]], 12.0);
            assert!(m[[0, 0, 0]].is_nan());
            assert_eq!(h.pixdim[1..4], [1.5, 1.5, 3.0]);
            let bad = Array3::from_elem((3, 4, 3), true);
            let e = masked_curves(&back.data, &bad).unwrap_err().to_string();
            assert!(e.contains("mask") && e.contains("[3, 4, 2]"), "{e}");
        }
        let e = read_series(&dir.join("missing.nii"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("missing.nii"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
