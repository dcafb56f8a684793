//! How much device memory work may use, and splitting work into chunks that fit.
//!
//! A 30 GB FLIM stack or a whole-liver volume runs on a 16 GB card by processing
//! independent items (pixels, voxels, frames) in chunks sized from the budget.

use crate::device::{Backend, DeviceInfo};
use crate::error::{Error, Result};
use std::ops::Range;

/// Environment variable that caps the device memory biogpu uses, e.g. `512M`, `4G`.
pub const MEMORY_LIMIT_ENV: &str = "BIOGPU_MEMORY_LIMIT";

/// Bytes of device memory available to one process's work.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryBudget {
    bytes: u64,
}

impl MemoryBudget {
    /// Keep this share of free CUDA memory for our buffers (the rest for the context,
    /// NVRTC modules and allocator padding).
    const CUDA_SHARE: f64 = 0.85;
    /// wgpu cannot report free memory; assume this much.
    const WGPU_DEFAULT: u64 = 2 << 30;

    /// An explicit budget.
    pub fn new(bytes: u64) -> Self {
        MemoryBudget { bytes }
    }

    /// The budget for a device: `BIOGPU_MEMORY_LIMIT` if set, else a share of its free memory.
    pub fn for_device(info: &DeviceInfo) -> Self {
        let from_device = match info.backend {
            Backend::Cuda => info
                .free_memory
                .or(info.total_memory)
                .map_or(Self::WGPU_DEFAULT, |f| (f as f64 * Self::CUDA_SHARE) as u64),
            Backend::Wgpu => Self::WGPU_DEFAULT,
            Backend::Cpu => info.free_memory.unwrap_or(Self::WGPU_DEFAULT) / 2,
        };
        let limit = std::env::var(MEMORY_LIMIT_ENV)
            .ok()
            .and_then(|v| parse_bytes(&v).ok());
        MemoryBudget {
            bytes: limit.map_or(from_device, |l| l.min(from_device)),
        }
    }

    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Split `items` independent work items, each needing `bytes_per_item` on the device,
    /// plus `fixed_bytes` shared by all chunks (e.g. an IRF or input function), into
    /// chunks that fit this budget.
    ///
    /// ```
    /// use gpu_runtime::MemoryBudget;
    /// let plan = MemoryBudget::new(1000).plan(25, 100, 200).unwrap();
    /// assert_eq!(plan.chunk_len(), 8);
    /// assert_eq!(plan.chunks().map(|r| r.len()).sum::<usize>(), 25);
    /// ```
    pub fn plan(&self, items: usize, bytes_per_item: u64, fixed_bytes: u64) -> Result<ChunkPlan> {
        let room = self.bytes.saturating_sub(fixed_bytes);
        let fit = room.checked_div(bytes_per_item).unwrap_or(items as u64);
        if items > 0 && fit == 0 {
            return Err(Error::OutOfDeviceMemory {
                device: "budget".into(),
                requested: fixed_bytes + bytes_per_item,
                available: self.bytes,
            });
        }
        let chunk = (fit.min(items as u64) as usize).max(1);
        Ok(ChunkPlan { items, chunk })
    }
}

/// Consecutive ranges covering `0..items`, each at most `chunk_len` long.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkPlan {
    items: usize,
    chunk: usize,
}

impl ChunkPlan {
    /// Items per chunk (the last may be shorter).
    pub fn chunk_len(&self) -> usize {
        self.chunk
    }

    /// Number of chunks.
    pub fn len(&self) -> usize {
        self.items.div_ceil(self.chunk)
    }

    pub fn is_empty(&self) -> bool {
        self.items == 0
    }

    /// The ranges, in order.
    pub fn chunks(&self) -> impl Iterator<Item = Range<usize>> + '_ {
        (0..self.items)
            .step_by(self.chunk)
            .map(|s| s..(s + self.chunk).min(self.items))
    }
}

/// Parse a byte count such as `1048576`, `512M`, `512MiB`, `4G`, `1.5GB` (binary units).
pub fn parse_bytes(text: &str) -> Result<u64> {
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let bad = || Error::InvalidLaunch {
        kernel: MEMORY_LIMIT_ENV.into(),
        why: format!("cannot read `{text}` as a byte count like 512M or 4G"),
    };
    let value: f64 = num.parse().map_err(|_| bad())?;
    let scale = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1u64,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        "t" | "tb" | "tib" => 1 << 40,
        _ => return Err(bad()),
    };
    if !value.is_finite() || value <= 0.0 {
        return Err(bad());
    }
    Ok((value * scale as f64) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn chunks_cover_every_item_once_and_fit(items in 0usize..10_000, per in 1u64..5_000, fixed in 0u64..10_000, extra in 0u64..1_000_000) {
            let budget = MemoryBudget::new(fixed + per + extra);
            let plan = budget.plan(items, per, fixed).unwrap();
            let mut next = 0;
            for r in plan.chunks() {
                prop_assert_eq!(r.start, next);
                prop_assert!(!r.is_empty());
                prop_assert!(fixed + r.len() as u64 * per <= budget.bytes());
                next = r.end;
            }
            prop_assert_eq!(next, items);
            prop_assert_eq!(plan.chunks().count(), plan.len());
        }
    }

    #[test]
    fn a_single_item_larger_than_the_budget_is_an_error() {
        let e = MemoryBudget::new(100).plan(3, 101, 0).unwrap_err();
        assert!(
            matches!(
                e,
                Error::OutOfDeviceMemory {
                    requested: 101,
                    available: 100,
                    ..
                }
            ),
            "{e}"
        );
    }

    #[test]
    fn byte_counts_parse_with_units_and_reject_junk() {
        assert_eq!(parse_bytes("512M").unwrap(), 512 << 20);
        assert_eq!(parse_bytes("4GiB").unwrap(), 4 << 30);
        assert_eq!(parse_bytes("1.5k").unwrap(), 1536);
        assert_eq!(parse_bytes("1000").unwrap(), 1000);
        for bad in ["", "M", "12Q", "-3G", "0"] {
            assert!(parse_bytes(bad).is_err(), "{bad}");
        }
    }
}
