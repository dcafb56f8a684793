//! What the CPU and GPU paths agree on, defined once: the mesh, optics, sources and their
//! sampling, the random streams, the formulas of transport, parameters and tuning, the
//! simulation and the result types.

pub mod detector;
pub mod fixed;
pub mod mesh;
pub mod optics;
pub mod params;
pub mod physics;
pub mod rng;
pub mod simulation;
pub mod source;
pub mod tally;
