//! The per-voxel steps both fit kernels share: the voxel's statistics, bounds, the start
//! comparison, taking the next voxel (persistent units), waiting for its curve, writing its fit.

use super::model::{self, Ctx, canonical, datum, n_params, sse};
use super::{READY_WORD, STATUS_AT_BOUND, STATUS_CONVERGED, STATUS_FAILED, STATUS_INVALID};
use cubecl::prelude::*;

/// Per-voxel constants shared by both fit kernels.
#[derive(CubeType, Clone, Copy)]
pub(crate) struct Voxel<F: Float> {
    pub(crate) valid: bool,
    pub(crate) sst: F,
    pub(crate) sumsq: F,
}

/// Validity, SST about the mean and sum of squares of the voxel's data (perfusion-core's
/// `curve_stats`). `big` is f32::MAX: |d| <= big is false for NaN and infinities.
#[cube]
pub(crate) fn curve_stats<F: Float>(
    data: &Array<f32>,
    curve: &SharedMemory<f32>,
    ctx: Ctx<F>,
    big: F,
    #[comptime] model: u32,
) -> Voxel<F> {
    let mut sum = F::new(0.0);
    let mut sumsq = F::new(0.0);
    let mut valid = true;
    for i in 0..ctx.nt {
        let d = datum::<F>(data, curve, ctx, i, model);
        if !(F::abs(d) <= big) {
            valid = false;
        }
        sum += d;
        sumsq += d * d;
    }
    let mean = sum / F::cast_from(ctx.nt);
    let mut sst = F::new(0.0);
    for i in 0..ctx.nt {
        let r = datum::<F>(data, curve, ctx, i, model) - mean;
        sst += r * r;
    }
    Voxel::<F> {
        valid: valid && sst > F::new(0.0),
        sst,
        sumsq,
    }
}

#[cube]
pub(crate) fn is_free(mask: u32, p: u32) -> bool {
    ((mask >> p) & 1u32) == 1u32
}

/// Clamp free parameters into the box, set fixed ones (perfusion-core's `Bounds::project`).
#[cube]
pub(crate) fn project<F: Float>(
    x: &mut Array<F>,
    setup: &Array<F>,
    mask: u32,
    #[comptime] np: u32,
) {
    #[unroll]
    for p in 0..np {
        if is_free(mask, p) {
            let lo = setup[(5 + p) as usize];
            let hi = setup[(10 + p) as usize];
            if x[p as usize] < lo {
                x[p as usize] = lo;
            } else if x[p as usize] > hi {
                x[p as usize] = hi;
            }
        } else {
            x[p as usize] = setup[p as usize];
        }
    }
}

/// Set fixed parameters (perfusion-core's `Bounds::hold_fixed`).
#[cube]
pub(crate) fn hold_fixed<F: Float>(
    x: &mut Array<F>,
    setup: &Array<F>,
    mask: u32,
    #[comptime] np: u32,
) {
    #[unroll]
    for p in 0..np {
        if !is_free(mask, p) {
            x[p as usize] = setup[p as usize];
        }
    }
}

/// Whether a free parameter lies within 1e-4 of its range from a bound
/// (perfusion-core's `Bounds::at_bound`); `margin_rel` is 1e-4.
#[cube]
pub(crate) fn at_bound<F: Float>(
    x: &Array<F>,
    setup: &Array<F>,
    mask: u32,
    margin_rel: F,
    #[comptime] np: u32,
) -> bool {
    let mut at = false;
    #[unroll]
    for p in 0..np {
        let lo = setup[(5 + p) as usize];
        let hi = setup[(10 + p) as usize];
        let margin = margin_rel * (hi - lo);
        if is_free(mask, p) && (x[p as usize] <= lo + margin || x[p as usize] >= hi - margin) {
            at = true;
        }
    }
    at
}

/// Nelder-Mead cost: +inf outside the box (barrier) and for non-finite costs.
#[cube]
pub(crate) fn nm_cost<F: Float>(
    data: &Array<f32>,
    curve: &SharedMemory<f32>,
    inputs: &SharedMemory<F>,
    grid: &Array<F>,
    setup: &Array<F>,
    ctx: Ctx<F>,
    x: &Array<F>,
    mask: u32,
    inf: F,
    #[comptime] model: u32,
) -> F {
    let np = comptime!(n_params(model));
    let mut inside = true;
    #[unroll]
    for p in 0..np {
        if is_free(mask, p) {
            let v = x[p as usize];
            if !(v >= setup[(5 + p) as usize] && v <= setup[(10 + p) as usize]) {
                inside = false;
            }
        }
    }
    let mut f = inf;
    if inside {
        let c = canonical::<F>(x, ctx.rate_scale, model);
        let s = sse::<F>(data, curve, inputs, grid, ctx, c, model);
        if s < inf {
            f = s;
        }
    }
    f
}

