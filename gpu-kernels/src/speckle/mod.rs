//! Laser speckle kernels, one file per kernel: [`spatial`] K over a square window and
//! [`temporal`] (and spatio-temporal) K over a sliding frame window, both from the exact
//! integer sums of [`sums`]; [`mod@tau_c`] inversion and per-pixel [`mesi`] fits (f32) from the
//! flow models of [`model`]. Shared constants live here, with the module's `catalog`.

pub mod mesi;
pub mod model;
pub mod spatial;
pub mod sums;
pub mod tau_c;
pub mod temporal;

use crate::configured::CatalogEntry;
use cubecl::prelude::*;

pub use mesi::{MesiFitParams, mesi_fit, mesi_fit_kernel};
pub use spatial::{SpatialParams, spatial_contrast, spatial_contrast_kernel};
pub use sums::PixelBits;
pub use tau_c::{tau_c, tau_c_kernel};
pub use temporal::{temporal_contrast, temporal_contrast_kernel};

/// Border codes shared with `speckle-core`'s `Border`.
pub const BORDER_REFLECT: u32 = 0;
pub const BORDER_ZERO: u32 = 1;
pub const BORDER_VALID: u32 = 2;

/// Output flag bits (same values as speckle-core's `ContrastMap` flags).
pub const FLAG_UNDEFINED: u32 = 1;
pub const FLAG_SATURATED: u32 = 2;

/// Output tile of the spatial kernel: 32 x 16 pixels, computed by 32 x 8 units (two rows
/// each; taller tiles read a smaller share of apron pixels). With r = 15 its shared memory
/// is 31 KB, inside the 32 KB that every backend offers.
pub const TILE_X: u32 = 32;
pub const TILE_Y: u32 = 16;
/// Units per cube in y.
pub const UNITS_Y: u32 = 8;

/// Flag bits of a tau_c pixel (speckle-core's `contrast::flags` values).
pub const FLAG_NO_MOTION: u32 = 4;
pub const FLAG_NO_CONTRAST: u32 = 8;

/// MESI statuses (speckle-core's `mesi::FitStatus` values).
pub const STATUS_CONVERGED: u32 = 0;
pub const STATUS_MAX_ITERATIONS: u32 = 1;
pub const STATUS_FAILED: u32 = 2;
pub const STATUS_INVALID: u32 = 3;

/// Most exposures a MESI fit takes (speckle-core's `mesi::MAX_EXPOSURES`).
pub const MAX_EXPOSURES: u32 = 32;

/// Smallest convergence tolerance that means anything in f32 (relative cost change and
/// step; the CPU's default 1e-10 would never be met and every fit would run to the cap).
pub const F32_TOLERANCE: f32 = 1e-6;

/// This module's kernels, configured as their launch wrappers configure them.
pub(crate) fn catalog<R: Runtime>(client: &ComputeClient<R>) -> Vec<CatalogEntry> {
    let mut entries = spatial::catalog(client);
    entries.extend(temporal::catalog(client));
    entries.extend(tau_c::catalog(client));
    entries.extend(mesi::catalog(client));
    entries
}
