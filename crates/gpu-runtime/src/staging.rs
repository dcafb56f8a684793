//! Fast host transfers: reusable host staging buffers, page-locked (pinned) on CUDA, and
//! copies between them and device arrays.
//!
//! CubeCL 0.10 uploads through `create_from_slice`, which copies the slice, stages it and
//! allocates per call, far below the link's rate (docs/benchmarks.md). Streaming needs the link's full
//! rate, so on CUDA biogpu keeps its own pinned buffers and copies with the driver into
//! buffers CubeCL allocated, draining CubeCL's queue before and after so the copies are
//! ordered with its kernels. Other backends fall back to CubeCL's own transfers.

use crate::buffer::GpuArray;
use crate::error::{Error, Result};
use crate::gpu::{Gpu, KnownRuntime};
use cubecl::prelude::*;
use std::ptr::NonNull;

/// A host buffer of `len` bytes for transfers; pinned when the device is a CUDA GPU.
pub struct HostStaging {
    ptr: NonNull<u8>,
    len: usize,
    pinned: bool,
    /// Heap storage when not pinned: owns the memory `ptr` points into (never read
    /// directly; it is freed when the staging buffer drops).
    _heap: Vec<u64>,
}

// SAFETY: the buffer is exclusively owned; pinned memory is plain host memory.
unsafe impl Send for HostStaging {}

impl std::fmt::Debug for HostStaging {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostStaging")
            .field("len", &self.len)
            .field("pinned", &self.pinned)
            .finish_non_exhaustive()
    }
}

impl HostStaging {
    /// Bytes held.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether the memory is page-locked (transfers run at the link's full rate).
    pub fn is_pinned(&self) -> bool {
        self.pinned
    }

    pub fn as_bytes(&self) -> &[u8] {
        // SAFETY: `ptr` points to `len` initialised bytes owned by self.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    pub fn as_bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as above, and `&mut self` makes the access exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }

    /// Copy `src` into the start of the buffer on all cores, zero-padded to whole 32-bit
    /// words (the kernels read words); returns the words written.
    pub fn write_words(&mut self, src: &[u8]) -> usize {
        let words = src.len().div_ceil(4);
        let dst = &mut self.as_bytes_mut()[..words * 4];
        par_copy(&mut dst[..src.len()], src);
        dst[src.len()..].fill(0);
        words
    }

    fn heap(len: usize) -> Self {
        let mut heap = vec![0u64; len.div_ceil(8).max(1)];
        let ptr = NonNull::new(heap.as_mut_ptr().cast::<u8>()).expect("Vec pointers are non-null");
        HostStaging {
            ptr,
            len,
            pinned: false,
            _heap: heap,
        }
    }
}

impl Drop for HostStaging {
    fn drop(&mut self) {
        if self.pinned {
            // SAFETY: allocated by cuMemHostAlloc in `pinned_alloc` and freed once, here.
            let _ = unsafe { cudarc::driver::result::free_host(self.ptr.as_ptr().cast()) };
        }
    }
}

/// `dst.copy_from_slice(src)` on all cores, in 1 MiB pieces: one core cannot keep up with
/// the host link when copying into pinned memory; a GPU host's cores together can.
pub fn par_copy(dst: &mut [u8], src: &[u8]) {
    use rayon::prelude::*;
    const PIECE: usize = 1 << 20;
    dst.par_chunks_mut(PIECE)
        .zip(src.par_chunks(PIECE))
        .for_each(|(d, s)| d.copy_from_slice(s));
}

impl<R: KnownRuntime> Gpu<R> {
    /// A reusable host buffer of `len` bytes (pinned on CUDA) for [`Gpu::upload_staged`]
    /// and [`Gpu::download_staged`].
    pub fn host_staging(&self, len: usize) -> HostStaging {
        match R::pinned_alloc(len) {
            Some(ptr) => HostStaging {
                ptr,
                len,
                pinned: true,
                _heap: Vec::new(),
            },
            None => HostStaging::heap(len),
        }
    }

