//! Voxelwise fitting: options, per-voxel statuses, the CPU path (f64, rayon) and the
//! dispatch to the GPU path.

mod lm;
mod nelder_mead;

pub(crate) use lm::{DAMP_FLOOR, LAMBDA_MAX, LAMBDA_MIN, LAMBDA_START, LmEnd, LmSettings};
pub(crate) use nelder_mead::NmSettings;

use crate::conv::{by_flags, normal, sse};
use crate::error::{Error, Result};
use crate::model::{MAX_PARAMS, Model, canonical, chain};
use crate::problem::Problem;
use gpu_runtime::Device;
use ndarray::{Array1, Array2, ArrayView2};
use rayon::prelude::*;
use serde::Serialize;
use std::sync::atomic::{AtomicBool, Ordering};

/// The optimiser.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Method {
    /// Nelder-Mead simplex as Lagarias et al. / `fminsearch` (the paper's method).
    NelderMead,
    /// Bounded Levenberg-Marquardt with the analytic Jacobian.
    LevenbergMarquardt,
}

impl Method {
    pub fn name(self) -> &'static str {
        match self {
            Method::NelderMead => "nm",
            Method::LevenbergMarquardt => "lm",
        }
    }

    /// Default iteration cap: 600 simplex updates (the paper), 100 LM steps.
    pub fn default_iterations(self) -> u32 {
        match self {
            Method::NelderMead => 600,
            Method::LevenbergMarquardt => 100,
        }
    }
}

impl std::str::FromStr for Method {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "nm" | "nelder-mead" | "simplex" => Ok(Method::NelderMead),
            "lm" | "levenberg-marquardt" => Ok(Method::LevenbergMarquardt),
            _ => Err(Error::InvalidOption {
                name: "method",
                value: s.into(),
                why: "expected nm (Nelder-Mead) or lm (Levenberg-Marquardt)".into(),
            }),
        }
    }
}

/// Arithmetic of the GPU path (the CPU path is always f64).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Precision {
    /// f64 where the device has it (CUDA), else f32 (wgpu).
    #[default]
    Auto,
    F64,
    F32,
}

impl std::str::FromStr for Precision {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "auto" => Ok(Precision::Auto),
            "f64" | "double" => Ok(Precision::F64),
            "f32" | "single" => Ok(Precision::F32),
            _ => Err(Error::InvalidOption {
                name: "precision",
                value: s.into(),
                why: "expected auto, f64 or f32".into(),
            }),
        }
    }
}

/// A coarse grid of delays (s) evaluated before the optimiser starts, when delays are free:
/// every combination of `start + k step`, `k < count`, for each free delay; the best one
/// (with the other parameters at their start) becomes the starting point.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct DelayGrid {
    pub start: f64,
    pub step: f64,
    pub count: u32,
}

impl DelayGrid {
    /// `start..=stop` in steps of `step` seconds.
    pub fn new(start: f64, stop: f64, step: f64) -> Result<Self> {
        if !(start.is_finite()
            && stop.is_finite()
            && step.is_finite()
            && step > 0.0
            && stop >= start)
        {
            return Err(Error::InvalidOption {
                name: "delay-grid",
                value: format!("{start}:{stop}:{step}"),
                why: "expected START:STOP:STEP seconds with STOP >= START and STEP > 0".into(),
            });
        }
        let count = ((stop - start) / step + 1e-9).floor() as u32 + 1;
        if count > 256 {
            return Err(Error::InvalidOption {
                name: "delay-grid",
                value: format!("{start}:{stop}:{step}"),
                why: format!("{count} delays per axis; use at most 256 (a coarser step)"),
            });
        }
        Ok(DelayGrid { start, step, count })
    }
}

