//! The GPU path: curves to the device (time-major, f32, packed on all cores into
//! page-locked pieces while earlier pieces cross the link; on CUDA the kernel starts after the
//! first piece and each unit waits for its voxel's), one `gpu_kernels::perfusion` fit per
//! voxel in f64 (CUDA) or f32 (wgpu), maps back. The launch shape comes from the fit's
//! [`GpuTuning`](crate::GpuTuning) (docs/perfusion.md).

mod launch;
mod levenberg_marquardt;
mod nelder_mead;
mod timing;
mod upload;

pub(crate) use timing::kernel_times;

use crate::error::Result;
use crate::model::start::CANDIDATES;
use crate::model::{Control, FitStatus, Fits, Problem, Setup};
use gpu_kernels::perfusion::{FitBuffers, KernelFloat};
use gpu_runtime::{Device, Gpu, GpuArray, HostStaging, KnownRuntime, with_gpu};
use launch::{StartInputs, counter_words, grid_values, launch, params, setup_values, start_values};
use ndarray::{ArrayView2, Zip, s};
use rayon::prelude::*;
use std::ops::Range;
use upload::{Pieces, pack, padded_row, piece_voxels, staging_cache, stream_pieces};

/// Most voxels per launch: `i * voxels + v` indexes the curves in 32 bits.
const MAX_CHUNK: usize = 1 << 20;
/// Launches per round without raw copies (wgpu) where units fit one voxel each (LM, and
/// Nelder-Mead without persistent units): the curves of launch k + 1 go up after launch k
/// is queued. On CUDA a round is one launch, started after its first piece of curves (the
/// rest stream in while it runs), and so are persistent units everywhere: every launch
/// ends with a tail in which its last voxels' units finish alone.
const PIPELINE_CHUNKS: usize = 4;
/// Launches are not made smaller than this for the pipeline (a launch must still fill the
/// GPU); an explicit launch count (benchmarks, tests) is taken as given.
const MIN_PIPELINE_CHUNK: usize = 1 << 16;

/// Values of the searched starts' buffer for `voxels` voxels: [`CANDIDATES`] parameter
/// vectors each with a start search, else one value (unused).
pub(super) fn starts_len(setup: &Setup, np: usize, voxels: usize) -> usize {
    if setup.plan.is_some() {
        CANDIDATES * np * voxels
    } else {
        1
    }
}

/// Fit every voxel on the GPU `device` in f64 (`use_f64`) or f32; the tuning's `launches`
/// overrides the kernel launches per round (benchmarks, tests).
pub(crate) fn fit(
    curves: ArrayView2<f32>,
    problem: &Problem,
    setup: &Setup,
    device: &Device,
    use_f64: bool,
    control: &Control,
) -> Result<Fits> {
    let launches = setup.tuning.launches;
    if use_f64 {
        run::<f64>(curves, problem, setup, device, control, launches)
    } else {
        run::<f32>(curves, problem, setup, device, control, launches)
    }
}

/// Launches a round of `round` voxels is split into: `launches` if given, else one where
/// `one_launch` (raw copies, or persistent units) and [`PIPELINE_CHUNKS`] (of at
/// least [`MIN_PIPELINE_CHUNK`] voxels) otherwise; never more than [`MAX_CHUNK`] voxels a
/// launch.
fn split(round: Range<usize>, launches: Option<usize>, one_launch: bool) -> Vec<Range<usize>> {
    let n = round.len();
    let len = match launches {
        Some(k) => n.div_ceil(k.max(1)),
        None if one_launch => n,
        None => n
            .div_ceil(PIPELINE_CHUNKS)
            .next_multiple_of(1024)
            .max(MIN_PIPELINE_CHUNK),
    }
    .clamp(1, MAX_CHUNK);
    round
        .clone()
        .step_by(len)
        .map(|s| s..(s + len).min(round.end))
        .collect()
}

