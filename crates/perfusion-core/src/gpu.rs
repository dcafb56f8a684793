//! The GPU path: curves to the device in chunks that fit (time-major, f32, through
//! page-locked staging kept between calls), one `gpu_kernels::perfusion` fit per voxel in
//! f64 (CUDA) or f32 (wgpu), maps back.
//!
//! `BIOGPU_PERFUSION_CUBE` (32, 64, 128, 256, 384, 512) sets the units per cube, to compare
//! launch shapes on a GPU in one run (the benchmark reports the shape it used).

use crate::error::{Error, Result};
use crate::fit::{
    Control, DAMP_FLOOR, FitStatus, Fits, LAMBDA_MAX, LAMBDA_MIN, LAMBDA_START, Method, NO_DELAY,
    Setup,
};
use crate::model::MAX_PARAMS;
use crate::problem::Problem;
use gpu_kernels::perfusion::{self as kernels, CUBE_FIT, FitParams, KernelFloat};
use gpu_runtime::{Device, Gpu, GpuArray, HostStaging, KnownRuntime, par_copy, with_gpu};
use ndarray::{ArrayView2, Axis, s};
use rayon::prelude::*;
use std::time::Duration;

/// Environment variable selecting the units per cube of the fit kernels.
pub const CUBE_ENV: &str = "BIOGPU_PERFUSION_CUBE";

/// Most voxels per launch: chunks report progress and check for Ctrl-C between them.
const MAX_CHUNK: usize = 1 << 20;
/// Large jobs run in at least this many chunks so that the host work of one chunk (packing
/// the curves into page-locked memory, converting the maps) overlaps the kernel of another;
/// `BIOGPU_PERFUSION_CHUNKS` overrides it (1: one launch, no overlap).
const PIPELINE_CHUNKS: usize = 4;
/// Environment variable setting the pipeline's chunk count.
pub const CHUNKS_ENV: &str = "BIOGPU_PERFUSION_CHUNKS";

/// Chunks a large job is split into: `BIOGPU_PERFUSION_CHUNKS` or [`PIPELINE_CHUNKS`].
pub fn pipeline_chunks() -> usize {
    std::env::var(CHUNKS_ENV)
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .filter(|&c: &usize| c >= 1)
        .unwrap_or(PIPELINE_CHUNKS)
}
/// Chunks are not made smaller than this for the pipeline (a launch must still fill the GPU).
const MIN_PIPELINE_CHUNK: usize = 1 << 16;

/// Tolerances below f32 rounding would never be met: the f32 kernels use at least these.
const F32_TOL: f64 = 1e-6;
const F32_TOL_GRAD: f64 = 1e-4;
const F32_FLOOR_REL: f64 = 3e-7;
/// At an f32 minimum rounding leaves J^T r at about this cosine with the residuals.
const F32_STALL: f64 = 1e-2;

/// `BIOGPU_PERFUSION_PERSISTENT=1|0`: persistent Nelder-Mead units (default on CUDA only).
pub const PERSISTENT_ENV: &str = "BIOGPU_PERFUSION_PERSISTENT";
/// `BIOGPU_PERFUSION_UNITS=N`: at most N persistent units per launch (default: 2048 per
/// streaming multiprocessor, all a GPU can keep resident).
pub const UNITS_ENV: &str = "BIOGPU_PERFUSION_UNITS";

fn env_u32(name: &str) -> Option<u32> {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok())
}

/// Whether Nelder-Mead runs persistent units on `info`'s device, and at most how many.
fn persistent_units(info: &gpu_runtime::DeviceInfo) -> (bool, u32) {
    let on = match env_u32(PERSISTENT_ENV) {
        Some(v) => v != 0,
        None => info.backend == gpu_runtime::Backend::Cuda,
    };
    let units = env_u32(UNITS_ENV)
        .filter(|&u| u > 0)
        .or_else(|| info.compute_units.map(|sm| sm.saturating_mul(2048)))
        .unwrap_or(kernels::PERSISTENT_UNITS);
    (on, units)
}

/// Units per cube: `BIOGPU_PERFUSION_CUBE` or the kernels' default.
pub fn cube_units() -> u32 {
    std::env::var(CUBE_ENV)
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(CUBE_FIT)
}

