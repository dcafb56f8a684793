//! Speckle contrast K = sigma / mean: spatial, temporal and spatio-temporal.

mod params;
pub mod spatial;
pub mod temporal;

pub use params::{Border, Window, reflect_index};
pub use spatial::{
    ContrastMap, ContrastOut, ContrastStack, contrast_shape, flags, spatial_contrast,
    spatial_contrast_into, spatial_contrast_stack,
};
pub use temporal::{TemporalStream, spatiotemporal_contrast, temporal_contrast};
