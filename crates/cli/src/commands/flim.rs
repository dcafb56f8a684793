//! `biogpu flim`: Fluorescence lifetime imaging (issue 4). Not built yet.

use gpu_runtime::Device;
use std::path::Path;

pub type Args = super::NotBuilt;

pub fn run(_args: Args, _device: &Device) -> anyhow::Result<()> {
    super::not_built("flim", 4)
}

/// This modality's part of `biogpu demo`: built-in data, device checked against the CPU,
/// outputs under `out`. Returns false while the modality has not landed.
#[allow(clippy::unnecessary_wraps)] // until the modality lands
pub fn demo(_out: &Path, _device: &Device) -> anyhow::Result<bool> {
    Ok(false)
}
