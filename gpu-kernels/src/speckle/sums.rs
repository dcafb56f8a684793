//! What the contrast kernels share: exact integer window sums (64-bit values as u32 pairs
//! where WGSL has no u64), packed pixel reads, the reflect border rule, flag bits, and the
//! wrappers' checks.
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

use super::{BORDER_REFLECT, FLAG_SATURATED, FLAG_UNDEFINED};
use cubecl::prelude::*;
use gpu_runtime::{Error, Gpu, Result};

/// A 64-bit unsigned integer as two u32 halves.
#[derive(CubeType, Clone, Copy)]
pub(crate) struct U64 {
    pub(crate) hi: u32,
    pub(crate) lo: u32,
}

/// Exact a * b as 64 bits (`mul_hi` is one instruction on CUDA, a polyfill on WGSL).
#[cube]
pub(crate) fn mul_wide(a: u32, b: u32) -> U64 {
    U64 {
        hi: a.mul_hi(b),
        lo: a * b,
    }
}

#[cube]
pub(crate) fn sub_wide(x: U64, y: U64) -> U64 {
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
pub(crate) fn wide_to_f32(x: U64) -> f32 {
    f32::cast_from(x.hi) * 4294967296.0f32 + f32::cast_from(x.lo)
}

/// Window sums of one output pixel: S1 = sum v and S2 = sum v^2 (64 bits as two u32;
/// v^2 of a 16-bit pixel fits 32 bits, so each pixel adds with one carry).
#[derive(CubeType, Clone, Copy)]
pub(crate) struct Sums {
    pub(crate) s1: u32,
    pub(crate) s2_hi: u32,
    pub(crate) s2_lo: u32,
    /// Pixels at or above the saturation level.
    pub(crate) sat: u32,
}

/// S2 as one native 64-bit integer (CUDA); the halves stay the storage format.
#[cube]
pub(crate) fn s2_of(s: &Sums) -> u64 {
    (u64::cast_from(s.s2_hi) << 32u64) | u64::cast_from(s.s2_lo)
}

#[cube]
pub(crate) fn set_s2(s: &mut Sums, x: u64) {
    s.s2_hi = u32::cast_from(x >> 32u64);
    s.s2_lo = u32::cast_from(x);
}

/// Add one pixel value to the sums. `wide`: native 64-bit integers (CUDA), else carries
/// between u32 halves (WGSL has no 64-bit types).
#[cube]
pub(crate) fn accumulate(s: &mut Sums, v: u32, #[comptime] wide: bool) {
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
pub(crate) fn remove(s: &mut Sums, v: u32, #[comptime] wide: bool) {
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
pub(crate) fn contrast_from_sums(s: Sums, n: u32, #[comptime] wide: bool) -> f32 {
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
pub(crate) fn pixel(input: &Array<u32>, idx: u32, #[comptime] bits: u32) -> u32 {
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
pub(crate) fn reflect(i: i32, n: i32) -> i32 {
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

#[cube]
pub(crate) fn zero_sums() -> Sums {
    Sums {
        s1: 0u32,
        s2_hi: 0u32,
        s2_lo: 0u32,
        sat: 0u32,
    }
}

/// Flag bits of a window: undefined (mean 0), saturated (any pixel at the level).
#[cube]
pub(crate) fn flags_of(s: Sums) -> u32 {
    let mut f = 0u32;
    if s.s1 == 0 {
        f |= FLAG_UNDEFINED;
    }
    if s.sat > 0 {
        f |= FLAG_SATURATED;
    }
    f
}

#[cube]
pub(crate) fn add_sums(s: &mut Sums, t: Sums, #[comptime] wide: bool) {
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
pub(crate) fn sub_sums(s: &mut Sums, t: Sums, #[comptime] wide: bool) {
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
pub(crate) fn bordered_frame(
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
    pub(crate) fn bits(self) -> u32 {
        match self {
            PixelBits::U8 => 8,
            PixelBits::U16 => 16,
        }
    }
    pub(crate) fn max_value(self) -> u64 {
        match self {
            PixelBits::U8 => 255,
            PixelBits::U16 => 65535,
        }
    }
}

/// Whether kernels on `gpu` may use native 64-bit integers (CUDA; WGSL has none).
pub(crate) fn native_u64<R: Runtime>(gpu: &Gpu<R>) -> bool {
    gpu.info().backend == gpu_runtime::Backend::Cuda
}

/// The u32 partial sums overflow beyond `(2r+1)^2 * frames_n * 255^2 >= 2^32`.
pub(crate) fn check_window(name: &str, radius: u32, frames_n: u32, pixel: PixelBits) -> Result<()> {
    if radius > 15 {
        return Err(Error::invalid_launch(
            name,
            format!("window {} exceeds 31", 2 * radius + 1),
        ));
    }
    // S1 must fit 32 bits, and N S2 (< N^2 2^32) 64 bits.
    let n = u64::from((2 * radius + 1) * (2 * radius + 1)) * u64::from(frames_n.max(1));
    let s1 = n * pixel.max_value();
    if n >= 1 << 16 || s1 >= 1 << 32 {
        return Err(Error::invalid_launch(
            name,
            format!("window of {n} pixels is too large for exact 32-bit sums"),
        ));
    }
    Ok(())
}