/// How to fit: the model, the optimiser, per-parameter start, bounds and fixed values,
/// stopping rules.
///
/// ```
/// use perfusion_core::{FitOptions, Method, Model};
/// let opts = FitOptions::new(Model::DualInput)
///     .with_method(Method::LevenbergMarquardt)
///     .with_start(&[10.0, 80.0, 200.0, 2.0, 3.0])
///     .with_fixed("tau_p", 2.0)
///     .unwrap();
/// assert_eq!(opts.n_free(), 4);
/// assert!(FitOptions::new(Model::Tofts).with_fixed("ka", 1.0).is_err());
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct FitOptions {
    pub model: Model,
    pub method: Method,
    /// Starting values, one per parameter (user units).
    pub start: Vec<f64>,
    pub lower: Vec<f64>,
    pub upper: Vec<f64>,
    /// Parameters held at their start value.
    pub fixed: Vec<bool>,
    /// Iteration cap (`None`: the method's default, 600 for NM, 100 for LM).
    pub max_iterations: Option<u32>,
    /// Nelder-Mead: converged when the vertex costs differ by at most this (default 1e-8).
    pub tol_fun: f64,
    /// Nelder-Mead: and the vertices by at most this in every parameter (default 1e-4, as
    /// fminsearch; infinite gives the paper's rule as written, which stops early in flat
    /// valleys, see docs/perfusion.md).
    pub tol_x: f64,
    /// Levenberg-Marquardt: relative step and cost decrease that count as converged.
    pub tolerance: f64,
    pub delay_grid: Option<DelayGrid>,
    /// Arithmetic of the GPU path.
    pub precision: Precision,
}

impl FitOptions {
    /// Defaults of `model`: its start values and bounds, every parameter free, Nelder-Mead.
    pub fn new(model: Model) -> Self {
        let p = model.params();
        FitOptions {
            model,
            method: Method::NelderMead,
            start: p.iter().map(|p| p.start).collect(),
            lower: p.iter().map(|p| p.lower).collect(),
            upper: p.iter().map(|p| p.upper).collect(),
            fixed: vec![false; p.len()],
            max_iterations: None,
            tol_fun: 1e-8,
            tol_x: 1e-4,
            tolerance: 1e-10,
            delay_grid: None,
            precision: Precision::Auto,
        }
    }

    pub fn with_method(mut self, method: Method) -> Self {
        self.method = method;
        self
    }

    pub fn with_start(mut self, start: &[f64]) -> Self {
        self.start = start.to_vec();
        self
    }

    pub fn with_max_iterations(mut self, n: u32) -> Self {
        self.max_iterations = Some(n);
        self
    }

    pub fn with_delay_grid(mut self, grid: Option<DelayGrid>) -> Self {
        self.delay_grid = grid;
        self
    }

    pub fn with_precision(mut self, precision: Precision) -> Self {
        self.precision = precision;
        self
    }

    /// Hold parameter `name` at `value`.
    pub fn with_fixed(mut self, name: &str, value: f64) -> Result<Self> {
        let i = self.require(name)?;
        self.start[i] = value;
        self.fixed[i] = true;
        Ok(self)
    }

    /// Bounds of parameter `name`.
    pub fn with_bounds(mut self, name: &str, lower: f64, upper: f64) -> Result<Self> {
        let i = self.require(name)?;
        self.lower[i] = lower;
        self.upper[i] = upper;
        Ok(self)
    }

    /// Starting value of parameter `name`.
    pub fn with_start_of(mut self, name: &str, value: f64) -> Result<Self> {
        let i = self.require(name)?;
        self.start[i] = value;
        Ok(self)
    }

    fn require(&self, name: &str) -> Result<usize> {
        self.index(name)
            .filter(|&i| {
                i < self.start.len()
                    && i < self.fixed.len()
                    && i < self.lower.len()
                    && i < self.upper.len()
            })
            .ok_or_else(|| Error::InvalidParameter {
                model: self.model.name(),
                name: name.into(),
                why: format!("no such parameter; the model has {}", names(self.model)),
            })
    }

    /// Index of parameter `name` in the model's parameter vector.
    pub fn index(&self, name: &str) -> Option<usize> {
        self.model.params().iter().position(|p| p.name == name)
    }

    /// Number of free parameters.
    pub fn n_free(&self) -> usize {
        self.fixed.iter().filter(|&&f| !f).count()
    }

