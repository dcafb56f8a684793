//! Temporal (`r = 0`) and spatio-temporal speckle contrast: K over a sliding window of
//! consecutive frames (and a square spatial window), with exact running integer sums (see
//! [`super::sums`]).

// CubeCL evaluates `if comptime!(..)` at expansion time; merging it with a runtime
// condition would turn it into a runtime branch.
#![allow(clippy::collapsible_if)]

use super::sums::{
    PixelBits, Sums, accumulate, add_sums, bordered_frame, check_window, contrast_from_sums,
    flags_of, native_u64, sub_sums, zero_sums,
};
use super::{BORDER_REFLECT, BORDER_VALID};
use crate::CUBE_1D;
use crate::configured::{CatalogEntry, array, entry, settings_1d};
use cubecl::prelude::*;
use gpu_runtime::{Error, Gpu, GpuArray, Result};

/// Temporal (`r = 0`) or spatio-temporal contrast: for each pixel, sums over a
/// `(2r + 1)^2` spatial window and `frames_n` consecutive frames, sliding along the stack
/// with exact running sums (add the entering frame, subtract the leaving one).
/// Output frame t covers input frames t..t + frames_n. Launched unchecked, as the spatial
/// kernel is (see [`super::spatial::spatial_contrast_kernel()`]).
// Fast division, as for the spatial kernel.
#[cube(launch_unchecked, fast_math = FastMath::AllowReciprocal | FastMath::ReducedPrecision | FastMath::UnsignedZero | FastMath::NotInf)]
pub fn temporal_contrast_kernel(
    input: &Array<u32>,
    k_out: &mut Array<f32>,
    flags_out: &mut Array<u32>,
    saturation: u32,
    width: u32,
    height: u32,
    frames: u32,
    frames_n: u32,
    #[comptime] r: u32,
    #[comptime] bits: u32,
    #[comptime] border: u32,
    #[comptime] wide: bool,
) {
    let side = comptime!(2 * r + 1);
    let plane = width * height;
    let mut out_w = width;
    let mut out_h = height;
    if comptime!(border == BORDER_VALID) {
        out_w = width - 2 * r;
        out_h = height - 2 * r;
    }
    let p = ABSOLUTE_POS_X + ABSOLUTE_POS_Y * CUBE_COUNT_X * CUBE_DIM_X;
    if p < out_w * out_h {
        let ox = (p % out_w) as i32;
        let oy = (p / out_w) as i32;
        let mut cx = ox;
        let mut cy = oy;
        if comptime!(border == BORDER_VALID) {
            cx = ox + r as i32;
            cy = oy + r as i32;
        }
        let w = width as i32;
        let h = height as i32;
        let n = side * side * frames_n;
        let mut s = zero_sums();
        // Running sums: add the entering frame's window, subtract the leaving one's (exact).
        for t in 0..frames {
            let entering = window_sums(
                input,
                t * plane,
                cx,
                cy,
                w,
                h,
                saturation,
                r,
                bits,
                border,
                wide,
            );
            add_sums(&mut s, entering, wide);
            if t >= frames_n {
                let leaving = window_sums(
                    input,
                    (t - frames_n) * plane,
                    cx,
                    cy,
                    w,
                    h,
                    saturation,
                    r,
                    bits,
                    border,
                    wide,
                );
                sub_sums(&mut s, leaving, wide);
            }
            if t + 1 >= frames_n {
                let out_t = t + 1 - frames_n;
                let at = (out_t * out_w * out_h + p) as usize;
                k_out[at] = contrast_from_sums(s, n, wide);
                flags_out[at] = flags_of(s);
            }
        }
    }
}

/// Window sums of the frame starting at `base`, centred on (cx, cy).
#[cube]
fn window_sums(
    input: &Array<u32>,
    base: u32,
    cx: i32,
    cy: i32,
    w: i32,
    h: i32,
    saturation: u32,
    #[comptime] r: u32,
    #[comptime] bits: u32,
    #[comptime] border: u32,
    #[comptime] wide: bool,
) -> Sums {
    let side = comptime!(2 * r + 1);
    let mut s = zero_sums();
    #[unroll]
    for dy in 0..side {
        #[unroll]
        for dx in 0..side {
            let v = bordered_frame(
                input,
                base,
                cx + dx as i32 - r as i32,
                cy + dy as i32 - r as i32,
                w,
                h,
                bits,
                border,
            );
            accumulate(&mut s, v, wide);
            if saturation > 0 && v >= saturation {
                s.sat += 1u32;
            }
        }
    }
    s
}

/// Temporal (`radius` 0) or spatio-temporal contrast over windows of `frames_n` frames;
/// `k` holds `(frames - frames_n + 1) * out_w * out_h` values.
pub fn temporal_contrast<R: Runtime>(
    gpu: &Gpu<R>,
    input: &GpuArray<u32>,
    width: u32,
    height: u32,
    frames: u32,
    frames_n: u32,
    radius: u32,
    border: u32,
    pixel: PixelBits,
    saturation: Option<u32>,
    k: &GpuArray<f32>,
    flags: &GpuArray<u32>,
) -> Result<()> {
    let name = "temporal_contrast";
    check_window(name, radius, frames_n, pixel)?;
    if frames_n < 2 || frames_n > frames {
        return Err(Error::invalid_launch(
            name,
            format!("window of {frames_n} frames for a stack of {frames}"),
        ));
    }
    let (ow, oh) = if border == BORDER_VALID {
        (
            width.saturating_sub(2 * radius),
            height.saturating_sub(2 * radius),
        )
    } else {
        (width, height)
    };
    if ow == 0 || oh == 0 {
        return Err(Error::invalid_launch(
            name,
            format!("image {width}x{height} smaller than the window"),
        ));
    }
    let outputs = (frames - frames_n + 1) as usize * (ow * oh) as usize;
    if k.len() < outputs || flags.len() < outputs {
        return Err(Error::invalid_launch(
            name,
            format!("output buffers shorter than {outputs}"),
        ));
    }
    let count = gpu.cube_count_1d(name, (ow * oh) as usize, CUBE_1D)?;
    gpu.launch(name, count, |count| {
        // SAFETY: as for `spatial_contrast`: lengths checked above, indices in range.
        unsafe {
            temporal_contrast_kernel::launch_unchecked::<R>(
                gpu.client(),
                count,
                CubeDim::new_1d(CUBE_1D),
                input.arg(),
                k.arg(),
                flags.arg(),
                saturation.unwrap_or(0),
                width,
                height,
                frames,
                frames_n,
                radius,
                pixel.bits(),
                border,
                native_u64(gpu),
            );
        };
    })
}

/// This file's kernels, configured as their launch wrappers configure them.
pub(crate) fn catalog<R: Runtime>(client: &ComputeClient<R>) -> Vec<CatalogEntry> {
    let s = || settings_1d(CUBE_1D);
    let mut entries = Vec::new();
    for (name, r) in [("temporal_u16", 0), ("spatiotemporal_5x5_u16", 2)] {
        let k = temporal_contrast_kernel::TemporalContrastKernel::<R>::new(
            s(),
            client.clone(),
            array(),
            array(),
            array(),
            (),
            (),
            (),
            (),
            (),
            r,
            16,
            BORDER_REFLECT,
            true,
        );
        entries.push(entry("speckle", name, k));
    }
    entries
}
