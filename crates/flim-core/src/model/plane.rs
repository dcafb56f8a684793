//! Map planes made on all cores.
//!
//! A 512x512 plane is a megabyte that must be written before use (zeroed, or NaN for "not
//! analysed"); eight of them written on one thread are a fifth of an end-to-end GPU
//! analysis (docs/benchmarks.md). The GPU paths make their planes one per core.

use ndarray::Array2;
use rayon::prelude::*;

/// `count` planes of `h` x `w` values `value`, one plane per task on all cores.
pub(crate) fn filled<T: Clone + Send + Sync>(
    count: usize,
    h: usize,
    w: usize,
    value: T,
) -> Vec<Array2<T>> {
    (0..count)
        .into_par_iter()
        .map(|_| Array2::from_elem((h, w), value.clone()))
        .collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn filled_has_the_count_shape_and_value() {
        let p = super::filled(3, 2, 5, 2.5f32);
        assert_eq!(p.len(), 3);
        assert!(
            p.iter()
                .all(|a| a.dim() == (2, 5) && a.iter().all(|&x| x == 2.5))
        );
        assert!(
            super::filled(2, 0, 4, 1u8)
                .iter()
                .all(ndarray::ArrayBase::is_empty)
        );
    }
}