/// Point `g` of the start comparison into `x`: 0 the given start `x0`, `g >= 1` the voxel's
/// searched start `g - 1`, left in `starts` by the start kernel ([`super::start`]),
/// projected (perfusion-core's `cpu::fit` compares the same).
#[cube]
#[allow(clippy::too_many_arguments)]
pub(crate) fn start_point<F: Float>(
    x: &mut Array<F>,
    x0: &Array<F>,
    starts: &Array<F>,
    setup: &Array<F>,
    mask: u32,
    voxel: u32,
    nvox: u32,
    g: u32,
    #[comptime] np: u32,
) {
    #[unroll]
    for p in 0..np {
        x[p as usize] = x0[p as usize];
    }
    if g > 0 {
        #[unroll]
        for p in 0..np {
            x[p as usize] = starts[(((g - 1u32) * np + p) * nvox + voxel) as usize];
        }
        project::<F>(x, setup, mask, np);
    }
}

/// Copy `n` parameters.
#[cube]
pub(crate) fn copy<F: Float>(dst: &mut Array<F>, src: &Array<F>, #[comptime] np: u32) {
    #[unroll]
    for p in 0..np {
        dst[p as usize] = src[p as usize];
    }
}

/// Samples per turn of a persistent unit's curve copy (independent loads in flight).
const COPY_UNROLL: u32 = 8;

/// Write the fit of `voxel` (minimum `x` of cost `cost`, status `result`: failed where the
/// cost is not finite, at a bound where a converged fit's free parameter is within 1e-4 of
/// its range from one); the unit stays on it (restarts, or [`next_voxel`]).
#[cube]
#[allow(clippy::too_many_arguments)]
pub(crate) fn record_fit<F: Float>(
    out: &mut Array<F>,
    status: &mut Array<u32>,
    x: &Array<F>,
    setup: &Array<F>,
    cost: F,
    stats: Voxel<F>,
    result: u32,
    iterations: u32,
    voxel: u32,
    nvox: u32,
    mask: u32,
    inf: F,
    nan: F,
    #[comptime] np: u32,
) {
    let mut code = result;
    if !(cost < inf) {
        code = STATUS_FAILED;
    } else if code == STATUS_CONVERGED
        && at_bound::<F>(x, setup, mask, F::new(1.0) / F::new(10000.0), np)
    {
        code = STATUS_AT_BOUND;
    }
    write_result::<F>(
        out, status, x, cost, stats, code, iterations, voxel, nvox, nan, np,
    );
}

/// The unit's next voxel once it has written one: from `counter[0]` for persistent units,
/// else none (`nvox`).
#[cube]
pub(crate) fn next_voxel(
    counter: &mut Array<Atomic<u32>>,
    nvox: u32,
    #[comptime] persistent: bool,
) -> u32 {
    let mut next = nvox;
    if comptime!(persistent) {
        next = counter[0].fetch_add(1u32);
    }
    next
}

/// The unit's first voxel: its own position, or for persistent units the next from
/// `counter[0]` (units past `units`, the last cube's rest, take none: `nvox`).
#[cube]
pub(crate) fn first_voxel(
    counter: &mut Array<Atomic<u32>>,
    nvox: u32,
    units: u32,
    #[comptime] persistent: bool,
) -> u32 {
    let mut voxel = ABSOLUTE_POS_X + ABSOLUTE_POS_Y * CUBE_COUNT_X * CUBE_DIM_X;
    if comptime!(persistent) {
        let pos = voxel;
        voxel = nvox;
        if pos < units {
            voxel = counter[0].fetch_add(1u32);
        }
    }
    voxel
}

/// From voxel `first` on, the first voxel with valid data, `nvox` when none is left (the
/// value returned is computed from the ready count read, as [`await_curve`]'s: use it for
/// the curve's reads): its curve in the unit's shared column (persistent units) and its
/// statistics in `stats`. Invalid voxels on the way are written at once (NaN maps, status
/// invalid input; `x` only fills the parameter slot); persistent units take each next voxel
/// from `counter[0]`, others have none.
#[cube]
#[allow(clippy::too_many_arguments)]
pub(crate) fn take_valid_voxel<F: Float>(
    data: &Array<f32>,
    curve: &mut SharedMemory<f32>,
    counter: &mut Array<Atomic<u32>>,
    out: &mut Array<F>,
    status: &mut Array<u32>,
    x: &Array<F>,
    ctx: Ctx<F>,
    stats: &mut Voxel<F>,
    first: u32,
    nvox: u32,
    nan: F,
    big: F,
    #[comptime] model: u32,
    #[comptime] np: u32,
    #[comptime] persistent: bool,
) -> u32 {
    let mut voxel = first;
    let mut at = ctx;
    let mut searching = true;
    while searching {
        if voxel >= nvox {
            searching = false;
        } else {
            voxel = await_curve(counter, voxel);
            at.voxel = voxel;
            if comptime!(persistent) {
                load_curve::<F>(data, curve, at, comptime!(model::cube_of(model)));
            }
            let st = curve_stats::<F>(data, curve, at, big, model);
            stats.valid = st.valid;
            stats.sst = st.sst;
            stats.sumsq = st.sumsq;
            if st.valid {
                searching = false;
            } else {
                write_result::<F>(
                    out,
                    status,
                    x,
                    nan,
                    *stats,
                    u32::new(STATUS_INVALID as i64),
                    0u32,
                    voxel,
                    nvox,
                    nan,
                    np,
                );
                voxel = nvox;
                if comptime!(persistent) {
                    voxel = counter[0].fetch_add(1u32);
                }
            }
        }
    }
    voxel
}

