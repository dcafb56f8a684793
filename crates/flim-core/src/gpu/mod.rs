//! The GPU path, host side: packing, staging, the chunk pipeline and the calls into
//! `gpu_kernels::flim`, one file per operation (the kernels' file names).
//!
//! A cube goes up as its own bytes (u16 counts two per word) in chunks of pixels through
//! page-locked staging ([`pipeline`]), each chunk's kernel writes f32 planes and a status
//! word per pixel, and they come back into the maps ([`planes`]).

pub(crate) mod fit;
pub(crate) mod fret;
pub(crate) mod global;
pub(crate) mod lifetimes;
pub(crate) mod pipeline;
pub(crate) mod planes;
