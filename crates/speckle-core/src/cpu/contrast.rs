//! Contrast of a stack on the CPU in the requested mode: the exact reference of
//! [`crate::api::contrast`].

use crate::cpu::spatial::{ContrastStack, spatial_contrast_stack};
use crate::cpu::temporal::{spatiotemporal_contrast, temporal_contrast};
use crate::error::Result;
use crate::model::contrast::{ContrastMaps, ContrastParams, Mode};
use crate::model::flow;
use crate::model::types::Pixel;
use ndarray::{Array2, ArrayView3, Axis};

/// The CPU reference, multithreaded.
pub fn contrast<T: Pixel>(stack: ArrayView3<T>, params: &ContrastParams) -> Result<ContrastMaps> {
    let ContrastStack { k, flags: fl, .. } = match params.mode {
        Mode::Spatial => {
            spatial_contrast_stack(stack, params.window, params.border, params.saturation)?
        }
        Mode::Temporal => temporal_contrast(stack, params.frames, params.saturation)?,
        Mode::SpatioTemporal => spatiotemporal_contrast(
            stack,
            params.window,
            params.frames,
            params.border,
            params.saturation,
        )?,
    };
    let sfi = params
        .exposure_s
        .map(|t| k.mapv(|k| flow::sfi(f64::from(k), t) as f32));
    Ok(ContrastMaps { k, sfi, flags: fl })
}

/// Root mean square of K over the frames of each pixel, `sqrt(mean K^2)` over the finite
/// K^2 (NaN where none): the speckle-averaged K of a stack, e.g. before [`crate::api::flow`].
pub fn rms_over_frames(k: ArrayView3<f32>) -> Array2<f32> {
    k.map_axis(Axis(0), |k| {
        let (s, n) = k
            .iter()
            .map(|v| v * v)
            .filter(|v| v.is_finite())
            .fold((0f64, 0usize), |(s, n), v| (s + f64::from(v), n + 1));
        let mean = if n == 0 { f64::NAN } else { s / n as f64 };
        (mean as f32).sqrt()
    })
}
