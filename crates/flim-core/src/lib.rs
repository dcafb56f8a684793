//! Fluorescence lifetime imaging (FLIM): TCSPC cubes, simulation with known lifetimes,
//! non-iterative lifetime methods (RLD, IEM, CMM, phasor), fast bi-exponential FRET
//! analysis (BCMM, PM), per-pixel and global iterative fits, on the CPU (f64, rayon) and
//! the GPU (f32, one thread per pixel), checked against each other.
//!
//! Units: time in nanoseconds, counts in photons, angular frequency in rad/ns.
//!
//! Every analysis has one form, `op(cube, &Params, &Device) -> Result<(Maps, RunInfo)>`
//! ([`api`]): the f32 GPU kernels where the device is a GPU, the f64 CPU reference
//! otherwise. How the GPU path is run is set by [`GpuTuning`] in the params.
//!
//! ```
//! use flim_core::{Analysis, analyse, sim::mono_exponential};
//! use gpu_runtime::Device;
//! let cube = mono_exponential(&[2.5], 8, 8, 256, 0.05, 12.8, 20_000.0, 1)?;
//! let (maps, info) = analyse(&cube, &Analysis::default(), &Device::cpu())?;
//! assert!((maps.tau_cmm[[4, 4]] - 2.5).abs() < 0.1);
//! assert_eq!(info.backend, gpu_runtime::Backend::Cpu);
//! # Ok::<(), flim_core::Error>(())
//! ```
//!
//! Layout: [`model`] (what both paths agree on), `cpu/` (f64 references), `gpu/` (host side
//! of `gpu_kernels::flim`), [`io`] (one file per format), [`sim`] (phantoms and the demo).

pub mod api;
mod cpu;
pub mod error;
mod gpu;
pub mod io;
pub mod model;
pub mod sim;

pub use api::{
    analyse, analyse_any, analyse_fret, fit, fit_decay, fit_global, job_estimate, job_estimate_for,
    kernel_time, run_method,
};
pub use error::{Error, Result};
pub use model::*;
