//! Nelder-Mead's host side: its launch shape where it differs from the kernels' default
//! (the kernel and its wrapper: `gpu_kernels::perfusion::nelder_mead`).

/// Units per cube of persistent Nelder-Mead in f64: 12 warps per multiprocessor either way
/// at 128 or 384, the shared curves allow no more at Nt 128, and 384 caps registers at 170;
/// 384 measured faster (docs/benchmarks.md).
pub(super) const CUBE_NM_F64_PERSISTENT: u32 = 384;
