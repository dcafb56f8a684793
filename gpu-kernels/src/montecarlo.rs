//! Monte Carlo light transport kernels (issue 5). Not built yet.

use crate::catalog::CatalogEntry;
use cubecl::prelude::*;

/// This module's kernels, configured as their launch wrappers configure them.
pub(crate) fn catalog<R: Runtime>(_client: &ComputeClient<R>) -> Vec<CatalogEntry> {
    Vec::new()
}
