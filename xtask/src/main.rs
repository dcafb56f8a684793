//! `cargo xtask <task>`: project tasks that are programs rather than shell scripts.
//!
//! - `build-ptx`: every kernel to CUDA C++ and PTX (sm_80, sm_90) with a resource report.
//! - `bench`: run the benchmark suite on a device and record it in docs/benchmarks.{md,json};
//!   `bench --import FILE` records a run made elsewhere by `biogpu-bench` (the GPU machine).
//! - `gpu-bundle`: release test and bench binaries plus `run.sh` in one folder (< 64 MiB)
//!   to check a GPU machine in one command.

mod bundle;
mod ptx;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use gpu_runtime::{Device, DeviceRequest};
use std::path::PathBuf;
use xtask::{report, suite};

#[derive(Debug, Parser)]
#[command(name = "cargo xtask", about = "biogpu project tasks")]
struct Cli {
    #[command(subcommand)]
    task: Task,
}

#[derive(Debug, Subcommand)]
enum Task {
    /// Generate CUDA C++ and PTX (sm_80, sm_90) for every kernel under target/ptx/.
    BuildPtx,
    /// Run the benchmark suite and record it in docs/benchmarks.md and .json.
    Bench {
        /// Device to benchmark.
        #[arg(long, env = gpu_runtime::DEVICE_ENV, default_value = "auto")]
        device: String,
        /// Only groups whose name contains this.
        #[arg(long)]
        filter: Option<String>,
        /// Small sizes and few repetitions (smoke test; not recorded).
        #[arg(long)]
        quick: bool,
        /// Record runs written by `biogpu-bench` (e.g. on the GPU machine) instead of running.
        #[arg(long, num_args = 1..)]
        import: Vec<PathBuf>,
    },
    /// Build the GPU bundle: release binaries and run.sh in one folder.
    GpuBundle {
        /// Output folder (git-ignored).
        #[arg(long, default_value = ".gpu")]
        out: PathBuf,
    },
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    let root = workspace_root();
    match cli.task {
        Task::BuildPtx => ptx::run(&root),
        Task::Bench {
            device,
            filter,
            quick,
            import,
        } => {
            if !import.is_empty() {
                for path in import {
                    let text = std::fs::read_to_string(&path)
                        .with_context(|| format!("reading {}", path.display()))?;
                    let run: report::Run = serde_json::from_str(&text)
                        .with_context(|| format!("{} is not a biogpu-bench run", path.display()))?;
                    println!(
                        "recording {} measurements from {} ({})",
                        run.measurements.len(),
                        run.device.name,
                        run.date
                    );
                    report::record(&root.join("docs"), run)?;
                }
                return Ok(());
            }
            let request: DeviceRequest = device.parse()?;
            let device = Device::select(request, true)?.device;
            let command = format!(
                "cargo xtask bench --device {}{}",
                device.info().id,
                filter
                    .as_ref()
                    .map(|f| format!(" --filter {f}"))
                    .unwrap_or_default()
            );
            let run = suite::run(&device, &command, &suite::Options { filter, quick })?;
            report::print(&run);
            if quick {
                println!("--quick: not recorded");
            } else {
                report::record(&root.join("docs"), run)?;
                println!("recorded in docs/benchmarks.md and docs/benchmarks.json");
            }
            Ok(())
        }
        Task::GpuBundle { out } => bundle::run(&root, &root.join(out)),
    }
}

fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map_or_else(|| PathBuf::from("."), PathBuf::from)
}
