//! Raw copies outside CubeCL's queue: page-locked host memory and driver copies on CUDA
//! (one non-blocking stream per host thread), nothing on other runtimes, which fall back to
//! CubeCL's own transfers.

use cubecl::prelude::*;
use std::ptr::NonNull;

/// Raw copies a runtime can do outside CubeCL's queue (CUDA), or `false` to fall back.
pub trait RawTransfers: Runtime {
    /// Whether this runtime has pinned memory and raw copies (the methods below succeed).
    const RAW: bool = false;
    /// Page-locked host memory of `len` bytes, if the runtime has it.
    fn pinned_alloc(_len: usize) -> Option<NonNull<u8>> {
        None
    }
    /// Copy `src` into the device memory of `dst`; `Ok(false)` when not supported.
    fn copy_to_device(
        client: &ComputeClient<Self>,
        dst: &cubecl::server::Handle,
        src: &[u8],
    ) -> std::result::Result<bool, String> {
        Self::copy_to_device_at(client, dst, 0, src)
    }
    /// Copy `src` into the device memory of `dst` from byte `offset` on; `Ok(false)` when
    /// not supported.
    fn copy_to_device_at(
        _client: &ComputeClient<Self>,
        _dst: &cubecl::server::Handle,
        _offset: usize,
        _src: &[u8],
    ) -> std::result::Result<bool, String> {
        Ok(false)
    }
    /// Copy `rows` rows of `width` bytes, packed one after the other in `src`, into the
    /// device memory of `dst` at byte `offset + r * pitch` for row `r`, then `flag`'s bytes
    /// (handle, byte offset, bytes) on the same stream; `Ok(false)` when not supported.
    fn copy_rows_to_device_at(
        _client: &ComputeClient<Self>,
        _dst: &cubecl::server::Handle,
        _offset: usize,
        _pitch: usize,
        _width: usize,
        _src: &[u8],
        _flag: Option<(&cubecl::server::Handle, usize, &[u8])>,
    ) -> std::result::Result<bool, String> {
        Ok(false)
    }
    /// Copy the device memory of `src` into `dst`; `Ok(false)` when not supported.
    fn copy_to_host(
        _client: &ComputeClient<Self>,
        _src: &cubecl::server::Handle,
        _dst: &mut [u8],
    ) -> std::result::Result<bool, String> {
        Ok(false)
    }
}

impl RawTransfers for cubecl::wgpu::WgpuRuntime {}

impl RawTransfers for cubecl::cuda::CudaRuntime {
    const RAW: bool = true;

    fn pinned_alloc(len: usize) -> Option<NonNull<u8>> {
        // SAFETY: cuMemHostAlloc returns page-locked memory of `len` bytes or an error.
        let ptr = unsafe { cudarc::driver::result::malloc_host(len.max(1), 0) }.ok()?;
        NonNull::new(ptr.cast::<u8>())
    }

    fn copy_to_device_at(
        client: &ComputeClient<Self>,
        dst: &cubecl::server::Handle,
        offset: usize,
        src: &[u8],
    ) -> std::result::Result<bool, String> {
        let res = client
            .get_resource(dst.clone())
            .map_err(|e| e.to_string())?;
        let ptr = res.resource().ptr + offset as u64;
        copy_stream::run(|stream| {
            // SAFETY: `ptr` addresses at least `src.len()` bytes of the handle's allocation
            // (the callers check `offset + src.len()` against the array); `run`
            // synchronises the stream before `src` can be touched again.
            unsafe { cudarc::driver::result::memcpy_htod_async(ptr, src, stream) }
        })?;
        Ok(true)
    }

