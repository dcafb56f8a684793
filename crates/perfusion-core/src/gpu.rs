//! GPU path (placeholder while the kernels are written).
use crate::error::{Error, Result};
use crate::fit::{Control, Fits, Setup};
use crate::problem::Problem;
use gpu_runtime::Device;
use ndarray::ArrayView2;

pub(crate) fn fit(
    _curves: ArrayView2<f32>,
    _problem: &Problem,
    _setup: &Setup,
    _device: &Device,
    _use_f64: bool,
    _control: &Control,
) -> Result<Fits> {
    Err(Error::Gpu("not yet".into()))
}

/// Placeholder.
pub fn kernel_fit() {}
