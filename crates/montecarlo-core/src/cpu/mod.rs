//! The f64 CPU reference (one file per operation, same names as the GPU's files).

pub mod replay;
pub(crate) mod transport;
