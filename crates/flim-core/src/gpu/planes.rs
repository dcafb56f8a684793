//! Tables going up and maps coming down, shared by the per-pixel GPU paths.

use crate::model::lifetimes::{STATUS_MASKED, Setup};
use ndarray::Array2;
use rayon::prelude::*;

/// The phasor and Simpson tables of a setup, as the kernels read them (f32).
pub(crate) fn tables(su: &Setup) -> Vec<f32> {
    su.simpson
        .iter()
        .chain(&su.cos_t)
        .chain(&su.sin_t)
        .map(|&v| v as f32)
        .collect()
}

/// A chunk's planes (`vals`, plane-major over the chunk's pixels) into rows `range` of whole-
/// image map planes, all planes at once on all cores (one plane's copy alone runs at a
/// single core's speed): map plane `q` takes chunk plane `source(q)`, NaN where `None`.
pub(crate) fn store_planes<const N: usize>(
    planes: [&mut Array2<f32>; N],
    range: std::ops::Range<usize>,
    vals: &[f32],
    source: impl Fn(usize) -> Option<usize> + Sync,
) {
    let n = range.len();
    planes.into_par_iter().enumerate().for_each(|(q, plane)| {
        let dst = &mut plane.as_slice_mut().expect("standard layout")[range.clone()];
        match source(q) {
            Some(i) => dst.copy_from_slice(&vals[i * n..(i + 1) * n]),
            None => dst.fill(f32::NAN),
        }
    });
}

/// A chunk's kernel status words into rows `range` of a whole-image status map.
pub(crate) fn store_status(status: &mut Array2<u8>, range: std::ops::Range<usize>, words: &[u32]) {
    let dst = &mut status.as_slice_mut().expect("standard layout")[range];
    for (d, &s) in dst.iter_mut().zip(words) {
        *d = status_code(s);
    }
}

/// The kernels' status word (0 = analysed) as a map's status.
fn status_code(s: u32) -> u8 {
    if s == 0 { 0 } else { STATUS_MASKED }
}
