//! Library side of the project tasks: the benchmark suite (shared by `cargo xtask bench`
//! and the `biogpu-bench` binary that travels to GPU machines) and its report.

pub mod report;
mod speckle_bench;
pub mod suite;
