//! NumPy `.npy` cubes (y, x, bin) of u16, u32, f32 or f64 (read as f32), through
//! `ndarray-npy`.

use super::AnyCube;
use crate::cube::Cube;
use crate::error::{Error, Result};
use ndarray::Array3;
use ndarray_npy::{ReadNpyError, read_npy as read};
use std::path::Path;

/// Read a 3-D `.npy` of counts, (y, x, bin), with bins `bin_ns` wide.
pub fn read_npy(path: &Path, bin_ns: f64) -> Result<AnyCube> {
    let fail = |e: ReadNpyError| Error::Format {
        path: path.to_path_buf(),
        what: format!("not a 3-D (y, x, bin) array of u16, u32, f32 or f64: {e}"),
    };
    // The header names the type; try the supported ones in turn.
    match read::<_, Array3<u16>>(path) {
        Ok(a) => return Ok(AnyCube::U16(Cube::new(a, bin_ns)?)),
        Err(ReadNpyError::WrongDescriptor(_)) => {}
        Err(e) => return Err(fail(e)),
    }
    match read::<_, Array3<u32>>(path) {
        Ok(a) => return Ok(AnyCube::U32(Cube::new(a, bin_ns)?)),
        Err(ReadNpyError::WrongDescriptor(_)) => {}
        Err(e) => return Err(fail(e)),
    }
    match read::<_, Array3<f32>>(path) {
        Ok(a) => return Ok(AnyCube::F32(Cube::new(a, bin_ns)?)),
        Err(ReadNpyError::WrongDescriptor(_)) => {}
        Err(e) => return Err(fail(e)),
    }
    let a = read::<_, Array3<f64>>(path).map_err(fail)?;
    Ok(AnyCube::F32(Cube::new(a.mapv(|v| v as f32), bin_ns)?))
}

/// Write a cube's counts as `.npy` (y, x, bin), e.g. for `biogpu flim convert`.
pub fn write_npy(path: &Path, cube: &AnyCube) -> Result<()> {
    let io = |e: ndarray_npy::WriteNpyError| Error::Format {
        path: path.to_path_buf(),
        what: format!("writing .npy: {e}"),
    };
    match cube {
        AnyCube::U16(c) => ndarray_npy::write_npy(path, &c.counts()).map_err(io),
        AnyCube::U32(c) => ndarray_npy::write_npy(path, &c.counts()).map_err(io),
        AnyCube::F32(c) => ndarray_npy::write_npy(path, &c.counts()).map_err(io),
    }
}
