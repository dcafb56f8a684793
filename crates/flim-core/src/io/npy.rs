//! NumPy `.npy` cubes through `ndarray-npy`: (y, x, bin) or a time series (frame, y, x, bin)
//! of u16, u32, f32 or f64 (read as f32). `.npy` stores no bin width, so the caller gives it.

use crate::error::Result;
use crate::io::recording::{Format, Image, Recording, format_error};
use crate::model::cube::{AnyCube, with_cube};
use crate::model::cube::{Count, Cube};
use ndarray::{ArrayD, Axis, Ix3};
use ndarray_npy::{ReadNpyError, ReadableElement, read_npy as read};
use std::path::Path;

/// Read a 3-D (y, x, bin) or 4-D (frame, y, x, bin) `.npy` of counts in bins `bin_ns` wide.
pub fn read_npy(path: &Path, bin_ns: f64) -> Result<Recording> {
    // The header names the type; try the supported ones in turn.
    fn attempt<T: ReadableElement + Count>(
        path: &Path,
        bin_ns: f64,
    ) -> std::result::Result<Result<Vec<AnyCube>>, ReadNpyError>
    where
        AnyCube: From<Cube<T>>,
    {
        read::<_, ArrayD<T>>(path).map(|a| frames(path, a, bin_ns))
    }
    let fail = |e: ReadNpyError| {
        format_error(
            path,
            format!(
                "not a 3-D (y, x, bin) or 4-D (frame, y, x, bin) array of u16, u32, f32 or f64: {e}"
            ),
        )
    };
    let cubes = match attempt::<u16>(path, bin_ns) {
        Err(ReadNpyError::WrongDescriptor(_)) => match attempt::<u32>(path, bin_ns) {
            Err(ReadNpyError::WrongDescriptor(_)) => match attempt::<f32>(path, bin_ns) {
                Err(ReadNpyError::WrongDescriptor(_)) => {
                    let a = read::<_, ArrayD<f64>>(path).map_err(fail)?;
                    frames(path, a.mapv(|v| v as f32), bin_ns)
                }
                other => other.map_err(fail)?,
            },
            other => other.map_err(fail)?,
        },
        other => other.map_err(fail)?,
    }?;
    let images = cubes
        .into_iter()
        .enumerate()
        .map(|(frame, cube)| Image {
            block: 0,
            frame,
            channel: 0,
            cube,
        })
        .collect();
    Ok(Recording {
        path: path.to_path_buf(),
        format: Format::Npy,
        images,
        metadata: vec![("format".into(), "NumPy .npy".into())],
    })
}

fn frames<T: Count>(path: &Path, a: ArrayD<T>, bin_ns: f64) -> Result<Vec<AnyCube>>
where
    AnyCube: From<Cube<T>>,
{
    let shape = a.shape().to_vec();
    let one = |a: ArrayD<T>| -> Result<AnyCube> {
        let a = a.into_dimensionality::<Ix3>().expect("3-D checked");
        Ok(Cube::new(a, bin_ns)?.into())
    };
    match shape.len() {
        3 => Ok(vec![one(a)?]),
        4 => a.axis_iter(Axis(0)).map(|f| one(f.to_owned())).collect(),
        n => Err(format_error(
            path,
            format!("array of shape {shape:?} ({n}-D): expected (y, x, bin) or (frame, y, x, bin)"),
        )),
    }
}

/// Write a cube's counts as `.npy` (y, x, bin) in its own type, e.g. for
/// `biogpu flim convert`.
pub fn write_npy(path: &Path, cube: &AnyCube) -> Result<()> {
    with_cube!(cube, |c| ndarray_npy::write_npy(path, &c.counts()))
        .map_err(|e| format_error(path, format!("writing .npy: {e}")))
}
