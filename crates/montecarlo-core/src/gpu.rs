//! GPU path (placeholder while the kernel is written).
use crate::error::{Error, Result};
use crate::sim::Simulation;
use crate::tally::McResult;
use gpu_runtime::Device;
use std::sync::atomic::AtomicBool;

pub fn run(
    _sim: &Simulation,
    _device: &Device,
    _stop: Option<&AtomicBool>,
    _progress: impl FnMut(u64, u64),
) -> Result<McResult> {
    Err(Error::Gpu("not yet".into()))
}
