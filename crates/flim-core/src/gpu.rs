//! The GPU path: a cube goes up as its own bytes (u16 counts two per word) in chunks of
//! pixels through page-locked staging, each chunk's kernel writes f32 planes and a status
//! word per pixel, and they come back.
//!
//! Chunks are pipelined: the calling thread copies chunk c + 1 into a pinned slot on all
//! cores while [`workers`] threads (kept for the life of the process) upload, run and
//! download earlier chunks. CubeCL gives each host thread its own CUDA stream and
//! gpu-runtime's pinned copies run on per-thread streams too, so one worker's upload
//! overlaps another's kernel and a third's download. Transfer-bound methods take chunks of
//! at most [`chunk_bytes`] (16 MiB by default); fits take at least [`FIT_CHUNK_PIXELS`] so
//! that each launch fills the GPU. All chunks in flight fit the device's memory budget;
//! results do not depend on the chunking (tested bit for bit). Pinned buffers are kept
//! between calls: page-locking a hundred megabytes costs more than analysing them. A cube
//! page-locked in place ([`Cube::pin_on`]) skips the staging copy: each worker uploads its
//! chunk straight from the cube's memory, so the link alone bounds the time.

use crate::cube::{Count, Cube};
use crate::error::{Error, Result};
use crate::fret::{Donor, FretMaps, FretSetup};
use crate::methods::{Analysis, LifetimeMaps, STATUS_MASKED, Setup};
use gpu_kernels::flim::fret::{self as fret_kernels, FRET_PLANES, FretParams};
use gpu_kernels::flim::lifetimes::{self as kernels, LifetimeParams, plane_of, planes};
use gpu_runtime::{Device, Gpu, GpuArray, HostStaging, KnownRuntime, with_gpu};
use ndarray::Array2;
use rayon::prelude::*;
use std::collections::VecDeque;
use std::sync::Mutex;
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};

/// Most pipeline workers.
const MAX_WORKERS: usize = 16;

/// Names the number of pipeline workers (1 = sequential).
const WORKERS_ENV: &str = "BIOGPU_FLIM_WORKERS";

/// Pipeline workers (chunks in flight); `BIOGPU_FLIM_WORKERS` overrides (1 = sequential).
pub fn workers() -> usize {
    std::env::var(WORKERS_ENV)
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&w| (1..=MAX_WORKERS).contains(&w))
        .unwrap_or(3)
}

/// Largest chunk of counts per transfer (bytes); `BIOGPU_FLIM_CHUNK_MIB` overrides.
pub fn chunk_bytes() -> usize {
    std::env::var("BIOGPU_FLIM_CHUNK_MIB")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .filter(|&m| m >= 1)
        .unwrap_or(16)
        << 20
}

/// Fewest pixels per fit launch: with two chunks in flight, about 1.5 waves of the fit
/// kernel on an H100 (132 multiprocessors, 5 blocks of 256 at 47 registers).
const FIT_CHUNK_PIXELS: usize = 1 << 17;

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
    /// [`chunk_bytes`] chunks so copies overlap; an iterative fit needs launches big enough
    /// to fill the GPU (a 16 MiB chunk of 256-bin pixels is 32k threads, a quarter of one
    /// wave on an H100, which left the fits latency-bound).
    pub min_chunk_pixels: usize,
    /// Launch on one chunk: (gpu, counts as words, its first pixel, its pixels, out
    /// planes, status).
    pub launch: &'a ChunkLaunch<'a, R>,
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
/// a stream and its state for each new host thread, which cost 3-5 ms at the first launch
/// of a fresh thread on the H100, more than a 134 MB cube's kernels.
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
    // A page-locked cube goes up straight from its own memory: no staging copy.
    let direct = (raw && cube.is_pinned()).then_some(bytes);
    let nworkers = workers();
    // Even pixel counts keep u16 chunks word-aligned; all workers' chunks fit together.
    let fit = gpu
        .budget()
        .plan(pixels.div_ceil(2), 2 * per_px * nworkers as u64, 0)?
        .chunk_len()
        * 2;
    let target = (chunk_bytes() / px_bytes.max(1))
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
    let mut cache = PIPELINE
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    // With nothing to stage, slots are small: two per worker, so that each worker has its
    // next chunk queued while the caller passes earlier results to the sink (making the
    // maps on the first one took 1.4 ms on an H100 host, longer than four chunks' uploads).
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