    pub fn iterations(&self) -> u32 {
        self.max_iterations
            .unwrap_or_else(|| self.method.default_iterations())
    }

    /// Check every setting against the model.
    pub fn validate(&self) -> Result<()> {
        self.setup().map(|_| ())
    }

    pub(crate) fn setup(&self) -> Result<Setup> {
        let model = self.model;
        let np = model.n_params();
        let bad = |name: &str, why: String| Error::InvalidParameter {
            model: model.name(),
            name: name.into(),
            why,
        };
        for (what, len) in [
            ("start", self.start.len()),
            ("lower", self.lower.len()),
            ("upper", self.upper.len()),
            ("fixed", self.fixed.len()),
        ] {
            if len != np {
                return Err(bad(
                    what,
                    format!(
                        "{len} values given, the model has {np} parameters ({})",
                        names(model)
                    ),
                ));
            }
        }
        let mut lo = [0.0; MAX_PARAMS];
        let mut hi = [0.0; MAX_PARAMS];
        let mut free = [false; MAX_PARAMS];
        let mut start = [0.0; MAX_PARAMS];
        for (i, info) in model.params().iter().enumerate() {
            let (l, u, s) = (self.lower[i], self.upper[i], self.start[i]);
            if l.is_nan() || u.is_nan() || l > u {
                return Err(bad(
                    info.name,
                    format!("bounds [{l}, {u}] are not an interval"),
                ));
            }
            if !s.is_finite() {
                return Err(bad(info.name, format!("start value {s} is not finite")));
            }
            if self.fixed[i] {
                lo[i] = s;
                hi[i] = s;
            } else {
                if !(l < u) {
                    return Err(bad(
                        info.name,
                        format!("a free parameter needs lower < upper, got [{l}, {u}]"),
                    ));
                }
                if s < l || s > u {
                    return Err(bad(
                        info.name,
                        format!("start {s} lies outside the bounds [{l}, {u}]"),
                    ));
                }
                lo[i] = l;
                hi[i] = u;
            }
            free[i] = !self.fixed[i];
            start[i] = s;
        }
        let bounds = Bounds::new(&lo, &hi, free, &start, np);
        if bounds.n_free == 0 {
            return Err(bad(
                "all",
                "every parameter is fixed: nothing to fit".into(),
            ));
        }
        let iterations = self.iterations();
        if iterations == 0 {
            return Err(Error::InvalidOption {
                name: "max-iterations",
                value: "0".into(),
                why: "at least one iteration is needed".into(),
            });
        }
        for (name, v) in [("tol-fun", self.tol_fun), ("tolerance", self.tolerance)] {
            if !(v.is_finite() && v >= 0.0) {
                return Err(Error::InvalidOption {
                    name,
                    value: v.to_string(),
                    why: "must be a finite number >= 0".into(),
                });
            }
        }
        if self.tol_x.is_nan() || self.tol_x < 0.0 {
            return Err(Error::InvalidOption {
                name: "tol-x",
                value: self.tol_x.to_string(),
                why: "must be >= 0 (infinite to disable)".into(),
            });
        }
        let mut delays = [NO_DELAY; 2];
        if self.delay_grid.is_some() {
            let mut k = 0;
            for (i, info) in model.params().iter().enumerate() {
                if info.delay && free[i] && k < 2 {
                    delays[k] = i;
                    k += 1;
                }
            }
        }
        Ok(Setup {
            model,
            method: self.method,
            bounds,
            start,
            nm: NmSettings {
                max_iterations: iterations,
                tol_fun: self.tol_fun,
                tol_x: self.tol_x,
                ten_eps: 10.0 * f64::EPSILON,
            },
            lm: LmSettings {
                max_iterations: iterations,
                tol: self.tolerance,
                tol_grad: LM_TOL_GRAD,
                stall: LM_STALL,
                floor: 0.0,
                delay: std::array::from_fn(|i| i < np && model.params()[i].delay),
                max_delay_step: f64::INFINITY,
            },
            floor_rel: LM_FLOOR_REL,
            grid: self.delay_grid,
            delays,
        })
    }
}

