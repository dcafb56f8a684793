//! Page-locking host memory in place, so that later uploads from it run at the link's full
//! rate with no staging copy.
//!
//! A pageable buffer goes to a CUDA device through a copy into pinned memory first (all of a
//! GPU host's cores copy at about the link's own rate, so the copy doubles the cost of an
//! upload unless it overlaps perfectly). Locking the buffer itself costs more than one such
//! copy (docs/benchmarks.md), so it pays for data that go up more than once: a cube analysed
//! by several methods, a stack streamed repeatedly, a benchmark.

use crate::device::{Backend, Device, DeviceInfo};
use crate::error::{Error, Result};

/// Host memory page-locked in place for a CUDA device; unlocked on drop. On other devices
/// nothing is locked and [`HostPin::is_locked`] is false.
#[derive(Debug)]
pub struct HostPin {
    ptr: usize,
    len: usize,
    info: Option<DeviceInfo>,
}

impl HostPin {
    /// Page-lock `bytes` for `device` when it is a CUDA GPU.
    ///
    /// # Safety
    /// The memory of `bytes` must stay allocated, and must not be freed or reallocated,
    /// until the returned value is dropped (the lock refers to the address range).
    pub unsafe fn new(device: &Device, bytes: &[u8]) -> Result<Self> {
        let info = device.info();
        if info.backend != Backend::Cuda || bytes.is_empty() {
            return Ok(Self {
                ptr: bytes.as_ptr() as usize,
                len: bytes.len(),
                info: None,
            });
        }
        crate::device::make_current(info)?;
        let _span = tracing::debug_span!("host_pin", bytes = bytes.len()).entered();
        // PORTABLE: every context sees the range as pinned (CubeCL and biogpu's copy
        // streams share the primary context, but a later caller might not).
        // SAFETY: a valid host range, registered once and unregistered in Drop; the caller
        // keeps it allocated until then.
        let rc = unsafe {
            cudarc::driver::sys::cuMemHostRegister_v2(
                bytes.as_ptr().cast_mut().cast(),
                bytes.len(),
                cudarc::driver::sys::CU_MEMHOSTREGISTER_PORTABLE,
            )
        };
        if rc != cudarc::driver::sys::CUresult::CUDA_SUCCESS {
            return Err(Error::Backend {
                device: info.id.clone(),
                message: format!(
                    "cannot page-lock {} bytes of host memory: {rc:?}",
                    bytes.len()
                ),
            });
        }
        Ok(Self {
            ptr: bytes.as_ptr() as usize,
            len: bytes.len(),
            info: Some(info.clone()),
        })
    }

    /// Whether the memory is page-locked (a CUDA device).
    pub fn is_locked(&self) -> bool {
        self.info.is_some()
    }

    /// Whether `bytes` lies inside the locked range.
    pub fn covers(&self, bytes: &[u8]) -> bool {
        let start = bytes.as_ptr() as usize;
        self.is_locked() && start >= self.ptr && start + bytes.len() <= self.ptr + self.len
    }
}

impl Drop for HostPin {
    fn drop(&mut self) {
        if let Some(info) = &self.info {
            let _span = tracing::debug_span!("host_unpin", bytes = self.len).entered();
            if crate::device::make_current(info).is_ok() {
                // SAFETY: the range registered in `new`, unregistered once, here.
                let _ = unsafe { cudarc::driver::sys::cuMemHostUnregister(self.ptr as *mut _) };
            }
        }
    }
}