    /// A new device array of `len` elements holding the first `len` elements of `staging`.
    pub fn upload_staged<T: CubeElement>(
        &self,
        staging: &HostStaging,
        len: usize,
    ) -> Result<GpuArray<T>> {
        let bytes = len * std::mem::size_of::<T>();
        let src = staging
            .as_bytes()
            .get(..bytes)
            .ok_or_else(|| too_small("upload_staged", bytes, staging.len()))?;
        let _span =
            tracing::debug_span!("upload_staged", bytes, pinned = staging.is_pinned()).entered();
        let dst = self.empty::<T>(len)?;
        // The buffer may reuse memory a queued kernel still reads: drain the queue first.
        self.sync()?;
        if self.with_context(|| R::copy_to_device(self.client(), dst.handle(), src))? {
            Ok(dst)
        } else {
            self.upload(T::from_bytes(src))
        }
    }

    /// Overwrite device array `dst` with the first `dst.len()` elements of `staging`, after
    /// the queued work that uses `dst` (reusing one device buffer across a stream).
    pub fn upload_staged_into<T: CubeElement>(
        &self,
        staging: &HostStaging,
        dst: &GpuArray<T>,
    ) -> Result<()> {
        let bytes = dst.len() * std::mem::size_of::<T>();
        let src = staging
            .as_bytes()
            .get(..bytes)
            .ok_or_else(|| too_small("upload_staged_into", bytes, staging.len()))?;
        let _span = tracing::debug_span!("upload_staged_into", bytes, pinned = staging.is_pinned())
            .entered();
        self.upload_bytes_into(src, dst)
    }

    /// Overwrite the first `src.len()` bytes of device array `dst` with `src`, after the
    /// queued work that uses `dst`. At the link's full rate when `src` is page-locked
    /// (a [`HostStaging`] or memory under a [`crate::HostPin`]); CUDA only, like
    /// [`Gpu::upload_staged_into`].
    pub fn upload_bytes_into<T: CubeElement>(&self, src: &[u8], dst: &GpuArray<T>) -> Result<()> {
        let _span = tracing::debug_span!("upload_bytes_into", bytes = src.len()).entered();
        let room = dst.len() * std::mem::size_of::<T>();
        if src.len() > room {
            return Err(Error::InvalidLaunch {
                kernel: "upload_bytes_into".into(),
                why: format!("{} bytes into a device array of {room}", src.len()),
            });
        }
        self.sync()?;
        if self.with_context(|| R::copy_to_device(self.client(), dst.handle(), src))? {
            return Ok(());
        }
        Err(Error::InvalidLaunch {
            kernel: "upload_bytes_into".into(),
            why: format!(
                "{} cannot write into an existing buffer; use upload_staged",
                self.info().id
            ),
        })
    }

    /// Copy `src` into device array `dst` from byte `offset` on **without** draining
    /// CubeCL's queue first, so that the copy overlaps the kernels queued before it (the
    /// copy itself has ended when this returns). `Ok(false)`, having copied nothing, where
    /// the runtime has no raw copies (wgpu): use [`Gpu::upload_staged`] there.
    ///
    /// # Safety
    ///
    /// No queued or running work may read or write those bytes of `dst`: e.g. `dst` was
    /// allocated before the queued launches and none of them takes it.
    pub unsafe fn upload_bytes_at_unsynced<T: CubeElement>(
        &self,
        src: &[u8],
        dst: &GpuArray<T>,
        offset: usize,
    ) -> Result<bool> {
        let room = dst.len() * std::mem::size_of::<T>();
        if offset.checked_add(src.len()).is_none_or(|end| end > room) {
            return Err(Error::InvalidLaunch {
                kernel: "upload_bytes_at_unsynced".into(),
                why: format!(
                    "{} bytes at offset {offset} into a device array of {room}",
                    src.len()
                ),
            });
        }
        if !R::RAW {
            return Ok(false);
        }
        let _span = tracing::debug_span!("upload_unsynced", bytes = src.len(), offset).entered();
        self.with_context(|| R::copy_to_device_at(self.client(), dst.handle(), offset, src))
    }