fn names(model: Model) -> String {
    model
        .params()
        .iter()
        .map(|p| p.name)
        .collect::<Vec<_>>()
        .join(", ")
}

/// A parameter vector padded to [`MAX_PARAMS`], checked against the model's length.
pub(crate) fn full_vector(model: Model, v: &[f64], what: &str) -> Result<[f64; MAX_PARAMS]> {
    if v.len() != model.n_params() {
        return Err(Error::InvalidParameter {
            model: model.name(),
            name: what.into(),
            why: format!(
                "{} values given, the model has {} parameters ({})",
                v.len(),
                model.n_params(),
                names(model)
            ),
        });
    }
    let mut out = [0.0; MAX_PARAMS];
    out[..v.len()].copy_from_slice(v);
    Ok(out)
}

/// LM defaults in f64: gradient cosine at a minimum, stall cosine, rounding floor of the
/// residual relative to the data.
const LM_TOL_GRAD: f64 = 1e-8;
const LM_STALL: f64 = 1e-3;
const LM_FLOOR_REL: f64 = 1e-14;
pub(crate) const NO_DELAY: usize = usize::MAX;
/// A fitted parameter this close to a bound, relative to its range, is reported at the bound.
pub(crate) const AT_BOUND: f64 = 1e-4;

/// Box constraints, fixed values and the free-parameter map.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Bounds {
    pub lo: [f64; MAX_PARAMS],
    pub hi: [f64; MAX_PARAMS],
    pub free: [bool; MAX_PARAMS],
    pub fixed: [f64; MAX_PARAMS],
    pub np: usize,
    pub n_free: usize,
    /// `free_index[j]`: the j-th free parameter.
    pub free_index: [usize; MAX_PARAMS],
}

impl Bounds {
    pub fn new(
        lo: &[f64; MAX_PARAMS],
        hi: &[f64; MAX_PARAMS],
        free: [bool; MAX_PARAMS],
        fixed: &[f64; MAX_PARAMS],
        np: usize,
    ) -> Self {
        let mut free_index = [0; MAX_PARAMS];
        let mut n_free = 0;
        for p in 0..np {
            if free[p] {
                free_index[n_free] = p;
                n_free += 1;
            }
        }
        Bounds {
            lo: *lo,
            hi: *hi,
            free,
            fixed: *fixed,
            np,
            n_free,
            free_index,
        }
    }

    /// Clamp free parameters into the box; set fixed ones to their value.
    #[inline]
    pub fn project(&self, x: &mut [f64; MAX_PARAMS]) {
        for p in 0..self.np {
            if self.free[p] {
                if x[p] < self.lo[p] {
                    x[p] = self.lo[p];
                } else if x[p] > self.hi[p] {
                    x[p] = self.hi[p];
                }
            } else {
                x[p] = self.fixed[p];
            }
        }
    }

    /// Set fixed parameters to their value.
    #[inline]
    pub fn hold_fixed(&self, x: &mut [f64; MAX_PARAMS]) {
        for p in 0..self.np {
            if !self.free[p] {
                x[p] = self.fixed[p];
            }
        }
    }

    /// Whether every free parameter lies in its closed interval (false for NaN).
    #[inline]
    pub fn inside(&self, x: &[f64; MAX_PARAMS]) -> bool {
        let mut ok = true;
        for p in 0..self.np {
            if self.free[p] && !(x[p] >= self.lo[p] && x[p] <= self.hi[p]) {
                ok = false;
            }
        }
        ok
    }

    /// Whether a free parameter lies within [`AT_BOUND`] of its range from a bound (Nelder-
    /// Mead approaches a bound without reaching it; LM lands on it).
    pub fn at_bound(&self, x: &[f64; MAX_PARAMS]) -> bool {
        (0..self.np).any(|p| {
            let margin = AT_BOUND * (self.hi[p] - self.lo[p]);
            self.free[p] && (x[p] <= self.lo[p] + margin || x[p] >= self.hi[p] - margin)
        })
    }
}

