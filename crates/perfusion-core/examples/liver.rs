//! First contact with perfusion-core: Wang & Cao's simulated liver (the dual-input model with
//! ka 20, kp 100, kl 400 ml/100g/min, delays 1 s and 2 s; 128 samples over 2 min; Parker's
//! population arterial input and a portal-venous input derived from it), 200 tissue curves
//! without noise and 200 at a contrast-to-noise ratio of 20, fitted per voxel by
//! Levenberg-Marquardt (the default) and Nelder-Mead through the library's `fit`.
//!
//! ```text
//! cargo run --release -p perfusion-core --example liver -- [DEVICE]
//! ```
//!
//! DEVICE as the CLI's `--device` (`cpu`, `auto`, `cuda`, `wgpu`, `wgpu:software`); default
//! `BIOGPU_DEVICE`, else `cpu`. Prints, per fit, the device, precision, time and how many
//! voxels converged, then per parameter the truth and the median recovered value of each fit
//! (with the 25th-75th percentile range at CNR 20). Takes about a second on the CPU.

use gpu_runtime::{DEVICE_ENV, Device, DeviceRequest};
use perfusion_core::sim::Simulation;
use perfusion_core::{FitInput, FitParams, FitStatus, Fits, Method, Model, fit};
use std::time::Instant;

/// The `q`-quantile (0..=1) of the finite values of a column.
fn quantile(values: ndarray::ArrayView1<'_, f64>, q: f64) -> f64 {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    v[((v.len() - 1) as f64 * q).round() as usize]
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let name = std::env::args()
        .nth(1)
        .or_else(|| {
            std::env::var(DEVICE_ENV)
                .ok()
                .filter(|v| !v.trim().is_empty())
        })
        .unwrap_or_else(|| "cpu".into());
    let device = Device::select(name.parse::<DeviceRequest>()?, true)?.device;

    let paper = Simulation::paper(128).with_voxels(200);
    let runs = [
        ("noise-free, LM", None, Method::LevenbergMarquardt),
        ("CNR 20, LM", Some(20.0), Method::LevenbergMarquardt),
        ("CNR 20, NM", Some(20.0), Method::NelderMead),
    ];
    let mut results: Vec<Fits> = Vec::new();
    for (label, cnr, method) in runs {
        let sim = paper.clone().with_cnr(cnr).with_seed(3).run()?;
        let params = FitParams::new(Model::DualInput).with_method(method);
        let t0 = Instant::now();
        let (fits, info) = fit(
            FitInput::new(sim.curves.view(), &sim.problem),
            &params,
            &device,
        )?;
        let converged = (0..fits.len())
            .filter(|&v| fits.status(v) == FitStatus::Converged)
            .count();
        println!(
            "{label:<15} on {} ({}): {:.0} ms, {converged} of {} voxels converged",
            info.device,
            info.precision,
            t0.elapsed().as_secs_f64() * 1e3,
            fits.len()
        );
        results.push(fits);
    }

    println!("  parameter          truth  noise-free LM  CNR 20 LM (25-75%)        CNR 20 NM");
    for (i, (p, truth)) in Model::DualInput
        .params()
        .iter()
        .zip(&paper.truth)
        .enumerate()
    {
        // `params` is (parameter, voxel).
        let q = |f: &Fits, q: f64| quantile(f.params.row(i), q);
        let (clean, lm, nm) = (&results[0], &results[1], &results[2]);
        println!(
            "  {:<16} {truth:>6.1}  {:>13.2}  {:>7.2} ({:>6.2}-{:>6.2})  {:>10.2}",
            format!("{} ({})", p.name, p.unit),
            q(clean, 0.5),
            q(lm, 0.5),
            q(lm, 0.25),
            q(lm, 0.75),
            q(nm, 0.5),
        );
    }
    Ok(())
}
