//! Speckle contrast K = sigma / mean: spatial, temporal and spatio-temporal.

mod params;
pub mod spatial;

pub use params::{reflect_index, Border, Window};
pub use spatial::{
    contrast_shape, flags, spatial_contrast, spatial_contrast_into, spatial_contrast_stack, ContrastMap,
    ContrastOut, ContrastStack,
};
