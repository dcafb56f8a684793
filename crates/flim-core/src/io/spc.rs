//! Becker & Hickl `.spc` FIFO photon streams with their `.set` files: not read yet.

use crate::error::Result;
use crate::io::recording::{ReadOptions, Recording, format_error};
use std::path::Path;

/// Histogram a B&H `.spc` photon stream (not yet supported: refused with a clear error).
pub fn read_spc(path: &Path, _opts: &ReadOptions) -> Result<Recording> {
    Err(format_error(
        path,
        "Becker & Hickl .spc streams are not read yet",
    ))
}
