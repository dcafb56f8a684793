//! `biogpu-bench`: the benchmark suite as a stand-alone binary for GPU machines without
//! Rust. Writes the run as JSON; `cargo xtask bench --import FILE` records it in docs/.

use anyhow::Context;
use clap::Parser;
use gpu_runtime::{Device, DeviceRequest};
use xtask::suite::{self, Options};

#[derive(Debug, Parser)]
#[command(about = "Run the biogpu benchmark suite and write the results as JSON")]
struct Args {
    /// Device to benchmark (auto, cpu, cuda:N, wgpu:N, wgpu:software).
    #[arg(long, env = gpu_runtime::DEVICE_ENV, default_value = "auto")]
    device: String,
    /// Only groups whose name contains one of these comma-separated words (runtime,speckle).
    #[arg(long)]
    filter: Option<String>,
    /// Small sizes and few repetitions.
    #[arg(long)]
    quick: bool,
    /// Output JSON file.
    #[arg(long, default_value = "bench.json")]
    out: std::path::PathBuf,
}

/// `BIOGPU_TRACE=FILTER` (e.g. `flim_core=debug,gpu_runtime=debug`) logs each span's
/// busy and idle time as it closes, on stderr: where a benchmark's time goes.
fn init_tracing() {
    if let Ok(filter) = std::env::var("BIOGPU_TRACE") {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
            .with_span_events(tracing_subscriber::fmt::format::FmtSpan::CLOSE)
            .with_thread_ids(true)
            .with_writer(std::io::stderr)
            .try_init();
    }
}

fn main() -> anyhow::Result<()> {
    init_tracing();
    let args = Args::parse();
    let request: DeviceRequest = args.device.parse()?;
    let device = Device::select(request, true)?.device;
    let command = std::env::args().collect::<Vec<_>>().join(" ");
    let run = suite::run(
        &device,
        &command,
        &Options {
            filter: args.filter,
            quick: args.quick,
        },
    )?;
    std::fs::write(&args.out, serde_json::to_string_pretty(&run)?)
        .with_context(|| format!("writing {}", args.out.display()))?;
    xtask::report::print(&run);
    println!("wrote {}", args.out.display());
    Ok(())
}
