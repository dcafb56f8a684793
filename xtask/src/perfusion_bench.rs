//! DCE perfusion benchmarks (issue 6). Not built yet.

use crate::report::Measurement;
use crate::suite::Options;
use anyhow::Result;
use gpu_runtime::Device;

/// Run this modality's benchmarks on `device`; `earlier` holds the runtime group's bounds.
#[allow(clippy::unnecessary_wraps)] // until the modality lands
pub fn run(
    _device: &Device,
    _opts: &Options,
    _earlier: &[Measurement],
) -> Result<Vec<Measurement>> {
    Ok(Vec::new())
}
