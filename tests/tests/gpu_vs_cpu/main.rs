//! GPU-vs-CPU tests for every kernel, in one binary so the GPU bundle stays small.
//! Device: `BIOGPU_DEVICE` (lavapipe in CI, CUDA on the GPU machine); see biogpu-tests.

mod base_kernels;
mod errors;
mod flim;
mod flim_global;
mod montecarlo;
mod perfusion;
mod speckle;
mod speckle_flow;
