//! DCE perfusion: voxelwise pharmacokinetic fitting on the CPU (f64, rayon) and the GPU
//! (f64 on CUDA, f32 on wgpu), checked against each other.
//!
//! Models ([`Model`]): the dual-input single-compartment liver model of Wang & Cao (2012),
//! Tofts, extended Tofts, Patlak and the two-compartment exchange model, each evaluated in
//! O(Nt) by the exact recursion for the convolution of a piecewise-linear input with an
//! exponential, with fractional delays and any (non-uniform) time grid. Fits ([`fit`],
//! [`fit_on`]): Nelder-Mead exactly as Lagarias et al. / `fminsearch`, or bounded
//! Levenberg-Marquardt with analytic Jacobians, optionally from a coarse delay grid; per voxel
//! the parameters, SSE, R^2, iterations and a [`FitStatus`].
//!
//! Units: time in s, concentrations in the input's units (mM), dual-input rates in
//! ml/100g/min, other rates in 1/min, volume fractions unitless, delays in s.
//! See docs/perfusion.md.

// `!(x < y)` is meant throughout the fits: it is also true for NaN, which must never pass a
// convergence or acceptance test.
#![allow(clippy::neg_cmp_op_on_partial_ord, clippy::if_not_else)]

mod conv;
pub mod convert;
pub mod error;
mod fit;
mod gpu;
pub mod io;
mod model;
mod problem;
pub mod sim;

pub use conv::predict;
pub use error::{Error, Result};
pub use fit::{
    Control, DelayGrid, FitOptions, FitStatus, Fits, Method, Precision, fit, fit_on,
    fit_on_in_launches, fit_with, mean_evaluations,
};
pub use gpu::{CUBE_ENV, PERSISTENT_ENV, UNITS_ENV, kernel_times};
pub use model::{MAX_PARAMS, Model, ParamInfo};
pub use problem::Problem;
