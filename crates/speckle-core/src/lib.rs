//! Laser speckle contrast imaging (LSCI): raw frames to speckle contrast K and flow maps.
//!
//! Units: exposure times and tau_c in seconds, SFI in 1/s, K dimensionless, pixel
//! coordinates in pixels (x = column, y = row, from the top-left pixel). Stacks are
//! `ndarray` arrays in (frame, row, column) order.
//!
//! Layout: [`api`] holds the verbs, one form each (`op(input, &OpParams, &Device) ->
//! Result<(OpMaps, OpInfo)>`): [`contrast`] (spatial, temporal and spatio-temporal K, exact
//! integer window sums), [`flow`] (tau_c from K), [`mesi`] (multi-exposure fits), [`roi`]
//! (ROI time courses) and [`stream`] (live frames to maps). [`model`] defines what both
//! paths agree on (parameters, formulas, flags, statuses, results, [`GpuTuning`]); [`cpu`]
//! is the f64 reference, one file per operation; the GPU host code calls
//! `gpu_kernels::speckle`. [`io`] reads TIFF, PNG, raw binary and live streams and writes
//! maps; [`sim`] simulates speckle with known statistics and runs the [`sim::demo`].
//!
//! ```
//! use ndarray::Array3;
//! use speckle_core::{ContrastParams, FlowParams, RawStack, Window, contrast, flow};
//! let device = gpu_runtime::Device::cpu();
//! let stack = RawStack::U16(Array3::from_shape_fn((4, 32, 32), |(t, y, x)| ((t * 7 + y * 13 + x * 31) % 97 + 20) as u16));
//! let params = ContrastParams::spatial(Window::new(7)?).with_exposure(5e-3)?;
//! let (maps, info) = contrast(&stack, &params, &device)?;
//! assert_eq!(maps.k.dim(), (4, 32, 32));
//! assert!(maps.sfi.is_some());
//! let (tau, _) = flow(maps.k.index_axis(ndarray::Axis(0), 0), &FlowParams::new(5e-3, 1.0), &device)?;
//! assert_eq!(tau.tau_c.dim(), (32, 32));
//! println!("K on {}", info.backend);
//! # Ok::<(), speckle_core::Error>(())
//! ```

pub mod api;
pub mod cpu;
pub mod error;
mod gpu;
pub mod io;
pub mod model;
pub mod sim;

pub use api::{calibrate, contrast, flow, job_estimate, mesi, roi, stream};
pub use error::{Error, Result};
pub use model::beta::{BetaEstimate, BetaOrigin, Calibration, CalibrationInfo, CalibrationParams};
pub use model::contrast::{ContrastInfo, ContrastMaps, ContrastParams, Mode};
pub use model::flags;
pub use model::flow::{BetaSource, FlowInfo, FlowModel, FlowParams, TauMap};
pub use model::frame::Frame;
pub use model::mesi::{
    BetaMode, FitStatus, MesiFit, MesiInfo, MesiInput, MesiMaps, MesiOptions, MesiParams,
};
pub use model::roi::{Roi, RoiInfo, RoiParams, Table};
pub use model::stream::{FrameMaps, StreamParams, StreamReport};
pub use model::tuning::GpuTuning;
pub use model::types::{CameraInfo, Pixel, RawStack};
pub use model::window::{Border, Window};
