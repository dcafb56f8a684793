//! The GPU path: curves to the device (time-major, f32, packed on all cores into
//! page-locked pieces while earlier pieces cross the link; on CUDA the kernel starts after the
//! first piece and each unit waits for its voxel's), one `gpu_kernels::perfusion` fit per
//! voxel in f64 (CUDA) or f32 (wgpu), maps back.
//!
//! Launch shape settings for tests and benchmarks (docs/perfusion.md): `BIOGPU_PERFUSION_CUBE`
//! (32, 64, 128, 256, 384, 512 units per cube), `BIOGPU_PERFUSION_PERSISTENT=0|1` and
//! `BIOGPU_PERFUSION_UNITS=N` (persistent Nelder-Mead units; CI runs lavapipe with them on).

use crate::error::{Error, Result};
use crate::fit::{
    Control, DAMP_FLOOR, FitStatus, Fits, LAMBDA_MAX, LAMBDA_MIN, LAMBDA_START, Method, NO_DELAY,
    Setup,
};
use crate::model::MAX_PARAMS;
use crate::problem::Problem;
use gpu_kernels::perfusion::{self as kernels, CUBE_FIT, FitParams, KernelFloat};
use gpu_runtime::{Device, Gpu, GpuArray, HostStaging, KnownRuntime, par_copy, with_gpu};
use ndarray::{ArrayView2, Axis, Zip, s};
use rayon::prelude::*;
use std::ops::Range;
use std::time::Duration;

/// Environment variable selecting the units per cube of the fit kernels.
pub const CUBE_ENV: &str = "BIOGPU_PERFUSION_CUBE";

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
/// The curves go up in pieces of about this many bytes (a block of voxels of every time row
/// of a launch's time-major array): one piece is packed on all cores while the previous one
/// crosses the link, so packing and the copy overlap, and the kernel, started after the
/// first, fits the voxels of each piece as soon as it has landed.
const PIECE_BYTES: usize = 16 << 20;
/// Pieces hold whole groups of this many voxels: 128 bytes of every time row, so that no
/// cache sector the kernel reads holds samples of a voxel whose piece is still on its way.
const PIECE_ALIGN: usize = 32;
/// A launch's curves go up in at least this many pieces where it has the voxels: its
/// kernel starts after the first (and small jobs, such as the tests', stream too).
const MIN_PIECES: usize = 8;

/// A fit launch's counter: no voxel taken yet, `ready` voxels' curves on the device.
fn counter_words(ready: u32) -> [u32; kernels::COUNTER_WORDS] {
    let mut words = [0; kernels::COUNTER_WORDS];
    words[kernels::READY_WORD] = ready;
    words
}

/// Values per time row of a launch's curves on the device where they stream in: whole
/// 32-voxel groups, so that the rows' 128-byte lines hold the voxels of one piece only.
fn padded_row(voxels: usize) -> usize {
    voxels.next_multiple_of(PIECE_ALIGN)
}

/// Voxels per piece of curves of `nt` samples for launches of at most `longest` voxels.
fn piece_voxels(nt: usize, longest: usize) -> usize {
    let by_bytes = PIECE_BYTES / (4 * nt).max(1);
    by_bytes
        .min(longest.div_ceil(MIN_PIECES))
        .next_multiple_of(PIECE_ALIGN)
        .max(PIECE_ALIGN)
}

/// Tolerances below f32 rounding would never be met: the f32 kernels use at least these.
const F32_TOL: f64 = 1e-6;
const F32_TOL_GRAD: f64 = 1e-4;
const F32_FLOOR_REL: f64 = 3e-7;
/// At an f32 minimum rounding leaves J^T r at about this cosine with the residuals.
const F32_STALL: f64 = 1e-2;

/// `BIOGPU_PERFUSION_PERSISTENT=1|0`: persistent Nelder-Mead units (default on CUDA only).
pub const PERSISTENT_ENV: &str = "BIOGPU_PERFUSION_PERSISTENT";
/// `BIOGPU_PERFUSION_UNITS=N`: at most N persistent units per launch (default: 2048 per
/// streaming multiprocessor, all a GPU can keep resident).
pub const UNITS_ENV: &str = "BIOGPU_PERFUSION_UNITS";

/// Units per cube of persistent Nelder-Mead in f64 (H100, 2026-11-26: 4.75 M voxels/s against
/// 4.56 M at 128; 12 warps per multiprocessor either way, the shared curves allow no more
/// at Nt 128, and 384 caps registers at 170).
const CUBE_NM_F64_PERSISTENT: u32 = 384;

