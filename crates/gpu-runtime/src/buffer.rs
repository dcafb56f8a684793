//! Typed device arrays.

use cubecl::prelude::*;
use cubecl::server::Handle;
use std::marker::PhantomData;

/// `len` elements of `T` on a device. Cloning shares the storage (it is a handle).
#[derive(Clone)]
pub struct GpuArray<T> {
    handle: Handle,
    len: usize,
    _elem: PhantomData<T>,
}

impl<T> std::fmt::Debug for GpuArray<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "GpuArray<{}>[{}]", std::any::type_name::<T>(), self.len)
    }
}

impl<T: CubeElement> GpuArray<T> {
    pub(crate) fn from_handle(handle: Handle, len: usize) -> Self {
        GpuArray {
            handle,
            len,
            _elem: PhantomData,
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The raw CubeCL handle (for launch wrappers).
    pub fn handle(&self) -> &Handle {
        &self.handle
    }

    /// The first `n` elements (at most `len`), sharing the storage: to download part of an
    /// array.
    pub fn prefix(&self, n: usize) -> GpuArray<T> {
        let n = n.min(self.len);
        let cut = ((self.len - n) * std::mem::size_of::<T>()) as u64;
        GpuArray::from_handle(self.handle.clone().offset_end(cut), n)
    }

    /// The array as a kernel argument. Safe because the length is the one allocated.
    pub fn arg<R: Runtime>(&self) -> ArrayArg<R> {
        // SAFETY: `len` elements of `T` were allocated for `handle` by `Gpu::upload`/`empty`.
        unsafe { ArrayArg::from_raw_parts(self.handle.clone(), self.len) }
    }
}
