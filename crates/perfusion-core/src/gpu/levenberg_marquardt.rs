//! Levenberg-Marquardt's host side: the floors its f32 kernel puts under the f64 tolerances
//! (the kernel and its wrapper: `gpu_kernels::perfusion::levenberg_marquardt`).

/// Tolerances below f32 rounding would never be met: the f32 kernels use at least these.
pub(super) const F32_TOL: f64 = 1e-6;
pub(super) const F32_TOL_GRAD: f64 = 1e-4;
pub(super) const F32_FLOOR_REL: f64 = 3e-6;
/// At an f32 minimum rounding leaves J^T r at about this cosine with the residuals.
pub(super) const F32_STALL: f64 = 1e-2;
