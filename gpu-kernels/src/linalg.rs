//! Small dense linear algebra shared by the per-unit fitting kernels.

// `!(x > 0.0)` is meant (also true for NaN); CubeCL's loops take `a..b` ranges only.
#![allow(clippy::neg_cmp_op_on_partial_ord, clippy::range_plus_one)]

use cubecl::prelude::*;

/// Solve `m x = b` by Cholesky, `m` symmetric positive definite, read from the upper
/// triangle of a row-major `stride` x `stride` array, of size `np <= stride`. Both sizes
/// are known at compile time, so the loops unroll and the factor lives in registers.
/// Returns false when `m` is not positive definite (non-positive pivots are replaced by 1,
/// so `x` stays finite; the caller treats the step as failed).
#[cube]
pub(crate) fn cholesky_solve<F: Float>(
    m: &Array<F>,
    b: &Array<F>,
    x: &mut Array<F>,
    #[comptime] stride: u32,
    #[comptime] np: u32,
) -> bool {
    let mut l = Array::<F>::new(comptime!((stride * stride) as usize));
    let mut y = Array::<F>::new(comptime!(stride as usize));
    let mut ok = true;
    #[unroll]
    for i in 0..np {
        #[unroll]
        for j in 0..i + 1 {
            let mut s = m[(j * stride + i) as usize];
            #[unroll]
            for q in 0..j {
                s -= l[(i * stride + q) as usize] * l[(j * stride + q) as usize];
            }
            if comptime!(i == j) {
                if !(s > F::new(0.0)) {
                    ok = false;
                    s = F::new(1.0);
                }
                l[(i * stride + i) as usize] = F::sqrt(s);
            } else {
                l[(i * stride + j) as usize] = s / l[(j * stride + j) as usize];
            }
        }
    }
    #[unroll]
    for i in 0..np {
        let mut s = b[i as usize];
        #[unroll]
        for q in 0..i {
            s -= l[(i * stride + q) as usize] * y[q as usize];
        }
        y[i as usize] = s / l[(i * stride + i) as usize];
    }
    #[unroll]
    for ii in 0..np {
        let i = np - 1 - ii;
        let mut s = y[i as usize];
        #[unroll]
        for q in i + 1..np {
            s -= l[(q * stride + i) as usize] * x[q as usize];
        }
        x[i as usize] = s / l[(i * stride + i) as usize];
    }
    ok
}
