//! A kernel configured as its launch wrapper configures it: the settings helpers the
//! wrappers use and the entry the catalog lists, kept apart from the catalog so that kernel
//! modules and the catalog import in one direction only.

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
