//! DCE perfusion benchmarks (issue 6).
//!
//! GPU: the paper's liver, 626,400 voxels of the dual-input model at Nt = 128 (the paper's
//! simulation, CNR 20 noise, started from 10, 80, 200, 2 s, 3 s), end to end (curves from
//! host memory up, maps down: `fit`) with Nelder-Mead and LM in f64 and f32, and the
//! kernels alone in several cube shapes. Targets: NM <= 0.1 s, LM <= 0.03 s; the paper:
//! 0.9 min on a Tesla C2050. CPU: NM and LM at Nt = 64, one thread and all threads
//! (targets: NM >= 1,500 and LM >= 10,000 voxels/s per core). Three groups, so that
//! `--filter` can pick one: `perfusion-end-to-end`, `perfusion-kernels`, `perfusion-cpu`.

use crate::group::{Options, measurement};
use crate::report::Measurement;
use anyhow::Result;
use gpu_runtime::{Backend, Device, Timing, bench};
use perfusion_core::sim::Simulation;
use perfusion_core::{
    FitInput, FitParams, FitStatus, Fits, GpuTuning, Method, Model, PERSISTENT_ENV, Precision, fit,
    kernel_times, mean_evaluations,
};

const PAPER_START: [f64; 5] = [10.0, 80.0, 200.0, 2.0, 3.0];
const PAPER_VOXELS: usize = 626_400;
/// The paper's figure: 626,400 voxels in 0.9 min.
const PAPER_RATE: f64 = 626_400.0 / 54.0;
/// Floating-point operations per time step of one dual-input cost evaluation, counted in
/// the kernel source before the uniform-grid sampler (two interpolated inputs, the input mix,
/// the recursion, the residual; a fused multiply-add counts 2). Kept as the work unit so
/// that TFLOP/s figures stay comparable across kernel versions; the sampler of 2026-11-26
/// does about 15 per step.
const FLOPS_PER_STEP: f64 = 22.0;

/// The paper's fit by `method` in `precision`, with the launch shape `tuning`.
fn options(method: Method, precision: Precision, tuning: GpuTuning) -> FitParams {
    FitParams::new(Model::DualInput)
        .with_method(method)
        .with_start(&PAPER_START)
        .with_precision(precision)
        .with_gpu(tuning)
}

fn precision_name(p: Precision) -> &'static str {
    if p == Precision::F64 { "f64" } else { "f32" }
}

fn as_err(e: perfusion_core::Error) -> gpu_runtime::Error {
    gpu_runtime::Error::Backend {
        device: "perfusion".into(),
        message: e.to_string(),
    }
}

fn summary(f: &Fits) -> String {
    let c = f.status_counts();
    let it = f.iterations.iter().map(|&i| f64::from(i)).sum::<f64>() / f.len().max(1) as f64;
    format!(
        "{:.1}% converged ({} max-iter, {} at bound, {} failed), mean {it:.0} iterations",
        100.0 * c[FitStatus::Converged as usize] as f64 / f.len().max(1) as f64,
        c[1],
        c[2],
        c[4]
    )
}

/// Which groups to run.
#[derive(Clone, Copy, Debug)]
pub struct Groups {
    pub end_to_end: bool,
    pub kernels: bool,
    pub cpu: bool,
}

pub fn run(
    device: &Device,
    opts: &Options,
    groups: Groups,
    _earlier: &[Measurement],
) -> Result<Vec<Measurement>> {
    let mut out = Vec::new();
    if device.is_gpu() && (groups.end_to_end || groups.kernels) {
        out.extend(gpu(device, opts, groups)?);
    }
    if groups.cpu {
        out.extend(cpu(opts)?);
    }
    Ok(out)
}

