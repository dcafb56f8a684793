//! The curves' way to the device: packed time-major on all cores into page-locked staging
//! buffers (kept per thread across calls), and on CUDA streamed in pieces while the kernel
//! runs, each piece's ready count raised behind it.

use gpu_kernels::perfusion as kernels;
use gpu_runtime::{Gpu, GpuArray, HostStaging, KnownRuntime, par_copy};
use ndarray::{ArrayView2, Axis, s};
use rayon::prelude::*;
use std::ops::Range;

/// The curves go up in pieces of about this many bytes (a block of voxels of every time row
/// of a launch's time-major array): one piece is packed on all cores while the previous one
/// crosses the link, so packing and the copy overlap, and the kernel, started after the
/// first, fits the voxels of each piece as soon as it has landed.
pub(super) const PIECE_BYTES: usize = 16 << 20;
/// Pieces hold whole groups of this many voxels: 128 bytes of every time row, so that no
/// cache sector the kernel reads holds samples of a voxel whose piece is still on its way.
pub(super) const PIECE_ALIGN: usize = 32;
/// A launch's curves go up in at least this many pieces where it has the voxels: its
/// kernel starts after the first (and small jobs, such as the tests', stream too).
const MIN_PIECES: usize = 8;

/// Values per time row of a launch's curves on the device where they stream in: whole
/// 32-voxel groups, so that the rows' 128-byte lines hold the voxels of one piece only.
pub(super) fn padded_row(voxels: usize) -> usize {
    voxels.next_multiple_of(PIECE_ALIGN)
}

/// Voxels per piece of curves of `nt` samples for launches of at most `longest` voxels.
pub(super) fn piece_voxels(nt: usize, longest: usize) -> usize {
    let by_bytes = PIECE_BYTES / (4 * nt).max(1);
    by_bytes
        .min(longest.div_ceil(MIN_PIECES))
        .next_multiple_of(PIECE_ALIGN)
        .max(PIECE_ALIGN)
}

/// Staging buffers kept per thread across calls (page-locking costs milliseconds).
pub(super) mod staging_cache {
    use gpu_runtime::{Gpu, HostStaging, KnownRuntime};
    use std::cell::RefCell;

    /// Slots: 0 and 1 upload pieces, 2 a whole launch's curves (no raw copies: wgpu),
    /// 3 and 4 maps and statuses.
    pub const SLOTS_N: usize = 5;

    thread_local!(static SLOTS: RefCell<[Option<HostStaging>; SLOTS_N]> = const { RefCell::new([None, None, None, None, None]) });

    pub fn take<R: KnownRuntime>(gpu: &Gpu<R>, slot: usize, len: usize) -> HostStaging {
        let cached = SLOTS.with_borrow_mut(|s| s[slot].take());
        match cached {
            Some(b) if b.len() >= len && b.is_pinned() == gpu.can_write_in_place() => b,
            _ => gpu.host_staging(len),
        }
    }

    pub fn put(slot: usize, buf: HostStaging) {
        SLOTS.with_borrow_mut(|s| s[slot] = Some(buf));
    }
}

/// Time rows `rows` of curves `range` (voxels x time) into `dst`, time-major as f32 bytes
/// (row t at `(t - rows.start) * range.len() * 4`), on all cores: one parallel copy in
/// 1 MiB pieces when the part is one contiguous time-major block (a whole time-major
/// series), else per time row (split in pieces as well when the row is contiguous).
pub(super) fn pack(
    curves: ArrayView2<f32>,
    range: Range<usize>,
    rows: Range<usize>,
    dst: &mut [u8],
) {
    let n = range.len();
    let part = curves.slice(s![range, rows]);
    let by_time = part.t();
    if let Some(all) = by_time.as_slice() {
        par_copy(&mut dst[..all.len() * 4], bytemuck::cast_slice(all));
        return;
    }
    dst[..n * by_time.nrows() * 4]
        .par_chunks_mut(n * 4)
        .zip(by_time.axis_iter(Axis(0)).into_par_iter())
        .for_each(|(d, row)| {
            if let Some(s) = row.as_slice() {
                par_copy(d, bytemuck::cast_slice(s));
            } else {
                let d: &mut [f32] = bytemuck::cast_slice_mut(d);
                d.iter_mut().zip(row.iter()).for_each(|(a, b)| *a = *b);
            }
        });
}

/// A launch's curves split for the upload: voxels `range` (of the job), `nt` time rows,
/// pieces of `voxels` voxels (a multiple of [`PIECE_ALIGN`]; the last one shorter).
pub(super) struct Pieces {
    pub range: Range<usize>,
    pub nt: usize,
    pub voxels: usize,
}

impl Pieces {
    /// Voxel ranges within the launch.
    pub(super) fn iter(&self) -> impl Iterator<Item = Range<usize>> + '_ {
        let len = self.range.len();
        (0..len)
            .step_by(self.voxels.max(1))
            .map(move |a| a..(a + self.voxels).min(len))
    }

    /// Piece `within` packed into `dst`: time-major, row t at `t * within.len() * 4`.
    pub(super) fn pack(&self, curves: ArrayView2<f32>, within: Range<usize>, dst: &mut [u8]) {
        let s = self.range.start;
        pack(curves, s + within.start..s + within.end, 0..self.nt, dst);
    }
}

