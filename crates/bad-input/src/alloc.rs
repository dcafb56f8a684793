//! A global allocator with a ceiling on the live heap.

use std::alloc::{GlobalAlloc, Layout, System};
use std::io::Write;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The system allocator, refusing any allocation that would take the live heap past `cap`
/// bytes. A refused allocation aborts the process (Rust's out-of-memory handling); before
/// that, the allocator writes the request size and the case being read to stderr, unbuffered
/// and uncaptured, so the abort names its cause.
#[derive(Debug)]
pub struct CappedAlloc {
    cap: usize,
    live: AtomicUsize,
}

impl CappedAlloc {
    pub const fn new(cap: usize) -> Self {
        CappedAlloc {
            cap,
            live: AtomicUsize::new(0),
        }
    }

    /// Bytes currently allocated through this allocator.
    pub fn live(&self) -> usize {
        self.live.load(Ordering::Relaxed)
    }

    fn admit(&self, size: usize) -> bool {
        let mut live = self.live.load(Ordering::Relaxed);
        loop {
            let Some(next) = live.checked_add(size).filter(|&n| n <= self.cap) else {
                self.report_refusal(size, live);
                return false;
            };
            match self
                .live
                .compare_exchange_weak(live, next, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => return true,
                Err(now) => live = now,
            }
        }
    }

    fn report_refusal(&self, size: usize, live: usize) {
        // Format into a stack buffer: the heap is what we are refusing.
        let mut buf = [0u8; 512];
        let mut w = &mut buf[..];
        let _ = write!(
            w,
            "\nbad-input: refused an allocation of {size} bytes ({live} live, cap {}) while reading: ",
            self.cap
        );
        let used = 512 - w.len();
        let mut err = std::io::stderr().lock();
        let _ = err.write_all(&buf[..used]);
        crate::runner::with_current_case(|label| {
            let _ = err.write_all(label.as_bytes());
        });
        let _ = err.write_all(b"\n");
    }
}

// SAFETY: every method forwards to `System` with the caller's layout; the counter only
// decides whether to forward, and is decremented exactly once per successful allocation.
unsafe impl GlobalAlloc for CappedAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if !self.admit(layout.size()) {
            return std::ptr::null_mut();
        }
        // SAFETY: forwarded unchanged.
        let p = unsafe { System.alloc(layout) };
        if p.is_null() {
            self.live.fetch_sub(layout.size(), Ordering::Relaxed);
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if !self.admit(layout.size()) {
            return std::ptr::null_mut();
        }
        // SAFETY: forwarded unchanged.
        let p = unsafe { System.alloc_zeroed(layout) };
        if p.is_null() {
            self.live.fetch_sub(layout.size(), Ordering::Relaxed);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded unchanged.
        unsafe { System.dealloc(ptr, layout) };
        self.live.fetch_sub(layout.size(), Ordering::Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let old = layout.size();
        if new_size > old && !self.admit(new_size - old) {
            return std::ptr::null_mut();
        }
        // SAFETY: forwarded unchanged.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if p.is_null() {
            if new_size > old {
                self.live.fetch_sub(new_size - old, Ordering::Relaxed);
            }
        } else if new_size < old {
            self.live.fetch_sub(old - new_size, Ordering::Relaxed);
        }
        p
    }
}
