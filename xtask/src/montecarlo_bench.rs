//! Monte Carlo light transport benchmarks (issue 5).
//!
//! GPU: MCX's cube60 (n 1.37 inside and out) and cube60b (n 1.37 inside, 1 outside,
//! Fresnel) on a 60 mm cube meshed on a 2 mm grid with 5 tetrahedra per cell (135,000
//! tets), mua 0.005/mm, mus 1/mm, g 0.01, pencil at (30.1, 30.2, 0) along +z, photons ended
//! at 5 ns like MCX: photons/ms and the absorbed fraction against MCX's 17.7% / 27.2%.
//! Up to 1e8 photons; fewer when the measured rate would take longer than ~30 s (the photons
//! actually run are in the name). TIM-OS cube_5med and FourLayer (data folder from
//! `BIOGPU_MC_DATA`, holding `cube_5med/` and `fourlayer/`): photons/ms and the paper's L1
//! norm of fluence between GPU and CPU next to the CPU-CPU one (both at the same count).
//! CPU: cube60 photons/ms per core.

use crate::report::Measurement;
use crate::suite::{Options, measurement};
use anyhow::{Context, Result};
use gpu_runtime::{Device, Timing};
use montecarlo_core::transport::Params;
use montecarlo_core::{Material, McResult, Optics, Simulation, Source, generate, l1_norm, timos};
use std::path::PathBuf;

/// Environment variable naming the folder with the TIM-OS models.
pub const DATA_ENV: &str = "BIOGPU_MC_DATA";

fn cube60(n_out: f64) -> Result<Simulation> {
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
    Ok(Simulation::new(mesh, optics, &src, 1, params)?)
}

fn timos_model(name: &str) -> Result<Option<Simulation>> {
    let Ok(root) = std::env::var(DATA_ENV) else {
        return Ok(None);
    };
    let (dir, stem) = match name {
        "cube_5med" => ("cube_5med", "cube_5med"),
        _ => ("fourlayer", "FourLayer"),
    };
    let base = PathBuf::from(root).join(dir);
    let mesh = timos::read_mesh(&base.join(format!("{stem}.mesh")))?;
    let optics = timos::read_opt(&base.join(format!("{stem}.opt")))?;
    let (src, _) = timos::read_source(&base.join(format!("{stem}.source")))?;
    Ok(Some(Simulation::new(
        mesh,
        optics,
        &src,
        1,
        Params::default(),
    )?))
}

fn run_n(sim: &mut Simulation, device: &Device, photons: u64, seed: u64) -> Result<McResult> {
    sim.photons = photons;
    sim.params.seed = seed;
    Ok(sim.run(device, None, |_, _| {})?)
}

fn timing(r: &McResult) -> Timing {
    Timing::from_durations(&[std::time::Duration::from_secs_f64(r.summary.seconds)])
}

/// Photons for a run of about `seconds` at `rate` photons/ms, at most `max`, at least 1e5.
fn budget(rate: f64, seconds: f64, max: u64) -> u64 {
    ((rate * seconds * 1e3) as u64).clamp(100_000, max)
}

