//! Every GPU kernel of biogpu, in Rust via CubeCL 0.10, one module per modality.
//!
//! Each module holds its `#[cube]` functions and one launch wrapper per kernel that owns
//! the only `unsafe`, takes [`gpu_runtime::Gpu`] and [`gpu_runtime::GpuArray`]s, checks
//! lengths, and returns `Result`. Modality crates call the wrappers, never raw launches.
//! [`catalog`] lists every kernel for `cargo xtask build-ptx`.

pub mod base;
pub mod catalog;
mod configured;
pub mod flim;
pub mod linalg;
pub mod montecarlo;
pub mod perfusion;
pub mod speckle;

/// Units per cube for 1-D kernels: a multiple of every vendor's SIMD width (32 NVIDIA,
/// 64 AMD, 8 lavapipe) and small enough for every backend's limit.
pub const CUBE_1D: u32 = 256;
