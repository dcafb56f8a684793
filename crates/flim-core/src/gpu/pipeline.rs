//! The chunk pipeline of the per-pixel GPU paths: a cube goes up as its own bytes (u16
//! counts two per word) in chunks of pixels through page-locked staging, each chunk's
//! kernel writes f32 planes and a status word per pixel, and they come back.
//!
//! Chunks are pipelined: the calling thread copies chunk c + 1 into a pinned slot on all
//! cores while [`GpuTuning::workers`] threads (kept for the life of the process) upload, run and
//! download earlier chunks. CubeCL gives each host thread its own CUDA stream and
//! gpu-runtime's pinned copies run on per-thread streams too, so one worker's upload
//! overlaps another's kernel and a third's download. Transfer-bound methods take chunks of
//! at most [`GpuTuning::chunk_bytes`] (16 MiB by default); fits take at least a minimum so
//! that each launch fills the GPU. All chunks in flight fit the device's memory budget;
//! results do not depend on the chunking (tested bit for bit). Pinned buffers are kept
//! between calls: page-locking a hundred megabytes costs more than analysing them. A cube
//! page-locked in place ([`Cube::pin_on`]) skips the staging copy: each worker uploads its
//! chunk straight from the cube's memory, so the link alone bounds the time. The first cube
//! of a process goes up straight from its pageable memory too: a single run would pay
//! page-locking its staging and never use it again.

use crate::model::cube::{Count, Cube};
use crate::model::tuning::{GpuTuning, MAX_WORKERS};
use gpu_runtime::{Gpu, GpuArray, HostStaging, KnownRuntime};
use std::collections::VecDeque;
use std::sync::Mutex;
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};

/// A kernel launch on one chunk of pixels.
pub(crate) type ChunkLaunch<'a, R> = dyn Fn(
        &Gpu<R>,
        &GpuArray<u32>,
        usize,
        usize,
        &GpuArray<f32>,
        &GpuArray<u32>,
    ) -> gpu_runtime::Result<()>
    + Sync
    + 'a;

/// What a per-pixel kernel run over the cube needs to know.
pub(crate) struct PixelJob<'a, R: KnownRuntime> {
    /// f32 planes written per pixel.
    pub planes: usize,
    /// Fewest pixels per chunk (memory permitting). Transfer-bound kernels take
    /// [`GpuTuning::chunk_bytes`] chunks so copies overlap; an iterative fit needs launches
    /// big enough to fill the GPU (a 16 MiB chunk of 256-bin pixels is 32k threads, a
    /// fraction of one wave on a large GPU, which left the fits latency-bound).
    pub min_chunk_pixels: usize,
    /// Launch on one chunk: (gpu, counts as words, its first pixel, its pixels, out
    /// planes, status).
    pub launch: &'a ChunkLaunch<'a, R>,
    /// Workers and chunk size.
    pub tuning: GpuTuning,
}

/// Host memory of one chunk in flight.
struct Slot {
    input: HostStaging,
    output: HostStaging,
    status: HostStaging,
}

/// Slots kept between calls (page-locking is slow); held for a whole pipeline run, so one
/// pipeline runs at a time (its workers must all be running for it to finish).
static PIPELINE: Mutex<Vec<Slot>> = Mutex::new(Vec::new());

impl Slot {
    fn fits(&self, raw: bool, input: usize, output: usize, status: usize) -> bool {
        self.input.is_pinned() == raw
            && self.input.len() >= input
            && self.output.len() >= output
            && self.status.len() >= status
    }
}

/// A chunk for a worker: its pixel range and the slot it travels with.
type Job = (std::ops::Range<usize>, Slot);

/// Device arrays of one worker, allocated on its thread.
struct DeviceBuffers {
    input: GpuArray<u32>,
    out: GpuArray<f32>,
    status: GpuArray<u32>,
}

/// A chunk's results as they come back: its pixel range, its planes (plane-major,
/// `planes * range.len()` values) and one status word per pixel.
pub(crate) type ChunkSink<'a> = dyn FnMut(std::ops::Range<usize>, &[f32], &[u32]) + 'a;

