//! The f64 CPU references, one file per operation (pixels in parallel with rayon).

pub(crate) mod fit;
pub(crate) mod fret;
pub(crate) mod global;
pub(crate) mod lifetimes;
pub(crate) mod lm;
