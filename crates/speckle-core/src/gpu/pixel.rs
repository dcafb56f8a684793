//! Integer pixels as the kernels read them, and the kernels' view of contrast parameters.

use crate::model::contrast::ContrastParams;
use crate::model::types::Pixel;
use crate::model::window::Border;
use gpu_kernels::speckle::{self as kernels, PixelBits, SpatialParams};

/// Integer pixels the kernels take. Frames are uploaded as their own little-endian bytes,
/// read by the kernels as packed 32-bit words (two u16 or four u8 per word).
pub trait PackedPixel: Pixel + bytemuck::Pod {
    const BITS: PixelBits;
}

impl PackedPixel for u8 {
    const BITS: PixelBits = PixelBits::U8;
}

impl PackedPixel for u16 {
    const BITS: PixelBits = PixelBits::U16;
}

/// Kernel parameters of spatial contrast for `frames` frames of `w x h` pixels.
pub(crate) fn spatial_params<T: PackedPixel>(
    params: &ContrastParams,
    w: usize,
    h: usize,
    frames: u32,
    saturation: Option<u32>,
) -> SpatialParams {
    SpatialParams {
        width: w as u32,
        height: h as u32,
        frames,
        radius: params.window.radius() as u32,
        border: border_code(params.border),
        pixel: T::BITS,
        sfi_scale: params.exposure_s.map(|t| (1.0 / (2.0 * t)) as f32),
        saturation,
    }
}

/// Fill a freshly allocated (standard-layout) output slab from staged f32 bytes.
pub(crate) fn copy_into(mut dst: ndarray::ArrayViewMut3<f32>, src: &gpu_runtime::HostStaging) {
    let out = dst.as_slice_mut().expect("output slabs are contiguous");
    let n = out.len() * 4;
    gpu_runtime::par_copy(bytemuck::cast_slice_mut(out), &src.as_bytes()[..n]);
}

pub(crate) fn border_code(b: Border) -> u32 {
    match b {
        Border::Reflect => kernels::BORDER_REFLECT,
        Border::Zero => kernels::BORDER_ZERO,
        Border::Valid => kernels::BORDER_VALID,
    }
}