fn env_u32(name: &str) -> Option<u32> {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok())
}

/// Whether Nelder-Mead runs persistent units on `info`'s device, and at most how many.
fn persistent_units(info: &gpu_runtime::DeviceInfo) -> (bool, u32) {
    let on = match env_u32(PERSISTENT_ENV) {
        Some(v) => v != 0,
        None => info.backend == gpu_runtime::Backend::Cuda,
    };
    let units = env_u32(UNITS_ENV)
        .filter(|&u| u > 0)
        .or_else(|| info.compute_units.map(|sm| sm.saturating_mul(2048)))
        .unwrap_or(kernels::PERSISTENT_UNITS);
    (on, units)
}

/// Units per cube: `BIOGPU_PERFUSION_CUBE`, else [`CUBE_NM_F64_PERSISTENT`] for persistent
/// Nelder-Mead in f64 and the kernels' default otherwise.
fn cube_units(method: Method, f64: bool, persistent: bool) -> u32 {
    env_u32(CUBE_ENV).unwrap_or(if method == Method::NelderMead && f64 && persistent {
        CUBE_NM_F64_PERSISTENT
    } else {
        CUBE_FIT
    })
}

/// The launch settings of `setup` for arithmetic `F`.
fn params<F: KernelFloat>(
    setup: &Setup,
    problem: &Problem,
    voxels: usize,
    info: &gpu_runtime::DeviceInfo,
) -> FitParams {
    let (persistent, units) = persistent_units(info);
    let b = &setup.bounds;
    let mut free_mask = 0;
    let mut delay_mask = 0;
    for p in 0..b.np {
        if b.free[p] {
            free_mask |= 1 << p;
        }
        if setup.lm.delay[p] {
            delay_mask |= 1 << p;
        }
    }
    let f32_path = F::NAME == "f32";
    let at_least = |v: f64, min: f64| if f32_path { v.max(min) } else { v };
    let eps = if f32_path {
        f64::from(f32::EPSILON)
    } else {
        f64::EPSILON
    };
    let delay = |d: usize| if d == NO_DELAY { u32::MAX } else { d as u32 };
    FitParams {
        voxels: voxels as u32,
        stride: voxels as u32,
        nt: problem.len() as u32,
        model: setup.model.id(),
        free_mask,
        rate_scale: setup.model.rate_scale(),
        max_iterations: setup.nm.max_iterations,
        tol_fun: setup.nm.tol_fun,
        tol_x: setup.nm.tol_x,
        ten_eps: 10.0 * eps,
        tol: at_least(setup.lm.tol, F32_TOL),
        tol_grad: at_least(setup.lm.tol_grad, F32_TOL_GRAD),
        stall: at_least(setup.lm.stall, F32_STALL),
        floor_rel: at_least(setup.floor_rel, F32_FLOOR_REL),
        max_delay_step: problem.mean_interval(),
        delay_mask,
        lambda: [LAMBDA_START, LAMBDA_MIN, LAMBDA_MAX, DAMP_FLOOR],
        grid: setup.grid.map(|g| (g.start, g.step, g.count)),
        delays: [delay(setup.delays[0]), delay(setup.delays[1])],
        uniform: problem.is_uniform(),
        inv_dt: problem.inv_dt,
        cube: cube_units(setup.method, !f32_path, persistent),
        persistent,
        units,
    }
}

/// The shared grid: times, intervals, inputs and slopes, and the inputs padded for the
/// uniform-grid walk (`gpu_kernels::perfusion::grid_values`).
fn grid_values<F: KernelFloat>(p: &Problem) -> Vec<F> {
    kernels::grid_values::<F>([&p.t, &p.dt, &p.u1, &p.s1, &p.u2, &p.s2])
}

/// Start, lower and upper bounds (fixed parameters: their value three times).
fn setup_values<F: KernelFloat>(setup: &Setup) -> Vec<F> {
    let b = &setup.bounds;
    let mut v = vec![F::from_f64(0.0); kernels::SETUP_LEN];
    for p in 0..MAX_PARAMS {
        v[p] = F::from_f64(if b.free[p] {
            setup.start[p]
        } else {
            b.fixed[p]
        });
        v[5 + p] = F::from_f64(b.lo[p]);
        v[10 + p] = F::from_f64(b.hi[p]);
    }
    v
}

