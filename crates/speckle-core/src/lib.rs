//! Laser speckle contrast imaging (LSCI): raw frames to speckle contrast K and flow maps.
//!
//! Layout: [`io`] reads TIFF, raw binary and live streams; [`contrast`] computes spatial,
//! temporal and spatio-temporal K exactly (integer window sums for integer data);
//! [`flow`] turns K into SFI, 1/K^2 and the decorrelation time tau_c; [`mesi`] fits
//! multi-exposure data; [`correct`] holds dark-frame, shot-noise and averaging corrections;
//! [`roi`] gives ROI time courses; [`output`] writes float TIFF, PNG colour maps and
//! previews; [`sim`] simulates speckle with known statistics for tests and demos.

pub mod contrast;
pub mod correct;
pub mod engine;
pub mod error;
pub mod flow;
pub mod gpu;
mod gpu_flow;
mod gpu_stream;
pub mod io;
pub mod mesi;
pub mod output;
pub mod pipeline;
pub mod roi;
pub mod sim;
pub mod types;

pub use contrast::{Border, Window};
pub use error::{Error, Result};
pub use types::{CameraInfo, Pixel, RawStack};