/// The launch settings of `setup` for arithmetic `F`.
fn params<F: KernelFloat>(
    setup: &Setup,
    problem: &Problem,
    voxels: usize,
    info: &gpu_runtime::DeviceInfo,
) -> FitParams {
    let (persistent, units) = persistent_units(info);
    let b = &setup.bounds;
    let mut free_mask = 0;
    let mut delay_mask = 0;
    for p in 0..b.np {
        if b.free[p] {
            free_mask |= 1 << p;
        }
        if setup.lm.delay[p] {
            delay_mask |= 1 << p;
        }
    }
    let f32_path = F::NAME == "f32";
    let at_least = |v: f64, min: f64| if f32_path { v.max(min) } else { v };
    let eps = if f32_path {
        f64::from(f32::EPSILON)
    } else {
        f64::EPSILON
    };
    let delay = |d: usize| if d == NO_DELAY { u32::MAX } else { d as u32 };
    FitParams {
        voxels: voxels as u32,
        nt: problem.len() as u32,
        model: setup.model.id(),
        free_mask,
        rate_scale: setup.model.rate_scale(),
        max_iterations: setup.nm.max_iterations,
        tol_fun: setup.nm.tol_fun,
        tol_x: setup.nm.tol_x,
        ten_eps: 10.0 * eps,
        tol: at_least(setup.lm.tol, F32_TOL),
        tol_grad: at_least(setup.lm.tol_grad, F32_TOL_GRAD),
        stall: at_least(setup.lm.stall, F32_STALL),
        floor_rel: at_least(setup.floor_rel, F32_FLOOR_REL),
        max_delay_step: problem.mean_interval(),
        delay_mask,
        lambda: [LAMBDA_START, LAMBDA_MIN, LAMBDA_MAX, DAMP_FLOOR],
        grid: setup.grid.map(|g| (g.start, g.step, g.count)),
        delays: [delay(setup.delays[0]), delay(setup.delays[1])],
        uniform: problem.is_uniform(),
        inv_dt: problem.inv_dt,
        cube: cube_units(),
        persistent,
        units,
    }
}

/// The shared grid: times, intervals, arterial input and slopes, portal input and slopes.
fn grid_values<F: KernelFloat>(p: &Problem) -> Vec<F> {
    [&p.t, &p.dt, &p.u1, &p.s1, &p.u2, &p.s2]
        .iter()
        .flat_map(|v| v.iter().map(|&x| F::from_f64(x)))
        .collect()
}

/// Start, lower and upper bounds (fixed parameters: their value three times).
fn setup_values<F: KernelFloat>(setup: &Setup) -> Vec<F> {
    let b = &setup.bounds;
    let mut v = vec![F::from_f64(0.0); kernels::SETUP_LEN];
    for p in 0..MAX_PARAMS {
        v[p] = F::from_f64(if b.free[p] {
            setup.start[p]
        } else {
            b.fixed[p]
        });
        v[5 + p] = F::from_f64(b.lo[p]);
        v[10 + p] = F::from_f64(b.hi[p]);
    }
    v
}

/// Staging buffers kept per thread across calls (page-locking costs milliseconds).
mod staging_cache {
    use gpu_runtime::{Gpu, HostStaging, KnownRuntime};
    use std::cell::RefCell;

    /// Slots: 0 and 1 curves (two chunks in flight), 2-5 maps and statuses of two chunks.
    pub const SLOTS_N: usize = 6;

    thread_local!(static SLOTS: RefCell<[Option<HostStaging>; SLOTS_N]> = const { RefCell::new([None, None, None, None, None, None]) });

    pub fn take<R: KnownRuntime>(gpu: &Gpu<R>, slot: usize, len: usize) -> HostStaging {
        let cached = SLOTS.with_borrow_mut(|s| s[slot].take());
        match cached {
            Some(b) if b.len() >= len && b.is_pinned() == gpu.host_staging(0).is_pinned() => b,
            _ => gpu.host_staging(len),
        }
    }

    pub fn put(slot: usize, buf: HostStaging) {
        SLOTS.with_borrow_mut(|s| s[slot] = Some(buf));
    }
}

