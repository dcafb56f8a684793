//! The GPU paths, host side only: packing, staging, chunk plans and calls into
//! `gpu_kernels::speckle`. Reached through [`crate::api`].

pub(crate) mod contrast;
pub(crate) mod mesi;
pub(crate) mod pixel;
pub(crate) mod staging;
pub(crate) mod stream;
pub(crate) mod tau_c;