fn gpu(device: &Device, opts: &Options, groups: Groups) -> Result<Vec<Measurement>> {
    let voxels = if opts.quick { 8192 } else { PAPER_VOXELS };
    eprintln!("bench: perfusion: simulating {voxels} voxels (Nt 128, CNR 20)");
    let sim = Simulation::paper(128)
        .with_cnr(Some(20.0))
        .with_voxels(voxels)
        .with_seed(2012)
        .run()?;
    // Time-major storage, as curves come from a NIfTI series: the upload needs no transpose.
    let time_major = sim.curves.t().as_standard_layout().into_owned();
    let curves = time_major.t();
    let input = FitInput::new(curves, &sim.problem);
    // The launch shape the BIOGPU_PERFUSION_* variables name (default: chosen per device).
    let tuning = GpuTuning::from_lookup(|k| std::env::var(k).ok())?;
    let id = device.info().id.clone();
    let mut precisions = vec![Precision::F32];
    if device.info().supports_f64 {
        precisions.insert(0, Precision::F64);
    }
    // Model evaluations per voxel (CPU, f64, on a sample): the work each fit does.
    let sample = FitInput::new(
        curves.slice(ndarray::s![..512.min(voxels), ..]),
        &sim.problem,
    );
    let mut evals = std::collections::HashMap::new();
    for method in [Method::NelderMead, Method::LevenbergMarquardt] {
        evals.insert(
            method.name(),
            mean_evaluations(sample, &options(method, Precision::F64, tuning))?,
        );
    }
    let mut out = Vec::new();
    for &precision in &precisions {
        for method in [Method::NelderMead, Method::LevenbergMarquardt] {
            let reps = if opts.quick { 2 } else { 5 };
            let target = match method {
                Method::NelderMead => 100.0,
                Method::LevenbergMarquardt => 30.0,
            };
            // End to end as `fit` runs it (on CUDA one launch per round, started after
            // the first piece of curves), then (full runs) with the work split into 1, 2, 4
            // and 8 launches, each of which ends in a tail of its slowest fits. Chooses the
            // default.
            let splits: &[Option<usize>] = match (groups.end_to_end, opts.quick) {
                (false, _) => &[],
                (true, true) => &[None],
                (true, false) => &[None, Some(1), Some(2), Some(4), Some(8)],
            };
            for &launches in splits {
                let mut last = None;
                let o = options(method, precision, tuning.with_launches(launches));
                let t = bench(1, reps, || {
                    last = Some(fit(input, &o, device).map_err(as_err)?);
                    Ok(())
                })?;
                let (f, info) = last.expect("ran");
                let rate = voxels as f64 / (t.median_ms / 1e3);
                let how = match launches {
                    None => "end to end".to_string(),
                    Some(k) => format!("end to end in {k} launch(es)"),
                };
                out.push(measurement(
                    "perfusion",
                    &format!("{} {} {voxels} voxels Nt 128 {how}", method.name(), info.precision),
                    rate,
                    "voxels/s",
                    t,
                    format!(
                        "{id}; curves up (pieces packed while the previous one is copied, the launch's units fitting the pieces already up), maps down; default one launch per round on CUDA (the curves stream in while it runs), else 4 for LM; NM persistent units {} ({PERSISTENT_ENV}); {:.0}x the paper's 11,600 voxels/s; target {target} ms for 626,400 voxels; {}",
                        std::env::var(PERSISTENT_ENV).unwrap_or_else(|_| "on CUDA by default".into()),
                        rate / PAPER_RATE,
                        summary(&f)
                    ),
                ));
            }
            if !groups.kernels {
                continue;
            }
            // The kernel alone, in several cube shapes (curves already on the device).
            // On CUDA the cube size also caps registers (`__launch_bounds__`): 384 units leave
            // 170 registers per unit, 512 leave 128 (`cargo xtask build-ptx` reports what each
            // kernel uses at 128), spilling the rest. Persistent Nelder-Mead at 512 falls back
            // to one voxel per unit at Nt 128 (512 shared curves need 256 KiB).
            let cubes: &[u32] = match (opts.quick, device.backend()) {
                (true, _) => &[128],
                (false, Backend::Cuda) => &[64, 128, 256, 384, 512],
                (false, _) => &[64, 128, 256],
            };
            // Nelder-Mead: persistent units (default on CUDA) and one voxel per unit.
            let modes: &[Option<bool>] = match (method, device.backend()) {
                (Method::NelderMead, Backend::Cuda) => &[Some(true), Some(false)],
                _ => &[None],
            };
            for (&cube, &mode) in cubes.iter().flat_map(|c| modes.iter().map(move |m| (c, m))) {
                let shape = tuning
                    .with_cube(Some(cube))
                    .with_persistent(mode.or(tuning.persistent));
                let (times, used) = kernel_times(
                    input,
                    &options(method, precision, shape),
                    device,
                    if opts.quick { 2 } else { 5 },
                )?;
                let kt = Timing::from_durations(&times);
                let e = evals[method.name()];
                let steps_per_s = voxels as f64 * e * 128.0 / (kt.median_ms / 1e3);
                let shape = match mode {
                    Some(true) => ", persistent units",
                    Some(false) => ", one voxel per unit",
                    None => "",
                };
                out.push(measurement(
                    "perfusion",
                    &format!("kernel {} {} {voxels} voxels Nt 128, cube {used}{shape}", method.name(), precision_name(precision)),
                    voxels as f64 / (kt.median_ms / 1e3),
                    "voxels/s",
                    kt,
                    format!(
                        "{id}; launch + sync; {e:.0} model evaluations per voxel (CPU count); {:.2e} time steps/s = {:.1} TFLOP/s at {FLOPS_PER_STEP} flops per step",
                        steps_per_s,
                        steps_per_s * FLOPS_PER_STEP / 1e12
                    ),
                ));
            }
        }
    }
    Ok(out)
}

fn cpu(opts: &Options) -> Result<Vec<Measurement>> {
    let threads = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
    let mut out = Vec::new();
    for (method, voxels) in [
        (Method::NelderMead, 2000usize),
        (Method::LevenbergMarquardt, 10_000),
    ] {
        let voxels = if opts.quick { voxels / 10 } else { voxels };
        let sim = Simulation::paper(64)
            .with_cnr(Some(20.0))
            .with_voxels(voxels)
            .with_seed(64)
            .run()?;
        let o = options(method, Precision::F64, GpuTuning::default());
        let input = FitInput::new(sim.curves.view(), &sim.problem);
        for pool_threads in [1, threads] {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(pool_threads)
                .build()?;
            let mut last = None;
            let t = pool.install(|| {
                bench(1, if opts.quick { 1 } else { 3 }, || {
                    last = Some(fit(input, &o, &Device::cpu()).map_err(as_err)?.0);
                    Ok(())
                })
            })?;
            let rate = voxels as f64 / (t.median_ms / 1e3);
            let target = match method {
                Method::NelderMead => 1500.0,
                Method::LevenbergMarquardt => 10_000.0,
            };
            out.push(measurement(
                "perfusion",
                &format!("cpu {} f64 Nt 64, {pool_threads} thread(s)", method.name()),
                rate / pool_threads as f64,
                "voxels/s/core",
                t,
                format!(
                    "{voxels} voxels, {:.0} voxels/s in all; target {target} per core; {}",
                    rate,
                    summary(&last.expect("ran"))
                ),
            ));
        }
    }
    Ok(out)
}
