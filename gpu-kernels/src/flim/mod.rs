//! FLIM kernels, f32: the non-iterative lifetime methods ([`mod@lifetimes`]), the fast
//! bi-exponential methods ([`fret`]) and per-pixel iterative fits ([`fit`]), one unit
//! (thread) per pixel, and global analysis ([`global`], one cube per segment). flim-core
//! holds the formulas and the f64 CPU references.
//!
//! Decays are read in the instrument's layout (pixel after pixel, bins contiguous) as
//! 32-bit words: two u16 counts, one u32 or one f32 per word.

// CubeCL evaluates `if comptime!(..)` at expansion time; merging it with a runtime
// condition would turn it into a runtime branch.
#![allow(clippy::collapsible_if)]
// `!(x > 0.0)` is meant: it is also true for NaN.
#![allow(clippy::neg_cmp_op_on_partial_ord, clippy::if_not_else)]

pub mod fit;
pub mod fret;
pub mod global;
pub mod lifetimes;

pub use lifetimes::{LifetimeParams, lifetimes};

use crate::configured::CatalogEntry;
use cubecl::prelude::*;
use gpu_runtime::GpuArray;

/// Counts stored as u16, two per word (little-endian).
pub const KIND_U16: u32 = 0;
/// Counts stored as u32.
pub const KIND_U32: u32 = 1;
/// Counts stored as f32.
pub const KIND_F32: u32 = 2;

/// Count `e` of the cube.
#[cube]
pub(crate) fn count(words: &Array<u32>, e: u32, #[comptime] kind: u32) -> f32 {
    if comptime!(kind == KIND_U16) {
        let w = words[(e >> 1) as usize];
        f32::cast_from((w >> ((e & 1) * 16)) & 0xFFFFu32)
    } else if comptime!(kind == KIND_U32) {
        f32::cast_from(words[e as usize])
    } else {
        f32::reinterpret(words[e as usize])
    }
}

/// Elements of each pixel's decay that one [`load_tile`] brings into shared memory.
pub(crate) const TILE: u32 = 16;
/// Shared-memory row of one pixel: one word of padding, so that units reading their own
/// rows element by element hit 32 different banks.
pub(crate) const TILE_ROW: u32 = TILE + 1;

/// Where a cube's decays are: `pixels` in the launch, `elements` per pixel in the fit range
/// (words of two counts when `pairs`, else counts), pixel `p`'s first element at
/// `p * stride + first` in elements of the buffer (`stride` and `first` halved for pairs).
#[derive(CubeType, Clone, Copy)]
pub(crate) struct Decays {
    pub pixels: u32,
    pub stride: u32,
    pub first: u32,
    pub elements: u32,
}

/// Decays counted in words for pairs, in counts otherwise (see [`Decays`]).
#[cube]
pub(crate) fn decays(
    pixels: u32,
    stride: u32,
    first: u32,
    m: u32,
    #[comptime] pairs: bool,
) -> Decays {
    let mut d = Decays {
        pixels,
        stride,
        first,
        elements: m,
    };
    if comptime!(pairs) {
        d.stride = stride >> 1;
        d.first = first >> 1;
        d.elements = m >> 1;
    }
    d
}

/// First pixel of this cube (the launch grid may be two-dimensional).
#[cube]
pub(crate) fn cube_first_pixel() -> u32 {
    (CUBE_POS_X + CUBE_POS_Y * CUBE_COUNT_X) * CUBE_DIM_X
}

/// This unit's share of tile `t0` (elements `t0 .. t0 + TILE` of every decay of the cube)
/// into `regs`: its `r`-th value is element `UNIT_POS_X % TILE` of the cube's pixel
/// `UNIT_POS_X / TILE + r * (cube / TILE)`, so consecutive units read consecutive elements
/// of one decay (a warp's load is two runs of 64 contiguous bytes, where one unit per
/// pixel would touch 32 places 512 bytes apart). Elements past a decay and pixels past the
/// launch are not read (0 stands in for them). `cube` is the launch's units per cube, a multiple of TILE.
#[cube]
#[allow(unused_assignments)] // CubeCL has no if-expressions: declared, then set per branch
pub(crate) fn fetch_tile(
    words: &Array<u32>,
    regs: &mut Array<u32>,
    d: Decays,
    t0: u32,
    #[comptime] cube: u32,
    #[comptime] kind: u32,
    #[comptime] pairs: bool,
) {
    let p0 = cube_first_pixel();
    let e = t0 + UNIT_POS_X % TILE;
    let q0 = UNIT_POS_X / TILE;
    #[unroll]
    for r in 0..TILE {
        let px = p0 + q0 + r * comptime!(cube / TILE);
        let mut v = 0u32;
        if px < d.pixels && e < d.elements {
            let at = px * d.stride + d.first + e;
            if comptime!(pairs || kind != KIND_U16) {
                v = words[at as usize];
            } else {
                v = (words[(at >> 1) as usize] >> ((at & 1) * 16)) & 0xFFFFu32;
            }
        }
        regs[r as usize] = v;
    }
}

/// The values of [`fetch_tile`] into the cube's shared tile (row `q` for the cube's pixel
/// `q`, [`TILE_ROW`] words per row). The caller synchronises before reading it.
#[cube]
pub(crate) fn store_tile(tile: &mut SharedMemory<u32>, regs: &Array<u32>, #[comptime] cube: u32) {
    let e = UNIT_POS_X % TILE;
    let q0 = UNIT_POS_X / TILE;
    #[unroll]
    for r in 0..TILE {
        tile[((q0 + r * comptime!(cube / TILE)) * TILE_ROW + e) as usize] = regs[r as usize];
    }
}

/// A count held in a tile element (not for pairs): u16 and u32 counts as integers, f32
/// counts as their bits.
#[cube]
#[allow(unused_assignments)]
pub(crate) fn tile_count(v: u32, #[comptime] kind: u32) -> f32 {
    let mut c = 0.0f32;
    if comptime!(kind == KIND_F32) {
        c = f32::reinterpret(v);
    } else {
        c = f32::cast_from(v);
    }
    c
}

/// Whether `words` holds `pixels` decays of `stride` counts of type `kind` (two u16 counts
/// per word, else one).
pub(crate) fn holds_decays(words: &GpuArray<u32>, kind: u32, pixels: usize, stride: u32) -> bool {
    let per_word = if kind == KIND_U16 { 2 } else { 1 };
    words.len() * per_word >= pixels * stride as usize
}

/// Whether u16 counts can be read two per load: every pixel and the range start on a word.
pub(crate) fn u16_pairs(kind: u32, stride: u32, first: u32, m: u32) -> bool {
    kind == KIND_U16 && stride.is_multiple_of(2) && first.is_multiple_of(2) && m.is_multiple_of(2)
}

/// This module's kernels, configured as their launch wrappers configure them.
pub(crate) fn catalog<R: Runtime>(client: &ComputeClient<R>) -> Vec<CatalogEntry> {
    let mut all = lifetimes::catalog(client);
    all.extend(fret::catalog(client));
    all.extend(fit::catalog(client));
    all.extend(global::catalog(client));
    all
}