    /// Copy `rows` rows of `width` bytes, packed one after the other in `src`, into `dst`
    /// at byte `offset + r * pitch` for row `r`, without waiting for the queued work, as
    /// [`Gpu::upload_bytes_at_unsynced`] (a block of columns of a row-major array, e.g. some
    /// voxels of every time row); then, with `flag = Some((words, k, value))`, `value` into
    /// `words[k]` on the same stream, so that a running kernel that sees the new value finds
    /// the rows in place (one synchronisation for both). Returns `Ok(false)` where the
    /// runtime has no raw copies.
    ///
    /// # Safety
    ///
    /// As [`Gpu::upload_bytes_at_unsynced`]: no queued or running work may access those
    /// bytes of `dst` while they are copied, and running work may only read `words[k]`.
    pub unsafe fn upload_rows_at_unsynced<T: CubeElement>(
        &self,
        src: &[u8],
        dst: &GpuArray<T>,
        offset: usize,
        pitch: usize,
        width: usize,
        flag: Option<(&GpuArray<u32>, usize, u32)>,
    ) -> Result<bool> {
        if let Some((words, k, _)) = flag
            && k >= words.len()
        {
            return Err(Error::InvalidLaunch {
                kernel: "upload_rows_at_unsynced".into(),
                why: format!("flag word {k} of an array of {}", words.len()),
            });
        }
        let room = dst.len() * std::mem::size_of::<T>();
        let rows = src.len().checked_div(width).unwrap_or(0);
        let fits = width <= pitch
            && src.len() == rows * width
            && (rows == 0
                || (rows - 1)
                    .checked_mul(pitch)
                    .and_then(|last| last.checked_add(offset + width))
                    .is_some_and(|end| end <= room));
        if !fits {
            return Err(Error::InvalidLaunch {
                kernel: "upload_rows_at_unsynced".into(),
                why: format!(
                    "{} bytes in rows of {width} at offset {offset}, pitch {pitch}, into a device array of {room}",
                    src.len()
                ),
            });
        }
        if !R::RAW {
            return Ok(false);
        }
        if rows == 0 && flag.is_none() {
            return Ok(true);
        }
        let _span = tracing::debug_span!("upload_rows_unsynced", rows, width, offset).entered();
        let bytes = flag.map(|(_, _, v)| v.to_ne_bytes());
        let flag = flag
            .zip(bytes.as_ref())
            .map(|((words, k, _), b)| (words.handle(), 4 * k, &b[..]));
        self.with_context(|| {
            R::copy_rows_to_device_at(self.client(), dst.handle(), offset, pitch, width, src, flag)
        })
    }

    /// Whether [`Gpu::upload_staged_into`] is available (raw copies, i.e. CUDA).
    pub fn can_write_in_place(&self) -> bool {
        R::RAW
    }

    /// Copy `src` into the start of `staging`, after the queued work that writes it.
    pub fn download_staged<T: CubeElement>(
        &self,
        src: &GpuArray<T>,
        staging: &mut HostStaging,
    ) -> Result<()> {
        let bytes = src.len() * std::mem::size_of::<T>();
        let len = staging.len();
        let dst = staging
            .as_bytes_mut()
            .get_mut(..bytes)
            .ok_or_else(|| too_small("download_staged", bytes, len))?;
        let _span = tracing::debug_span!("download_staged", bytes).entered();
        self.sync()?;
        if self.with_context(|| R::copy_to_host(self.client(), src.handle(), dst))? {
            return Ok(());
        }
        let host = self.download(src)?;
        dst.copy_from_slice(T::as_bytes(&host));
        Ok(())
    }

    /// Run a raw driver call with the device's primary context current on this thread.
    pub(crate) fn with_context(
        &self,
        f: impl FnOnce() -> std::result::Result<bool, String>,
    ) -> Result<bool> {
        crate::device::make_current(self.info())?;
        f().map_err(|message| Error::Backend {
            device: self.info().id.clone(),
            message,
        })
    }
}

fn too_small(what: &str, need: usize, have: usize) -> Error {
    Error::InvalidLaunch {
        kernel: what.into(),
        why: format!("staging buffer of {have} bytes, {need} needed"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn written_words_hold_the_bytes_then_zeros_up_to_the_word() {
        // Three MiB and a few bytes: several parallel pieces and a partial last word.
        let src: Vec<u8> = (0..(3 << 20) + 5).map(|i| (i % 251) as u8 + 1).collect();
        let mut staging = HostStaging::heap(src.len() + 16);
        staging.as_bytes_mut().fill(0xAA);
        let words = staging.write_words(&src);
        assert_eq!(words, src.len().div_ceil(4));
        let got = staging.as_bytes();
        assert_eq!(&got[..src.len()], &src[..]);
        assert!(got[src.len()..words * 4].iter().all(|&b| b == 0));
        assert!(got[words * 4..].iter().all(|&b| b == 0xAA));
    }
}
