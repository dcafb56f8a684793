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

pub fn run(_args: &Args, device: &Device) -> anyhow::Result<()> {
    println!("device: {device}");
    self_check(device)?;
    println!("modalities: speckle, flim, mc and perfusion have not landed yet (see README.md)");
    Ok(())
}

/// Runs the runtime's own kernels on the device and compares them with the CPU.
fn self_check(device: &Device) -> anyhow::Result<()> {
    let n = 1 << 20;
    let x: Vec<f32> = (0..n).map(|i| ((i * 7919) % 1000) as f32 / 1000.0 - 0.5).collect();
    let want: f64 = x.iter().map(|&v| f64::from(2.0f32.mul_add(v, v))).sum();
    if !device.is_gpu() {
        println!("self-check: CPU path only (sum of 2x + x over 1 Mi elements = {want:.3})");
        return Ok(());
    }
    let got = with_gpu!(device, |gpu| {
        let (xd, yd) = (gpu.upload(&x)?, gpu.upload(&x)?);
        base::axpy(gpu, 2.0, &xd, &yd)?;
        base::sum(gpu, &yd)
    })
    .context("device self-check")?;
    let err = (got - want).abs() / want.abs().max(1.0);
    ensure!(err < 1e-5, "device self-check failed: GPU sum {got}, CPU sum {want}");
    println!("self-check: axpy + block sum of 1 Mi elements on {} matches the CPU (rel. diff {err:.1e})", device.info().id);
    Ok(())
}