/// The phasor and Simpson tables of a setup, as the kernels read them (f32).
fn tables(su: &Setup) -> Vec<f32> {
    su.simpson
        .iter()
        .chain(&su.cos_t)
        .chain(&su.sin_t)
        .map(|&v| v as f32)
        .collect()
}

/// A chunk's planes (`vals`, plane-major over the chunk's pixels) into rows `range` of whole-
/// image map planes, all planes at once on all cores (one plane's copy alone runs at a
/// single core's speed): map plane `q` takes chunk plane `source(q)`, NaN where `None`.
fn store_planes<const N: usize>(
    planes: [&mut Array2<f32>; N],
    range: std::ops::Range<usize>,
    vals: &[f32],
    source: impl Fn(usize) -> Option<usize> + Sync,
) {
    let n = range.len();
    planes.into_par_iter().enumerate().for_each(|(q, plane)| {
        let dst = &mut plane.as_slice_mut().expect("standard layout")[range.clone()];
        match source(q) {
            Some(i) => dst.copy_from_slice(&vals[i * n..(i + 1) * n]),
            None => dst.fill(f32::NAN),
        }
    });
}

/// A chunk's kernel status words into rows `range` of a whole-image status map.
fn store_status(status: &mut Array2<u8>, range: std::ops::Range<usize>, words: &[u32]) {
    let dst = &mut status.as_slice_mut().expect("standard layout")[range];
    for (d, &s) in dst.iter_mut().zip(words) {
        *d = status_code(s);
    }
}

/// The kernels' status word (0 = analysed) as a map's status.
fn status_code(s: u32) -> u8 {
    if s == 0 { 0 } else { STATUS_MASKED }
}

/// The non-iterative kernel's settings for `pixels` pixels of `bins` counts of type `T`.
fn lifetime_params<T: Count>(su: &Setup, bins: usize, pixels: usize) -> LifetimeParams {
    LifetimeParams {
        pixels: pixels as u32,
        stride: bins as u32,
        first: su.first as u32,
        m: su.m as u32,
        h: su.h as f32,
        omega: su.omega as f32,
        offset: su.offset as f32,
        threshold: su.threshold as f32,
        cal: (su.cal_cos as f32, su.cal_sin as f32),
        table_sums: (su.sum_simpson as f32, su.sum_cos as f32, su.sum_sin as f32),
        kind: T::KIND,
        methods: su.methods.bits(),
    }
}

/// The BCMM/PM kernel's settings for `pixels` pixels of `bins` counts of type `T`.
fn fret_params<T: Count>(fs: &FretSetup, donor: Donor, bins: usize, pixels: usize) -> FretParams {
    let su = &fs.base;
    FretParams {
        pixels: pixels as u32,
        stride: bins as u32,
        first: su.first as u32,
        m: su.m as u32,
        h: su.h as f32,
        omega: su.omega as f32,
        offset: su.offset as f32,
        threshold: su.threshold as f32,
        cal: (su.cal_cos as f32, su.cal_sin as f32),
        table_sums: (su.sum_cos as f32, su.sum_sin as f32),
        tau_d: match donor {
            Donor::Known(t) => Some(t as f32),
            Donor::Unknown => None,
        },
        period: fs.period as f32,
        kind: T::KIND,
    }
}

fn gpu_error(e: gpu_runtime::Error) -> Error {
    Error::from(e)
}

