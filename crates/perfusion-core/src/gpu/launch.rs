//! A launch's settings and inputs: the kernel parameters resolved from the fit's setup and
//! the tuning (persistent units, cube), the shared grid and setup arrays, the counter, and
//! the launch of the method's kernel.

use super::levenberg_marquardt::{F32_FLOOR_REL, F32_STALL, F32_TOL, F32_TOL_GRAD};
use super::nelder_mead::CUBE_NM_F64_PERSISTENT;
use crate::model::start::{DelayAxis, NO_TABLE, StartPlan};
use crate::model::{
    DAMP_FLOOR, GpuTuning, LAMBDA_MAX, LAMBDA_MIN, LAMBDA_START, MAX_PARAMS, Method, NO_DELAY,
    Problem, Setup,
};
use gpu_kernels::perfusion::{
    self as kernels, CUBE_FIT, FitBuffers, KernelFloat, KernelParams, StartAxis, StartParams,
};
use gpu_runtime::{Gpu, GpuArray, KnownRuntime};

/// A fit launch's counter: no voxel taken yet, `ready` voxels' curves on the device.
pub(super) fn counter_words(ready: u32) -> [u32; kernels::COUNTER_WORDS] {
    let mut words = [0; kernels::COUNTER_WORDS];
    words[kernels::READY_WORD] = ready;
    words
}

/// Whether Nelder-Mead runs persistent units on `info`'s device, and at most how many.
pub(super) fn persistent_units(tuning: &GpuTuning, info: &gpu_runtime::DeviceInfo) -> (bool, u32) {
    let on = match tuning.persistent {
        Some(v) => v,
        None => info.backend == gpu_runtime::Backend::Cuda,
    };
    let units = tuning
        .units
        .filter(|&u| u > 0)
        .or_else(|| info.compute_units.map(|sm| sm.saturating_mul(2048)))
        .unwrap_or(kernels::PERSISTENT_UNITS);
    (on, units)
}

/// Units per cube: the tuning's, else [`CUBE_NM_F64_PERSISTENT`] for persistent Nelder-Mead
/// in f64 and the kernels' default otherwise.
pub(super) fn cube_units(tuning: &GpuTuning, method: Method, f64: bool, persistent: bool) -> u32 {
    tuning
        .cube
        .unwrap_or(if method == Method::NelderMead && f64 && persistent {
            CUBE_NM_F64_PERSISTENT
        } else {
            CUBE_FIT
        })
}

/// The launch settings of `setup` for arithmetic `F`.
pub(super) fn params<F: KernelFloat>(
    setup: &Setup,
    problem: &Problem,
    voxels: usize,
    info: &gpu_runtime::DeviceInfo,
) -> KernelParams {
    let (persistent, units) = persistent_units(&setup.tuning, info);
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
    KernelParams {
        voxels: voxels as u32,
        stride: voxels as u32,
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
        seeded: setup.plan.is_some(),
        uniform: problem.is_uniform(),
        inv_dt: problem.inv_dt,
        cube: cube_units(&setup.tuning, setup.method, !f32_path, persistent),
        persistent,
        units,
    }
}

/// The shared grid: times, intervals, inputs and slopes, and the inputs padded for the
/// uniform-grid walk (`gpu_kernels::perfusion::grid_values`).
pub(super) fn grid_values<F: KernelFloat>(p: &Problem) -> Vec<F> {
    kernels::grid_values::<F>([&p.t, &p.dt, &p.u1, &p.s1, &p.u2, &p.s2])
}

/// Start, lower and upper bounds (fixed parameters: their value three times).
pub(super) fn setup_values<F: KernelFloat>(setup: &Setup) -> Vec<F> {
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

/// The start search of `plan` for the kernels: its axes and tables (intervals, then the
/// basis tables, in `F`).
pub(super) fn start_values<F: KernelFloat>(plan: &StartPlan) -> (Vec<F>, StartParams) {
    let axis = |a: &DelayAxis| StartAxis {
        start: a.start,
        step: a.step,
        count: a.count as u32,
        stride: a.stride as u32,
        first: a.first as u32,
        param: if a.param == NO_DELAY {
            u32::MAX
        } else {
            a.param as u32
        },
        free: a.free,
    };
    let offset = |t: usize| if t == NO_TABLE { u32::MAX } else { t as u32 };
    let params = StartParams {
        axes: [axis(&plan.axes[0]), axis(&plan.axes[1])],
        tables: [plan.a1, plan.v1, plan.aa1, plan.a2].map(offset),
        coarse: plan.coarse.map(|c| c as u32),
        cross: offset(plan.cross),
        norms: offset(plan.norms),
    };
    (
        plan.tables.iter().map(|&v| F::from_f64(v)).collect(),
        params,
    )
}

/// The start search's device inputs: its tables and settings.
pub(super) type StartInputs<'a, F> = Option<(&'a GpuArray<F>, &'a StartParams)>;

/// Launch the start search (where the setup has one) and then `method`'s kernel on
/// `buffers` with the settings `p`.
pub(super) fn launch<R: KnownRuntime, F: KernelFloat>(
    gpu: &Gpu<R>,
    method: Method,
    buffers: &FitBuffers<'_, F>,
    p: &KernelParams,
    start: StartInputs<'_, F>,
) -> gpu_runtime::Result<()> {
    if let Some((tables, search)) = start {
        kernels::start_search(gpu, buffers, tables, p, search)?;
    }
    match method {
        Method::NelderMead => kernels::nelder_mead(gpu, buffers, p),
        Method::LevenbergMarquardt => kernels::levenberg_marquardt(gpu, buffers, p),
    }
}
