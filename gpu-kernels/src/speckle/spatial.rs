//! Spatial speckle contrast: K over a square window of every frame, from a shared-memory
//! tile with separable window sums (exact integer sums, see [`super::sums`]).

// CubeCL evaluates `if comptime!(..)` at expansion time; merging it with a runtime
// condition would turn it into a runtime branch.
#![allow(clippy::collapsible_if)]

use super::sums::{
    PixelBits, Sums, accumulate, add_sums, bordered_frame, check_window, contrast_from_sums,
    flags_of, native_u64, pixel, remove, zero_sums,
};
use super::{BORDER_REFLECT, BORDER_VALID, BORDER_ZERO, TILE_X, TILE_Y, UNITS_Y};
use crate::configured::{CatalogEntry, array, entry, settings_2d};
use cubecl::prelude::*;
use gpu_runtime::{Error, Gpu, GpuArray, Result};

/// Rows of column sums one unit slides through (TILE_X + 30 columns x TILE_Y / SEGMENT
/// segments must not exceed the cube's TILE_X * UNITS_Y units).
const SEGMENT: u32 = 4;

/// Spatial speckle contrast of one frame (`frame` selects it within a stack).
///
/// Each cube computes a `TILE_X x TILE_Y` block: it loads the block plus a `r`-pixel apron
/// into shared memory, sums columns over `2r + 1` rows, then rows over `2r + 1` columns.
/// Outputs: K (NaN where the mean is 0), SFI = `sfi_scale / K^2` if `with_sfi`, and flag
/// bits if `with_flags` (saturated: any window pixel >= `saturation`).
///
/// Launched unchecked: every index is in range by construction (tile and apron indices
/// are bounded by the comptime tile size, input indices by the border rule, outputs by
/// the `out_width`/`out_height` guard) and the wrapper checks the buffer lengths.
// Fast division (`__fdividef` on CUDA, 2 ulp): IEEE division was a tenth of the
// instructions; nothing else is relaxed.
#[cube(launch_unchecked, fast_math = FastMath::AllowReciprocal | FastMath::ReducedPrecision | FastMath::UnsignedZero | FastMath::NotInf)]
pub fn spatial_contrast_kernel(
    input: &Array<u32>,
    k_out: &mut Array<f32>,
    sfi_out: &mut Array<f32>,
    flags_out: &mut Array<u32>,
    width: u32,
    height: u32,
    out_width: u32,
    out_height: u32,
    first_frame: u32,
    sfi_scale: f32,
    saturation: u32,
    #[comptime] r: u32,
    #[comptime] bits: u32,
    #[comptime] border: u32,
    #[comptime] with_sfi: bool,
    #[comptime] with_flags: bool,
    #[comptime] wide: bool,
) {
    let side = comptime!(2 * r + 1);
    let tile_w = comptime!(TILE_X + 2 * r);
    let tile_h = comptime!(TILE_Y + 2 * r);
    let threads = comptime!(TILE_X * UNITS_Y);
    // Column sums, one plane per field of `Sums` (the saturation count only with flags).
    let planes = comptime!(if with_flags { 4u32 } else { 3u32 });
    let col_len = comptime!(TILE_Y * tile_w);
    let mut tile = SharedMemory::<u32>::new((tile_w * tile_h) as usize);
    let mut cols = SharedMemory::<u32>::new((planes * col_len) as usize);

    let tid = UNIT_POS_Y * TILE_X + UNIT_POS_X;
    let x0 = (CUBE_POS_X * TILE_X) as i32;
    let y0 = (CUBE_POS_Y * TILE_Y) as i32;
    // Input coordinates of the tile's first pixel: `valid` outputs start r pixels in.
    let shift = comptime!(if border == BORDER_VALID {
        0i32
    } else {
        r as i32
    });
    let w = width as i32;
    let h = height as i32;
    // One cube layer per frame: a batch of frames is one launch.
    let frame = first_frame + CUBE_POS_Z;
    let frame_base = frame * width * height;

    // Tiles away from the image edge need no border rule (and no modulo arithmetic).
    let interior = x0 - shift >= 0
        && y0 - shift >= 0
        && x0 - shift + (tile_w as i32) <= w
        && y0 - shift + (tile_h as i32) <= h;
    let mut i = tid;
    while i < comptime!(tile_w * tile_h) {
        let tx = (i % tile_w) as i32;
        let ty = (i / tile_w) as i32;
        let x = x0 + tx - shift;
        let y = y0 + ty - shift;
        // Edge tiles apply the border rule (`valid` tiles overhang only past the far
        // edges, where the zero they read feeds outputs that are dropped).
        let v = if interior {
            pixel(input, frame_base + (y * w + x) as u32, bits)
        } else {
            bordered_frame(input, frame_base, x, y, w, h, bits, border)
        };
        tile[i as usize] = v;
        i += threads;
    }
    sync_cube();

    // Column sums over `side` rows, for TILE_Y rows of the tile: each task takes a
    // segment of SEGMENT rows of one column, sums its first window, then slides down
    // (add the entering row, remove the leaving one: exact in integers).
    let tasks = comptime!(tile_w * (TILE_Y / SEGMENT));
    if tid < tasks {
        let cx = tid % tile_w;
        let cy0 = (tid / tile_w) * SEGMENT;
        let mut s = zero_sums();
        #[unroll]
        for dy in 0..side {
            let v = tile[((cy0 + dy) * tile_w + cx) as usize];
            accumulate(&mut s, v, wide);
            if comptime!(with_flags) {
                if saturation > 0 && v >= saturation {
                    s.sat += 1u32;
                }
            }
        }
        #[unroll]
        for k in 0..SEGMENT {
            if k > 0 {
                let enter = tile[((cy0 + k + side - 1) * tile_w + cx) as usize];
                let leave = tile[((cy0 + k - 1) * tile_w + cx) as usize];
                accumulate(&mut s, enter, wide);
                remove(&mut s, leave, wide);
                if comptime!(with_flags) {
                    if saturation > 0 && enter >= saturation {
                        s.sat += 1u32;
                    }
                    if saturation > 0 && leave >= saturation {
                        s.sat -= 1u32;
                    }
                }
            }
            let j = (cy0 + k) * tile_w + cx;
            cols[j as usize] = s.s1;
            cols[(col_len + j) as usize] = s.s2_hi;
            cols[(2 * col_len + j) as usize] = s.s2_lo;
            if comptime!(with_flags) {
                cols[(3 * col_len + j) as usize] = s.sat;
            }
        }
    }
    sync_cube();

    let ox = CUBE_POS_X * TILE_X + UNIT_POS_X;
    #[unroll]
    for row in 0..comptime!(TILE_Y / UNITS_Y) {
        let ty = UNIT_POS_Y + row * UNITS_Y;
        let oy = CUBE_POS_Y * TILE_Y + ty;
        if ox < out_width && oy < out_height {
            let mut s = zero_sums();
            let first = ty * tile_w + UNIT_POS_X;
            #[unroll]
            for dx in 0..side {
                let at = first + dx;
                let mut t = Sums {
                    s1: cols[at as usize],
                    s2_hi: cols[(col_len + at) as usize],
                    s2_lo: cols[(2 * col_len + at) as usize],
                    sat: 0u32,
                };
                if comptime!(with_flags) {
                    t.sat = cols[(3 * col_len + at) as usize];
                }
                add_sums(&mut s, t, wide);
            }
            let k = contrast_from_sums(s, side * side, wide);
            let out = (frame * out_width * out_height + oy * out_width + ox) as usize;
            k_out[out] = k;
            if comptime!(with_sfi) {
                sfi_out[out] = sfi_scale / (k * k);
            }
            if comptime!(with_flags) {
                flags_out[out] = flags_of(s);
            }
        }
    }
}

