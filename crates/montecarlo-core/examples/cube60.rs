//! cube60 on the CPU (MCX's benchmark on a 135,000-tet mesh): photons/ms, for profiling the
//! CPU transport (`perf stat`, `valgrind --tool=callgrind`).
//!
//! `cargo run --release -p montecarlo-core --example cube60 -- [photons] [threads] [n_outside]`

use montecarlo_core::sim::generate;
use montecarlo_core::{Material, Optics, Params, Simulation, Source};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let arg = |i: usize, d: f64| {
        std::env::args()
            .nth(i)
            .and_then(|s| s.parse().ok())
            .unwrap_or(d)
    };
    let photons = arg(1, 20_000.0) as u64;
    let threads = arg(2, 1.0) as usize;
    let n_out = arg(3, 1.37);
    let mesh = generate::box_mesh([0.0; 3], [60.0; 3], 2.0, 5)?;
    let optics = Optics {
        materials: vec![Material {
            mua: 0.005,
            mus: 1.0,
            g: 0.01,
            n: 1.37,
        }],
        n_outside: n_out,
    };
    let src = [Source::Pencil {
        pos: [30.1, 30.2, 0.0],
        dir: [0.0, 0.0, 1.0],
        power: 1.0,
    }];
    let params = Params {
        time_limit_ns: Some(5.0),
        ..Params::default()
    };
    let sim = Simulation::new(mesh, optics, &src, photons, params)?;
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()?;
    let t0 = std::time::Instant::now();
    let _ = pool.install(|| sim.run_cpu(0, 1));
    eprintln!(
        "one photon (packing included): {:.1} ms",
        t0.elapsed().as_secs_f64() * 1e3
    );
    let r = pool.install(|| sim.run_cpu(0, photons));
    let s = &r.summary;
    println!(
        "{photons} photons on {threads} threads: {:.1} photons/ms ({:.1} per thread), absorbed {:.4}, escaped {:.4}, expired {:.4}, balance {:.1e}",
        s.photons_per_ms,
        s.photons_per_ms / threads as f64,
        s.absorbed,
        s.escaped,
        s.expired,
        s.balance_error
    );
    Ok(())
}