/// Curves `range` of `curves` (voxels x time) into `dst` time-major, as f32 bytes, on all
/// cores: one parallel copy in 1 MiB pieces when the range is one contiguous time-major
/// block (a whole time-major series), else per time row (split in pieces as well when the
/// row is contiguous).
fn pack(curves: ArrayView2<f32>, range: std::ops::Range<usize>, dst: &mut [u8]) {
    let n = range.len();
    let part = curves.slice(s![range, ..]);
    let by_time = part.t();
    if let Some(all) = by_time.as_slice() {
        par_copy(&mut dst[..all.len() * 4], bytemuck::cast_slice(all));
        return;
    }
    dst[..n * by_time.nrows() * 4]
        .par_chunks_mut(n * 4)
        .zip(by_time.axis_iter(Axis(0)).into_par_iter())
        .for_each(|(d, row)| {
            if let Some(s) = row.as_slice() {
                par_copy(d, bytemuck::cast_slice(s));
            } else {
                let d: &mut [f32] = bytemuck::cast_slice_mut(d);
                d.iter_mut().zip(row.iter()).for_each(|(a, b)| *a = *b);
            }
        });
}

/// Fit every voxel on the GPU `device` in f64 (`use_f64`) or f32.
pub(crate) fn fit(
    curves: ArrayView2<f32>,
    problem: &Problem,
    setup: &Setup,
    device: &Device,
    use_f64: bool,
    control: &Control,
) -> Result<Fits> {
    if use_f64 {
        run::<f64>(curves, problem, setup, device, control)
    } else {
        run::<f32>(curves, problem, setup, device, control)
    }
}

fn run<F: KernelFloat>(
    curves: ArrayView2<f32>,
    problem: &Problem,
    setup: &Setup,
    device: &Device,
    control: &Control,
) -> Result<Fits> {
    let n = curves.nrows();
    let nt = problem.len();
    let np = setup.model.n_params();
    let mut fits = Fits::new_for(setup, n, device.info().id.clone(), F::NAME);
    if n == 0 {
        return Ok(fits);
    }
    let fsize = std::mem::size_of::<F>() as u64;
    with_gpu!(device, |gpu| {
        let grid = gpu.upload(&grid_values::<F>(problem))?;
        let setup_dev = gpu.upload(&setup_values::<F>(setup))?;
        let per_voxel = nt as u64 * 4 + (np as u64 + 2) * fsize + 4;
        let fixed = grid.len() as u64 * fsize + 1024;
        // Four times the bytes per voxel: two chunks in flight, and room for the memory
        // pool's rounding and earlier buffers.
        let plan = gpu.budget().plan(n, 4 * per_voxel, fixed)?;
        let chunk = chunk_len(n, plan.chunk_len());
        let ranges: Vec<_> = (0..n)
            .step_by(chunk)
            .map(|s| s..(s + chunk).min(n))
            .collect();
        pipeline::<_, F>(
            gpu, curves, &ranges, problem, setup, &grid, &setup_dev, &mut fits, control,
        )
    })
    .map_err(Error::from)?;
    Ok(fits)
}

/// Voxels per chunk: what fits (and at most [`MAX_CHUNK`]), and for large jobs at most
/// 1 / [`pipeline_chunks`] of them (not below [`MIN_PIPELINE_CHUNK`]), rounded up to 1024.
fn chunk_len(n: usize, fits: usize) -> usize {
    let pipelined = n
        .div_ceil(pipeline_chunks())
        .next_multiple_of(1024)
        .max(MIN_PIPELINE_CHUNK);
    fits.min(MAX_CHUNK).min(pipelined).max(1)
}

/// One chunk on the device: its curves, maps and statuses.
struct InFlight<F: KernelFloat> {
    range: std::ops::Range<usize>,
    /// Held until the chunk's maps are down, so its memory is not reused under the kernel.
    _data: GpuArray<f32>,
    out: GpuArray<F>,
    status: GpuArray<u32>,
}

