//! Library side of the project tasks: the benchmark suite (shared by `cargo xtask bench`
//! and the `biogpu-bench` binary that travels to GPU machines) and its report.

mod flim_bench;
mod group;
mod montecarlo_bench;
mod perfusion_bench;
pub mod report;
mod speckle_bench;
pub mod suite;
