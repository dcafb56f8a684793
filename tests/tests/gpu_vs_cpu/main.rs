//! GPU-vs-CPU tests for every kernel, in one binary so the GPU bundle stays small.
//! Device: `BIOGPU_DEVICE` (lavapipe in CI, CUDA on the GPU machine); see biogpu-tests.
//! `harness = false`: `main` is biogpu-tests' harness, which runs what `gpu_test!`
//! registered and reports tests without a device as ignored (a plain `#[test]` here would
//! not run).

mod base_kernels;
mod errors;
mod flim;
mod flim_global;
mod montecarlo;
mod perfusion;
mod speckle;
mod speckle_flow;

fn main() -> std::process::ExitCode {
    biogpu_tests::harness::main()
}
