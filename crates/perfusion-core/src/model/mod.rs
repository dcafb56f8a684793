//! What the CPU and GPU paths agree on, defined once: the models and their canonical form
//! (kinetics), the problem (time grid and input functions), the fit's parameters and
//! their resolved form, the GPU tuning, the results and statuses, the recursion weights and
//! the signal-to-concentration conversions ([`convert`]).

pub mod convert;
mod fits;
mod kinetics;
mod params;
pub mod population;
mod problem;
pub(crate) mod start;
pub mod t1;
mod tuning;
pub(crate) mod weights;

pub use fits::{
    Control, FitInfo, FitStatus, Fits, Flags, POOR_FIT_NOISE, POORLY_DETERMINED_SE, finite_median,
};
pub use kinetics::{MAX_PARAMS, Model, ParamInfo};
pub use params::{DelayGrid, FitParams, Method, Precision};
pub use problem::Problem;
pub use start::StartSearch;
pub use tuning::{CUBE_ENV, GpuTuning, PERSISTENT_ENV, UNITS_ENV};

pub(crate) use fits::VoxelFit;
pub(crate) use kinetics::{CANON, Canonical, canonical, chain, full_vector};
pub(crate) use params::{
    Bounds, DAMP_FLOOR, LAMBDA_MAX, LAMBDA_MIN, LAMBDA_START, LmSettings, NO_DELAY, NmSettings,
    Setup,
};
