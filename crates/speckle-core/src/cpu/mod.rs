//! The f64 (exact integer-sum) CPU reference, one file per operation, multithreaded.

pub mod beta;
pub mod calibrate;
pub mod contrast;
pub mod correct;
pub mod mesi;
pub mod roi;
pub mod spatial;
pub mod stream;
pub mod tau_c;
pub mod temporal;

pub use beta::{beta_max_for, estimate_beta, speckle_lag1_correlation, stack_lag1_correlation};
pub use calibrate::calibrate_beta;
pub use contrast::rms_over_frames;
pub use mesi::{fit_mesi, fit_mesi_map};
pub use roi::time_course;
pub use spatial::{
    ContrastMap, ContrastOut, ContrastStack, spatial_contrast, spatial_contrast_into,
    spatial_contrast_stack,
};
pub use tau_c::{decorrelation_rate_map, inverse_k2_map, sfi_map, tau_c_map};
pub use temporal::{TemporalStream, spatiotemporal_contrast, temporal_contrast};
