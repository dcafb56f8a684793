//! Small dense linear algebra shared by the per-unit fitting kernels, and its CPU twin
//! ([`solve_spd`]) for the f64 references, so both paths take the same steps.

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

/// Solve `m x = b` on the CPU by Cholesky, `m` symmetric positive definite, read from the
/// upper triangle of its leading `n` x `n` block: the same operations in the same order as
/// the kernels' `cholesky_solve`, so CPU references and kernels agree step for step.
/// Returns false when `m` is not positive definite (a non-positive or NaN pivot is replaced
/// by 1, so `x` stays finite; the caller treats the step as failed).
///
/// ```
/// use gpu_kernels::linalg::solve_spd;
/// let m = [[4.0, 2.0], [2.0, 3.0]];
/// let mut x = [0.0; 2];
/// assert!(solve_spd(&m, &[2.0, 1.0], &mut x, 2));
/// assert!((4.0 * x[0] + 2.0 * x[1] - 2.0).abs() < 1e-12);
/// assert!(!solve_spd(&[[1.0, 2.0], [2.0, 1.0]], &[1.0, 1.0], &mut x, 2));
/// ```
pub fn solve_spd<const N: usize>(m: &[[f64; N]; N], b: &[f64], x: &mut [f64], n: usize) -> bool {
    assert!(
        n <= N && b.len() >= n && x.len() >= n,
        "solve_spd: size {n} exceeds the arrays"
    );
    let mut l = [[0.0f64; N]; N];
    let mut y = [0.0f64; N];
    let mut ok = true;
    for i in 0..n {
        for j in 0..=i {
            let mut s = m[j][i];
            for q in 0..j {
                s -= l[i][q] * l[j][q];
            }
            if i == j {
                if !(s > 0.0) {
                    ok = false;
                    s = 1.0;
                }
                l[i][i] = s.sqrt();
            } else {
                l[i][j] = s / l[j][j];
            }
        }
    }
    for i in 0..n {
        let mut s = b[i];
        for q in 0..i {
            s -= l[i][q] * y[q];
        }
        y[i] = s / l[i][i];
    }
    for i in (0..n).rev() {
        let mut s = y[i];
        for q in i + 1..n {
            s -= l[q][i] * x[q];
        }
        x[i] = s / l[i][i];
    }
    ok
}

#[cfg(test)]
mod tests {
    use super::solve_spd;

    #[test]
    fn solves_spd_systems_and_flags_indefinite_ones() {
        let m = [[4.0, 2.0, 0.4], [2.0, 5.0, 1.0], [0.4, 1.0, 3.0]];
        let want = [0.3, -0.2, 0.7];
        let b: Vec<f64> = (0..3)
            .map(|i| (0..3).map(|j| m[i][j] * want[j]).sum())
            .collect();
        let mut x = [0.0; 3];
        assert!(solve_spd(&m, &b, &mut x, 3));
        for (g, w) in x.iter().zip(want) {
            assert!((g - w).abs() < 1e-12, "{g} vs {w}");
        }
        // A leading 2x2 block of a larger array is solved on its own.
        let mut x2 = [9.0; 3];
        assert!(solve_spd(&m, &[4.0, 2.0], &mut x2, 2));
        assert!((x2[0] - 1.0).abs() < 1e-12 && x2[1].abs() < 1e-12 && x2[2] == 9.0);
        let bad = [[1.0, 3.0], [3.0, 1.0]];
        let mut xb = [0.0; 2];
        assert!(!solve_spd(&bad, &[1.0, 1.0], &mut xb, 2));
        assert!(xb.iter().all(|v| v.is_finite()));
        let nan = [[f64::NAN, 0.0], [0.0, 1.0]];
        assert!(!solve_spd(&nan, &[1.0, 1.0], &mut xb, 2));
    }
}