/// Staging buffers kept per thread across calls (page-locking costs milliseconds).
mod staging_cache {
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
fn pack(curves: ArrayView2<f32>, range: Range<usize>, rows: Range<usize>, dst: &mut [u8]) {
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

/// Fit every voxel on the GPU `device` in f64 (`use_f64`) or f32; `launches` overrides the
/// kernel launches per round (benchmarks, tests).
pub(crate) fn fit(
    curves: ArrayView2<f32>,
    problem: &Problem,
    setup: &Setup,
    device: &Device,
    use_f64: bool,
    control: &Control,
    launches: Option<usize>,
) -> Result<Fits> {
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
    let new_fits = || Fits::new_for(setup, n, device.info().id.clone(), F::NAME);
    if n == 0 {
        return Ok(new_fits());
    }
    let fsize = std::mem::size_of::<F>() as u64;
    let mut fits = None;
    with_gpu!(device, |gpu| {
        let grid = gpu.upload(&grid_values::<F>(problem))?;
        let setup_dev = gpu.upload(&setup_values::<F>(setup))?;
        let per_voxel = nt as u64 * 4 + (np as u64 + 2) * fsize + 4;
        let fixed = grid.len() as u64 * fsize + 1024;
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
            let queued = queue_round::<_, F>(
                gpu, curves, &chunks, problem, setup, &grid, &setup_dev, control,
            )?;
            // The first round's results are allocated while its kernels run.
            let fits = fits.get_or_insert_with(new_fits);
            finish_round::<_, F>(gpu, queued, np, fits, control, n)?;
        }
        Ok(())
    })
    .map_err(Error::from)?;
    Ok(fits.unwrap_or_else(new_fits))
}

/// One launch on the device: its voxels, curves, maps, statuses and counter.
struct Launched<F: KernelFloat> {
    range: Range<usize>,
    /// Held until the maps are down, so that their memory is not reused under the kernel.
    _data: GpuArray<f32>,
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
#[allow(clippy::too_many_arguments)]
fn queue_round<R: KnownRuntime, F: KernelFloat>(
    gpu: &Gpu<R>,
    curves: ArrayView2<f32>,
    chunks: &[Range<usize>],
    problem: &Problem,
    setup: &Setup,
    grid: &GpuArray<F>,
    setup_dev: &GpuArray<F>,
    control: &Control,
) -> gpu_runtime::Result<Vec<Launched<F>>> {
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
            let status = gpu.empty::<u32>(len)?;
            // The next voxel for persistent units and the voxels whose curves are up (raised
            // piece by piece with raw copies). (A new upload waits for the queue: made now,
            // before any launch of the round.)
            let ready = if raw { 0 } else { len as u32 };
            let counter = gpu.upload(&counter_words(ready))?;
            bufs.push((data, out, status, counter));
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
    for (range, (data, out, status, counter)) in chunks.iter().zip(bufs) {
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
            launch::<R, F>(
                gpu,
                setup.method,
                data,
                grid,
                setup_dev,
                &p,
                &out,
                &status,
                &counter,
            )
        };
        let launched = match (data, ring.as_mut(), whole.as_mut()) {
            (Some(data), Some(ring), _) => {
                let pieces = Pieces {
                    range: range.clone(),
                    nt,
                    voxels: piece_voxels,
                };
                stream_pieces(gpu, curves, &pieces, &data, &counter, ring, || start(&data))
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

/// A launch's curves split for the upload: voxels `range` (of the job), `nt` time rows,
/// pieces of `voxels` voxels (a multiple of [`PIECE_ALIGN`]; the last one shorter).
struct Pieces {
    range: Range<usize>,
    nt: usize,
    voxels: usize,
}

impl Pieces {
    /// Voxel ranges within the launch.
    fn iter(&self) -> impl Iterator<Item = Range<usize>> + '_ {
        let len = self.range.len();
        (0..len)
            .step_by(self.voxels.max(1))
            .map(move |a| a..(a + self.voxels).min(len))
    }

    /// Piece `within` packed into `dst`: time-major, row t at `t * within.len() * 4`.
    fn pack(&self, curves: ArrayView2<f32>, within: Range<usize>, dst: &mut [u8]) {
        let s = self.range.start;
        pack(curves, s + within.start..s + within.end, 0..self.nt, dst);
    }
}

/// Curves `pieces` into `data` (time-major, a row of [`padded_row`] values per time point),
/// piece by piece: piece j + 1 is packed on the other cores while piece j is copied (into
/// its columns of every row), through the two page-locked `ring` buffers. Behind each
/// piece, on the same stream, the ready word of `counter` (the voxels whose curves are up)
/// is raised, and after the first piece `start` queues the launch, whose units wait for
/// their voxels' pieces. The copies do not wait for the queue: `data` was allocated for
/// this launch before any launch of the round, and the launch reads a voxel's curve only
/// once its piece is up.
fn stream_pieces<R: KnownRuntime>(
    gpu: &Gpu<R>,
    curves: ArrayView2<f32>,
    pieces: &Pieces,
    data: &GpuArray<f32>,
    counter: &GpuArray<u32>,
    ring: &mut [HostStaging; 2],
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
            Ok(false) => Err(gpu_runtime::Error::InvalidLaunch {
                kernel: "perfusion upload".into(),
                why: "no raw copies on this device".into(),
            }),
            Err(e) => Err(e),
        };
        if result.is_err() {
            break;
        }
        if let Some(start) = start.take() {
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

#[allow(clippy::too_many_arguments)]
fn launch<R: KnownRuntime, F: KernelFloat>(
    gpu: &Gpu<R>,
    method: Method,
    data: &GpuArray<f32>,
    grid: &GpuArray<F>,
    setup: &GpuArray<F>,
    p: &FitParams,
    out: &GpuArray<F>,
    status: &GpuArray<u32>,
    counter: &GpuArray<u32>,
) -> gpu_runtime::Result<()> {
    match method {
        Method::NelderMead => kernels::nelder_mead(gpu, data, grid, setup, p, out, status, counter),
        Method::LevenbergMarquardt => {
            kernels::levenberg_marquardt(gpu, data, grid, setup, p, out, status, counter)
        }
    }
}

/// Kernel time alone: the curves stay on the device; each repetition is one launch and a
/// sync. For benchmarks (`biogpu-bench --filter perfusion`); `f64` selects the arithmetic.
/// Returns the per-repetition times and the units per cube used.
/// `cube` overrides the units per cube (else [`CUBE_ENV`] or the default), `persistent`
/// whether Nelder-Mead runs persistent units (else [`PERSISTENT_ENV`] or the default).
pub fn kernel_times(
    curves: ArrayView2<f32>,
    problem: &Problem,
    opts: &crate::FitOptions,
    device: &Device,
    f64: bool,
    reps: usize,
    cube: Option<u32>,
    persistent: Option<bool>,
) -> Result<(Vec<Duration>, u32)> {
    let setup = opts.setup()?;
    problem.check_model(opts.model)?;
    let shape = (cube, persistent);
    if f64 {
        device.require_f64()?;
        time_kernel::<f64>(curves, problem, &setup, device, reps, shape)
    } else {
        time_kernel::<f32>(curves, problem, &setup, device, reps, shape)
    }
}

fn time_kernel<F: KernelFloat>(
    curves: ArrayView2<f32>,
    problem: &Problem,
    setup: &Setup,
    device: &Device,
    reps: usize,
    (cube, persistent): (Option<u32>, Option<bool>),
) -> Result<(Vec<Duration>, u32)> {
    let n = curves.nrows();
    let nt = problem.len();
    let np = setup.model.n_params();
    with_gpu!(device, |gpu| {
        let mut staging: HostStaging = gpu.host_staging(n * nt * 4);
        pack(curves, 0..n, 0..nt, staging.as_bytes_mut());
        let data = gpu.upload_staged::<f32>(&staging, n * nt)?;
        let grid = gpu.upload(&grid_values::<F>(problem))?;
        let setup_dev = gpu.upload(&setup_values::<F>(setup))?;
        let out = gpu.empty::<F>((np + 2) * n)?;
        let status = gpu.empty::<u32>(n)?;
        let mut p = params::<F>(setup, problem, n, gpu.info());
        if let Some(on) = persistent {
            p.persistent = on;
        }
        p.cube = cube.unwrap_or_else(|| cube_units(setup.method, F::NAME == "f64", p.persistent));
        // One counter per launch (no voxel taken, all curves up), made before the timed
        // launches.
        let counters = (0..=reps.max(1))
            .map(|_| gpu.upload(&counter_words(n as u32)))
            .collect::<gpu_runtime::Result<Vec<_>>>()?;
        let run = |k: usize| {
            launch(
                gpu,
                setup.method,
                &data,
                &grid,
                &setup_dev,
                &p,
                &out,
                &status,
                &counters[k],
            )
        };
        run(0)?;
        gpu.sync()?;
        let mut times = Vec::with_capacity(reps);
        for k in 1..=reps.max(1) {
            let ((), t) = gpu.timed(|| run(k))?;
            times.push(t);
        }
        Ok((times, p.cube))
    })
    .map_err(Error::from)
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
