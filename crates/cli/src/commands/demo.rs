//! `biogpu demo`: every landed modality on built-in data, plus a device self-check.

use anyhow::{Context, ensure};
use gpu_kernels::base;
use gpu_runtime::{Device, with_gpu};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Write outputs (maps, PNGs, JSON) under this folder.
    #[arg(long, default_value = "biogpu-demo")]
    pub out: std::path::PathBuf,
}

/// One modality's demo: returns false while the modality has not landed.
type Demo = fn(&std::path::Path, &Device) -> anyhow::Result<bool>;

pub fn run(args: &Args, device: &Device) -> anyhow::Result<()> {
    crate::say!("device: {device}");
    self_check(device)?;
    speckle(args, device).context("speckle demo")?;
    let mut pending = Vec::new();
    for (name, demo) in [
        ("flim", super::flim::demo as Demo),
        ("mc", super::mc::demo),
        ("perfusion", super::perfusion::demo),
    ] {
        if !demo(&args.out, device).with_context(|| format!("{name} demo"))? {
            pending.push(name);
        }
    }
    if !pending.is_empty() {
        crate::say!(
            "modalities not landed yet: {} (see README.md)",
            pending.join(", ")
        );
    }
    write_provenance(&args.out)
}

/// `provenance.json` in the demo's folder (each run of the demo replaces its outputs).
fn write_provenance(dir: &std::path::Path) -> anyhow::Result<()> {
    let doc = crate::record::with_provenance(
        serde_json::json!({ "demo": "every modality checked against the CPU", "outputs": dir }),
        &[],
    );
    let path = dir.join("provenance.json");
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    std::fs::write(&path, serde_json::to_string_pretty(&doc)? + "\n")
        .with_context(|| format!("writing {}", path.display()))?;
    crate::record::summary_written(&doc);
    Ok(())
}

/// The speckle demo (`speckle_core::sim::demo`): K on the device against the CPU reference.
fn speckle(args: &Args, device: &Device) -> anyhow::Result<()> {
    super::speckle::demo(&args.out, device).map(drop)
}

/// Runs the runtime's own kernels on the device and compares them with the CPU.
fn self_check(device: &Device) -> anyhow::Result<()> {
    let n = 1 << 20;
    let x: Vec<f32> = (0..n)
        .map(|i| ((i * 7919) % 1000) as f32 / 1000.0 - 0.5)
        .collect();
    let want: f64 = x.iter().map(|&v| f64::from(2.0f32.mul_add(v, v))).sum();
    if !device.is_gpu() {
        crate::say!("self-check: CPU path only (sum of 2x + x over 1 Mi elements = {want:.3})");
        return Ok(());
    }
    let got = with_gpu!(device, |gpu| {
        let (xd, yd) = (gpu.upload(&x)?, gpu.upload(&x)?);
        base::axpy(gpu, 2.0, &xd, &yd)?;
        base::sum(gpu, &yd)
    })
    .context("device self-check")?;
    let err = (got - want).abs() / want.abs().max(1.0);
    ensure!(
        err < 1e-5,
        "device self-check failed: GPU sum {got}, CPU sum {want}"
    );
    crate::say!(
        "self-check: axpy + block sum of 1 Mi elements on {} matches the CPU (rel. diff {err:.1e})",
        device.info().id
    );
    Ok(())
}