/// [`crate::analyse`] on `device`: the GPU kernel (f32) where the device is a GPU, the f64
/// CPU reference otherwise. GPU and CPU agree within the f32 error bounds stated in
/// tests/tests/gpu_vs_cpu/flim.rs.
///
/// ```
/// use flim_core::{Analysis, gpu::analyse_on, sim::mono_exponential};
/// let cube = mono_exponential(&[3.0], 4, 4, 128, 0.1, 12.8, 5_000.0, 2)?;
/// let maps = analyse_on(&cube, &Analysis::default(), &gpu_runtime::Device::cpu())?;
/// assert!((maps.tau_rld[[0, 0]] - 3.0).abs() < 0.3);
/// # Ok::<(), flim_core::Error>(())
/// ```
pub fn analyse_on<T: Count>(
    cube: &Cube<T>,
    opts: &Analysis,
    device: &Device,
) -> Result<LifetimeMaps> {
    if !device.is_gpu() {
        return crate::analyse(cube, opts);
    }
    let su = opts.setup(cube.bins(), cube.bin_ns(), cube.period_ns())?;
    let (h, w) = cube.shape();
    let methods = su.methods.bits();
    let nplanes = planes(methods);
    let params = lifetime_params::<T>(&su, cube.bins(), 0);
    let table = tables(&su);
    let _span = tracing::debug_span!("flim_analyse_on", pixels = h * w).entered();
    // Chunks land straight in the maps: no whole-image staging vector, one copy per value,
    // the planes in parallel (a plane's copy alone runs at a single core's speed). The maps
    // are made when the first chunk is back, while the others cross the link.
    let mut maps: Option<LifetimeMaps> = None;
    let mut sink = |range: std::ops::Range<usize>, vals: &[f32], st: &[u32]| {
        let maps = maps.get_or_insert_with(|| LifetimeMaps::zeros(h, w));
        store_planes(maps.planes_mut(), range.clone(), vals, |q| {
            plane_of(methods, q as u32).map(|i| i as usize)
        });
        store_status(&mut maps.status, range, st);
    };
    with_gpu!(device, |gpu| {
        let tables_dev = gpu.upload(&table)?;
        gpu.sync()?;
        let launch = |gpu: &Gpu<_>,
                      words: &GpuArray<u32>,
                      _first: usize,
                      n: usize,
                      out: &GpuArray<f32>,
                      st: &GpuArray<u32>| {
            let p = LifetimeParams {
                pixels: n as u32,
                ..params
            };
            kernels::lifetimes(gpu, words, &tables_dev, &p, out, st)
        };
        run_pixels(
            gpu,
            cube,
            &PixelJob {
                planes: nplanes,
                min_chunk_pixels: 0,
                launch: &launch,
            },
            &mut sink,
        )
    })
    .map_err(gpu_error)?;
    Ok(maps.unwrap_or_else(|| LifetimeMaps::zeros(h, w)))
}

