//! The public verbs: fit every voxel ([`fit`], [`fit_with`]), the model curve ([`predict`]),
//! and the two benchmark measures ([`mean_evaluations`], [`kernel_times`]). The crate's only
//! choice between the CPU and the GPU path is made here.

use crate::error::{Error, Result};
use crate::model::{Control, FitInfo, FitParams, Fits, Model, Precision, Problem};
use crate::{cpu, gpu};
use gpu_runtime::Device;
use ndarray::ArrayView2;
use std::time::Duration;

/// What a fit reads: tissue curves, one per row (`(voxels, time)`, any strides, e.g. a
/// time-major series viewed transposed), and the problem (time grid and input functions).
#[derive(Debug, Clone, Copy)]
pub struct FitInput<'a> {
    pub curves: ArrayView2<'a, f32>,
    pub problem: &'a Problem,
}

impl<'a> FitInput<'a> {
    pub fn new(curves: ArrayView2<'a, f32>, problem: &'a Problem) -> Self {
        FitInput { curves, problem }
    }

    /// The curves' length against the problem's, and the model's inputs.
    fn check(&self, model: Model) -> Result<()> {
        self.problem.check_model(model)?;
        if self.curves.ncols() != self.problem.len() {
            return Err(Error::LengthMismatch {
                what: "each tissue curve".into(),
                expected: self.problem.len(),
                got: self.curves.ncols(),
            });
        }
        Ok(())
    }
}

/// Fit every voxel of `input` on `device`: the GPU path for a GPU (f64 where it has it, else
/// f32; see [`Precision`], launch shape from [`FitParams::gpu`]), the CPU path (f64, all
/// cores) otherwise.
///
/// ```
/// use gpu_runtime::Device;
/// use ndarray::Array2;
/// use perfusion_core::{FitInput, FitParams, FitStatus, Method, Model, Problem, fit, predict};
/// let t: Vec<f64> = (0..64).map(|i| i as f64 * 1.5).collect();
/// let aif: Vec<f64> = t.iter().map(|&s| if s > 6.0 { 6.0 * (s - 6.0) / 5.0 * (-(s - 6.0) / 5.0).exp() + 0.5 } else { 0.0 }).collect();
/// let problem = Problem::new(&t, &aif, None).unwrap();
/// let truth = [0.3, 0.4, 2.0];
/// let curve = predict(&problem, Model::Tofts, &truth).unwrap();
/// let curves = Array2::from_shape_fn((1, 64), |(_, i)| curve[i] as f32);
/// let params = FitParams::new(Model::Tofts).with_method(Method::LevenbergMarquardt);
/// let input = FitInput::new(curves.view(), &problem);
/// let (fits, info) = fit(input, &params, &Device::cpu()).unwrap();
/// assert_eq!(fits.status(0), FitStatus::Converged);
/// assert!((fits.params[[0, 0]] - 0.3).abs() < 1e-4);
/// assert_eq!((info.device.as_str(), info.precision), ("cpu", "f64"));
/// ```
pub fn fit(input: FitInput<'_>, params: &FitParams, device: &Device) -> Result<(Fits, FitInfo)> {
    fit_with(input, params, device, &Control::default())
}