/// Threads the pipeline's workers run on, kept for the life of the process: CubeCL sets up
/// a stream and its state for each new host thread, which costs more at the first launch
/// of a fresh thread than a 134 MB cube's kernels.
fn pipeline_pool() -> &'static rayon::ThreadPool {
    static POOL: std::sync::OnceLock<rayon::ThreadPool> = std::sync::OnceLock::new();
    POOL.get_or_init(|| {
        rayon::ThreadPoolBuilder::new()
            .num_threads(MAX_WORKERS)
            .thread_name(|i| format!("biogpu-flim-{i}"))
            .build()
            .expect("spawning the FLIM pipeline threads")
    })
}

/// Run a per-pixel kernel over every pixel of `cube`, handing each chunk's results to
/// `sink` (in no particular order) as they come back.
///
/// The calling thread copies each chunk into a pinned slot (with all cores) and hands it to
/// a worker, which uploads it, launches the kernel and downloads the planes; the caller
/// then passes them to `sink` and reuses the slot.
pub(crate) fn run_pixels<R: KnownRuntime, T: Count>(
    gpu: &Gpu<R>,
    cube: &Cube<T>,
    job: &PixelJob<'_, R>,
    sink: &mut ChunkSink<'_>,
) -> gpu_runtime::Result<()> {
    let (h, w) = cube.shape();
    let pixels = h * w;
    let px_bytes = cube.bins() * std::mem::size_of::<T>();
    let per_px = (px_bytes + job.planes * 4 + 4) as u64;
    if pixels == 0 {
        return Ok(());
    }
    // Raw copies (CUDA): pinned slots, written in place into each worker's device buffers.
    let raw = gpu.can_write_in_place();
    let bytes: &[u8] = bytemuck::cast_slice(cube.as_slice());
    let mut cache = PIPELINE
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    // A page-locked cube goes up straight from its own memory: no staging copy. So does
    // the first cube of a process, from pageable memory through the driver's own staging:
    // page-locking two 64 MiB slots costs more (73 ms of a single 94 ms fit on an H200)
    // than it saves once; from the second cube on (a batch) the slots are kept.
    let first = cache.is_empty();
    let direct = (raw && (cube.is_pinned() || first)).then_some(bytes);
    let nworkers = job.tuning.workers();
    // Even pixel counts keep u16 chunks word-aligned; all workers' chunks fit together.
    let fit = gpu
        .budget()
        .plan(pixels.div_ceil(2), 2 * per_px * nworkers as u64, 0)?
        .chunk_len()
        * 2;
    let target = (job.tuning.chunk_bytes() / px_bytes.max(1))
        .max(job.min_chunk_pixels)
        .max(2)
        & !1;
    let chunk = fit.min(target).min(pixels.next_multiple_of(2));
    let ranges: Vec<_> = (0..pixels)
        .step_by(chunk)
        .map(|s| s..(s + chunk).min(pixels))
        .collect();
    let in_bytes = if direct.is_some() {
        4
    } else {
        (chunk * px_bytes).next_multiple_of(4)
    };
    let (out_bytes, st_bytes) = (chunk * job.planes * 4, chunk * 4);
    // With nothing to stage, slots are small: two per worker, so that each worker has its
    // next chunk queued while the caller passes earlier results to the sink (making the
    // maps on the first one takes longer than four chunks' uploads).
    let nslots = if direct.is_some() {
        2 * nworkers
    } else {
        nworkers
    };
    let mut free: Vec<Slot> = cache
        .drain(..)
        .filter(|s| s.fits(raw, in_bytes, out_bytes, st_bytes))
        .take(nslots)
        .collect();
    while free.len() < nslots.min(ranges.len()) {
        free.push(Slot {
            input: gpu.host_staging(in_bytes),
            output: gpu.host_staging(out_bytes),
            status: gpu.host_staging(st_bytes),
        });
    }
    let nworkers = nworkers.min(ranges.len());
    let stopped = || gpu_runtime::Error::Backend {
        device: gpu.info().id.clone(),
        message: "FLIM pipeline worker stopped".into(),
    };
    pipeline_pool().in_place_scope(|scope| -> gpu_runtime::Result<()> {
        let mut lanes: Vec<(SyncSender<Job>, Receiver<gpu_runtime::Result<Job>>)> = Vec::new();
        for _ in 0..nworkers {
            let (job_tx, job_rx) = sync_channel::<Job>(1);
            let (done_tx, done_rx) = sync_channel::<gpu_runtime::Result<Job>>(1);
            scope.spawn(move |_| {
                worker(gpu, job, raw, direct, px_bytes, chunk, &job_rx, &done_tx);
            });
            lanes.push((job_tx, done_rx));
        }
        let mut in_flight: VecDeque<usize> = VecDeque::new();
        let mut failure: Option<gpu_runtime::Error> = None;
        let mut collect = |in_flight: &mut VecDeque<usize>,
                           free: &mut Vec<Slot>,
                           failure: &mut Option<gpu_runtime::Error>| {
            let Some(lane) = in_flight.pop_front() else {
                return;
            };
            match lanes[lane].1.recv() {
                Ok(Ok((range, slot))) => {
                    let n = range.len();
                    let _span = tracing::debug_span!("flim_collect", pixels = n).entered();
                    sink(
                        range,
                        bytemuck::cast_slice(&slot.output.as_bytes()[..n * job.planes * 4]),
                        bytemuck::cast_slice(&slot.status.as_bytes()[..n * 4]),
                    );
                    free.push(slot);
                }
                Ok(Err(e)) => {
                    failure.get_or_insert(e);
                }
                Err(_) => {
                    failure.get_or_insert(stopped());
                }
            }
        };
        for (c, range) in ranges.iter().enumerate() {
            if failure.is_some() {
                break;
            }
            while free.is_empty() {
                collect(&mut in_flight, &mut free, &mut failure);
            }
            let mut slot = free.pop().expect("a slot was freed above");
            if direct.is_none() {
                let src = &bytes[range.start * px_bytes..range.end * px_bytes];
                tracing::debug_span!("flim_stage", bytes = src.len())
                    .in_scope(|| slot.input.write_words(src));
            }
            let lane = c % nworkers;
            if lanes[lane].0.send((range.clone(), slot)).is_err() {
                failure.get_or_insert(stopped());
                break;
            }
            in_flight.push_back(lane);
        }
        while !in_flight.is_empty() {
            collect(&mut in_flight, &mut free, &mut failure);
        }
        drop(lanes);
        *cache = free;
        failure.map_or(Ok(()), Err)
    })
}

