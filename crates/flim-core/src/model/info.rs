//! What a run of an analysis reports besides its maps.

use gpu_runtime::Backend;

/// Where and how long an analysis ran.
#[derive(Debug, Clone, PartialEq)]
pub struct RunInfo {
    /// Where it ran: a GPU backend (f32 kernels) or the f64 CPU reference.
    pub backend: Backend,
    /// The device's id (e.g. `cuda:0`).
    pub device: String,
    /// Pixels of the cube.
    pub pixels: usize,
    /// Wall time of the call, transfers included.
    pub elapsed: std::time::Duration,
    /// The record to keep with the maps: library, device, precision, start time.
    pub provenance: gpu_runtime::Provenance,
}