/// [`fit`] with progress reports and interruption: a stopped job returns the voxels fitted
/// so far, the others with status [`FitStatus::NotFitted`](crate::FitStatus::NotFitted).
///
/// ```
/// use gpu_runtime::Device;
/// use perfusion_core::sim::Simulation;
/// use perfusion_core::{Control, FitInput, FitParams, FitStatus, Model, fit_with};
/// use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
/// let sim = Simulation::paper(64).with_voxels(16).run()?; // the paper's liver, 16 curves
/// let input = FitInput::new(sim.curves.view(), &sim.problem);
/// let params = FitParams::new(Model::DualInput);
/// let done = AtomicUsize::new(0);
/// let progress = |d: usize, _total: usize| { done.fetch_max(d, Ordering::Relaxed); };
/// let control = Control { progress: Some(&progress), stop: None };
/// let (fits, _) = fit_with(input, &params, &Device::cpu(), &control)?;
/// assert_eq!((done.load(Ordering::Relaxed), fits.status(15)), (16, FitStatus::Converged));
/// let stop = AtomicBool::new(true); // e.g. set by a Ctrl-C handler before the first block
/// let control = Control { progress: None, stop: Some(&stop) };
/// let (fits, _) = fit_with(input, &params, &Device::cpu(), &control)?;
/// assert_eq!(fits.status(0), FitStatus::NotFitted);
/// # Ok::<(), perfusion_core::Error>(())
/// ```
pub fn fit_with(
    input: FitInput<'_>,
    params: &FitParams,
    device: &Device,
    control: &Control,
) -> Result<(Fits, FitInfo)> {
    let started = std::time::SystemTime::now();
    let setup = params.setup()?;
    input.check(params.model)?;
    let FitInput { curves, problem } = input;
    let setup = {
        let _span = tracing::debug_span!("start_plan").entered();
        setup.with_plan(problem)
    };
    // Standard errors and quality flags: one CPU pass after either path's fit.
    let flag = |fits: &mut Fits| {
        let _span = tracing::debug_span!("quality_flags").entered();
        fits.set_flags(curves, problem, &setup);
    };
    if device.is_gpu() {
        let use_f64 = gpu_f64(params.precision, device)?;
        let mut fits = gpu::fit(curves, problem, &setup, device, use_f64, control)?;
        flag(&mut fits);
        let precision = if use_f64 { "f64" } else { "f32" };
        let info = FitInfo {
            device: device.info().id.clone(),
            precision,
            provenance: gpu_runtime::Provenance::new(device, precision, started),
        };
        return Ok((fits, info));
    }
    let mut fits = cpu::fit(curves, problem, &setup, control);
    flag(&mut fits);
    let info = FitInfo {
        device: "cpu".into(),
        precision: "f64",
        provenance: gpu_runtime::Provenance::new(&Device::cpu(), "f64", started),
    };
    Ok((fits, info))
}

/// Whether the GPU path runs in f64 on `device` for `precision`.
fn gpu_f64(precision: Precision, device: &Device) -> Result<bool> {
    Ok(match precision {
        Precision::Auto => device.info().supports_f64,
        Precision::F64 => {
            device.require_f64()?;
            true
        }
        Precision::F32 => false,
    })
}

/// The model curve of `theta` (user units) on the problem's grid.
///
/// ```
/// use perfusion_core::{Model, Problem, predict};
/// let t: Vec<f64> = (0..60).map(|i| i as f64).collect();
/// let aif: Vec<f64> = t.iter().map(|&s| if s >= 5.0 { 5.0 * (-(s - 5.0) / 20.0).exp() } else { 0.0 }).collect();
/// let p = Problem::new(&t, &aif, None).unwrap();
/// let c = predict(&p, Model::Tofts, &[0.3, 0.4, 0.0]).unwrap();
/// assert_eq!(c.len(), 60);
/// assert!(c[0] == 0.0 && c[30] > 0.0);
/// ```
pub fn predict(problem: &Problem, model: Model, theta: &[f64]) -> Result<Vec<f64>> {
    cpu::predict(problem, model, theta)
}

