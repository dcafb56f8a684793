//! The one error type of gpu-runtime: every way device work can fail, with the facts.

/// Errors from device selection, memory, kernel compilation and launches.
///
/// Nothing in this crate panics on a machine without a GPU or without libcuda; such
/// conditions come back as one of these variants.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Error {
    /// The device name could not be parsed.
    #[error(
        "unknown device `{given}`: expected auto, cpu, cuda, cuda:N, wgpu, wgpu:N or wgpu:software"
    )]
    BadDeviceName { given: String },
    /// The named device does not exist on this machine.
    #[error("no such device `{name}`: {why}")]
    NoSuchDevice { name: String, why: String },
    /// The driver or run-time library for a backend is not installed.
    #[error("{backend} driver missing: {why}")]
    DriverMissing { backend: &'static str, why: String },
    /// An allocation would not fit in device memory.
    #[error(
        "out of device memory on {device}: {requested} bytes requested, {available} bytes available; \
         process the data in smaller chunks or set BIOGPU_MEMORY_LIMIT"
    )]
    OutOfDeviceMemory {
        device: String,
        requested: u64,
        available: u64,
    },
    /// A kernel failed to compile for the device.
    #[error("kernel `{kernel}` failed to compile: {message}")]
    KernelCompilation { kernel: String, message: String },
    /// The device cannot run the requested precision.
    #[error("{precision} is not supported on {device}: {why}")]
    UnsupportedPrecision {
        precision: &'static str,
        device: String,
        why: &'static str,
    },
    /// A launch was malformed (grid too large, buffer too short, ...).
    #[error("invalid launch of `{kernel}`: {why}")]
    InvalidLaunch { kernel: String, why: String },
    /// The work asked for a GPU but the device is the CPU.
    #[error("`{what}` needs a GPU device, but the selected device is the CPU")]
    NotAGpu { what: String },
    /// Anything else the backend reported (execution error, lost device, ...).
    #[error("{device}: {message}")]
    Backend { device: String, message: String },
}

impl Error {
    /// A malformed launch of `kernel` (grid too large, buffer too short, ...): the one
    /// constructor every launch wrapper uses.
    pub fn invalid_launch(kernel: &str, why: impl Into<String>) -> Self {
        Error::InvalidLaunch {
            kernel: kernel.to_string(),
            why: why.into(),
        }
    }

    /// Whether the device ran out of memory: callers can retry in smaller chunks or fall
    /// back to the CPU.
    pub fn is_out_of_memory(&self) -> bool {
        matches!(self, Error::OutOfDeviceMemory { .. })
    }
}

/// Result alias for gpu-runtime.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// First line of a backend message: CubeCL errors append backtraces and sources.
pub(crate) fn first_lines(message: &str, max_lines: usize) -> String {
    message
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with("Backtrace") && !l.starts_with("Caused by"))
        .take(max_lines)
        .collect::<Vec<_>>()
        .join(" | ")
}