/// The arterial and portal value blocks of `grid` into the cube's shared `inputs`
/// ([`shared_inputs_len`]), copied by the whole cube at launch (persistent units).
#[cube]
pub(crate) fn load_shared_inputs<F: Float>(grid: &Array<F>, inputs: &mut SharedMemory<F>, nt: u32) {
    let len = 3 * nt + 2;
    let mut k = UNIT_POS;
    while k < 2 * len {
        let mut src = 6 * nt + k;
        if k >= len {
            src += len;
        }
        inputs[k as usize] = grid[src as usize];
        k += CUBE_DIM;
    }
    sync_cube();
}

/// Voxel `ctx.voxel`'s curve into the unit's column of the shared curves (persistent
/// units). Eight loads in flight per turn: the rest of the warp waits for this copy (one
/// voxel's curve, nt loads from device memory).
#[cube]
pub(crate) fn load_curve<F: Float>(
    data: &Array<f32>,
    curve: &mut SharedMemory<f32>,
    ctx: Ctx<F>,
    #[comptime] cube: u32,
) {
    let nt = ctx.nt;
    let blocks = nt / COPY_UNROLL;
    for b in 0..blocks {
        #[unroll]
        for k in 0..COPY_UNROLL {
            let i = b * COPY_UNROLL + k;
            curve[(i * cube + ctx.lane) as usize] = data[(i * ctx.stride + ctx.voxel) as usize];
        }
    }
    for i in blocks * COPY_UNROLL..nt {
        curve[(i * cube + ctx.lane) as usize] = data[(i * ctx.stride + ctx.voxel) as usize];
    }
}

/// Dependent integer steps between two reads of the ready count by a waiting unit (tens of
/// microseconds): units that outrun the upload would otherwise keep one L2 slice busy with
/// their atomic reads and may slow every unit. The pause also leaves units idle for a while
/// after their piece has landed; a shorter one is not measured yet (docs/perfusion.md).
const WAIT_STEPS: u32 = 16384;

/// Wait until the ready count (`counter[READY_WORD]`: the voxels whose curves are on the
/// device, raised by the host as pieces land while the kernel runs) passes `voxel`, reading
/// it every [`WAIT_STEPS`] steps; returns `voxel` computed from the word read (`voxel +
/// (ready >> 31)`: launches hold at most 2^20 voxels, so the same value), so that the
/// curve's loads depend on that read and cannot be issued before it. The host uploads pieces
/// of whole 32-voxel groups into rows padded to such groups, so no cache line holds samples
/// of a voxel not yet ready.
#[cube]
pub(crate) fn await_curve(counter: &Array<Atomic<u32>>, voxel: u32) -> u32 {
    let mut ready = counter[READY_WORD].load();
    let mut pause = voxel;
    while ready <= voxel {
        for _ in 0..WAIT_STEPS {
            pause = pause * 1664525u32 + 1013904223u32;
        }
        // `pause & (ready >> 31)` is 0 (ready < 2^31) but keeps the steps from being removed.
        ready = counter[(READY_WORD as u32 + (pause & (ready >> 31))) as usize].load();
    }
    voxel + (ready >> 31)
}

/// Parameters, SSE, R^2 and status of one voxel (NaN parameters for invalid input).
#[cube]
pub(crate) fn write_result<F: Float>(
    out: &mut Array<F>,
    status: &mut Array<u32>,
    x: &Array<F>,
    cost: F,
    stats: Voxel<F>,
    result: u32,
    iterations: u32,
    voxel: u32,
    nvox: u32,
    nan: F,
    #[comptime] np: u32,
) {
    #[unroll]
    for p in 0..np {
        let mut v = nan;
        if stats.valid {
            v = x[p as usize];
        }
        out[(p * nvox + voxel) as usize] = v;
    }
    let mut sse_v = nan;
    let mut r2 = nan;
    if stats.valid {
        sse_v = cost;
        r2 = F::new(1.0) - cost / stats.sst;
    }
    out[(np * nvox + voxel) as usize] = sse_v;
    out[((np + 1) * nvox + voxel) as usize] = r2;
    status[voxel as usize] = result | (iterations << 8);
}
