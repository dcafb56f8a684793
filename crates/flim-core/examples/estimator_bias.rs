//! Bias and precision of every least-squares weighting and of MLE on mono-exponential decays
//! with a Gaussian IRF (issue 21's table): for each lifetime, `--decays` Poisson decays of
//! `--photons` photons (256 bins of 50 ps, 12.8 ns period, IRF 250 ps FWHM at 1 ns), fitted
//! with reconvolution. Prints the mean lifetime's relative error, the precision
//! F = sd(tau) / tau * sqrt(N), the statuses, and the time per fit; with a GPU device also
//! the largest GPU-CPU lifetime difference per estimator.
//!
//! ```text
//! cargo run --release -p flim-core --example estimator_bias -- [DEVICE] [DECAYS] [PHOTONS]
//! ```
//! DEVICE as for the CLI's `--device` (default `cpu`), DECAYS per lifetime (default 2,500),
//! PHOTONS per decay (default 1,000).

use flim_core::sim::DecaySim;
use flim_core::{Estimator, FitOptions, FitStatus, Model, Offset, Shift};
use gpu_runtime::{Device, DeviceRequest};
use std::time::Instant;

const TAUS: [f64; 6] = [0.5, 1.0, 2.0, 2.5, 4.0, 5.0];
const ESTIMATORS: [(Estimator, &str); 4] = [
    (Estimator::LeastSquaresModel, "lsq model (default)"),
    (Estimator::LeastSquaresNeyman, "lsq neyman"),
    (Estimator::LeastSquaresPearson, "lsq pearson"),
    (Estimator::MaximumLikelihood, "mle"),
];

/// The Cramer-Rao bound of tau as an F-value (amplitude free, IRF and background known): the
/// best precision any unbiased estimator can reach on these bins.
fn crb_f(sim: &DecaySim, tau: f64, photons: f64) -> f64 {
    let l0 = sim.expected(&[(1.0, tau)]);
    let d = 1e-5 * tau;
    let (up, down) = (
        sim.expected(&[(1.0, tau + d)]),
        sim.expected(&[(1.0, tau - d)]),
    );
    let (mut iaa, mut iat, mut itt) = (0.0, 0.0, 0.0);
    for j in 0..l0.len() {
        if l0[j] > 0.0 {
            let dt = (up[j] - down[j]) / (2.0 * d);
            iaa += l0[j];
            iat += dt;
            itt += dt * dt / l0[j];
        }
    }
    (iaa / (iaa * itt - iat * iat)).sqrt() / tau * photons.sqrt()
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let request: DeviceRequest = args.first().map_or("cpu", String::as_str).parse()?;
    let device = Device::select(request, true)?.device;
    let decays: usize = args.get(1).map_or(Ok(2_500), |s| s.parse())?;
    let photons: f64 = args.get(2).map_or(Ok(1_000.0), |s| s.parse())?;
    let side = (decays as f64).sqrt().ceil() as usize;
    let n = side * side;
    let fwhm_ns = 0.25;
    let sigma = fwhm_ns / (8.0 * 2f64.ln()).sqrt();
    println!(
        "device {}, {n} decays per lifetime, {photons} photons, 256 x 50 ps bins, IRF {fwhm_ns} ns FWHM",
        device.info().id
    );
    println!(
        "{:<20} {:>6} {:>9} {:>7} {:>7} {:>7} {:>7} {:>7} {:>9}{}",
        "estimator",
        "tau ns",
        "mean ns",
        "bias %",
        "F",
        "CRB F",
        "conv",
        "failed",
        "us/fit",
        if device.is_gpu() {
            "  max |gpu-cpu| ns"
        } else {
            ""
        }
    );
    for (est, label) in ESTIMATORS {
        for (i, &tau) in TAUS.iter().enumerate() {
            let sim = DecaySim::new(256, 0.05, photons)?
                .with_irf(sigma, 1.0)
                .with_seed(1000 + i as u64);
            let cube = sim.cube(side, side, |_, _| vec![(1.0, tau)])?;
            let opts = FitOptions::new(Model::Mono)
                .with_estimator(est)
                .with_offset(Offset::Fixed(0.0))
                .with_irf(&sim.irf_histogram().expect("IRF"))
                .with_irf_shift(Shift::Fixed(0.0));
            let t0 = Instant::now();
            let (maps, _) = flim_core::fit(&cube, &opts, &device)?;
            let us = t0.elapsed().as_secs_f64() * 1e6 / n as f64;
            let taus: Vec<f64> = maps.tau[0]
                .iter()
                .zip(maps.status.iter())
                .filter(|(_, s)| **s == FitStatus::Converged)
                .map(|(&t, _)| f64::from(t))
                .collect();
            let conv = taus.len();
            let failed = maps
                .status
                .iter()
                .filter(|&&s| s == FitStatus::Failed)
                .count();
            let mean = taus.iter().sum::<f64>() / conv.max(1) as f64;
            let var =
                taus.iter().map(|t| (t - mean).powi(2)).sum::<f64>() / (conv.max(2) - 1) as f64;
            let f = var.sqrt() / tau * photons.sqrt();
            let gpu_cpu = if device.is_gpu() {
                let (cpu, _) = flim_core::fit(&cube, &opts, &Device::cpu())?;
                let d = cpu.tau[0]
                    .iter()
                    .zip(maps.tau[0].iter())
                    .map(|(a, b)| f64::from((a - b).abs()))
                    .fold(0.0, f64::max);
                format!("  {d:.2e}")
            } else {
                String::new()
            };
            println!(
                "{label:<20} {tau:>6.2} {mean:>9.4} {:>7.2} {f:>7.3} {:>7.3} {conv:>7} {failed:>7} {us:>9.2}{gpu_cpu}",
                (mean / tau - 1.0) * 100.0,
                crb_f(&sim, tau, photons)
            );
        }
    }
    Ok(())
}