fn run<F: KernelFloat>(
    curves: ArrayView2<f32>,
    problem: &Problem,
    setup: &Setup,
    device: &Device,
    control: &Control,
    launches: Option<usize>,
) -> Result<Fits> {
    let n = curves.nrows();
    let nt = problem.len();
    let np = setup.model.n_params();
    let new_fits = || Fits::new_for(setup, n);
    if n == 0 {
        return Ok(new_fits());
    }
    let fsize = std::mem::size_of::<F>() as u64;
    let mut fits = None;
    with_gpu!(device, |gpu| {
        let grid = gpu.upload(&grid_values::<F>(problem))?;
        let setup_dev = gpu.upload(&setup_values::<F>(setup))?;
        let search = setup.plan.as_ref().map(start_values::<F>);
        let tables = search.as_ref().map(|(t, _)| gpu.upload(t)).transpose()?;
        let per_voxel =
            nt as u64 * 4 + (np as u64 + 2) * fsize + starts_len(setup, np, 1) as u64 * fsize + 4;
        let fixed = (grid.len() + tables.as_ref().map_or(0, GpuArray::len)) as u64 * fsize + 1024;
        // A round's buffers are all on the device at once; twice the bytes per voxel leave
        // room for the memory pool's rounding and earlier buffers.
        let round = gpu.budget().plan(n, 2 * per_voxel, fixed)?.chunk_len();
        let p = params::<F>(setup, problem, 0, gpu.info());
        let one_launch = gpu.can_write_in_place()
            || p.shared_nt(
                gpu.client().properties().hardware.max_shared_memory_size,
                fsize as usize,
            ) > 0;
        for start in (0..n).step_by(round) {
            if control.stopped() {
                break;
            }
            let chunks = split(start..(start + round).min(n), launches, one_launch);
            let job = Job {
                problem,
                setup,
                grid: &grid,
                setup_dev: &setup_dev,
                start: tables.as_ref().zip(search.as_ref().map(|(_, s)| s)),
            };
            let queued = queue_round::<_, F>(gpu, curves, &chunks, &job, control)?;
            // The first round's results are allocated while its kernels run.
            let fits = fits.get_or_insert_with(new_fits);
            finish_round::<_, F>(gpu, queued, np, fits, control, n)?;
        }
        Ok(())
    })?;
    Ok(fits.unwrap_or_else(new_fits))
}

/// What every launch of a job shares: the problem, the resolved setup, and their device
/// copies (the grid, the start/bounds array, the start search's tables).
struct Job<'a, F: KernelFloat> {
    problem: &'a Problem,
    setup: &'a Setup,
    grid: &'a GpuArray<F>,
    setup_dev: &'a GpuArray<F>,
    start: StartInputs<'a, F>,
}

/// One launch on the device: its voxels, curves, maps, statuses and counter.
struct Launched<F: KernelFloat> {
    range: Range<usize>,
    /// Held until the maps are down, so that their memory is not reused under the kernel.
    _data: GpuArray<f32>,
    _starts: GpuArray<F>,
    out: GpuArray<F>,
    status: GpuArray<u32>,
    _counter: GpuArray<u32>,
}

/// Queue the launches of one round. Every buffer of the round is allocated first, so that
/// on CUDA the curves can be copied without waiting for the queue: each launch is queued
/// once its first piece of curves has landed, and the other pieces cross the link (each
/// packed on all cores while the previous one is copied) while it runs, its units waiting
/// for their voxels' pieces (the counter's ready word). Elsewhere (wgpu: no raw copies)
/// each launch's curves go up whole, after the queued work. Returns the launches queued
/// (fewer when stopped).
fn queue_round<R: KnownRuntime, F: KernelFloat>(
    gpu: &Gpu<R>,
    curves: ArrayView2<f32>,
    chunks: &[Range<usize>],
    job: &Job<'_, F>,
    control: &Control,
) -> gpu_runtime::Result<Vec<Launched<F>>> {
    let Job {
        problem,
        setup,
        grid,
        setup_dev,
        start: search,
    } = *job;
    let _span = tracing::debug_span!("perfusion_round", launches = chunks.len()).entered();
    let nt = problem.len();
    let np = setup.model.n_params();
    let raw = gpu.can_write_in_place();
    let mut bufs = Vec::with_capacity(chunks.len());
    {
        let _span = tracing::debug_span!("allocate").entered();
        for r in chunks {
            let len = r.len();
            let data = if raw {
                Some(gpu.empty::<f32>(padded_row(len) * nt)?)
            } else {
                None
            };
            let out = gpu.empty::<F>((np + 2) * len)?;
            let starts = gpu.empty::<F>(starts_len(setup, np, len))?;
            let status = gpu.empty::<u32>(len)?;
            // The next voxel for persistent units and the voxels whose curves are up (raised
            // piece by piece with raw copies). (A new upload waits for the queue: made now,
            // before any launch of the round.)
            let ready = if raw { 0 } else { len as u32 };
            let counter = gpu.upload(&counter_words(ready))?;
            bufs.push((data, out, starts, status, counter));
        }
    }
    let longest = chunks.iter().map(ExactSizeIterator::len).max().unwrap_or(0);
    let piece_voxels = piece_voxels(nt, longest);
    let mut ring = if raw {
        let bytes = piece_voxels.min(longest) * nt * 4;
        Some([
            staging_cache::take(gpu, 0, bytes),
            staging_cache::take(gpu, 1, bytes),
        ])
    } else {
        None
    };
    let mut whole = (!raw).then(|| staging_cache::take(gpu, 2, longest * nt * 4));
    let mut queued = Vec::with_capacity(chunks.len());
    let mut result = Ok(());
    for (range, (data, out, starts, status, counter)) in chunks.iter().zip(bufs) {
        if control.stopped() {
            break;
        }
        let len = range.len();
        let mut p = params::<F>(setup, problem, len, gpu.info());
        if raw {
            p.stride = padded_row(len) as u32;
        }
        let start = |data: &GpuArray<f32>| {
            let _span = tracing::debug_span!("launch", voxels = len).entered();
            let buffers = FitBuffers {
                data,
                grid,
                setup: setup_dev,
                out: &out,
                starts: &starts,
                status: &status,
                counter: &counter,
            };
            launch::<R, F>(gpu, setup.method, &buffers, &p, search)
        };
        let launched = match (data, ring.as_mut(), whole.as_mut()) {
            (Some(data), Some(ring), _) => {
                let pieces = Pieces {
                    range: range.clone(),
                    nt,
                    voxels: piece_voxels,
                };
                // With a start search both kernels are queued after the last piece (the
                // search's units, all launched at once, do not wait for pieces: streaming
                // under it hung on an H200); without, after the first.
                let after = if search.is_some() { usize::MAX } else { 1 };
                stream_pieces(gpu, curves, &pieces, &data, &counter, ring, after, || {
                    start(&data)
                })
                .map(|()| data)
            }
            (_, _, Some(staging)) => {
                pack(curves, range.clone(), 0..nt, staging.as_bytes_mut());
                gpu.upload_staged::<f32>(staging, len * nt)
                    .and_then(|data| start(&data).map(|()| data))
            }
            _ => unreachable!("raw copies have a ring, others a whole staging buffer"),
        };
        let launched = launched.map(|data| Launched {
            range: range.clone(),
            _data: data,
            _starts: starts,
            out,
            status,
            _counter: counter,
        });
        match launched {
            Ok(l) => queued.push(l),
            Err(e) => {
                result = Err(e);
                break;
            }
        }
    }
    if let Some([a, b]) = ring {
        staging_cache::put(0, a);
        staging_cache::put(1, b);
    }
    if let Some(w) = whole {
        staging_cache::put(2, w);
    }
    match result {
        Ok(()) => Ok(queued),
        Err(e) => {
            // Let what was queued finish before its buffers go.
            let _ = gpu.sync();
            Err(e)
        }
    }
}

