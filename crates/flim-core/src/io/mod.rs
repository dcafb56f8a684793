//! Reading TCSPC data: Becker & Hickl `.sdt` and NumPy `.npy`, into cubes of the stored
//! count type ([`AnyCube`]).

mod npy;
mod sdt;

pub use npy::{read_npy, write_npy};
pub use sdt::{SdtImage, read_sdt, write_sdt};

use crate::cube::Cube;
use crate::error::{Error, Result};
use crate::methods::{Analysis, LifetimeMaps};
use std::path::Path;

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

    /// Name of the stored count type.
    pub fn dtype(&self) -> &'static str {
        match self {
            AnyCube::U16(_) => "u16",
            AnyCube::U32(_) => "u32",
            AnyCube::F32(_) => "f32",
        }
    }

    /// [`crate::gpu::analyse_on`] for the cube inside.
    pub fn analyse_on(
        &self,
        opts: &Analysis,
        device: &gpu_runtime::Device,
    ) -> Result<LifetimeMaps> {
        with_cube!(self, |c| crate::gpu::analyse_on(c, opts, device))
    }
}

/// Read a cube by file extension: `.sdt` (the first image: block 0, channel 0; use
/// [`read_sdt`] for all), or `.npy` (3-D, (y, x, bin), with `bin_ns` given).
pub fn read_cube(path: &Path, bin_ns: Option<f64>) -> Result<AnyCube> {
    let ext = path
        .extension()
        .and_then(|e| e.to_str())
        .unwrap_or("")
        .to_ascii_lowercase();
    match ext.as_str() {
        "sdt" => {
            let images = read_sdt(path)?;
            let first = images.into_iter().next().ok_or_else(|| Error::Format {
                path: path.to_path_buf(),
                what: "the file holds no data blocks".into(),
            })?;
            Ok(match bin_ns {
                Some(b) => first.cube.with_bin_ns(b)?,
                None => first.cube,
            })
        }
        "npy" => {
            let b = bin_ns.ok_or_else(|| Error::Format {
                path: path.to_path_buf(),
                what: ".npy files carry no bin width: give it (--bin-ns)".into(),
            })?;
            read_npy(path, b)
        }
        _ => Err(Error::Format {
            path: path.to_path_buf(),
            what: format!("unknown extension {ext:?}: expected .sdt or .npy"),
        }),
    }
}

impl AnyCube {
    /// The same counts with another bin width (ns), e.g. to override a file's header.
    pub fn with_bin_ns(self, bin_ns: f64) -> Result<Self> {
        Ok(match self {
            AnyCube::U16(c) => AnyCube::U16(c.with_bin_ns(bin_ns)?),
            AnyCube::U32(c) => AnyCube::U32(c.with_bin_ns(bin_ns)?),
            AnyCube::F32(c) => AnyCube::F32(c.with_bin_ns(bin_ns)?),
        })
    }
}
