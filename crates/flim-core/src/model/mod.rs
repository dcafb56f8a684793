//! What the CPU and GPU paths agree on, defined once: the cube, the settings of every
//! analysis (with [`GpuTuning`]), the formulas and their f64 single-decay forms, statuses,
//! result maps, and the preparation of cubes (binning, ranges, IRFs).

pub mod cube;
pub mod fit;
pub mod fit_model;
pub mod fret;
pub mod info;
pub mod lifetimes;
pub mod method;
pub(crate) mod plane;
pub mod preprocess;
pub mod segments;
pub mod tuning;

pub use cube::{AnyCube, Count, Cube};
pub use fit::{
    DecayFit, Estimator, FitMaps, FitOptions, FitStatus, GlobalOptions, Model, model_curve,
    objective,
};
pub use fit_model::{MAX_PARAMS, Offset, Shift};
pub use fret::{Donor, FRET_PLANES, FretDecay, FretMaps, FretOptions, analyse_fret_decay};
pub use info::RunInfo;
pub use lifetimes::{
    Analysis, Calibration, DecayLifetimes, LifetimeMaps, Methods, PLANES, STATUS_MASKED, STATUS_OK,
    analyse_decay, decay_phasor,
};
pub use method::{Method, MethodOptions, Weights};
pub use preprocess::{
    Binning, FitRange, Irf, bin_spatial, estimate_offset, half_rise_ns, photon_mask,
    rise_shift_map, summed_decay,
};
pub use segments::Segments;
pub use tuning::GpuTuning;