    fn copy_rows_to_device_at(
        client: &ComputeClient<Self>,
        dst: &cubecl::server::Handle,
        offset: usize,
        pitch: usize,
        width: usize,
        src: &[u8],
        flag: Option<(&cubecl::server::Handle, usize, &[u8])>,
    ) -> std::result::Result<bool, String> {
        use cudarc::driver::sys;
        let res = client
            .get_resource(dst.clone())
            .map_err(|e| e.to_string())?;
        let flag = match flag {
            Some((handle, at, bytes)) => {
                let res = client
                    .get_resource(handle.clone())
                    .map_err(|e| e.to_string())?;
                Some((res.resource().ptr + at as u64, bytes))
            }
            None => None,
        };
        let copy = sys::CUDA_MEMCPY2D {
            srcMemoryType: sys::CUmemorytype::CU_MEMORYTYPE_HOST,
            srcHost: src.as_ptr().cast(),
            srcPitch: width,
            dstMemoryType: sys::CUmemorytype::CU_MEMORYTYPE_DEVICE,
            dstDevice: res.resource().ptr + offset as u64,
            dstPitch: pitch,
            WidthInBytes: width,
            Height: src.len() / width.max(1),
            srcXInBytes: 0,
            srcY: 0,
            srcDevice: 0,
            srcArray: std::ptr::null_mut(),
            dstXInBytes: 0,
            dstY: 0,
            dstHost: std::ptr::null_mut(),
            dstArray: std::ptr::null_mut(),
        };
        copy_stream::run(|stream| {
            if copy.Height > 0 {
                // SAFETY: the caller checked that every row lies within the handle's
                // allocation and `src` holds `Height` rows; `run` synchronises the stream
                // before `src` can be touched again.
                unsafe { sys::cuMemcpy2DAsync_v2(&raw const copy, stream) }.result()?;
            }
            match flag {
                // SAFETY: the caller checked the flag's bytes against its allocation;
                // queued after the rows on the same stream, synchronised by `run`.
                Some((ptr, bytes)) => unsafe {
                    cudarc::driver::result::memcpy_htod_async(ptr, bytes, stream)
                },
                None => Ok(()),
            }
        })?;
        Ok(true)
    }

    fn copy_to_host(
        client: &ComputeClient<Self>,
        src: &cubecl::server::Handle,
        dst: &mut [u8],
    ) -> std::result::Result<bool, String> {
        let res = client
            .get_resource(src.clone())
            .map_err(|e| e.to_string())?;
        let ptr = res.resource().ptr;
        copy_stream::run(|stream| {
            // SAFETY: as above, in the other direction.
            unsafe { cudarc::driver::result::memcpy_dtoh_async(dst, ptr, stream) }
        })?;
        Ok(true)
    }
}

/// One non-blocking CUDA stream per host thread (and context) for biogpu's own copies.
///
/// The synchronous driver copies run on the legacy default stream, which serialises every
/// thread's copies: one thread's upload could not overlap another's download. CubeCL
/// already gives each host thread its own stream for kernels; with copies on per-thread
/// streams too, threads that each run upload, kernel, download overlap all three.
mod copy_stream {
    use cudarc::driver::{result, sys};
    use std::cell::RefCell;

    /// Streams of this thread, keyed by the context they belong to.
    struct Streams(Vec<(usize, sys::CUstream)>);

    impl Drop for Streams {
        fn drop(&mut self) {
            for &(_, stream) in &self.0 {
                // SAFETY: created by `run` on this thread, destroyed once at thread exit.
                let _ = unsafe { result::stream::destroy(stream) };
            }
        }
    }

    thread_local! {
        static STREAMS: RefCell<Streams> = const { RefCell::new(Streams(Vec::new())) };
    }

    /// Enqueue `copy` on this thread's stream for the current context and wait for it.
    pub(super) fn run(
        copy: impl FnOnce(sys::CUstream) -> Result<(), result::DriverError>,
    ) -> Result<(), String> {
        let err = |e: result::DriverError| e.to_string();
        // The context `with_context` made current on this thread.
        let ctx = result::ctx::get_current().map_err(err)?;
        let key = ctx.map_or(0, |c| c as usize);
        let stream = STREAMS.with_borrow_mut(|streams| {
            if let Some(&(_, s)) = streams.0.iter().find(|(k, _)| *k == key) {
                return Ok(s);
            }
            let s = result::stream::create(result::stream::StreamKind::NonBlocking)?;
            streams.0.push((key, s));
            Ok(s)
        });
        let stream = stream.map_err(err)?;
        copy(stream).map_err(err)?;
        // SAFETY: the stream belongs to this thread and is alive.
        unsafe { result::stream::synchronize(stream) }.map_err(err)
    }
}
