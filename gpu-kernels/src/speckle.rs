//! Laser speckle contrast kernels: spatial K over a square window (shared-memory tile with
//! separable window sums), temporal K over a sliding frame window, and spatio-temporal K.
//!
//! **Exactness.** Integer pixels (u8, u16; packed two or four per u32 word, so uploads move
//! the camera's own bytes) are summed exactly in integers: S1 in 32 bits, and S2 (each
//! v^2 of a 16-bit pixel fits 32 bits) in 64 bits emulated with u32 pairs (WGSL has no
//! u64), for windows of up to 65,535 pixels (31x31 x 68 frames; the wrappers check). The
//! variance numerator D = N S2 - S1^2 is formed exactly in 64 bits, and only D and S1 are
//! rounded to f32. So K matches an f64 reference to about 3e-7 relative at any image size:
//! no running float sums.

// CubeCL evaluates `if comptime!(..)` at expansion time; merging it with a runtime
// condition would turn it into a runtime branch.
#![allow(clippy::collapsible_if)]

use crate::CUBE_1D;
use cubecl::prelude::*;
use gpu_runtime::{Error, Gpu, GpuArray, Result};

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
/// Rows of column sums one unit slides through (TILE_X + 30 columns x TILE_Y / SEGMENT
/// segments must not exceed the cube's TILE_X * UNITS_Y units).
const SEGMENT: u32 = 4;

/// A 64-bit unsigned integer as two u32 halves.
#[derive(CubeType, Clone, Copy)]
struct U64 {
    hi: u32,
    lo: u32,
}

/// Exact a * b as 64 bits (`mul_hi` is one instruction on CUDA, a polyfill on WGSL).
#[cube]
fn mul_wide(a: u32, b: u32) -> U64 {
    U64 {
        hi: a.mul_hi(b),
        lo: a * b,
    }
}

#[cube]
fn sub_wide(x: U64, y: U64) -> U64 {
    let mut borrow = 0u32;
    if x.lo < y.lo {
        borrow = 1u32;
    }
    U64 {
        hi: x.hi - y.hi - borrow,
        lo: x.lo - y.lo,
    }
}

#[cube]
fn wide_to_f32(x: U64) -> f32 {
    f32::cast_from(x.hi) * 4294967296.0f32 + f32::cast_from(x.lo)
}

/// Window sums of one output pixel: S1 = sum v and S2 = sum v^2 (64 bits as two u32;
/// v^2 of a 16-bit pixel fits 32 bits, so each pixel adds with one carry).
#[derive(CubeType, Clone, Copy)]
struct Sums {
    s1: u32,
    s2_hi: u32,
    s2_lo: u32,
    /// Pixels at or above the saturation level.
    sat: u32,
}

/// S2 as one native 64-bit integer (CUDA); the halves stay the storage format.
#[cube]
fn s2_of(s: &Sums) -> u64 {
    (u64::cast_from(s.s2_hi) << 32u64) | u64::cast_from(s.s2_lo)
}

#[cube]
fn set_s2(s: &mut Sums, x: u64) {
    s.s2_hi = u32::cast_from(x >> 32u64);
    s.s2_lo = u32::cast_from(x);
}

/// Add one pixel value to the sums. `wide`: native 64-bit integers (CUDA), else carries
/// between u32 halves (WGSL has no 64-bit types).
#[cube]
fn accumulate(s: &mut Sums, v: u32, #[comptime] wide: bool) {
    let sq = v * v;
    if comptime!(wide) {
        let x = s2_of(s) + u64::cast_from(sq);
        set_s2(s, x);
    } else {
        let lo = s.s2_lo + sq;
        if lo < sq {
            s.s2_hi += 1u32;
        }
        s.s2_lo = lo;
    }
    s.s1 += v;
}

