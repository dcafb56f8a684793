//! Fluorescence lifetime imaging (FLIM): TCSPC cubes, simulation with known lifetimes, and
//! non-iterative lifetime methods (RLD, IEM, CMM, phasor) on the CPU (f64, rayon) and the
//! GPU (f32, one thread per pixel), checked against each other.
//!
//! Units: time in nanoseconds, counts in photons.

pub mod cube;
pub mod error;
pub mod fit;
pub mod fret;
pub mod gpu;
pub mod io;
pub mod methods;
pub mod output;
mod plane;
pub mod preprocess;
pub mod sim;

pub use cube::{Count, Cube};
pub use error::{Error, Result};
pub use io::AnyCube;
pub use methods::{Analysis, Calibration, LifetimeMaps, Methods, analyse, analyse_decay};