/// Wait for a round's launches, then bring each launch's maps down and store them (the
/// results were allocated while the kernels ran). Progress is reported per launch.
fn finish_round<R: KnownRuntime, F: KernelFloat>(
    gpu: &Gpu<R>,
    queued: Vec<Launched<F>>,
    np: usize,
    fits: &mut Fits,
    control: &Control,
    n: usize,
) -> gpu_runtime::Result<()> {
    let fsize = std::mem::size_of::<F>();
    let longest = queued.iter().map(|l| l.range.len()).max().unwrap_or(0);
    let mut maps = staging_cache::take(gpu, 3, (np + 2) * fsize * longest);
    let mut words = staging_cache::take(gpu, 4, 4 * longest);
    let mut result = Ok(());
    {
        let _span = tracing::debug_span!("wait_kernels").entered();
        if let Err(e) = gpu.sync() {
            result = Err(e);
        }
    }
    for l in &queued {
        if result.is_err() {
            break;
        }
        let down = {
            let _span = tracing::debug_span!("download_maps", voxels = l.range.len()).entered();
            gpu.download_staged(&l.out, &mut maps)
                .and_then(|()| gpu.download_staged(&l.status, &mut words))
        };
        if let Err(e) = down {
            result = Err(e);
            break;
        }
        let _span = tracing::debug_span!("store", voxels = l.range.len()).entered();
        store::<F>(&l.range, &maps, &words, np, fits);
        control.report(l.range.end, n);
    }
    staging_cache::put(3, maps);
    staging_cache::put(4, words);
    result
}

/// Chunk `range`'s maps (`np + 2` planes of `F`) and status words into `fits`.
fn store<F: KernelFloat>(
    range: &std::ops::Range<usize>,
    maps: &HostStaging,
    words: &HostStaging,
    np: usize,
    fits: &mut Fits,
) {
    let n = range.len();
    let fsize = std::mem::size_of::<F>();
    let values = F::from_bytes(&maps.as_bytes()[..(np + 2) * n * fsize]);
    let words: &[u32] = bytemuck::cast_slice(&words.as_bytes()[..n * 4]);
    // Parameter rows of `Fits` are contiguous: copy plane by plane.
    for q in 0..np + 2 {
        let src = &values[q * n..(q + 1) * n];
        let mut dst = match q {
            q if q < np => fits.params.slice_mut(s![q, range.clone()]),
            q if q == np => fits.sse.slice_mut(s![range.clone()]),
            _ => fits.r2.slice_mut(s![range.clone()]),
        };
        if let Some(d) = dst.as_slice_mut() {
            d.par_iter_mut()
                .zip(src.par_iter())
                .for_each(|(d, v)| *d = KernelFloat::to_f64(*v));
        } else {
            dst.iter_mut()
                .zip(src)
                .for_each(|(d, v)| *d = KernelFloat::to_f64(*v));
        }
    }
    Zip::from(fits.status.slice_mut(s![range.clone()]))
        .and(fits.iterations.slice_mut(s![range.clone()]))
        .and(ndarray::ArrayView1::from(words))
        .par_for_each(|st, it, &w| {
            *st = FitStatus::from_code((w & 0xFF) as u8).unwrap_or(FitStatus::Failed) as u8;
            *it = w >> 8;
        });
}