/// Curves `pieces` into `data` (time-major, a row of [`padded_row`] values per time point),
/// piece by piece: piece j + 1 is packed on the other cores while piece j is copied (into
/// its columns of every row), through the two page-locked `ring` buffers. Behind each
/// piece, on the same stream, the ready word of `counter` (the voxels whose curves are up)
/// is raised, and after the first `launch_after` pieces (at least one) `start` queues the
/// launch, whose units wait for their voxels' pieces. The copies do not wait for the queue: `data` was allocated for
/// this launch before any launch of the round, and the launch reads a voxel's curve only
/// once its piece is up.
pub(super) fn stream_pieces<R: KnownRuntime>(
    gpu: &Gpu<R>,
    curves: ArrayView2<f32>,
    pieces: &Pieces,
    data: &GpuArray<f32>,
    counter: &GpuArray<u32>,
    ring: &mut [HostStaging; 2],
    launch_after: usize,
    start: impl FnOnce() -> gpu_runtime::Result<()>,
) -> gpu_runtime::Result<()> {
    let _span = tracing::debug_span!("upload_curves", voxels = pieces.range.len()).entered();
    let len = pieces.range.len();
    let pitch = padded_row(len) * 4;
    let list: Vec<Range<usize>> = pieces.iter().collect();
    {
        let _span = tracing::debug_span!("pack_first").entered();
        pieces.pack(curves, list[0].clone(), ring[0].as_bytes_mut());
    }
    let mut start = Some(start);
    let mut result = Ok(());
    for (j, piece) in list.iter().enumerate() {
        let [a, b] = &mut *ring;
        let (cur, next) = if j % 2 == 0 { (a, b) } else { (b, a) };
        let src = &cur.as_bytes()[..piece.len() * pieces.nt * 4];
        let following = list.get(j + 1).cloned();
        let dst = next.as_bytes_mut();
        let copied = rayon::in_place_scope(|sc| {
            if let Some(within) = following {
                sc.spawn(move |_| pieces.pack(curves, within, dst));
            }
            // SAFETY: see above; the launch reads these voxels only once it reads the
            // count that lands after them, and only reads that word (atomically).
            unsafe {
                gpu.upload_rows_at_unsynced(
                    src,
                    data,
                    piece.start * 4,
                    pitch,
                    piece.len() * 4,
                    Some((counter, kernels::READY_WORD, piece.end as u32)),
                )
            }
        });
        result = match copied {
            Ok(true) => Ok(()),
            Ok(false) => Err(gpu_runtime::Error::invalid_launch(
                "perfusion upload",
                "no raw copies on this device",
            )),
            Err(e) => Err(e),
        };
        if result.is_err() {
            break;
        }
        if j + 1 >= launch_after.min(list.len())
            && let Some(start) = start.take()
        {
            start()?;
        }
    }
    if result.is_err() && start.is_none() {
        // The launch is queued: let its units find every voxel ready, so that it ends.
        let word = (len as u32).to_ne_bytes();
        // SAFETY: the launch only reads the word (atomically); the host is its only writer.
        let _ = unsafe { gpu.upload_bytes_at_unsynced(&word, counter, 4 * kernels::READY_WORD) };
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_cover_a_launch_in_aligned_blocks() {
        // The paper's liver at Nt 128: 16 MiB pieces of 32,768 voxels, the last one shorter.
        assert_eq!(piece_voxels(128, 626_400), 32_768);
        // Small launches still stream, in at least 8 pieces of whole 32-voxel groups.
        assert_eq!(piece_voxels(32, 300), 64);
        assert_eq!(piece_voxels(32, 10), 32);
        // Long curves: about 16 MiB, rounded up to whole groups.
        assert_eq!(piece_voxels(448, 1 << 20) % PIECE_ALIGN, 0);
        for (len, nt) in [(626_400, 128), (300, 32), (31, 64), (1, 8), (65, 448)] {
            let pieces = Pieces {
                range: 7..7 + len,
                nt,
                voxels: piece_voxels(nt, len),
            };
            let list: Vec<_> = pieces.iter().collect();
            assert_eq!(list.first().map(|r| r.start), Some(0));
            assert_eq!(list.last().map(|r| r.end), Some(len));
            assert!(list.windows(2).all(|w| w[0].end == w[1].start));
            assert!(
                list.iter()
                    .all(|r| r.start % PIECE_ALIGN == 0 && !r.is_empty())
            );
            // At most one 32-voxel group over the piece size.
            assert!(
                list.iter()
                    .all(|r| r.len() * nt * 4 <= PIECE_BYTES + 4 * nt * PIECE_ALIGN)
            );
        }
    }

    #[test]
    fn a_piece_packs_its_voxels_time_major() {
        let curves = ndarray::Array2::from_shape_fn((100, 3), |(v, t)| (v * 10 + t) as f32);
        let pieces = Pieces {
            range: 10..100,
            nt: 3,
            voxels: 32,
        };
        let mut dst = vec![0u8; 32 * 3 * 4];
        pieces.pack(curves.view(), 32..64, &mut dst);
        let got: &[f32] = bytemuck::cast_slice(&dst);
        for t in 0..3 {
            for k in 0..32 {
                assert_eq!(got[t * 32 + k], ((10 + 32 + k) * 10 + t) as f32);
            }
        }
    }
}
