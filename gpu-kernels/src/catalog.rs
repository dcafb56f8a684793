//! Every kernel with a representative configuration, so that `cargo xtask build-ptx` can
//! generate CUDA C++ for each one and compile it ahead of time.
//!
//! CubeCL 0.10 builds a kernel's IR from a `ComputeClient` (it reads the device's
//! properties), so the catalog needs an opened device of any runtime: CUDA where there is
//! one, otherwise a wgpu adapter such as lavapipe. See docs/gpu.md.

use crate::configured::{array, entry, settings_1d};
use cubecl::prelude::*;

pub use crate::configured::CatalogEntry;

/// Every kernel in this crate, configured as its launch wrapper configures it.
pub fn all<R: Runtime>(client: &ComputeClient<R>) -> Vec<CatalogEntry> {
    use crate::base::{atomic_accumulate_kernel, axpy_kernel, block_sum_kernel, fill_kernel};
    let s = || settings_1d(crate::CUBE_1D);
    let c = || client.clone();
    let mut entries = vec![
        entry(
            "base",
            "fill",
            fill_kernel::FillKernel::<R>::new(s(), c(), array(), ()),
        ),
        entry(
            "base",
            "axpy",
            axpy_kernel::AxpyKernel::<R>::new(s(), c(), (), array(), array()),
        ),
        entry(
            "base",
            "block_sum",
            block_sum_kernel::BlockSumKernel::<R>::new(s(), c(), array(), array(), crate::CUBE_1D),
        ),
        entry(
            "base",
            "atomic_accumulate",
            atomic_accumulate_kernel::AtomicAccumulateKernel::<R>::new(
                s(),
                c(),
                array(),
                array(),
                array(),
            ),
        ),
    ];
    entries.extend(crate::speckle::catalog(client));
    entries.extend(crate::flim::catalog(client));
    entries.extend(crate::montecarlo::catalog(client));
    entries.extend(crate::perfusion::catalog(client));
    entries
}