/// Options resolved for the evaluators (CPU here, GPU in `crate::gpu`).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Setup {
    pub model: Model,
    pub method: Method,
    pub bounds: Bounds,
    pub start: [f64; MAX_PARAMS],
    pub nm: NmSettings,
    pub lm: LmSettings,
    pub floor_rel: f64,
    pub grid: Option<DelayGrid>,
    /// Indices of the (up to two) free delays the grid searches, or [`NO_DELAY`].
    pub delays: [usize; 2],
}

/// Outcome of one voxel's fit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[repr(u8)]
pub enum FitStatus {
    /// The stopping rule was met inside the bounds.
    Converged = 0,
    /// The iteration cap was reached first.
    MaxIterations = 1,
    /// Converged with a free parameter on one of its bounds (within 1e-4 of its range).
    AtBound = 2,
    /// The curve has non-finite samples or is constant (nothing to fit).
    InvalidInput = 3,
    /// The cost became non-finite or no step could reduce it away from a minimum.
    Failed = 4,
    /// Not fitted: the job was interrupted first.
    NotFitted = 5,
}

impl FitStatus {
    pub const ALL: [FitStatus; 6] = [
        FitStatus::Converged,
        FitStatus::MaxIterations,
        FitStatus::AtBound,
        FitStatus::InvalidInput,
        FitStatus::Failed,
        FitStatus::NotFitted,
    ];

    pub fn from_code(code: u8) -> Option<Self> {
        Self::ALL.get(code as usize).copied()
    }

    pub fn name(self) -> &'static str {
        match self {
            FitStatus::Converged => "converged",
            FitStatus::MaxIterations => "max-iterations",
            FitStatus::AtBound => "at-bound",
            FitStatus::InvalidInput => "invalid-input",
            FitStatus::Failed => "failed",
            FitStatus::NotFitted => "not-fitted",
        }
    }
}

/// Maps of a fit over many voxels (voxel `v` is column `v`).
#[derive(Debug, Clone, PartialEq)]
pub struct Fits {
    pub model: Model,
    pub method: Method,
    /// Parameters, `(n_params, voxels)`, user units; NaN where the input was invalid.
    pub params: Array2<f64>,
    /// Sum of squared residuals (concentration^2).
    pub sse: Array1<f64>,
    /// Coefficient of determination 1 - SSE / SST.
    pub r2: Array1<f64>,
    pub iterations: Array1<u32>,
    /// [`FitStatus`] codes.
    pub status: Array1<u8>,
    /// Where it ran (`cpu`, `cuda:0`, ...).
    pub device: String,
    /// Arithmetic used: `f64` or `f32`.
    pub precision: &'static str,
}

impl Fits {
    pub fn len(&self) -> usize {
        self.sse.len()
    }

    pub fn is_empty(&self) -> bool {
        self.sse.is_empty()
    }

    pub fn status(&self, voxel: usize) -> FitStatus {
        FitStatus::from_code(self.status[voxel]).unwrap_or(FitStatus::Failed)
    }

    /// Voxels per status, in [`FitStatus::ALL`] order.
    pub fn status_counts(&self) -> [usize; 6] {
        let mut c = [0; 6];
        for &s in &self.status {
            c[(s as usize).min(5)] += 1;
        }
        c
    }

    /// Parameter `name`'s map.
    pub fn param(&self, name: &str) -> Option<ndarray::ArrayView1<'_, f64>> {
        let i = self.model.params().iter().position(|p| p.name == name)?;
        Some(self.params.row(i))
    }

    fn empty(
        model: Model,
        method: Method,
        n: usize,
        device: String,
        precision: &'static str,
    ) -> Self {
        Fits {
            model,
            method,
            params: Array2::from_elem((model.n_params(), n), f64::NAN),
            sse: Array1::from_elem(n, f64::NAN),
            r2: Array1::from_elem(n, f64::NAN),
            iterations: Array1::zeros(n),
            status: Array1::from_elem(n, FitStatus::NotFitted as u8),
            device,
            precision,
        }
    }
}

