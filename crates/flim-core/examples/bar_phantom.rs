//! First contact with flim-core: the paper's bar phantom (four vertical bars of 2, 2.5, 3 and
//! 4 ns, 1,000 photons per pixel, 256 bins of 50 ps, 12.8 ns period; 32 x 64 pixels),
//! analysed by the four non-iterative methods (RLD, IEM, CMM, phasor) and a per-pixel
//! Poisson MLE fit; then the bi-exponential FRET phantom (donor 2.5 ns, quenched 0.8 ns,
//! donor fraction f_D falling from 0.8 to 0.2 across the image) by BCMM and PM.
//!
//! ```text
//! cargo run --release -p flim-core --example bar_phantom -- [DEVICE]
//! ```
//!
//! DEVICE as the CLI's `--device` (`cpu`, `auto`, `cuda`, `wgpu`, `wgpu:software`); default
//! `BIOGPU_DEVICE`, else `cpu`. Prints, per bar, the mean and standard deviation of each
//! method's lifetime (ns) against the truth, then f_D at five columns of the FRET phantom;
//! each with the time it took. Takes about a second on the CPU.

use flim_core::sim::{DecaySim, bi_exponential, mono_exponential};
use flim_core::{Analysis, Donor, FitOptions, FretOptions, Model, analyse, analyse_fret, fit};
use gpu_runtime::{DEVICE_ENV, Device, DeviceRequest};
use ndarray::{Array2, s};
use std::time::Instant;

/// Mean and standard deviation of `map` over columns `cols` (every row), NaN left out.
fn stats(map: &Array2<f32>, cols: std::ops::Range<usize>) -> (f64, f64) {
    let v: Vec<f64> = map
        .slice(s![.., cols])
        .iter()
        .filter(|t| t.is_finite())
        .map(|&t| f64::from(t))
        .collect();
    let n = v.len().max(1) as f64;
    let mean = v.iter().sum::<f64>() / n;
    let sd = (v.iter().map(|t| (t - mean).powi(2)).sum::<f64>() / n).sqrt();
    (mean, sd)
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

    let taus = [2.0, 2.5, 3.0, 4.0];
    let (h, w) = (32, 64);
    let cube = mono_exponential(&taus, h, w, 256, 0.05, 12.8, 1000.0, 1)?;
    let t0 = Instant::now();
    let (maps, _) = analyse(&cube, &Analysis::default(), &device)?;
    let t1 = Instant::now();
    let (fits, _) = fit(&cube, &FitOptions::new(Model::Mono), &device)?;
    let t2 = Instant::now();
    println!(
        "bar phantom {h}x{w}x256, 1000 photons/pixel on {device}: RLD+IEM+CMM+phasor {:.1} ms, \
         MLE fit {:.1} ms",
        (t1 - t0).as_secs_f64() * 1e3,
        (t2 - t1).as_secs_f64() * 1e3
    );
    println!("  true (ns)   RLD          IEM          CMM          phasor       MLE");
    for (b, tau) in taus.iter().enumerate() {
        let cols = b * w / taus.len()..(b + 1) * w / taus.len();
        let cells: Vec<String> = [
            &maps.tau_rld,
            &maps.tau_iem,
            &maps.tau_cmm,
            &maps.tau_phase,
            &fits.tau[0],
        ]
        .iter()
        .map(|m| {
            let (mean, sd) = stats(m, cols.clone());
            format!("{mean:.3}±{sd:.3}")
        })
        .collect();
        println!("  {tau:<9.1}   {}", cells.join("  "));
    }

    // FRET: f_D = 0.8 at the left edge to 0.2 at the right, 20,000 photons per pixel.
    let sim = DecaySim::new(256, 0.05, 20_000.0)?;
    let fret_cube = bi_exponential(0.8, 2.5, 8, 33, &sim)?;
    let t0 = Instant::now();
    let opts = FretOptions::new(Donor::Known(2.5));
    let (fret, _) = analyse_fret(&fret_cube, &opts, &device)?;
    println!(
        "FRET phantom 8x33 (tau 0.8 and 2.5 ns), BCMM and PM in {:.1} ms:",
        t0.elapsed().as_secs_f64() * 1e3
    );
    println!("  column  f_D true  f_D BCMM  f_D PM");
    for x in [0, 8, 16, 24, 32] {
        let truth = 0.8 - 0.6 * x as f64 / 32.0;
        let (bcmm, _) = stats(&fret.f_d_bcmm, x..x + 1);
        let (pm, _) = stats(&fret.f_d_pm, x..x + 1);
        println!("  {x:>6}  {truth:>8.3}  {bcmm:>8.3}  {pm:>6.3}");
    }
    Ok(())
}