/// Fit `ranges` in order, two chunks in flight: while the GPU fits chunk k, the host packs
/// the curves of chunk k + 1 into page-locked memory; chunk k's maps come down as soon as
/// its kernel ends, chunk k + 1 is launched, and chunk k's maps are converted while it runs.
/// (CubeCL's queue is one stream: a transfer waits for every queued kernel, hence this
/// order.) Progress and Ctrl-C are checked between chunks.
#[allow(clippy::too_many_arguments)]
fn pipeline<R: KnownRuntime, F: KernelFloat>(
    gpu: &Gpu<R>,
    curves: ArrayView2<f32>,
    ranges: &[std::ops::Range<usize>],
    problem: &Problem,
    setup: &Setup,
    grid: &GpuArray<F>,
    setup_dev: &GpuArray<F>,
    fits: &mut Fits,
    control: &Control,
) -> gpu_runtime::Result<()> {
    let nt = problem.len();
    let np = setup.model.n_params();
    let fsize = std::mem::size_of::<F>();
    let n = curves.nrows();
    let longest = ranges.iter().map(ExactSizeIterator::len).max().unwrap_or(0);
    let mut input = [
        staging_cache::take(gpu, 0, longest * nt * 4),
        staging_cache::take(gpu, 1, longest * nt * 4),
    ];
    let mut maps = [
        staging_cache::take(gpu, 2, (np + 2) * fsize * longest),
        staging_cache::take(gpu, 3, (np + 2) * fsize * longest),
    ];
    let mut words = [
        staging_cache::take(gpu, 4, 4 * longest),
        staging_cache::take(gpu, 5, 4 * longest),
    ];
    let launch_chunk = |range: &std::ops::Range<usize>,
                        staged: &HostStaging|
     -> gpu_runtime::Result<InFlight<F>> {
        let len = range.len();
        let data = gpu.upload_staged::<f32>(staged, len * nt)?;
        let out = gpu.empty::<F>((np + 2) * len)?;
        let status = gpu.empty::<u32>(len)?;
        let p = params::<F>(setup, problem, len, gpu.info());
        launch::<R, F>(gpu, setup.method, &data, grid, setup_dev, &p, &out, &status)?;
        Ok(InFlight {
            range: range.clone(),
            _data: data,
            out,
            status,
        })
    };
    let mut result = Ok(());
    if let Some(first) = ranges.first().filter(|_| !control.stopped()) {
        pack(curves, first.clone(), input[0].as_bytes_mut());
    }
    let mut current: Option<InFlight<F>> = None;
    let mut slot = 0;
    for (k, range) in ranges.iter().enumerate() {
        if control.stopped() {
            break;
        }
        let running = match current.take() {
            Some(c) => c,
            None => match launch_chunk(range, &input[slot]) {
                Ok(c) => c,
                Err(e) => {
                    result = Err(e);
                    break;
                }
            },
        };
        let next = ranges.get(k + 1).filter(|_| !control.stopped());
        if let Some(next) = next {
            pack(curves, next.clone(), input[1 - slot].as_bytes_mut());
        }
        // Maps of chunk k down (waits for its kernel), then chunk k + 1 up and launched.
        let down = gpu
            .download_staged(&running.out, &mut maps[slot])
            .and_then(|()| gpu.download_staged(&running.status, &mut words[slot]));
        if let Err(e) = down {
            result = Err(e);
            break;
        }
        if let Some(next) = next {
            match launch_chunk(next, &input[1 - slot]) {
                Ok(c) => current = Some(c),
                Err(e) => {
                    result = Err(e);
                    break;
                }
            }
        }
        store::<F>(&running.range, &maps[slot], &words[slot], np, fits);
        control.report(running.range.end, n);
        slot = 1 - slot;
    }
    // Whatever happens, the staging buffers go back to the cache.
    let [i0, i1] = input;
    let [m0, m1] = maps;
    let [w0, w1] = words;
    for (k, b) in [i0, i1, m0, m1, w0, w1].into_iter().enumerate() {
        staging_cache::put(k, b);
    }
    if current.is_some() {
        // Interrupted (or failed) with a chunk still queued: let it finish before returning.
        gpu.sync()?;
    }
    result
}

/// Chunk `range`'s maps (`np + 2` planes of `F`) and status words into `fits`.
fn store<F: KernelFloat>(
    range: &std::ops::Range<usize>,
    maps: &HostStaging,
    words: &HostStaging,
    np: usize,
    fits: &mut Fits,
) {
    let n = range.len();
    let fsize = std::mem::size_of::<F>();
    let values = F::from_bytes(&maps.as_bytes()[..(np + 2) * n * fsize]);
    let words: &[u32] = bytemuck::cast_slice(&words.as_bytes()[..n * 4]);
    // Parameter rows of `Fits` are contiguous: copy plane by plane.
    for q in 0..np + 2 {
        let src = &values[q * n..(q + 1) * n];
        let mut dst = match q {
            q if q < np => fits.params.slice_mut(s![q, range.clone()]),
            q if q == np => fits.sse.slice_mut(s![range.clone()]),
            _ => fits.r2.slice_mut(s![range.clone()]),
        };
        if let Some(d) = dst.as_slice_mut() {
            d.par_iter_mut()
                .zip(src.par_iter())
                .for_each(|(d, v)| *d = KernelFloat::to_f64(*v));
        } else {
            dst.iter_mut()
                .zip(src)
                .for_each(|(d, v)| *d = KernelFloat::to_f64(*v));
        }
    }
    let statuses = fits.status.slice_mut(s![range.clone()]);
    let iterations = fits.iterations.slice_mut(s![range.clone()]);
    statuses
        .into_iter()
        .zip(iterations)
        .zip(words)
        .for_each(|((st, it), &w)| {
            *st = FitStatus::from_code((w & 0xFF) as u8).unwrap_or(FitStatus::Failed) as u8;
            *it = w >> 8;
        });
}

