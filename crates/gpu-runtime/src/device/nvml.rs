//! The CUDA devices as NVML (the library behind `nvidia-smi`) sees them: names, memory,
//! compute capability and multiprocessors straight from the kernel driver, without
//! starting the CUDA driver. On an H200 under gVisor `cuInit` alone costs 0.1-0.2 s and a
//! process that called it another ~0.1 s at exit; NVML answers in ~20 ms (docs/benchmarks.md,
//! 2026-11-29 runs 11-16), so listing devices and picking one for `auto` no longer wait for it.
//!
//! NVML numbers devices by PCI bus; CUDA by speed (ties by PCI bus) and only those
//! `CUDA_VISIBLE_DEVICES` lets through, and with MIG it sees instances instead of GPUs.
//! The lists agree only where no device is hidden or partitioned and the order cannot
//! differ; anywhere else the caller asks the CUDA driver itself.

use super::{Backend, DeviceInfo};
use nvml_wrapper::Nvml;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::structs::device::MigMode;

/// The CUDA driver's variables that change which devices it lists, or in what order.
const CUDA_ORDER_VARS: [&str; 2] = ["CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER"];

/// Why NVML's list is not taken for CUDA's.
#[derive(Debug)]
pub(super) enum Unlisted {
    /// No NVML library, or it cannot reach the driver.
    NoNvml,
    /// `CUDA_VISIBLE_DEVICES` or `CUDA_DEVICE_ORDER` is set.
    CudaVariables,
    /// A GPU is in MIG mode (CUDA lists its instances).
    Mig,
    /// GPUs of different kinds (CUDA's order is by speed) or none.
    Order,
    /// A compute capability whose cores per multiprocessor are not known here.
    Architecture,
    /// A query failed (the step named) although NVML was loaded.
    Failed(&'static str, NvmlError),
}

impl std::fmt::Display for Unlisted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::NoNvml => write!(f, "no NVML"),
            Self::CudaVariables => write!(f, "CUDA_VISIBLE_DEVICES or CUDA_DEVICE_ORDER set"),
            Self::Mig => write!(f, "a GPU in MIG mode"),
            Self::Order => write!(f, "no GPU, or GPUs of several kinds"),
            Self::Architecture => write!(f, "an architecture without a known core count"),
            Self::Failed(step, e) => write!(f, "NVML's {step} query failed: {e}"),
        }
    }
}

/// Every CUDA device in CUDA's ordinal order, or why NVML cannot say it with certainty.
/// Free memory is read only when `with_free`.
pub(super) fn devices(with_free: bool) -> Result<Vec<DeviceInfo>, Unlisted> {
    let _span = tracing::debug_span!("nvml_probe").entered();
    // The CUDA driver's own variables (not biogpu tuning): any of them set, ask CUDA.
    if CUDA_ORDER_VARS
        .iter()
        .any(|v| std::env::var_os(v).is_some())
    {
        return Err(Unlisted::CudaVariables);
    }
    let nvml = Nvml::builder()
        .lib_path("libnvidia-ml.so.1".as_ref())
        .init()
        .or_else(|_| Nvml::init())
        .map_err(|_| Unlisted::NoNvml)?;
    let step = |what: &'static str| move |e: NvmlError| Unlisted::Failed(what, e);
    let count = nvml.device_count().map_err(step("device count"))?;
    let version = nvml.sys_cuda_driver_version().ok().map(|v| {
        format!(
            "CUDA driver {}.{}",
            nvml_wrapper::cuda_driver_version_major(v),
            nvml_wrapper::cuda_driver_version_minor(v)
        )
    });
    let mut list = Vec::new();
    for i in 0..count {
        let dev = nvml.device_by_index(i).map_err(step("device handle"))?;
        match dev.mig_mode() {
            Ok(MigMode { current: 0, .. }) | Err(NvmlError::NotSupported) => {}
            Ok(_) => return Err(Unlisted::Mig),
            Err(e) => return Err(step("MIG mode")(e)),
        }
        let name = dev.name().map_err(step("name"))?;
        let cc = dev
            .cuda_compute_capability()
            .map_err(step("compute capability"))?;
        let (major, minor) = (cc.major as u32, cc.minor as u32);
        // NVML counts CUDA cores; multiprocessors only for MIG instances.
        let cores = dev.num_cores().map_err(step("core count"))?;
        let sms = cores_per_multiprocessor(major, minor)
            .filter(|per| cores % per == 0)
            .map(|per| cores / per)
            .ok_or(Unlisted::Architecture)?;
        let memory = dev.memory_info().map_err(step("memory"))?;
        // What CUDA calls the total leaves out the driver's reserve.
        let total = memory.total.saturating_sub(memory.reserved);
        list.push(DeviceInfo {
            id: format!("cuda:{i}"),
            name,
            backend: Backend::Cuda,
            total_memory: Some(total),
            free_memory: with_free.then_some(memory.free),
            compute_capability: Some((major, minor)),
            compute_units: Some(sms),
            max_buffer_bytes: Some(total),
            supports_f64: true,
            software: false,
            driver: version.clone(),
        });
    }
    // CUDA puts the fastest first: the same order as NVML's only among equal GPUs.
    let same_kind = list.windows(2).all(|w| w[0].name == w[1].name);
    if list.is_empty() || !same_kind {
        return Err(Unlisted::Order);
    }
    Ok(list)
}

/// CUDA cores per multiprocessor by compute capability (as the CUDA samples'
/// `_ConvertSMVer2Cores`), for the architectures biogpu's kernels target; `None` for others,
/// which the CUDA driver then describes.
fn cores_per_multiprocessor(major: u32, minor: u32) -> Option<u32> {
    match (major, minor) {
        (7, 0 | 2 | 5) | (8, 0) => Some(64),
        (8, 6 | 7 | 9) | (9, 0) | (10..=12, _) => Some(128),
        _ => None,
    }
}