pub fn run(device: &Device, opts: &Options, _earlier: &[Measurement]) -> Result<Vec<Measurement>> {
    let mut out = Vec::new();
    if device.is_gpu() {
        let (max, secs) = if opts.quick {
            (2_000_000, 3.0)
        } else {
            (100_000_000, 15.0)
        };
        for (name, n_out, mcx) in [("cube60", 1.37, 0.177), ("cube60b", 1.0, 0.272)] {
            let mut sim = cube60(n_out)?;
            // Warm-up (kernel build) and a rate estimate.
            let warm = run_n(&mut sim, device, 2_000_000.min(max), 11)?;
            let n = budget(warm.summary.photons_per_ms, secs, max);
            let r = run_n(&mut sim, device, n, 1)?;
            let s = &r.summary;
            eprintln!(
                "  {name}: {} photons, {:.0} photons/ms, absorbed {:.4}",
                s.photons, s.photons_per_ms, s.absorbed
            );
            out.push(measurement(
                "montecarlo",
                &format!("{name} 135k tets, {n} photons, 5 ns"),
                s.photons_per_ms,
                "photons/ms",
                timing(&r),
                format!(
                    "absorbed {:.4} (MCX voxel {mcx}), escaped {:.4}, time-limited {:.4}, balance error {:.1e}; target >= 150,000 photons/ms (cube60); MCX 274k/152k photons/ms on an H200",
                    s.absorbed, s.escaped, s.expired, s.balance_error
                ),
            ));
        }
        // Launch-size sweep on cube60 (persistent threads: cubes of 128 threads).
        let mut sim = cube60(1.37)?;
        let sweep_n = if opts.quick { 1_000_000 } else { 20_000_000 };
        for cubes in [1024u32, 2048, 4096, 8192, 16384] {
            sim.params.gpu_cubes = Some(cubes);
            let r = run_n(&mut sim, device, sweep_n, 5)?;
            eprintln!(
                "  cube60 {cubes} cubes: {:.0} photons/ms",
                r.summary.photons_per_ms
            );
            out.push(measurement(
                "montecarlo",
                &format!("cube60 launch of {cubes}x128 threads, {sweep_n} photons"),
                r.summary.photons_per_ms,
                "photons/ms",
                timing(&r),
                "launch-size sweep (default 16384 cubes)".into(),
            ));
        }
        for name in ["cube_5med", "fourlayer"] {
            let Some(mut sim) = timos_model(name).with_context(|| format!("loading {name}"))?
            else {
                eprintln!("  {name}: {DATA_ENV} not set: skipped");
                continue;
            };
            let warm = run_n(&mut sim, device, 1_000_000.min(max), 11)?;
            let n = budget(warm.summary.photons_per_ms, secs, max);
            let r = run_n(&mut sim, device, n, 1)?;
            // L1 at a count the CPU runs in seconds on the GPU machine's cores.
            let m = if opts.quick { 100_000 } else { 1_000_000 };
            let g = run_n(&mut sim, device, m, 3)?;
            let cpu = Device::cpu();
            let a = run_n(&mut sim, &cpu, m, 1)?;
            let b = run_n(&mut sim, &cpu, m, 2)?;
            let fl = |x: &McResult| x.fluence(&sim.mesh, &sim.optics);
            let (l1_gpu, l1_cpu) = (l1_norm(&fl(&a), &fl(&g)), l1_norm(&fl(&a), &fl(&b)));
            let s = &r.summary;
            eprintln!(
                "  {name}: {} photons, {:.0} photons/ms, L1 GPU-CPU {l1_gpu:.4}, CPU-CPU {l1_cpu:.4}",
                s.photons, s.photons_per_ms
            );
            out.push(measurement(
                "montecarlo",
                &format!("{name} {} tets, {n} photons", sim.mesh.len()),
                s.photons_per_ms,
                "photons/ms",
                timing(&r),
                format!(
                    "absorbed {:.4} (CPU {:.4}); L1 fluence GPU-CPU {l1_gpu:.4} vs CPU-CPU {l1_cpu:.4} at {m} photons each; CPU {:.0} photons/ms on {} threads",
                    s.absorbed, a.summary.absorbed, a.summary.photons_per_ms, a.summary.device
                ),
            ));
        }
    } else {
        let mut sim = cube60(1.37)?;
        let n = if opts.quick { 5_000 } else { 50_000 };
        let r = run_n(&mut sim, device, n, 1)?;
        let s = &r.summary;
        let threads = std::thread::available_parallelism().map_or(1, usize::from);
        out.push(measurement(
            "montecarlo",
            &format!("cube60 CPU, {n} photons, 5 ns"),
            s.photons_per_ms / threads as f64,
            "photons/ms per core",
            timing(&r),
            format!(
                "{:.0} photons/ms on {threads} cores; absorbed {:.4} (MCX 0.177); target >= 100 photons/ms per core",
                s.photons_per_ms, s.absorbed
            ),
        ));
    }
    Ok(out)
}
