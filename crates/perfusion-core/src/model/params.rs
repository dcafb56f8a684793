//! What a fit is asked to do: the model, the optimiser, per-parameter start, bounds and fixed
//! values, stopping rules, the GPU's arithmetic and launch shape ([`FitParams`]), and the
//! same settings resolved for the evaluators ([`Setup`]), which the CPU and GPU paths read
//! alike.

use super::kinetics::{MAX_PARAMS, Model, names};
use super::problem::Problem;
use super::start::{StartPlan, StartSearch, plan};
use super::tuning::GpuTuning;
use crate::error::{Error, Result};
use serde::Serialize;

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

/// The delays (s) the start search scans for each free delay: `start + k step`, `k < count`
/// (then refined to a quarter step around the best; see [`StartSearch`]).
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
        if count > gpu_kernels::perfusion::MAX_COARSE {
            return Err(Error::InvalidOption {
                name: "delay-grid",
                value: format!("{start}:{stop}:{step}"),
                why: format!(
                    "{count} delays per axis; use at most {} (a coarser step)",
                    gpu_kernels::perfusion::MAX_COARSE
                ),
            });
        }
        Ok(DelayGrid { start, step, count })
    }
}

/// How to fit: the model, the optimiser, per-parameter start, bounds and fixed values,
/// stopping rules, and for the GPU path its arithmetic and launch shape ([`GpuTuning`]).
///
/// ```
/// use perfusion_core::{FitParams, Method, Model};
/// let opts = FitParams::new(Model::DualInput)
///     .with_method(Method::LevenbergMarquardt)
///     .with_start(&[10.0, 80.0, 200.0, 2.0, 3.0])
///     .with_fixed("tau_p", 2.0)
///     .unwrap();
/// assert_eq!(opts.n_free(), 4);
/// assert!(FitParams::new(Model::Tofts).with_fixed("ka", 1.0).is_err());
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct FitParams {
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
    /// How the start is found: linear least squares over a delay grid (default: each
    /// free delay's bounds, one frame apart), or the start values as given.
    pub start_search: StartSearch,
    /// Arithmetic of the GPU path.
    pub precision: Precision,
    /// Launch shape of the GPU path (default: chosen per device).
    pub gpu: GpuTuning,
    /// Compute the standard errors ([`Fits::se`](crate::Fits::se)) and the
    /// [`Flags::POORLY_DETERMINED`](crate::Flags::POORLY_DETERMINED) flag after the fit
    /// (default on; off saves their CPU pass: about 1.1 us per voxel and thread at 128 time
    /// points, docs/perfusion.md).
    pub standard_errors: bool,
}

impl Default for FitParams {
    /// The paper's model, the dual-input one, fitted as [`FitParams::new`] does.
    fn default() -> Self {
        FitParams::new(Model::DualInput)
    }
}

impl FitParams {
    /// Defaults of `model`: its start values and bounds, every parameter free, the start
    /// searched by linear least squares, bounded Levenberg-Marquardt (the method that
    /// recovers noise-free curves most often, docs/perfusion.md).
    pub fn new(model: Model) -> Self {
        let p = model.params();
        FitParams {
            model,
            method: Method::LevenbergMarquardt,
            start: p.iter().map(|p| p.start).collect(),
            lower: p.iter().map(|p| p.lower).collect(),
            upper: p.iter().map(|p| p.upper).collect(),
            fixed: vec![false; p.len()],
            max_iterations: None,
            tol_fun: 1e-8,
            tol_x: 1e-4,
            tolerance: 1e-10,
            start_search: StartSearch::Auto,
            precision: Precision::Auto,
            gpu: GpuTuning::default(),
            standard_errors: true,
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

    pub fn with_start_search(mut self, search: StartSearch) -> Self {
        self.start_search = search;
        self
    }

    pub fn with_precision(mut self, precision: Precision) -> Self {
        self.precision = precision;
        self
    }

    /// Whether to compute the standard errors and the poorly-determined flag (default on).
    pub fn with_standard_errors(mut self, on: bool) -> Self {
        self.standard_errors = on;
        self
    }

    /// The GPU path's launch shape (e.g. [`GpuTuning::from_lookup`] over the environment).
    pub fn with_gpu(mut self, tuning: GpuTuning) -> Self {
        self.gpu = tuning;
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
            search: self.start_search,
            plan: None,
            tuning: self.gpu,
            standard_errors: self.standard_errors,
        })
    }
}

/// LM defaults in f64: gradient cosine at a minimum, stall cosine, rounding floor of the
/// residual relative to the data: the curves are f32, so a fit within their rounding
/// (relative 2^-23 per sample) is as exact as the data allow.
const LM_TOL_GRAD: f64 = 1e-8;
const LM_STALL: f64 = 1e-3;
const LM_FLOOR_REL: f64 = f32::EPSILON as f64;
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

/// Options resolved for the evaluators (`crate::cpu` and `crate::gpu`).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Setup {
    pub model: Model,
    pub method: Method,
    pub bounds: Bounds,
    pub start: [f64; MAX_PARAMS],
    pub nm: NmSettings,
    pub lm: LmSettings,
    pub floor_rel: f64,
    pub search: StartSearch,
    /// The start search resolved for the problem ([`Setup::with_plan`]).
    pub plan: Option<StartPlan>,
    /// The GPU path's launch shape.
    pub tuning: GpuTuning,
    /// Whether the post-pass computes standard errors.
    pub standard_errors: bool,
}

impl Setup {
    /// Resolve the start search for `problem`.
    pub fn with_plan(mut self, problem: &Problem) -> Self {
        self.plan = plan(self.search, self.model, problem, &self.bounds, &self.start);
        self
    }
}

/// Stopping rule.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct NmSettings {
    pub max_iterations: u32,
    pub tol_fun: f64,
    pub tol_x: f64,
    /// 10 machine epsilons of the arithmetic (f64 here).
    pub ten_eps: f64,
}

/// Stopping rule and damping schedule.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct LmSettings {
    pub max_iterations: u32,
    /// Relative step and relative cost decrease that count as converged.
    pub tol: f64,
    /// Largest cosine between residuals and a free Jacobian column at a minimum.
    pub tol_grad: f64,
    /// Cosine accepted as stationary when no step reduces the cost any more.
    pub stall: f64,
    /// Costs at or below this are fits to rounding (exact data).
    pub floor: f64,
    /// Which parameters are delays, and the longest delay step (s) one iteration may take:
    /// the delay Jacobian is piecewise constant between samples, so longer Gauss-Newton
    /// steps in a delay are not trusted (the whole step is shortened, keeping its direction).
    pub delay: [bool; MAX_PARAMS],
    pub max_delay_step: f64,
}

/// Damping schedule: start, factor 10 up and down, limits (powers of two, exact in f32 and f64).
pub(crate) const LAMBDA_START: f64 = 1.0 / 1024.0;
pub(crate) const LAMBDA_MIN: f64 = 1.0 / 1_099_511_627_776.0; // 2^-40
pub(crate) const LAMBDA_MAX: f64 = 9_007_199_254_740_992.0; // 2^53
/// Smallest diagonal scale of the damping (2^-60).
pub(crate) const DAMP_FLOOR: f64 = 1.0 / 1_152_921_504_606_846_976.0;
