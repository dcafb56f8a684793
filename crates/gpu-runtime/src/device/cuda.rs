//! CUDA probe: checks that libcuda and libnvrtc load before touching the driver, so a
//! machine without them gets an error instead of cudarc's panic.

use super::{Backend, DeviceInfo};
use crate::error::{Error, Result};
use cudarc::driver::{result, sys};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, Ordering};

static DRIVER_STARTED: AtomicBool = AtomicBool::new(false);

/// Whether a probe has started the CUDA driver (`cuInit`) in this process: NVML could not
/// list the devices.
pub(super) fn driver_started() -> bool {
    DRIVER_STARTED.load(Ordering::Relaxed)
}

/// Every CUDA device, or why there is none: from NVML where it can say ([`super::nvml`]),
/// else from the CUDA driver. `free_memory` is read only when `with_free`: through the CUDA
/// driver it needs each device's context, whose creation is most of a short command's
/// set-up (so selecting one device reads it later, through the context the work opens).
pub(super) fn probe(with_free: bool) -> Result<Vec<DeviceInfo>> {
    let _span = tracing::debug_span!("cuda_probe", with_free).entered();
    // SAFETY: `is_culib_present` only tries to dlopen the library names and closes them.
    if !unsafe { sys::is_culib_present() } {
        return Err(Error::DriverMissing {
            backend: "CUDA",
            why: "libcuda (the NVIDIA driver) not found".into(),
        });
    }
    // SAFETY: as above, for NVRTC.
    if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
        return Err(Error::DriverMissing {
            backend: "CUDA",
            why: "the driver is present but NVRTC (libnvrtc, from the CUDA toolkit or the \
                  nvidia-cuda-nvrtc package) is not; kernels cannot be compiled"
                .into(),
        });
    }
    // CubeCL's CUDA compiler reads headers from the toolkit and panics without them.
    if cubecl::cuda::install::cuda_path().is_none() {
        return Err(Error::DriverMissing {
            backend: "CUDA",
            why: "driver and NVRTC found, but no CUDA toolkit headers (set CUDA_PATH to the toolkit, \
                  e.g. /usr/local/cuda)"
                .into(),
        });
    }
    // NVML lists the devices without starting the CUDA driver, where its list is CUDA's.
    match super::nvml::devices(with_free) {
        Ok(list) => return Ok(list),
        Err(why) => tracing::debug!(%why, "NVML did not list the CUDA devices"),
    }
    crate::gpu::note_cuda_started();
    DRIVER_STARTED.store(true, Ordering::Relaxed);
    // cudarc panics on a missing driver symbol (an old driver); turn that into an error.
    catch_unwind(AssertUnwindSafe(|| query_devices(with_free))).unwrap_or_else(|panic| {
        Err(Error::DriverMissing {
            backend: "CUDA",
            why: format!("driver query failed: {}", panic_text(&panic)),
        })
    })
}

pub(super) fn query_devices(with_free: bool) -> Result<Vec<DeviceInfo>> {
    let driver_err = |what: &str, e: cudarc::driver::DriverError| Error::DriverMissing {
        backend: "CUDA",
        why: format!("{what}: {e}"),
    };
    result::init().map_err(|e| driver_err("cuInit failed", e))?;
    let count =
        result::device::get_count().map_err(|e| driver_err("cuDeviceGetCount failed", e))?;
    if count == 0 {
        return Err(Error::DriverMissing {
            backend: "CUDA",
            why: "the driver reports no CUDA device".into(),
        });
    }
    let version = driver_version();
    (0..count)
        .map(|i| {
            let dev = result::device::get(i).map_err(|e| driver_err("cuDeviceGet failed", e))?;
            let name =
                result::device::get_name(dev).unwrap_or_else(|_| "unknown CUDA device".into());
            // SAFETY: `dev` is a valid device handle from `device::get`; these calls read properties.
            let (total, major, minor, sms) = unsafe {
                let attr = |a| result::device::get_attribute(dev, a).unwrap_or(0);
                (
                    result::device::total_mem(dev).ok().map(|b| b as u64),
                    attr(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR),
                    attr(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR),
                    attr(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT),
                )
            };
            Ok(DeviceInfo {
                id: format!("cuda:{i}"),
                name,
                backend: Backend::Cuda,
                total_memory: total,
                free_memory: if with_free { free_memory(dev) } else { None },
                compute_capability: Some((major as u32, minor as u32)),
                compute_units: Some(sms as u32),
                max_buffer_bytes: total,
                supports_f64: true,
                software: false,
                driver: version.clone(),
            })
        })
        .collect()
}

/// Free memory on `dev`, read through its primary context (the one CubeCL uses too).
fn free_memory(dev: sys::CUdevice) -> Option<u64> {
    // SAFETY: retain/set_current/release on a valid device; the primary context is shared
    // and reference counted, so releasing our reference leaves CubeCL's intact.
    unsafe {
        let ctx = result::primary_ctx::retain(dev).ok()?;
        let free = result::ctx::set_current(ctx)
            .ok()
            .and_then(|()| result::mem_get_info().ok())
            .map(|(f, _)| f as u64);
        let _ = result::primary_ctx::release(dev);
        free
    }
}

/// Free memory on the device of `info` now, read through its primary context (made current
/// on this thread and kept, as CubeCL keeps it): no context is created only to be destroyed.
pub(crate) fn free_memory_now(info: &DeviceInfo) -> Option<u64> {
    make_current(info).ok()?;
    result::mem_get_info().ok().map(|(free, _)| free as u64)
}

fn driver_version() -> Option<String> {
    let mut v = 0i32;
    // SAFETY: cuDriverGetVersion writes one int.
    let ok = unsafe { sys::cuDriverGetVersion(&raw mut v) } == sys::CUresult::CUDA_SUCCESS;
    ok.then(|| format!("CUDA driver {}.{}", v / 1000, (v % 1000) / 10))
}

pub(crate) fn panic_text(panic: &Box<dyn std::any::Any + Send>) -> String {
    panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_string()))
        .unwrap_or_else(|| "unknown panic".into())
}

/// Make the primary context of a CUDA device current on this thread (once per thread),
/// for driver calls made outside CubeCL. A no-op for other backends.
pub(crate) fn make_current(info: &DeviceInfo) -> Result<()> {
    use std::cell::Cell;
    thread_local!(static CURRENT: Cell<Option<i32>> = const { Cell::new(None) });
    if info.backend != Backend::Cuda {
        return Ok(());
    }
    let ordinal: i32 = info.id.trim_start_matches("cuda:").parse().unwrap_or(0);
    if CURRENT.get() == Some(ordinal) {
        return Ok(());
    }
    let fail = |e: cudarc::driver::DriverError| Error::Backend {
        device: info.id.clone(),
        message: format!("cannot make the CUDA context current: {e}"),
    };
    let dev = result::device::get(ordinal).map_err(fail)?;
    // SAFETY: retaining the primary context of a valid device and making it current; the
    // reference is kept for the life of the thread, as CubeCL keeps its own.
    unsafe {
        let ctx = result::primary_ctx::retain(dev).map_err(fail)?;
        result::ctx::set_current(ctx).map_err(fail)?;
    }
    CURRENT.set(Some(ordinal));
    Ok(())
}