/// Geometry and options of a spatial contrast launch.
#[derive(Debug, Clone, Copy)]
pub struct SpatialParams {
    pub width: u32,
    pub height: u32,
    pub frames: u32,
    pub radius: u32,
    pub border: u32,
    pub pixel: PixelBits,
    /// `Some(1 / (2 T))` writes SFI = value / K^2.
    pub sfi_scale: Option<f32>,
    /// `Some(level)` writes flags; pixels >= level are saturated.
    pub saturation: Option<u32>,
}

impl SpatialParams {
    /// Output (width, height) for the border mode.
    pub fn out_dims(&self) -> (u32, u32) {
        if self.border == BORDER_VALID {
            (
                self.width.saturating_sub(2 * self.radius),
                self.height.saturating_sub(2 * self.radius),
            )
        } else {
            (self.width, self.height)
        }
    }
}

/// Spatial contrast of every frame in `input` (packed pixels, frames back to back).
/// `k`, `sfi` and `flags` hold `frames * out_w * out_h` values (`sfi`/`flags` may be
/// one-element placeholders when not requested).
pub fn spatial_contrast<R: Runtime>(
    gpu: &Gpu<R>,
    input: &GpuArray<u32>,
    p: &SpatialParams,
    k: &GpuArray<f32>,
    sfi: &GpuArray<f32>,
    flags: &GpuArray<u32>,
) -> Result<()> {
    let name = "spatial_contrast";
    let (ow, oh) = p.out_dims();
    check_window(name, p.radius, 1, p.pixel)?;
    let pixels = u64::from(p.width) * u64::from(p.height) * u64::from(p.frames);
    let per_word = u64::from(32 / p.pixel.bits());
    if (input.len() as u64) * per_word < pixels {
        return Err(Error::invalid_launch(
            name,
            format!(
                "input holds {} words, {pixels} pixels need {}",
                input.len(),
                pixels.div_ceil(per_word)
            ),
        ));
    }
    let outputs = (u64::from(ow) * u64::from(oh) * u64::from(p.frames)) as usize;
    if ow == 0 || oh == 0 {
        return Err(Error::invalid_launch(
            name,
            format!("image {}x{} smaller than the window", p.width, p.height),
        ));
    }
    if k.len() < outputs
        || (p.sfi_scale.is_some() && sfi.len() < outputs)
        || (p.saturation.is_some() && flags.len() < outputs)
    {
        return Err(Error::invalid_launch(
            name,
            format!("output buffers shorter than {outputs}"),
        ));
    }
    // Frames go in the grid's z dimension, up to its limit per launch.
    let max_z = gpu.client().properties().hardware.max_cube_count.2.max(1);
    let mut first = 0u32;
    while first < p.frames {
        let layers = (p.frames - first).min(max_z);
        launch_spatial(gpu, input, p, (ow, oh), first, layers, k, sfi, flags)?;
        first += layers;
    }
    Ok(())
}