/// Device time of the non-iterative kernel (the methods `opts` selects), or of the BCMM/PM
/// kernel when `fret` names the donor, over the whole of `cube` already on the device: the
/// median of `reps` rounds of four launches and one synchronisation, per launch. For
/// benchmarks: what the kernel costs apart from transfers.
pub fn kernel_time<T: Count>(
    cube: &Cube<T>,
    opts: &Analysis,
    fret: Option<Donor>,
    device: &Device,
    reps: usize,
) -> Result<std::time::Duration> {
    const LAUNCHES: u32 = 4;
    if !device.is_gpu() {
        return Err(Error::Gpu("kernel_time needs a GPU device".into()));
    }
    let (h, w) = cube.shape();
    let pixels = h * w;
    let su = opts.setup(cube.bins(), cube.bin_ns(), cube.period_ns())?;
    let lifetimes = lifetime_params::<T>(&su, cube.bins(), pixels);
    let (fret, nplanes, table) = match fret {
        Some(donor) => {
            let fs = FretSetup::new(opts, donor, cube.bins(), cube.bin_ns(), cube.period_ns())?;
            let p = fret_params::<T>(&fs, donor, cube.bins(), pixels);
            (Some(p), FRET_PLANES, tables(&fs.base))
        }
        None => (None, planes(su.methods.bits()), tables(&su)),
    };
    let bytes: &[u8] = bytemuck::cast_slice(cube.as_slice());
    with_gpu!(device, |gpu| {
        let mut staging = gpu.host_staging(bytes.len().next_multiple_of(4));
        let words = staging.write_words(bytes);
        let words = gpu.upload_staged::<u32>(&staging, words)?;
        let tables_dev = gpu.upload(&table)?;
        let out = gpu.empty::<f32>(nplanes * pixels)?;
        let st = gpu.empty::<u32>(pixels)?;
        let round = || -> gpu_runtime::Result<std::time::Duration> {
            let t = std::time::Instant::now();
            for _ in 0..LAUNCHES {
                match &fret {
                    Some(p) => fret_kernels::fret(gpu, &words, &tables_dev, p, &out, &st)?,
                    None => kernels::lifetimes(gpu, &words, &tables_dev, &lifetimes, &out, &st)?,
                }
            }
            gpu.sync()?;
            Ok(t.elapsed() / LAUNCHES)
        };
        round()?;
        let mut times = (0..reps.max(1))
            .map(|_| round())
            .collect::<gpu_runtime::Result<Vec<_>>>()?;
        times.sort();
        Ok(times[times.len() / 2])
    })
    .map_err(gpu_error)
}

/// [`crate::fret::analyse_fret`] on `device` (f32 kernel on a GPU, the CPU otherwise);
/// tolerances in tests/tests/gpu_vs_cpu/flim.rs.
pub fn analyse_fret_on<T: Count>(
    cube: &Cube<T>,
    opts: &Analysis,
    donor: Donor,
    device: &Device,
) -> Result<FretMaps> {
    if !device.is_gpu() {
        return crate::fret::analyse_fret(cube, opts, donor);
    }
    let fs = FretSetup::new(opts, donor, cube.bins(), cube.bin_ns(), cube.period_ns())?;
    let su = &fs.base;
    let (h, w) = cube.shape();
    let params = fret_params::<T>(&fs, donor, cube.bins(), 0);
    let table = tables(su);
    let _span = tracing::debug_span!("flim_analyse_fret_on", pixels = h * w).entered();
    // As in `analyse_on`: chunks straight into maps made when the first chunk is back.
    let mut maps: Option<FretMaps> = None;
    let mut sink = |range: std::ops::Range<usize>, vals: &[f32], st: &[u32]| {
        let maps = maps.get_or_insert_with(|| FretMaps::nan(h, w));
        store_planes(maps.planes_mut(), range.clone(), vals, Some);
        store_status(&mut maps.status, range, st);
    };
    with_gpu!(device, |gpu| {
        let tables_dev = gpu.upload(&table)?;
        gpu.sync()?;
        let launch = |gpu: &Gpu<_>,
                      words: &GpuArray<u32>,
                      _first: usize,
                      n: usize,
                      out: &GpuArray<f32>,
                      st: &GpuArray<u32>| {
            let p = FretParams {
                pixels: n as u32,
                ..params
            };
            fret_kernels::fret(gpu, words, &tables_dev, &p, out, st)
        };
        run_pixels(
            gpu,
            cube,
            &PixelJob {
                planes: FRET_PLANES,
                min_chunk_pixels: 0,
                launch: &launch,
            },
            &mut sink,
        )
    })
    .map_err(gpu_error)?;
    Ok(maps.unwrap_or_else(|| FretMaps::nan(h, w)))
}