/// Mean number of model evaluations per voxel of the CPU fit over `input` (cost passes for
/// Nelder-Mead; cost and Jacobian passes for LM, a Jacobian pass counted as one): for
/// performance accounting (`biogpu-bench` divides kernel times by it).
///
/// ```
/// use perfusion_core::sim::Simulation;
/// use perfusion_core::{FitInput, FitParams, Method, Model, mean_evaluations};
/// let sim = Simulation::paper(64).with_voxels(4).run()?;
/// let input = FitInput::new(sim.curves.view(), &sim.problem);
/// let params = FitParams::new(Model::DualInput); // Levenberg-Marquardt
/// let lm = mean_evaluations(input, &params)?;
/// let nm = mean_evaluations(input, &params.clone().with_method(Method::NelderMead))?;
/// assert!(lm >= 1.0 && nm > lm, "LM {lm}, NM {nm}"); // the simplex needs many more passes
/// # Ok::<(), perfusion_core::Error>(())
/// ```
pub fn mean_evaluations(input: FitInput<'_>, params: &FitParams) -> Result<f64> {
    let setup = params.setup()?.with_plan(input.problem);
    input.problem.check_model(params.model)?;
    Ok(cpu::mean_evaluations(input.curves, input.problem, &setup))
}

/// Kernel time alone on the GPU `device`: the curves stay on the device; each of `reps`
/// repetitions is one launch and a sync (after one untimed launch). For benchmarks
/// (`biogpu-bench --filter perfusion`); the arithmetic as [`fit`] chooses it, the launch
/// shape from [`FitParams::gpu`]. Returns the per-repetition times and the units per cube
/// used.
///
/// ```
/// use perfusion_core::sim::Simulation;
/// use perfusion_core::{FitInput, FitParams, Model, kernel_times};
/// let sim = Simulation::paper(64).with_voxels(4).run()?;
/// let input = FitInput::new(sim.curves.view(), &sim.problem);
/// // A GPU measure: on the CPU device it is an error, not a panic; on a GPU, one time
/// // per repetition.
/// let cpu = gpu_runtime::Device::cpu();
/// assert!(kernel_times(input, &FitParams::new(Model::DualInput), &cpu, 3).is_err());
/// # Ok::<(), perfusion_core::Error>(())
/// ```
pub fn kernel_times(
    input: FitInput<'_>,
    params: &FitParams,
    device: &Device,
    reps: usize,
) -> Result<(Vec<Duration>, u32)> {
    input.problem.check_model(params.model)?;
    let FitInput { curves, problem } = input;
    let setup = params.setup()?.with_plan(problem);
    if gpu_f64(params.precision, device)? {
        gpu::kernel_times::<f64>(curves, problem, &setup, device, reps)
    } else {
        gpu::kernel_times::<f32>(curves, problem, &setup, device, reps)
    }
}

/// What a fit of `voxels` curves of `frames` time points by `method` costs on each side, for
/// `auto`'s choice between a GPU and the CPU ([`gpu_runtime::Device::for_job`]). Rates per
/// voxel and time point, start search and restarts included: CPU core-seconds from the
/// 2-core CI machine (the synthetic liver, 4,336 voxels x 128: LM 0.74 s, NM 0.83 s on 2
/// cores), GPU seconds from the H200 end-to-end benchmark (626,400 voxels x 128 in 0.27 s);
/// first compilation of the f64 kernels 2.8 s (LM) and 0.9 s (NM) on an H200.
///
/// ```
/// use perfusion_core::{Method, job_estimate};
/// let liver = job_estimate(4_336, 128, Method::LevenbergMarquardt);
/// assert!(liver.cpu_seconds(2) > liver.gpu_seconds);
/// // The liver demo on a 16-thread GPU host: the CPU first (measured 0.18 s vs 0.36 s).
/// assert!(liver.cpu_seconds(16) < gpu_runtime::GPU_OPEN_SECONDS);
/// ```
pub fn job_estimate(
    voxels: usize,
    frames: usize,
    method: crate::Method,
) -> gpu_runtime::JobEstimate {
    use crate::Method;
    let (cpu, compile) = match method {
        Method::LevenbergMarquardt => (2.65e-6, 2.8),
        Method::NelderMead => (3.0e-6, 0.9),
    };
    gpu_runtime::JobEstimate::per_item((voxels * frames) as f64, cpu, 3.4e-9)
        .with_first_compile(compile)
}