/// Progress reporting and interruption for long jobs.
#[derive(Default, Clone, Copy)]
pub struct Control<'a> {
    /// Called with (voxels done, total) between blocks.
    pub progress: Option<&'a (dyn Fn(usize, usize) + Sync)>,
    /// When set, the job stops between blocks; unfitted voxels get `NotFitted`.
    pub stop: Option<&'a AtomicBool>,
}

impl std::fmt::Debug for Control<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Control")
            .field("progress", &self.progress.is_some())
            .field("stop", &self.stop.map(|s| s.load(Ordering::Relaxed)))
            .finish()
    }
}

impl Control<'_> {
    pub(crate) fn stopped(&self) -> bool {
        self.stop.is_some_and(|s| s.load(Ordering::Relaxed))
    }
    pub(crate) fn report(&self, done: usize, total: usize) {
        if let Some(p) = self.progress {
            p(done, total);
        }
    }
}

/// One voxel's result.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct VoxelFit {
    pub params: [f64; MAX_PARAMS],
    pub sse: f64,
    pub r2: f64,
    pub iterations: u32,
    pub status: FitStatus,
}

/// Fit every voxel on the CPU (f64, all cores).
///
/// `curves` holds one concentration curve per row (`(voxels, time)`, any strides).
///
/// ```
/// use perfusion_core::{FitOptions, FitStatus, Method, Model, Problem, fit, predict};
/// use ndarray::Array2;
/// let t: Vec<f64> = (0..64).map(|i| i as f64 * 1.5).collect();
/// let aif: Vec<f64> = t.iter().map(|&s| if s > 6.0 { 6.0 * (s - 6.0) / 5.0 * (-(s - 6.0) / 5.0).exp() + 0.5 } else { 0.0 }).collect();
/// let problem = Problem::new(&t, &aif, None).unwrap();
/// let truth = [0.3, 0.4, 2.0];
/// let curve = predict(&problem, Model::Tofts, &truth).unwrap();
/// let curves = Array2::from_shape_fn((1, 64), |(_, i)| curve[i] as f32);
/// let opts = FitOptions::new(Model::Tofts).with_method(Method::LevenbergMarquardt);
/// let fits = fit(curves.view(), &problem, &opts).unwrap();
/// assert_eq!(fits.status(0), FitStatus::Converged);
/// assert!((fits.params[[0, 0]] - 0.3).abs() < 1e-4);
/// ```
pub fn fit(curves: ArrayView2<f32>, problem: &Problem, opts: &FitOptions) -> Result<Fits> {
    fit_with(curves, problem, opts, &Device::cpu(), &Control::default())
}

/// [`fit`] on `device`: the GPU path for a GPU (f64 where it has it, else f32; see
/// [`Precision`]), the CPU path otherwise.
pub fn fit_on(
    curves: ArrayView2<f32>,
    problem: &Problem,
    opts: &FitOptions,
    device: &Device,
) -> Result<Fits> {
    fit_with(curves, problem, opts, device, &Control::default())
}

/// [`fit_on`] with progress reports and interruption.
pub fn fit_with(
    curves: ArrayView2<f32>,
    problem: &Problem,
    opts: &FitOptions,
    device: &Device,
    control: &Control,
) -> Result<Fits> {
    fit_impl(curves, problem, opts, device, control, None)
}

/// [`fit_on`] with the GPU work split into `launches` kernel launches per round of voxels
/// that fit on the device (the curves of one launch go up while the previous one runs), for
/// benchmarks and tests; [`fit_on`] chooses (one launch for persistent Nelder-Mead units,
/// four otherwise). Same results either way; on the CPU this is [`fit_on`].
pub fn fit_on_in_launches(
    curves: ArrayView2<f32>,
    problem: &Problem,
    opts: &FitOptions,
    device: &Device,
    launches: usize,
) -> Result<Fits> {
    fit_impl(
        curves,
        problem,
        opts,
        device,
        &Control::default(),
        Some(launches),
    )
}

