//! The f64 reference on the CPU: the forward models ([`conv`]), the fit of every voxel
//! ([`fit`]) and its two optimisers, one file each.

mod conv;
mod fit;
mod levenberg_marquardt;
mod nelder_mead;
mod start;
mod uncertainty;

pub(crate) use conv::{Sampler, predict};
pub(crate) use fit::{fit, mean_evaluations};
pub(crate) use uncertainty::{LANES, Scratch, SePlan, StdErrors, standard_errors};