/// Remove one pixel value from the sums (it was added before).
#[cube]
fn remove(s: &mut Sums, v: u32, #[comptime] wide: bool) {
    let sq = v * v;
    if comptime!(wide) {
        let x = s2_of(s) - u64::cast_from(sq);
        set_s2(s, x);
    } else {
        if s.s2_lo < sq {
            s.s2_hi -= 1u32;
        }
        s.s2_lo -= sq;
    }
    s.s1 -= v;
}

/// K = sqrt(D N / (N - 1)) / S1 with D = N S2 - S1^2 exact; NaN when S1 = 0. D is rounded
/// to f32 once (3e-8 relative); the division is the fast one (kernels use fast math,
/// 2 ulp), so K is within about 3e-7 relative of an f64 reference.
#[cube]
fn contrast_from_sums(s: Sums, n: u32, #[comptime] wide: bool) -> f32 {
    let d = if comptime!(wide) {
        let s1 = u64::cast_from(s.s1);
        f32::cast_from(s2_of(&s) * u64::cast_from(n) - s1 * s1)
    } else {
        let ns2 = mul_wide(s.s2_lo, n);
        let ns2 = U64 {
            hi: ns2.hi + s.s2_hi * n,
            lo: ns2.lo,
        };
        wide_to_f32(sub_wide(ns2, mul_wide(s.s1, s.s1)))
    };
    // Quiet NaN where the mean is zero; built from a runtime value because CUDA C++
    // cannot reinterpret a literal.
    let nan_bits = s.s1 | 0x7FC0_0000u32;
    let mut k = f32::reinterpret(nan_bits);
    if s.s1 > 0 {
        let nf = f32::cast_from(n);
        k = f32::sqrt(d * (nf / (nf - 1.0f32))) / f32::cast_from(s.s1);
    }
    k
}

/// Pixel `idx` of an image stored `bits` per pixel (8, 16 or 32), packed little-endian.
#[cube]
fn pixel(input: &Array<u32>, idx: u32, #[comptime] bits: u32) -> u32 {
    let per_word = comptime!(32 / bits);
    let mask = comptime!(if bits == 32 {
        u32::MAX
    } else {
        (1u32 << bits) - 1
    });
    (input[(idx / per_word) as usize] >> ((idx % per_word) * bits)) & mask
}

/// Mirror `i` into 0..n about the edge pixels, any distance out (n >= 1). Windows reach
/// at most 15 pixels past an edge, so one fold per side is the rule; the loop only turns
/// again for images narrower than the window (no integer division on this path).
#[cube]
fn reflect(i: i32, n: i32) -> i32 {
    let mut m = i;
    if n == 1 {
        m = 0i32;
    } else {
        while m < 0 || m >= n {
            if m < 0 {
                m = -m;
            }
            if m >= n {
                m = 2 * (n - 1) - m;
            }
        }
    }
    m
}

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

#[cube]
fn zero_sums() -> Sums {
    Sums {
        s1: 0u32,
        s2_hi: 0u32,
        s2_lo: 0u32,
        sat: 0u32,
    }
}

/// Flag bits of a window: undefined (mean 0), saturated (any pixel at the level).
#[cube]
fn flags_of(s: Sums) -> u32 {
    let mut f = 0u32;
    if s.s1 == 0 {
        f |= FLAG_UNDEFINED;
    }
    if s.sat > 0 {
        f |= FLAG_SATURATED;
    }
    f
}

/// Temporal (`r = 0`) or spatio-temporal contrast: for each pixel, sums over a
/// `(2r + 1)^2` spatial window and `frames_n` consecutive frames, sliding along the stack
/// with exact running sums (add the entering frame, subtract the leaving one).
/// Output frame t covers input frames t..t + frames_n. Launched unchecked, as above.
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