#[allow(clippy::too_many_arguments)]
fn launch<R: KnownRuntime, F: KernelFloat>(
    gpu: &Gpu<R>,
    method: Method,
    data: &GpuArray<f32>,
    grid: &GpuArray<F>,
    setup: &GpuArray<F>,
    p: &FitParams,
    out: &GpuArray<F>,
    status: &GpuArray<u32>,
) -> gpu_runtime::Result<()> {
    match method {
        Method::NelderMead => kernels::nelder_mead(gpu, data, grid, setup, p, out, status),
        Method::LevenbergMarquardt => {
            kernels::levenberg_marquardt(gpu, data, grid, setup, p, out, status)
        }
    }
}

/// Kernel time alone: the curves stay on the device; each repetition is one launch and a
/// sync. For benchmarks (`biogpu-bench --filter perfusion`); `f64` selects the arithmetic.
/// Returns the per-repetition times and the units per cube used.
/// `cube` overrides the units per cube (else [`CUBE_ENV`] or the default), `persistent`
/// whether Nelder-Mead runs persistent units (else [`PERSISTENT_ENV`] or the default).
pub fn kernel_times(
    curves: ArrayView2<f32>,
    problem: &Problem,
    opts: &crate::FitOptions,
    device: &Device,
    f64: bool,
    reps: usize,
    cube: Option<u32>,
    persistent: Option<bool>,
) -> Result<(Vec<Duration>, u32)> {
    let setup = opts.setup()?;
    problem.check_model(opts.model)?;
    let shape = (cube, persistent);
    if f64 {
        device.require_f64()?;
        time_kernel::<f64>(curves, problem, &setup, device, reps, shape)
    } else {
        time_kernel::<f32>(curves, problem, &setup, device, reps, shape)
    }
}

fn time_kernel<F: KernelFloat>(
    curves: ArrayView2<f32>,
    problem: &Problem,
    setup: &Setup,
    device: &Device,
    reps: usize,
    (cube, persistent): (Option<u32>, Option<bool>),
) -> Result<(Vec<Duration>, u32)> {
    let n = curves.nrows();
    let nt = problem.len();
    let np = setup.model.n_params();
    with_gpu!(device, |gpu| {
        let mut staging: HostStaging = gpu.host_staging(n * nt * 4);
        pack(curves, 0..n, staging.as_bytes_mut());
        let data = gpu.upload_staged::<f32>(&staging, n * nt)?;
        let grid = gpu.upload(&grid_values::<F>(problem))?;
        let setup_dev = gpu.upload(&setup_values::<F>(setup))?;
        let out = gpu.empty::<F>((np + 2) * n)?;
        let status = gpu.empty::<u32>(n)?;
        let mut p = params::<F>(setup, problem, n, gpu.info());
        if let Some(c) = cube {
            p.cube = c;
        }
        if let Some(on) = persistent {
            p.persistent = on;
        }
        launch(
            gpu,
            setup.method,
            &data,
            &grid,
            &setup_dev,
            &p,
            &out,
            &status,
        )?;
        gpu.sync()?;
        let mut times = Vec::with_capacity(reps);
        for _ in 0..reps.max(1) {
            let ((), t) = gpu.timed(|| {
                launch(
                    gpu,
                    setup.method,
                    &data,
                    &grid,
                    &setup_dev,
                    &p,
                    &out,
                    &status,
                )
            })?;
            times.push(t);
        }
        Ok((times, p.cube))
    })
    .map_err(Error::from)
}
