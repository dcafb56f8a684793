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
//! maps; [`sim`] simulates speckle with known statistics and runs the [`sim::demo()`].
//!
//! ```
//! use ndarray::{Axis, s};
//! use speckle_core::sim::{Camera, FlowPhantom};
//! use speckle_core::{ContrastParams, FlowParams, Window, contrast, flow};
//! let device = gpu_runtime::Device::cpu();
//! // A vessel (tau_c 1 ms on its axis, row 15.5) in static tissue; 5 ms exposure, 16 bits.
//! let phantom = FlowPhantom::new(64, 32, 1, 5e-3, 1e-3).with_channel(15.5, 8.0).with_seed(1);
//! let raw = Camera::new(1000.0, 16).expose(phantom.simulate()?.intensity.view(), 2)?;
//! let params = ContrastParams::spatial(Window::new(7)?).with_exposure(5e-3)?;
//! let (maps, info) = contrast(&raw, &params, &device)?;
//! let k = maps.k.index_axis(Axis(0), 0);
//! assert!(k[[3, 32]] > 1.5 * k[[15, 32]]); // static tissue keeps its contrast
//! let (tau, _) = flow(k, &FlowParams::new(5e-3, 1.0), &device)?; // simulated beta = 1
//! let on_axis = tau.tau_c.slice(s![15, 8..56]).mean().unwrap();
//! assert!((on_axis / 1e-3 - 1.0).abs() < 0.3, "{on_axis}");
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