fn fit_impl(
    curves: ArrayView2<f32>,
    problem: &Problem,
    opts: &FitOptions,
    device: &Device,
    control: &Control,
    launches: Option<usize>,
) -> Result<Fits> {
    let setup = opts.setup()?;
    problem.check_model(opts.model)?;
    if curves.ncols() != problem.len() {
        return Err(Error::LengthMismatch {
            what: "each tissue curve".into(),
            expected: problem.len(),
            got: curves.ncols(),
        });
    }
    if device.is_gpu() {
        let f64_ok = device.info().supports_f64;
        let use_f64 = match opts.precision {
            Precision::Auto => f64_ok,
            Precision::F64 => {
                device.require_f64()?;
                true
            }
            Precision::F32 => false,
        };
        return crate::gpu::fit(curves, problem, &setup, device, use_f64, control, launches);
    }
    Ok(fit_cpu(curves, problem, &setup, control))
}

/// Voxels per block between progress reports and stop checks.
const BLOCK: usize = 2048;

fn fit_cpu(curves: ArrayView2<f32>, problem: &Problem, setup: &Setup, control: &Control) -> Fits {
    let n = curves.nrows();
    let nt = problem.len();
    let mut out = Fits::empty(setup.model, setup.method, n, "cpu".into(), "f64");
    let mut results = Vec::with_capacity(n);
    let mut done = 0;
    while done < n {
        if control.stopped() {
            break;
        }
        let end = (done + BLOCK).min(n);
        let block: Vec<VoxelFit> = (done..end)
            .into_par_iter()
            .map_init(
                || vec![0.0; nt],
                |buf, v| {
                    for (b, &c) in buf.iter_mut().zip(curves.row(v)) {
                        *b = f64::from(c);
                    }
                    fit_voxel(setup, problem, buf)
                },
            )
            .collect();
        results.extend(block);
        done = end;
        control.report(done, n);
    }
    for (v, r) in results.iter().enumerate() {
        out.store(v, r);
    }
    out
}

impl Fits {
    pub(crate) fn store(&mut self, v: usize, r: &VoxelFit) {
        for p in 0..self.model.n_params() {
            self.params[[p, v]] = r.params[p];
        }
        self.sse[v] = r.sse;
        self.r2[v] = r.r2;
        self.iterations[v] = r.iterations;
        self.status[v] = r.status as u8;
    }

    pub(crate) fn new_for(
        setup: &Setup,
        n: usize,
        device: String,
        precision: &'static str,
    ) -> Self {
        Fits::empty(setup.model, setup.method, n, device, precision)
    }
}

/// Curve statistics: (valid, SST about the mean, sum of squares). The GPU computes the same.
pub(crate) fn curve_stats(data: &[f64]) -> (bool, f64, f64) {
    let mut sum = 0.0;
    let mut sumsq = 0.0;
    let mut valid = true;
    for &d in data {
        if !d.is_finite() {
            valid = false;
        }
        sum += d;
        sumsq += d * d;
    }
    let mean = sum / data.len() as f64;
    let mut sst = 0.0;
    for &d in data {
        let r = d - mean;
        sst += r * r;
    }
    (valid && sst > 0.0, sst, sumsq)
}

/// Fit one voxel (f64).
pub(crate) fn fit_voxel(setup: &Setup, problem: &Problem, data: &[f64]) -> VoxelFit {
    let mut evals = 0;
    by_flags!(
        setup.model,
        fit_voxel_impl,
        (setup, problem, data, &mut evals)
    )
}

/// Mean number of model evaluations per voxel of the CPU fit over `curves` (cost passes for
/// Nelder-Mead; cost and Jacobian passes for LM, a Jacobian pass counted as one): for
/// performance accounting (`biogpu-bench` divides kernel times by it).
pub fn mean_evaluations(
    curves: ArrayView2<f32>,
    problem: &Problem,
    opts: &FitOptions,
) -> Result<f64> {
    let setup = opts.setup()?;
    problem.check_model(opts.model)?;
    let total: u64 = (0..curves.nrows())
        .into_par_iter()
        .map(|v| {
            let data: Vec<f64> = curves.row(v).iter().map(|&c| f64::from(c)).collect();
            let mut evals = 0;
            by_flags!(
                setup.model,
                fit_voxel_impl,
                (&setup, problem, &data, &mut evals)
            );
            evals
        })
        .sum();
    Ok(total as f64 / curves.nrows().max(1) as f64)
}

