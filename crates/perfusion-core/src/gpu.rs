//! The GPU path: curves to the device in chunks that fit (time-major, f32, through
//! page-locked staging kept between calls), one `gpu_kernels::perfusion` fit per voxel in
//! f64 (CUDA) or f32 (wgpu), maps back.
//!
//! `BIOGPU_PERFUSION_CUBE` (32..512) sets the units per cube, to compare launch shapes on a
//! GPU in one run (the benchmark reports the shape it used).

use crate::error::{Error, Result};
use crate::fit::{
    Control, DAMP_FLOOR, FitStatus, Fits, LAMBDA_MAX, LAMBDA_MIN, LAMBDA_START, Method, NO_DELAY,
    Setup,
};
use crate::model::MAX_PARAMS;
use crate::problem::Problem;
use gpu_kernels::perfusion::{self as kernels, CUBE_FIT, FitParams, KernelFloat};
use gpu_runtime::{Device, Gpu, GpuArray, HostStaging, KnownRuntime, with_gpu};
use ndarray::{ArrayView2, Axis, s};
use rayon::prelude::*;
use std::time::Duration;

/// Environment variable selecting the units per cube of the fit kernels.
pub const CUBE_ENV: &str = "BIOGPU_PERFUSION_CUBE";

/// Most voxels per launch: chunks report progress and check for Ctrl-C between them.
const MAX_CHUNK: usize = 1 << 20;

/// Tolerances below f32 rounding would never be met: the f32 kernels use at least these.
const F32_TOL: f64 = 1e-6;
const F32_TOL_GRAD: f64 = 1e-4;
const F32_FLOOR_REL: f64 = 3e-7;
/// At an f32 minimum rounding leaves J^T r at about this cosine with the residuals.
const F32_STALL: f64 = 1e-2;

/// Units per cube: `BIOGPU_PERFUSION_CUBE` or the kernels' default.
pub fn cube_units() -> u32 {
    std::env::var(CUBE_ENV)
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(CUBE_FIT)
}

/// The launch settings of `setup` for arithmetic `F`.
fn params<F: KernelFloat>(setup: &Setup, problem: &Problem, voxels: usize) -> FitParams {
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

    thread_local!(static SLOTS: RefCell<[Option<HostStaging>; 2]> = const { RefCell::new([None, None]) });

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

/// Curves `range` of `curves` (voxels x time) into `dst` time-major, as f32 bytes.
fn pack(curves: ArrayView2<f32>, range: std::ops::Range<usize>, dst: &mut [u8]) {
    let n = range.len();
    let part = curves.slice(s![range, ..]);
    let by_time = part.t();
    dst[..n * by_time.nrows() * 4]
        .par_chunks_mut(n * 4)
        .zip(by_time.axis_iter(Axis(0)).into_par_iter())
        .for_each(|(d, row)| {
            let d: &mut [f32] = bytemuck::cast_slice_mut(d);
            match row.as_slice() {
                Some(s) => d.copy_from_slice(s),
                None => d.iter_mut().zip(row.iter()).for_each(|(a, b)| *a = *b),
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
        // Twice the bytes per voxel: room for the memory pool's rounding and earlier buffers.
        let plan = gpu.budget().plan(n, 2 * per_voxel, fixed)?;
        let chunk = plan.chunk_len().min(MAX_CHUNK);
        let mut start = 0;
        while start < n {
            if control.stopped() {
                break;
            }
            let range = start..(start + chunk).min(n);
            fit_chunk::<_, F>(
                gpu,
                curves,
                range.clone(),
                problem,
                setup,
                &grid,
                &setup_dev,
                &mut fits,
            )?;
            start = range.end;
            control.report(start, n);
        }
        Ok(())
    })
    .map_err(Error::from)?;
    Ok(fits)
}

/// Upload the chunk's curves, fit, and store the results in `fits`.
#[allow(clippy::too_many_arguments)]
fn fit_chunk<R: KnownRuntime, F: KernelFloat>(
    gpu: &Gpu<R>,
    curves: ArrayView2<f32>,
    range: std::ops::Range<usize>,
    problem: &Problem,
    setup: &Setup,
    grid: &GpuArray<F>,
    setup_dev: &GpuArray<F>,
    fits: &mut Fits,
) -> gpu_runtime::Result<()> {
    let n = range.len();
    let nt = problem.len();
    let np = setup.model.n_params();
    let mut input = staging_cache::take(gpu, 0, n * nt * 4);
    pack(curves, range.clone(), input.as_bytes_mut());
    let data = gpu.upload_staged::<f32>(&input, n * nt)?;
    staging_cache::put(0, input);
    let out = gpu.empty::<F>((np + 2) * n)?;
    let status = gpu.empty::<u32>(n)?;
    let p = params::<F>(setup, problem, n);
    launch::<R, F>(gpu, setup.method, &data, grid, setup_dev, &p, &out, &status)?;
    let fsize = std::mem::size_of::<F>();
    let mut back = staging_cache::take(gpu, 1, ((np + 2) * fsize + 4) * n);
    gpu.download_staged(&out, &mut back)?;
    let values: Vec<f64> = {
        let raw = &back.as_bytes()[..(np + 2) * n * fsize];
        F::from_bytes(raw).par_iter().map(|&v| v.to_f64()).collect()
    };
    gpu.download_staged(&status, &mut back)?;
    let words: &[u32] = bytemuck::cast_slice(&back.as_bytes()[..n * 4]);
    // Parameter rows of `Fits` are contiguous: copy plane by plane.
    for q in 0..np + 2 {
        let src = &values[q * n..(q + 1) * n];
        let mut dst = match q {
            q if q < np => fits.params.slice_mut(s![q, range.clone()]),
            q if q == np => fits.sse.slice_mut(s![range.clone()]),
            _ => fits.r2.slice_mut(s![range.clone()]),
        };
        dst.iter_mut().zip(src).for_each(|(d, v)| *d = *v);
    }
    let statuses = fits.status.slice_mut(s![range.clone()]);
    let iterations = fits.iterations.slice_mut(s![range]);
    statuses
        .into_iter()
        .zip(iterations)
        .zip(words)
        .for_each(|((st, it), &w)| {
            *st = FitStatus::from_code((w & 0xFF) as u8).unwrap_or(FitStatus::Failed) as u8;
            *it = w >> 8;
        });
    staging_cache::put(1, back);
    Ok(())
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
/// `cube` overrides the units per cube (else [`CUBE_ENV`] or the default).
pub fn kernel_times(
    curves: ArrayView2<f32>,
    problem: &Problem,
    opts: &crate::FitOptions,
    device: &Device,
    f64: bool,
    reps: usize,
    cube: Option<u32>,
) -> Result<(Vec<Duration>, u32)> {
    let setup = opts.setup()?;
    problem.check_model(opts.model)?;
    if f64 {
        device.require_f64()?;
        time_kernel::<f64>(curves, problem, &setup, device, reps, cube)
    } else {
        time_kernel::<f32>(curves, problem, &setup, device, reps, cube)
    }
}

fn time_kernel<F: KernelFloat>(
    curves: ArrayView2<f32>,
    problem: &Problem,
    setup: &Setup,
    device: &Device,
    reps: usize,
    cube: Option<u32>,
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
        let mut p = params::<F>(setup, problem, n);
        if let Some(c) = cube {
            p.cube = c;
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
