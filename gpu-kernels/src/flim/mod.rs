//! FLIM kernels, f32: the non-iterative lifetime methods ([`lifetimes`]), the fast
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

use crate::catalog::CatalogEntry;
use cubecl::prelude::*;
use gpu_runtime::{Error, GpuArray};

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

pub(crate) fn invalid(kernel: &str, why: String) -> Error {
    Error::InvalidLaunch {
        kernel: kernel.into(),
        why,
    }
}

/// This module's kernels, configured as their launch wrappers configure them.
pub(crate) fn catalog<R: Runtime>(client: &ComputeClient<R>) -> Vec<CatalogEntry> {
    let mut all = lifetimes::catalog(client);
    all.extend(fret::catalog(client));
    all.extend(fit::catalog(client));
    all.extend(global::catalog(client));
    all
}