fn fit_voxel_impl<const TI: bool, const TE: bool, const VA: bool>(
    setup: &Setup,
    problem: &Problem,
    data: &[f64],
    evals: &mut u64,
) -> VoxelFit {
    let (valid, sst, sumsq) = curve_stats(data);
    if !valid {
        return VoxelFit {
            params: [f64::NAN; MAX_PARAMS],
            sse: f64::NAN,
            r2: f64::NAN,
            iterations: 0,
            status: FitStatus::InvalidInput,
        };
    }
    let model = setup.model;
    let b = &setup.bounds;
    let count = std::cell::Cell::new(0u64);
    let mut cost = |x: &[f64; MAX_PARAMS]| {
        count.set(count.get() + 1);
        let f = sse::<TI, TE, VA>(problem, &canonical(model, x), data);
        if f < f64::INFINITY { f } else { f64::INFINITY }
    };
    let mut x0 = setup.start;
    b.project(&mut x0);
    if let Some(g) = setup.grid {
        x0 = delay_grid_start(&mut cost, &x0, b, &g, setup.delays);
    }
    let (x, f, iterations, end) = match setup.method {
        Method::NelderMead => {
            let o = nelder_mead::nelder_mead(&mut cost, &x0, b, &setup.nm);
            let end = if o.converged {
                LmEnd::Converged
            } else {
                LmEnd::MaxIterations
            };
            (o.x, o.f, o.iterations, end)
        }
        Method::LevenbergMarquardt => {
            let np = b.np;
            let mut nrm = |x: &[f64; MAX_PARAMS]| {
                count.set(count.get() + 1);
                normal::<TI, TE, VA>(problem, &canonical(model, x), &chain(model, x), np, data)
            };
            let mut s = setup.lm;
            s.floor = setup.floor_rel * setup.floor_rel * sumsq;
            s.max_delay_step = problem.mean_interval();
            let o = lm::levenberg_marquardt(&mut nrm, &mut cost, &x0, b, &s);
            (o.x, o.f, o.iterations, o.end)
        }
    };
    *evals += count.get();
    let status = if !(f < f64::INFINITY) {
        FitStatus::Failed
    } else {
        match end {
            LmEnd::Failed => FitStatus::Failed,
            LmEnd::MaxIterations => FitStatus::MaxIterations,
            LmEnd::Converged if b.at_bound(&x) => FitStatus::AtBound,
            LmEnd::Converged => FitStatus::Converged,
        }
    };
    VoxelFit {
        params: x,
        sse: f,
        r2: 1.0 - f / sst,
        iterations,
        status,
    }
}

/// The coarse delay search: `x0` first, then every grid combination in order (first delay
/// outer); the strictly smallest cost wins.
pub(crate) fn delay_grid_start(
    cost: &mut impl FnMut(&[f64; MAX_PARAMS]) -> f64,
    x0: &[f64; MAX_PARAMS],
    b: &Bounds,
    g: &DelayGrid,
    delays: [usize; 2],
) -> [f64; MAX_PARAMS] {
    if delays[0] == NO_DELAY {
        return *x0;
    }
    let mut best = *x0;
    let mut best_f = cost(x0);
    let inner = if delays[1] == NO_DELAY { 1 } else { g.count };
    for a in 0..g.count {
        for c in 0..inner {
            let mut x = *x0;
            x[delays[0]] = g.start + g.step * f64::from(a);
            if delays[1] != NO_DELAY {
                x[delays[1]] = g.start + g.step * f64::from(c);
            }
            b.project(&mut x);
            let f = cost(&x);
            if f < best_f {
                best_f = f;
                best = x;
            }
        }
    }
    best
}
