//! Every kernel with a representative configuration, so that `cargo xtask build-ptx` can
//! generate CUDA C++ for each one and compile it ahead of time.
//!
//! CubeCL 0.10 builds a kernel's IR from a `ComputeClient` (it reads the device's
//! properties), so the catalog needs an opened device of any runtime: CUDA where there is
//! one, otherwise a wgpu adapter such as lavapipe. See docs/gpu.md.

use cubecl::prelude::*;

/// One kernel definition ready to compile.
pub struct CatalogEntry {
    /// Kernel module (`base`, `speckle`, ...).
    pub module: &'static str,
    /// Kernel name within the module.
    pub name: &'static str,
    /// The configured kernel; `define()` gives its IR.
    pub kernel: Box<dyn CubeKernel>,
    /// Launched without bounds checks (as the wrapper launches it).
    pub unchecked: bool,
}

impl std::fmt::Debug for CatalogEntry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}::{}", self.module, self.name)
    }
}

pub(crate) fn entry(
    module: &'static str,
    name: &'static str,
    kernel: impl CubeKernel + 'static,
) -> CatalogEntry {
    CatalogEntry {
        module,
        name,
        kernel: Box::new(kernel),
        unchecked: module != "base",
    }
}

/// Settings as the launch wrappers use them: a 1-D cube of `units`, 32-bit addressing.
pub(crate) fn settings_1d(units: u32) -> KernelSettings {
    KernelSettings::default()
        .cube_dim(CubeDim::new_1d(units))
        .address_type(AddressType::U32)
}

/// Settings for a 2-D cube.
pub(crate) fn settings_2d(x: u32, y: u32) -> KernelSettings {
    KernelSettings::default()
        .cube_dim(CubeDim::new_2d(x, y))
        .address_type(AddressType::U32)
}

/// An array argument as the launcher registers it (not aliased in place).
pub(crate) fn array() -> ArrayCompilationArg {
    ArrayCompilationArg { inplace: None }
}

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