fn launch_spatial<R: Runtime>(
    gpu: &Gpu<R>,
    input: &GpuArray<u32>,
    p: &SpatialParams,
    (ow, oh): (u32, u32),
    first: u32,
    layers: u32,
    k: &GpuArray<f32>,
    sfi: &GpuArray<f32>,
    flags: &GpuArray<u32>,
) -> Result<()> {
    let count = CubeCount::Static(ow.div_ceil(TILE_X), oh.div_ceil(TILE_Y), layers);
    gpu.launch("spatial_contrast", count, |count| {
        // SAFETY: buffer lengths were checked by `spatial_contrast`; the kernel's indices
        // stay inside them for every launch geometry (see the kernel's doc comment).
        unsafe {
            spatial_contrast_kernel::launch_unchecked::<R>(
                gpu.client(),
                count,
                CubeDim::new_2d(TILE_X, UNITS_Y),
                input.arg(),
                k.arg(),
                sfi.arg(),
                flags.arg(),
                p.width,
                p.height,
                ow,
                oh,
                first,
                p.sfi_scale.unwrap_or(0.0),
                p.saturation.unwrap_or(0),
                p.radius,
                p.pixel.bits(),
                p.border,
                p.sfi_scale.is_some(),
                p.saturation.is_some(),
                native_u64(gpu),
            );
        };
    })
}

/// This file's kernels, configured as their launch wrappers configure them.
pub(crate) fn catalog<R: Runtime>(client: &ComputeClient<R>) -> Vec<CatalogEntry> {
    let mut entries = Vec::new();
    // Speckle: the windows the benchmarks use, both pixel packings, every border.
    for (name, r, bits, border) in [
        ("spatial_5x5_u16_reflect", 2, 16, BORDER_REFLECT),
        ("spatial_7x7_u16_reflect", 3, 16, BORDER_REFLECT),
        ("spatial_31x31_u16_zero", 15, 16, BORDER_ZERO),
        ("spatial_7x7_u8_valid", 3, 8, BORDER_VALID),
    ] {
        let k = spatial_contrast_kernel::SpatialContrastKernel::<R>::new(
            settings_2d(TILE_X, UNITS_Y),
            client.clone(),
            array(),
            array(),
            array(),
            array(),
            (),
            (),
            (),
            (),
            (),
            (),
            (),
            r,
            bits,
            border,
            true,
            true,
            true,
        );
        entries.push(entry("speckle", name, k));
    }
    entries
}
