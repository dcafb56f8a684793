//! The f64 reference on the CPU: the forward models ([`conv`]), the fit of every voxel
//! ([`fit`]) and its two optimisers, one file each.

mod conv;
mod fit;
mod levenberg_marquardt;
mod nelder_mead;

pub(crate) use conv::predict;
pub(crate) use fit::{fit, mean_evaluations};
