//! DCE perfusion: voxelwise pharmacokinetic fitting on the CPU (f64, rayon) and the GPU
//! (f64 on CUDA, f32 on wgpu), checked against each other.
//!
//! Models ([`Model`]): the dual-input single-compartment liver model of Wang & Cao (2012),
//! Tofts, extended Tofts, Patlak and the two-compartment exchange model, each evaluated in
//! O(Nt) by the exact recursion for the convolution of a piecewise-linear input with an
//! exponential, with fractional delays and any (non-uniform) time grid. Fits ([`fit`],
//! [`fit_with`]): Nelder-Mead exactly as Lagarias et al. / `fminsearch`, or bounded
//! Levenberg-Marquardt with analytic Jacobians, optionally from a coarse delay grid; per voxel
//! the parameters, SSE, R^2, iterations and a [`FitStatus`] ([`Fits`]), with where and how
//! it ran ([`FitInfo`]). The GPU's launch shape is a [`GpuTuning`] in the [`FitParams`].
//!
//! Units: time in s, concentrations in the input's units (mM), dual-input rates in
//! ml/100g/min, other rates in 1/min, volume fractions unitless, delays in s.
//! See docs/perfusion.md.
//!
//! ```
//! use gpu_runtime::Device;
//! use perfusion_core::sim::Simulation;
//! use perfusion_core::{FitInput, FitParams, FitStatus, Method, Model, fit};
//! // The paper's liver, 8 noise-free curves of 64 samples, fitted by LM on the CPU.
//! let sim = Simulation::paper(64).with_voxels(8).run().unwrap();
//! let params = FitParams::new(Model::DualInput).with_method(Method::LevenbergMarquardt);
//! let input = FitInput::new(sim.curves.view(), &sim.problem);
//! let (fits, info) = fit(input, &params, &Device::cpu()).unwrap();
//! assert_eq!(info.precision, "f64");
//! assert!((0..8).all(|v| fits.status(v) == FitStatus::Converged));
//! ```

// `!(x < y)` is meant throughout the fits: it is also true for NaN, which must never pass a
// convergence or acceptance test.
#![allow(clippy::neg_cmp_op_on_partial_ord, clippy::if_not_else)]

mod api;
mod cpu;
pub mod error;
mod gpu;
pub mod io;
mod model;
pub mod sim;

pub use api::{FitInput, fit, fit_with, job_estimate, kernel_times, mean_evaluations, predict};
pub use error::{Error, Result};
pub use model::convert;
pub use model::population;
pub use model::t1;
pub use model::{
    CUBE_ENV, Control, DelayGrid, FitInfo, FitParams, FitStatus, Fits, Flags, GpuTuning,
    MAX_PARAMS, Method, Model, PERSISTENT_ENV, POOR_FIT_NOISE, POORLY_DETERMINED_SE, ParamInfo,
    Precision, Problem, StartSearch, UNITS_ENV, finite_median,
};
