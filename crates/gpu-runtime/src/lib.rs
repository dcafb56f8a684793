//! gpu-runtime: choose a device (CUDA, wgpu or the CPU), open it, move data, launch kernels,
//! split large work into chunks that fit, and time it — with one error type and no panics
//! on machines without a GPU.
//!
//! ```
//! use gpu_runtime::{Backend, Device, DeviceRequest};
//! // The CPU device is always there; every modality's verbs run their f64 reference on it.
//! let cpu = Device::cpu();
//! assert_eq!((cpu.backend(), cpu.is_gpu()), (Backend::Cpu, false));
//! // Device names as `--device` and `BIOGPU_DEVICE` take them.
//! let request: DeviceRequest = "cpu".parse()?;
//! assert_eq!(Device::select(request, false)?.device.info().id, "cpu");
//! assert!("cuda:x".parse::<DeviceRequest>().is_err());
//! // `auto` picks CUDA, then a hardware wgpu adapter, then the CPU (with a note saying why).
//! let selection = Device::select(DeviceRequest::Auto, false)?;
//! println!("running on {} {:?}", selection.device, selection.notes);
//! # Ok::<(), gpu_runtime::Error>(())
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
mod provenance;
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
pub use provenance::Provenance;
pub use raw_transfers::RawTransfers;
pub use staging::{HostStaging, par_copy};
pub use timing::{Timing, bench};

/// CubeCL, re-exported so every crate uses the pinned version.
pub use cubecl;
