//! gpu-runtime: choose a device (CUDA, wgpu or the CPU), open it, move data, launch kernels,
//! split large work into chunks that fit, and time it — with one error type and no panics
//! on machines without a GPU.
//!
//! ```
//! use gpu_runtime::{Device, DeviceRequest};
//! // `auto` picks CUDA, then a hardware wgpu adapter, then the CPU.
//! let selection = Device::select(DeviceRequest::Auto, false).unwrap();
//! println!("running on {}", selection.device);
//! ```

mod buffer;
mod choice;
mod contain;
mod device;
mod error;
mod faults;
mod gpu;
mod host_pin;
mod kernel_cache;
mod memory;
mod raw_transfers;
mod staging;
mod timing;

pub use buffer::GpuArray;
pub use choice::{Choice, FIRST_COMPILE_SECONDS, GPU_OPEN_SECONDS, JobEstimate};
pub use contain::contain_panic;
pub use device::{
    Backend, DEVICE_ENV, Device, DeviceHandle, DeviceInfo, DeviceRequest, Inventory, Selection,
};
pub use error::{Error, Result};
pub use gpu::{Gpu, GpuJob, KnownRuntime, cuda_was_started};
pub use host_pin::HostPin;
pub use kernel_cache::{KERNEL_CACHE_ENV, KernelCache};
pub use memory::{ChunkPlan, MEMORY_LIMIT_ENV, MemoryBudget, parse_bytes};
pub use raw_transfers::RawTransfers;
pub use staging::{HostStaging, par_copy};
pub use timing::{Timing, bench};

/// CubeCL, re-exported so every crate uses the pinned version.
pub use cubecl;