/// A worker: for each chunk, upload (from its staging slot, or straight from the cube's
/// page-locked memory when `direct` holds it), kernel, download.
fn worker<R: KnownRuntime>(
    gpu: &Gpu<R>,
    job: &PixelJob<'_, R>,
    raw: bool,
    direct: Option<&[u8]>,
    px_bytes: usize,
    chunk: usize,
    jobs: &Receiver<Job>,
    done: &SyncSender<gpu_runtime::Result<Job>>,
) {
    let mut buffers: Option<DeviceBuffers> = None;
    for (range, mut slot) in jobs {
        let result = (|| -> gpu_runtime::Result<()> {
            let n = range.len();
            let words_max = (chunk * px_bytes).div_ceil(4);
            let dev = match &buffers {
                Some(b) => b,
                None => buffers.insert(DeviceBuffers {
                    input: gpu.empty::<u32>(words_max)?,
                    out: gpu.empty::<f32>(chunk * job.planes)?,
                    status: gpu.empty::<u32>(chunk)?,
                }),
            };
            // Full chunks reuse the worker's device buffers; a short last one gets its own
            // (downloads move whole arrays).
            let src = direct.map(|b| &b[range.start * px_bytes..range.end * px_bytes]);
            let (input, out, st) = if n == chunk && raw {
                match src {
                    Some(src) => gpu.upload_bytes_into(src, &dev.input)?,
                    None => gpu.upload_staged_into(&slot.input, &dev.input)?,
                }
                (dev.input.clone(), dev.out.clone(), dev.status.clone())
            } else {
                let words = (n * px_bytes).div_ceil(4);
                let input = match src {
                    Some(src) => {
                        let input = gpu.empty::<u32>(words)?;
                        gpu.upload_bytes_into(src, &input)?;
                        input
                    }
                    None => gpu.upload_staged::<u32>(&slot.input, words)?,
                };
                (
                    input,
                    gpu.empty::<f32>(n * job.planes)?,
                    gpu.empty::<u32>(n)?,
                )
            };
            tracing::debug_span!("flim_kernel", pixels = n)
                .in_scope(|| (job.launch)(gpu, &input, range.start, n, &out, &st))?;
            gpu.download_staged(&out, &mut slot.output)?;
            gpu.download_staged(&st, &mut slot.status)?;
            Ok(())
        })();
        if done.send(result.map(|()| (range, slot))).is_err() {
            break;
        }
    }
}
