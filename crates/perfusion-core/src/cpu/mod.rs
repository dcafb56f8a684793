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

/// One inside-the-bounds parameter vector per model, for the tests of the forward model and
/// of the standard errors.
#[cfg(test)]
pub(crate) const TEST_POINTS: [(crate::model::Model, &[f64]); 5] = {
    use crate::model::Model;
    [
        (Model::DualInput, &[20.0, 100.0, 400.0, 1.3, 2.2]),
        (Model::Tofts, &[0.25, 0.35, 3.3]),
        (Model::ExtendedTofts, &[0.25, 0.35, 0.06, 3.3]),
        (Model::Patlak, &[0.02, 0.08, 1.7]),
        (Model::TwoCompartmentExchange, &[0.6, 0.12, 0.3, 0.07, 2.1]),
    ]
};
