//! The GPU path, host side: packing, staging, the batch plan and the calls into
//! `gpu_kernels::montecarlo` (one file per kernel, same names as the CPU's files).

pub(crate) mod transport;
