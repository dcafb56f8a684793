//! CPU speed of each non-iterative method alone (phasor, RLD, IEM, CMM) and of all four
//! together, on one thread and on every thread, for comparison with flimlib and phasorpy
//! (`xtask/peers/flim_lifetimes.py` times those on the same cube).
//!
//! ```text
//! cargo run --release -p flim-core --example lifetimes_speed -- FILE [REPS] [SAVE.npy]
//! ```
//! SAVE.npy: also write the cube, for the peers' script.
//! FILE: any FLIM file biogpu reads (its first image), or `synthetic` (256 x 256 x 256 u16
//! mono-exponential bars, 1,000 photons). Phasor runs over every bin; RLD, IEM and CMM from
//! the decay's peak to the end (`FitRange::from_peak`), as the peers are given.

use flim_core::io::{ReadOptions, read};
use flim_core::sim::mono_exponential;
use flim_core::{Analysis, AnyCube, FitRange, Methods, analyse_any};
use gpu_runtime::Device;
use std::time::Instant;

fn median_ms(reps: usize, mut f: impl FnMut()) -> f64 {
    f(); // warm-up
    let mut t: Vec<f64> = (0..reps)
        .map(|_| {
            let t0 = Instant::now();
            f();
            t0.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    t.sort_by(f64::total_cmp);
    t[reps / 2]
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let what = args.first().map_or("synthetic", String::as_str);
    let reps: usize = args.get(1).map_or(Ok(7), |s| s.parse())?;
    let cube: AnyCube = if what == "synthetic" {
        mono_exponential(&[2.0, 2.5, 3.0, 4.0], 256, 256, 256, 0.05, 12.8, 1000.0, 1)?.into()
    } else {
        read(std::path::Path::new(what), &ReadOptions::default())?
            .images
            .remove(0)
            .cube
    };
    if let Some(save) = args.get(2) {
        flim_core::io::write_npy(std::path::Path::new(save), &cube)?;
    }
    let (h, w) = cube.shape();
    let pixels = (h * w) as f64;
    let range = FitRange::from_peak(&cube)?;
    println!(
        "{what}: {w} x {h} x {} {}, range from the peak: bins {}..{}",
        cube.bins(),
        cube.dtype(),
        range.first,
        range.first + range.bins
    );
    let cases = [
        ("phasor", Methods::PHASOR, false),
        ("RLD", Methods::RLD, true),
        ("IEM", Methods::IEM, true),
        ("CMM", Methods::CMM, true),
        ("all four", Methods::ALL, true),
    ];
    let all = std::thread::available_parallelism().map_or(1, usize::from);
    println!(
        "{:<10} {:>8} {:>12} {:>14}",
        "method", "threads", "median ms", "Mpixels/s"
    );
    for threads in [1, all] {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()?;
        for (name, m, from_peak) in cases {
            let mut opts = Analysis::default().with_methods(m);
            if from_peak {
                opts = range.apply(opts);
            }
            let ms = pool.install(|| {
                median_ms(reps, || {
                    analyse_any(&cube, &opts, &Device::cpu()).expect("analysis");
                })
            });
            println!(
                "{name:<10} {threads:>8} {ms:>12.2} {:>14.2}",
                pixels / (ms * 1e-3) / 1e6
            );
        }
    }
    Ok(())
}