/// [`crate::fit::fit`] on `device`: the f32 kernel (one unit per pixel) on a GPU, the f64
/// CPU path otherwise; derived maps (sorting, fractions, means, reduced chi^2) are computed
/// from the parameters on the host for both. Tolerances in tests/tests/gpu_vs_cpu/flim.rs.
///
/// ```
/// use flim_core::fit::{FitOptions, Model};
/// use flim_core::{gpu::fit_on, sim::mono_exponential};
/// let cube = mono_exponential(&[2.0], 4, 4, 128, 0.1, 12.8, 5_000.0, 2)?;
/// let maps = fit_on(&cube, &FitOptions::new(Model::Mono), &gpu_runtime::Device::cpu())?;
/// assert!((maps.tau[0][[0, 0]] - 2.0).abs() < 0.2);
/// # Ok::<(), flim_core::Error>(())
/// ```
pub fn fit_on<T: Count>(
    cube: &Cube<T>,
    opts: &crate::fit::FitOptions,
    device: &Device,
) -> Result<crate::fit::FitMaps> {
    use crate::fit::{FitMaps, FitStatus, MapPixel};
    use gpu_kernels::flim::fit::{self as fk, FitParams};
    if !device.is_gpu() {
        return crate::fit::fit(cube, opts);
    }
    let (h, w) = cube.shape();
    let su = opts.setup(cube.bins(), cube.bin_ns(), cube.period_ns(), (h, w))?;
    let k = su.k;
    let np = su.np();
    let params = FitParams {
        threshold: opts.threshold() as f32,
        use_mask: opts.mask().is_some(),
        ..global::fit_params::<T>(&su, opts, cube.bins())
    };
    let planes = params.planes();
    let irf: Vec<f32> = su
        .irf
        .as_ref()
        .map_or_else(|| vec![0.0], |v| v.iter().map(|&x| x as f32).collect());
    let mask: Vec<u32> = opts
        .mask()
        .map_or_else(|| vec![0], |m| m.iter().map(|&b| u32::from(b)).collect());
    let mut init = [0.0f32; 3];
    if let Some(t) = opts.lifetimes() {
        for (d, s) in init.iter_mut().zip(t) {
            *d = *s as f32;
        }
    }
    let _span = tracing::debug_span!("flim_fit_on", pixels = h * w).entered();
    // Each chunk's maps are built (on all cores) as it comes back, while the GPU fits the
    // next one.
    let mut maps = FitMaps::unfilled(h, w, k);
    let mut sink = |range: std::ops::Range<usize>, vals: &[f32], status: &[u32]| {
        let (n, start) = (range.len(), range.start);
        let _maps = tracing::debug_span!("flim_fit_maps", pixels = n).entered();
        maps.fill(range, |p| {
            let i = p - start;
            let st = status[i];
            let photons = f64::from(vals[(np + 1) * n + i]);
            let code = st & 0xFF;
            if code == fk::FIT_MASKED {
                return MapPixel::masked(photons);
            }
            let mut theta = [0.0f64; crate::fit::model::MAX_PARAMS];
            for (q, t) in theta.iter_mut().enumerate().take(np) {
                *t = f64::from(vals[q * n + i]);
            }
            let status = if code == fk::FIT_CONVERGED {
                FitStatus::Converged
            } else {
                FitStatus::Failed
            };
            MapPixel::from_theta(
                &su,
                &theta,
                f64::from(vals[np * n + i]),
                photons,
                st >> 8,
                status,
            )
        });
    };
    with_gpu!(device, |gpu| {
        let irf_dev = gpu.upload(&irf)?;
        let mask_dev = gpu.upload(&mask)?;
        let init_dev = gpu.upload(&init)?;
        gpu.sync()?;
        let launch = |gpu: &Gpu<_>,
                      words: &GpuArray<u32>,
                      first: usize,
                      n: usize,
                      out: &GpuArray<f32>,
                      st: &GpuArray<u32>| {
            let p = FitParams {
                pixels: n as u32,
                mask_offset: first as u32,
                ..params
            };
            fk::fit(gpu, words, &irf_dev, &mask_dev, &init_dev, &p, out, st)
        };
        run_pixels(
            gpu,
            cube,
            &PixelJob {
                planes,
                min_chunk_pixels: FIT_CHUNK_PIXELS,
                launch: &launch,
            },
            &mut sink,
        )
    })
    .map_err(gpu_error)?;
    Ok(maps)
}

mod global;
pub use global::fit_global_on;
