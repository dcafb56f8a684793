//! Staging buffers kept per thread across calls: allocating page-locked memory costs
//! milliseconds, so a stream of batches reuses them.

use gpu_runtime::{Gpu, HostStaging, KnownRuntime};
use std::cell::RefCell;

thread_local!(static SLOTS: RefCell<Vec<Option<HostStaging>>> = const { RefCell::new(Vec::new()) });

/// A buffer of at least `len` bytes for `slot`, reused when it fits.
pub fn take<R: KnownRuntime>(gpu: &Gpu<R>, slot: usize, len: usize) -> HostStaging {
    let cached = SLOTS.with_borrow_mut(|s| s.get_mut(slot).and_then(Option::take));
    match cached {
        Some(buf) if buf.len() >= len && buf.is_pinned() == gpu.can_write_in_place() => buf,
        _ => gpu.host_staging(len),
    }
}

/// Return a buffer for reuse.
pub fn put(slot: usize, buf: HostStaging) {
    SLOTS.with_borrow_mut(|s| {
        if s.len() <= slot {
            s.resize_with(slot + 1, || None);
        }
        s[slot] = Some(buf);
    });
}

/// f32 values from page-locked bytes.
pub fn floats(staging: &HostStaging, n: usize) -> &[f32] {
    bytemuck::cast_slice(&staging.as_bytes()[..n * 4])
}