#[cube]
fn add_sums(s: &mut Sums, t: Sums, #[comptime] wide: bool) {
    if comptime!(wide) {
        let x = s2_of(s) + s2_of(&t);
        set_s2(s, x);
    } else {
        let lo = s.s2_lo + t.s2_lo;
        let mut carry = 0u32;
        if lo < t.s2_lo {
            carry = 1u32;
        }
        s.s2_hi += t.s2_hi + carry;
        s.s2_lo = lo;
    }
    s.s1 += t.s1;
    s.sat += t.sat;
}

#[cube]
fn sub_sums(s: &mut Sums, t: Sums, #[comptime] wide: bool) {
    if comptime!(wide) {
        let x = s2_of(s) - s2_of(&t);
        set_s2(s, x);
    } else {
        let mut borrow = 0u32;
        if s.s2_lo < t.s2_lo {
            borrow = 1u32;
        }
        s.s2_hi -= t.s2_hi + borrow;
        s.s2_lo -= t.s2_lo;
    }
    s.s1 -= t.s1;
    s.sat -= t.sat;
}

/// Value at (x, y) of the frame starting at `base`, under the border rule.
#[cube]
fn bordered_frame(
    input: &Array<u32>,
    base: u32,
    x: i32,
    y: i32,
    w: i32,
    h: i32,
    #[comptime] bits: u32,
    #[comptime] border: u32,
) -> u32 {
    let mut v = 0u32;
    if comptime!(border == BORDER_REFLECT) {
        v = pixel(
            input,
            base + (reflect(y, h) * w + reflect(x, w)) as u32,
            bits,
        );
    } else if x >= 0 && x < w && y >= 0 && y < h {
        v = pixel(input, base + (y * w + x) as u32, bits);
    }
    v
}

/// How integer pixels are stored in the uploaded words.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PixelBits {
    /// Four u8 per u32 word.
    U8,
    /// Two u16 per u32 word.
    U16,
}

impl PixelBits {
    fn bits(self) -> u32 {
        match self {
            PixelBits::U8 => 8,
            PixelBits::U16 => 16,
        }
    }
    fn max_value(self) -> u64 {
        match self {
            PixelBits::U8 => 255,
            PixelBits::U16 => 65535,
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
        return Err(invalid(
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
        return Err(invalid(
            name,
            format!("image {}x{} smaller than the window", p.width, p.height),
        ));
    }
    if k.len() < outputs
        || (p.sfi_scale.is_some() && sfi.len() < outputs)
        || (p.saturation.is_some() && flags.len() < outputs)
    {
        return Err(invalid(
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
        return Err(invalid(
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
        return Err(invalid(
            name,
            format!("image {width}x{height} smaller than the window"),
        ));
    }
    let outputs = (frames - frames_n + 1) as usize * (ow * oh) as usize;
    if k.len() < outputs || flags.len() < outputs {
        return Err(invalid(
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

/// Whether kernels on `gpu` may use native 64-bit integers (CUDA; WGSL has none).
fn native_u64<R: Runtime>(gpu: &Gpu<R>) -> bool {
    gpu.info().backend == gpu_runtime::Backend::Cuda
}

/// The u32 partial sums overflow beyond `(2r+1)^2 * frames_n * 255^2 >= 2^32`.
fn check_window(name: &str, radius: u32, frames_n: u32, pixel: PixelBits) -> Result<()> {
    if radius > 15 {
        return Err(invalid(
            name,
            format!("window {} exceeds 31", 2 * radius + 1),
        ));
    }
    // S1 must fit 32 bits, and N S2 (< N^2 2^32) 64 bits.
    let n = u64::from((2 * radius + 1) * (2 * radius + 1)) * u64::from(frames_n.max(1));
    let s1 = n * pixel.max_value();
    if n >= 1 << 16 || s1 >= 1 << 32 {
        return Err(invalid(
            name,
            format!("window of {n} pixels is too large for exact 32-bit sums"),
        ));
    }
    Ok(())
}

fn invalid(kernel: &str, why: String) -> Error {
    Error::InvalidLaunch {
        kernel: kernel.into(),
        why,
    }
}
