//! DCE perfusion fits, one unit per voxel, generic over the float type: f64 on CUDA (the
//! paper's precision), f32 on wgpu (WGSL has no f64).
//!
//! Both kernels port perfusion-core's CPU fits operation by operation (`fit/nelder_mead.rs`,
//! `fit/lm.rs`, `conv.rs`), so that f64 results follow the same path. They are written as
//! state machines with a single cost evaluation per loop turn: units of a warp that are in
//! different Nelder-Mead steps (reflect, expand, contract, shrink) still evaluate their
//! model curves together instead of one branch after another.
//!
//! Data layout: voxel curves as f32 (measured data; NIfTI float32), time-major
//! (`data[t * voxels + v]`, coalesced across a warp); the shared grid as `F` in six blocks
//! of `nt` values: times, intervals, arterial input, its slopes, portal input, its slopes.

// CubeCL evaluates `if comptime!(..)` at expansion time; merging it with a runtime
// condition would turn it into a runtime branch.
#![allow(clippy::collapsible_if, clippy::collapsible_else_if)]
// `!(x > 0.0)` is meant: it is also true for NaN. Ranges as CubeCL 0.10 parses them.
// Shared memory is a zero-sized handle on the host side; #[cube] functions take it by
// reference like the arrays.
#![allow(clippy::trivially_copy_pass_by_ref)]
#![allow(
    clippy::neg_cmp_op_on_partial_ord,
    clippy::range_plus_one,
    clippy::if_not_else
)]

pub(crate) mod model;
pub use model::WEIGHT_SERIES;

use crate::catalog::{CatalogEntry, array, entry, settings_1d};
use crate::linalg::cholesky_solve;
use cubecl::prelude::*;
use gpu_runtime::{Error, Gpu, GpuArray, Result};
use model::{
    CUBE_SHIFT, Ctx, SHARED_CURVE, UNIFORM_GRID, canonical, chain, chain_len, chain_small, datum,
    n_params, normal, sse, tri,
};

/// Model ids (perfusion-core's `Model::id`).
pub const MODEL_DUAL_INPUT: u32 = 0;
pub const MODEL_TOFTS: u32 = 1;
pub const MODEL_EXTENDED_TOFTS: u32 = 2;
pub const MODEL_PATLAK: u32 = 3;
pub const MODEL_2CXM: u32 = 4;

/// Per-voxel statuses (perfusion-core's `FitStatus`).
pub const STATUS_CONVERGED: u32 = 0;
pub const STATUS_MAX_ITERATIONS: u32 = 1;
pub const STATUS_AT_BOUND: u32 = 2;
pub const STATUS_INVALID: u32 = 3;
pub const STATUS_FAILED: u32 = 4;

/// Default units per cube: a register-heavy kernel, so fewer units than `CUBE_1D`.
pub const CUBE_FIT: u32 = 128;

/// Units per cube the fit kernels take. On CUDA the cube also caps registers per unit
/// (`__launch_bounds__(cube)`: 65,536 / cube, at most 255): 384 gives 170 (12 warps per
/// multiprocessor), 512 gives 128 (16 warps).
pub const CUBES: [u32; 6] = [32, 64, 128, 256, 384, 512];

/// The cube size in the comptime model word (multiples of 32).
const fn cube_word(cube: u32) -> u32 {
    (cube / 32) << CUBE_SHIFT
}

/// Setup array layout: start (fixed values for fixed parameters), lower, upper bounds, 5 each.
pub const SETUP_LEN: usize = 15;
/// Grid array blocks (times, intervals, arterial, slopes, portal, slopes), followed by the
/// four input blocks padded for the uniform-grid walk ([`pad_len`] values each).
pub const GRID_BLOCKS: usize = 6;

/// Values of one padded input block: sample indices `-nt - 1 ..= 2 nt`, every index a
/// uniform-grid evaluation can reach (delays are clamped to `nt` samples either way).
pub const fn pad_len(nt: usize) -> usize {
    3 * nt + 2
}

/// Length of the grid array for `nt` time points.
pub const fn grid_len(nt: usize) -> usize {
    GRID_BLOCKS * nt + 4 * pad_len(nt)
}

/// The grid array the fit kernels take, in `F`: times, intervals, arterial input, its
/// slopes, portal input, its slopes (`nt` values each), then the inputs and slopes again,
/// padded: sample `j` of each at `nt + 1 + j` for `j` in `-nt - 1 ..= 2 nt`, clamped to the
/// grid (the first value before it, the last after it; slopes 0 before it, and the last
/// slope, 0, after it), as perfusion-core's uniform-grid walk reads them. The kernels then
/// step through the padded blocks with no clamping per step; the values are the same.
pub fn grid_values<F: KernelFloat>(blocks: [&[f64]; GRID_BLOCKS]) -> Vec<F> {
    let nt = blocks[0].len();
    let mut v = Vec::with_capacity(grid_len(nt));
    for b in blocks {
        v.extend(b.iter().map(|&x| F::from_f64(x)));
    }
    let last = nt as isize - 1;
    for (b, slope) in [
        (blocks[2], false),
        (blocks[3], true),
        (blocks[4], false),
        (blocks[5], true),
    ] {
        v.extend((0..pad_len(nt)).map(|p| {
            let j = p as isize - nt as isize - 1;
            if slope && j < 0 {
                F::from_f64(0.0)
            } else {
                F::from_f64(b[j.clamp(0, last) as usize])
            }
        }));
    }
    v
}

/// Floats the kernels run in, with the host conversion of f64 settings.
pub trait KernelFloat: Float + CubeElement {
    const NAME: &'static str;
    fn from_f64(v: f64) -> Self;
    fn to_f64(self) -> f64;
}

impl KernelFloat for f64 {
    const NAME: &'static str = "f64";
    fn from_f64(v: f64) -> Self {
        v
    }
    fn to_f64(self) -> f64 {
        self
    }
}

impl KernelFloat for f32 {
    const NAME: &'static str = "f32";
    fn from_f64(v: f64) -> Self {
        v as f32
    }
    fn to_f64(self) -> f64 {
        f64::from(self)
    }
}

/// Settings every fit kernel takes, in the units perfusion-core resolved.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FitParams {
    pub voxels: u32,
    /// Values per time row of the curves (`>= voxels`: rows may be padded).
    pub stride: u32,
    pub nt: u32,
    /// `MODEL_*`.
    pub model: u32,
    /// Bit p set: parameter p is free.
    pub free_mask: u32,
    /// User rate unit to 1/s.
    pub rate_scale: f64,
    pub max_iterations: u32,
    /// Nelder-Mead stopping rule (vertex cost spread, vertex spread) and 10 eps of `F`.
    pub tol_fun: f64,
    pub tol_x: f64,
    pub ten_eps: f64,
    /// LM: relative step/cost tolerance, gradient cosine, stall cosine, rounding floor
    /// relative to the data, longest delay step (s), which parameters are delays (bits).
    pub tol: f64,
    pub tol_grad: f64,
    pub stall: f64,
    pub floor_rel: f64,
    pub max_delay_step: f64,
    pub delay_mask: u32,
    /// LM damping schedule (start, floor, ceiling, diagonal floor).
    pub lambda: [f64; 4],
    /// Delay grid (start s, step s, count) and the parameters it sets (`u32::MAX`: none).
    pub grid: Option<(f64, f64, u32)>,
    pub delays: [u32; 2],
    /// Whether the grid is uniform, and 1 / its interval.
    pub uniform: bool,
    pub inv_dt: f64,
    /// Units per cube.
    pub cube: u32,
    /// The shared-memory variants: Nelder-Mead's persistent units (each takes voxels from a
    /// counter, its curve in shared memory; at most `units` of them) where the curves of a
    /// cube fit, and LM's stash ([`LM_STASH`]).
    pub persistent: bool,
    pub units: u32,
}

impl FitParams {
    fn n_free(&self) -> u32 {
        (self.free_mask & ((1 << n_params(self.model)) - 1)).count_ones()
    }

    /// The comptime model word: id plus the uniform-grid flag.
    fn model_word(&self) -> u32 {
        self.model | if self.uniform { UNIFORM_GRID } else { 0 }
    }

    /// Samples per unit of the shared curves of persistent Nelder-Mead units (`nt` rounded
    /// up to a power of two, at least 32), or 0 when the launch is one voxel per unit (not
    /// asked for, or a cube's curves would not fit in `max_shared` bytes).
    /// `elem_bytes` is the size of the kernel's float: the input blocks the time loop
    /// walks ([`shared_inputs_len`]) are in shared memory too.
    pub fn shared_nt(&self, max_shared: usize, elem_bytes: usize) -> u32 {
        let cap = self.nt.next_power_of_two().max(32);
        let bytes =
            self.cube as usize * cap as usize * 4 + shared_inputs_len(cap) as usize * elem_bytes;
        if self.persistent && self.units > 0 && bytes <= max_shared {
            cap
        } else {
            0
        }
    }
}

/// Values in the shared copy of the padded input blocks a Nelder-Mead time loop walks
/// (arterial, then portal values: `3 nt + 2` each, see [`grid_values`]) for persistent units,
/// so that its input loads come from shared memory as its curve's do.
pub const fn shared_inputs_len(nt: u32) -> u32 {
    2 * (3 * nt + 2)
}

/// Set in LM's comptime model word (with the cube size, as [`SHARED_CURVE`]) when the
/// accepted point's J^T J, J^T r, x and the trial point wait in shared memory (30 values
/// per unit) while the trial is evaluated.
pub const LM_STASH: u32 = 0x400;

/// Most persistent units per launch by default: more than any GPU keeps resident (units
/// beyond those find the counter exhausted and end at once).
pub const PERSISTENT_UNITS: u32 = 1 << 18;

/// Per-voxel constants shared by both fit kernels.
#[derive(CubeType, Clone, Copy)]
struct Voxel<F: Float> {
    valid: bool,
    sst: F,
    sumsq: F,
}

/// Validity, SST about the mean and sum of squares of the voxel's data (perfusion-core's
/// `curve_stats`). `big` is f32::MAX: |d| <= big is false for NaN and infinities.
#[cube]
fn curve_stats<F: Float>(
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
fn is_free(mask: u32, p: u32) -> bool {
    ((mask >> p) & 1u32) == 1u32
}

/// Clamp free parameters into the box, set fixed ones (perfusion-core's `Bounds::project`).
#[cube]
fn project<F: Float>(x: &mut Array<F>, setup: &Array<F>, mask: u32, #[comptime] np: u32) {
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
fn hold_fixed<F: Float>(x: &mut Array<F>, setup: &Array<F>, mask: u32, #[comptime] np: u32) {
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
fn at_bound<F: Float>(
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
fn nm_cost<F: Float>(
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

/// Delay-grid settings as the kernels take them.
#[derive(CubeType, Clone, Copy)]
struct DelaySearch<F: Float> {
    start: F,
    step: F,
    count: u32,
    d1: u32,
    d2: u32,
}

/// Grid point `g` (0 = the start itself) into `x`: `x0` with the delays of combination g - 1
/// (first delay outer), projected (perfusion-core's `delay_grid_start`).
#[cube]
fn grid_point<F: Float>(
    x: &mut Array<F>,
    x0: &Array<F>,
    setup: &Array<F>,
    mask: u32,
    ds: DelaySearch<F>,
    g: u32,
    #[comptime] np: u32,
) {
    #[unroll]
    for p in 0..np {
        x[p as usize] = x0[p as usize];
    }
    if g > 0 {
        let mut inner = 1u32;
        if ds.d2 < 5 {
            inner = ds.count;
        }
        let a = (g - 1) / inner;
        let c = (g - 1) % inner;
        #[unroll]
        for p in 0..np {
            if p == ds.d1 {
                x[p as usize] = ds.start + ds.step * F::cast_from(a);
            }
            if p == ds.d2 {
                x[p as usize] = ds.start + ds.step * F::cast_from(c);
            }
        }
        project::<F>(x, setup, mask, np);
    }
}

/// Number of grid evaluations after the start (0 without a grid).
#[cube]
fn grid_total<F: Float>(ds: DelaySearch<F>) -> u32 {
    let mut total = 0u32;
    if ds.d1 < 5 && ds.count > 0 {
        total = ds.count;
        if ds.d2 < 5 {
            total = ds.count * ds.count;
        }
    }
    total
}

/// Copy `n` parameters.
#[cube]
fn copy<F: Float>(dst: &mut Array<F>, src: &Array<F>, #[comptime] np: u32) {
    #[unroll]
    for p in 0..np {
        dst[p as usize] = src[p as usize];
    }
}

/// Vertex `j` of the simplex into `dst` (select chain: indices stay constant).
#[cube]
fn read_vertex<F: Float>(
    dst: &mut Array<F>,
    vtx: &Array<F>,
    j: u32,
    #[comptime] nv: u32,
    #[comptime] np: u32,
) {
    #[unroll]
    for k in 0..nv {
        if k == j {
            #[unroll]
            for p in 0..np {
                dst[p as usize] = vtx[(k * 5 + p) as usize];
            }
        }
    }
}

/// `x` and cost `f` into vertex `j`.
#[cube]
fn write_vertex<F: Float>(
    vtx: &mut Array<F>,
    fv: &mut Array<F>,
    x: &Array<F>,
    f: F,
    j: u32,
    #[comptime] nv: u32,
    #[comptime] np: u32,
) {
    #[unroll]
    for k in 0..nv {
        if k == j {
            #[unroll]
            for p in 0..np {
                vtx[(k * 5 + p) as usize] = x[p as usize];
            }
            fv[k as usize] = f;
        }
    }
}

/// The reflected point `2 xbar - 1 worst` (worst: row `nv - 1`), fixed parameters held
/// (perfusion-core's `combine(2.0, 1.0)`).
#[cube]
fn reflect<F: Float>(
    pt: &mut Array<F>,
    xbar: &Array<F>,
    vtx: &Array<F>,
    setup: &Array<F>,
    mask: u32,
    #[comptime] nv: u32,
    #[comptime] np: u32,
) {
    #[unroll]
    for p in 0..np {
        pt[p as usize] =
            F::new(2.0) * xbar[p as usize] - F::new(1.0) * vtx[((nv - 1) * 5 + p) as usize];
    }
    hold_fixed::<F>(pt, setup, mask, np);
}

/// Samples per turn of a persistent unit's curve copy (independent loads in flight).
const COPY_UNROLL: u32 = 8;

const S_GRID: u32 = 0;
const S_INIT: u32 = 1;
const S_REFLECT: u32 = 2;
const S_EXPAND: u32 = 3;
const S_OUTSIDE: u32 = 4;
const S_INSIDE: u32 = 5;
const S_SHRINK: u32 = 6;

/// Nelder-Mead fits (perfusion-core's `nelder_mead`, with the delay grid first).
/// `out` receives `np + 2` planes of `voxels` values (parameters, SSE, R^2); `status` the
/// status in its low byte and the iterations above it. `inf`, `nan` and `big` (f32::MAX)
/// are passed in because CUDA C++ cannot reinterpret literals.
///
/// One flat loop, one cost evaluation per turn: a unit whose fit ends writes it and starts
/// its next voxel at the top of the next turn, while the other units of its warp go on. With
/// `shared_nt = 0` a unit fits voxel `ABSOLUTE_POS` only. With `shared_nt >= nt` the units are
/// persistent: each takes voxels from `counter[0]` (zero at launch) until none is left, and
/// copies the voxel's curve into its column of shared memory (`shared_nt` samples of `cube`
/// units), so that units of a warp working on unrelated voxels still read their data on chip;
/// a warp then no longer waits for its slowest voxel (the 600-update cap) before the others
/// take new work. Persistent units also read the inputs from a copy of their value blocks
/// that the cube makes in shared memory at launch. Each voxel's fit is the same operations
/// either way.
#[cube(launch_unchecked)]
pub fn nelder_mead_kernel<F: Float + CubeElement>(
    data: &Array<f32>,
    grid: &Array<F>,
    setup: &Array<F>,
    out: &mut Array<F>,
    status: &mut Array<u32>,
    counter: &mut Array<Atomic<u32>>,
    nvox: u32,
    stride: u32,
    units: u32,
    nt: u32,
    mask: u32,
    rate_scale: F,
    inv_dt: F,
    max_iter: u32,
    tol_fun: F,
    tol_x: F,
    ten_eps: F,
    grid_start: F,
    grid_step: F,
    grid_count: u32,
    delay1: u32,
    delay2: u32,
    inf: F,
    nan: F,
    big: F,
    #[comptime] model: u32,
    #[comptime] n_free: u32,
    #[comptime] shared_nt: u32,
) {
    let np = comptime!(n_params(model));
    let nv = comptime!(n_free + 1);
    let cube = comptime!(model::cube_of(model));
    let persistent = comptime!(shared_nt > 0);
    let mut curve = SharedMemory::<f32>::new(comptime!(if shared_nt > 0 {
        (cube * shared_nt) as usize
    } else {
        1usize
    }));
    let mut inputs = SharedMemory::<F>::new(comptime!(if shared_nt > 0 {
        shared_inputs_len(shared_nt) as usize
    } else {
        1usize
    }));
    if comptime!(persistent) {
        load_shared_inputs::<F>(grid, &mut inputs, nt);
    }
    let lane = UNIT_POS;
    let mut voxel = first_voxel(counter, nvox, units, persistent);
    let ds = DelaySearch::<F> {
        start: grid_start,
        step: grid_step,
        count: grid_count,
        d1: delay1,
        d2: delay2,
    };
    let total = grid_total::<F>(ds);
    let usual = F::new(21.0) / F::new(20.0);
    let zero_term = F::new(1.0) / F::new(4000.0);
    let half = F::new(0.5);
    let inv_n = F::new(1.0) / F::cast_from(n_free);
    // The simplex, one vertex of 5 per row. During the delay grid, row 0 holds the start and
    // row 1 the best grid point; from the initial simplex on, row 0 is the start (then the
    // best vertex). Few arrays live across the cost evaluation: the vertices, their costs, the
    // trial point and the centroid (the worst vertex is read from the simplex, the reflected
    // point recomputed), so the kernel keeps fewer registers.
    let mut vtx = Array::<F>::new(30usize);
    let mut fv = Array::<F>::new(6usize);
    let mut pt = Array::<F>::new(5usize);
    let mut xbar = Array::<F>::new(5usize);
    let mut stats = Voxel::<F> {
        valid: false,
        sst: F::new(0.0),
        sumsq: F::new(0.0),
    };
    let mut state = u32::new(S_INIT as i64);
    let mut j = 0u32;
    let mut fr = inf;
    let mut grid_best = inf;
    let mut converged = false;
    let mut it = 0u32;
    let mut ctx = Ctx::<F> {
        voxel,
        lane,
        stride,
        nt,
        rate_scale,
        inv_dt,
    };
    let mut active = true;
    let mut fresh = true;
    while active {
        if fresh {
            voxel = take_valid_voxel::<F>(
                data, &mut curve, counter, out, status, &vtx, ctx, &mut stats, voxel, nvox, nan,
                big, model, np, persistent,
            );
            ctx.voxel = voxel;
            active = voxel < nvox;
            if active {
                #[unroll]
                for k in 0..30u32 {
                    vtx[k as usize] = F::new(0.0);
                }
                #[unroll]
                for p in 0..np {
                    pt[p as usize] = setup[p as usize];
                }
                project::<F>(&mut pt, setup, mask, np);
                // x0 = the projected start, in row 0.
                copy::<F>(&mut vtx, &pt, np);
                copy::<F>(&mut xbar, &pt, np);
                #[unroll]
                for k in 0..6u32 {
                    fv[k as usize] = inf;
                }
                state = S_INIT;
                if total > 0 {
                    state = S_GRID;
                }
                j = 0;
                fr = inf;
                grid_best = inf;
                converged = false;
                it = 0;
            }
            fresh = false;
        }
        if active {
            let f = nm_cost::<F>(
                data, &curve, &inputs, grid, setup, ctx, &pt, mask, inf, model,
            );
            let mut step_done = false;
            let mut done = false;
            // Cost of the point that replaces the worst vertex (`pt`) when a step is done.
            let mut accepted = f;
            if state == S_GRID {
                // j counts grid evaluations; pt is grid point j; row 1 holds the best so
                // far, row 0 the start.
                if j == 0 || f < grid_best {
                    grid_best = f;
                    #[unroll]
                    for p in 0..np {
                        vtx[(5 + p) as usize] = pt[p as usize];
                    }
                }
                j += 1;
                if j <= total {
                    grid_point::<F>(&mut pt, &vtx, setup, mask, ds, j, np);
                } else {
                    // The best grid point becomes x0 (row 0 at j = 0 of the simplex).
                    #[unroll]
                    for p in 0..np {
                        pt[p as usize] = vtx[(5 + p) as usize];
                    }
                    j = 0;
                    state = S_INIT;
                }
            } else if state == S_INIT {
                write_vertex::<F>(&mut vtx, &mut fv, &pt, f, j, nv, np);
                j += 1;
                if j < nv {
                    // Perturb the (j-1)-th free parameter of x0 (vertex 0), as fminsearch.
                    copy::<F>(&mut pt, &vtx, np);
                    let mut rank = 0u32;
                    #[unroll]
                    for p in 0..np {
                        if is_free(mask, p) {
                            if rank + 1 == j {
                                if pt[p as usize] != F::new(0.0) {
                                    pt[p as usize] = usual * pt[p as usize];
                                } else {
                                    pt[p as usize] = zero_term;
                                }
                            }
                            rank += 1;
                        }
                    }
                } else {
                    step_done = true;
                }
            } else if state == S_REFLECT {
                // The worst vertex (row nv - 1) is still in place in every branch here.
                fr = f;
                if fr < fv[0] {
                    #[unroll]
                    for p in 0..np {
                        pt[p as usize] = F::new(3.0) * xbar[p as usize]
                            - F::new(2.0) * vtx[((nv - 1) * 5 + p) as usize];
                    }
                    hold_fixed::<F>(&mut pt, setup, mask, np);
                    state = S_EXPAND;
                } else if fr < fv[(nv - 2) as usize] {
                    accepted = fr;
                    step_done = true;
                } else if fr < fv[(nv - 1) as usize] {
                    #[unroll]
                    for p in 0..np {
                        pt[p as usize] = F::new(1.5) * xbar[p as usize]
                            - half * vtx[((nv - 1) * 5 + p) as usize];
                    }
                    hold_fixed::<F>(&mut pt, setup, mask, np);
                    state = S_OUTSIDE;
                } else {
                    #[unroll]
                    for p in 0..np {
                        pt[p as usize] =
                            half * xbar[p as usize] + half * vtx[((nv - 1) * 5 + p) as usize];
                    }
                    hold_fixed::<F>(&mut pt, setup, mask, np);
                    state = S_INSIDE;
                }
            } else if state == S_EXPAND {
                accepted = f;
                if !(f < fr) {
                    // Keep the reflected point: recomputed exactly as in the centroid step
                    // (the worst vertex is still in place).
                    reflect::<F>(&mut pt, &xbar, &vtx, setup, mask, nv, np);
                    accepted = fr;
                }
                step_done = true;
            } else if state == S_SHRINK {
                write_vertex::<F>(&mut vtx, &mut fv, &pt, f, j, nv, np);
                j += 1;
                if j >= nv {
                    step_done = true;
                }
            } else {
                // Outside (accept if f <= fr) or inside contraction (accept if f < worst).
                let mut accept = f < fv[(nv - 1) as usize];
                if state == S_OUTSIDE {
                    accept = f <= fr;
                }
                if accept {
                    accepted = f;
                    step_done = true;
                } else {
                    j = 1;
                    state = S_SHRINK;
                }
            }
            if state == S_SHRINK && !step_done {
                // Next shrunk vertex: v0 + 1/2 (vj - v0).
                read_vertex::<F>(&mut pt, &vtx, j, nv, np);
                #[unroll]
                for p in 0..np {
                    pt[p as usize] = vtx[p as usize] + half * (pt[p as usize] - vtx[p as usize]);
                }
                hold_fixed::<F>(&mut pt, setup, mask, np);
            }
            if step_done {
                let whole = state == S_INIT || state == S_SHRINK;
                if !whole {
                    // Reflection, expansion or contraction: `pt` replaces the worst vertex.
                    write_vertex::<F>(&mut vtx, &mut fv, &pt, accepted, nv - 1, nv, np);
                }
                sort_simplex::<F>(&mut vtx, &mut fv, whole, nv, np);
                if nm_stop::<F>(&vtx, &fv, mask, tol_fun, tol_x, ten_eps, nv, np) {
                    converged = true;
                    done = true;
                } else if it >= max_iter {
                    done = true;
                } else {
                    it += 1;
                    // Centroid of the best n vertices; reflect the worst through it.
                    #[unroll]
                    for p in 0..np {
                        xbar[p as usize] = vtx[p as usize];
                        if is_free(mask, p) {
                            let mut sum = F::new(0.0);
                            #[unroll]
                            for k in 0..n_free {
                                sum += vtx[(k * 5 + p) as usize];
                            }
                            xbar[p as usize] = sum * inv_n;
                        }
                    }
                    reflect::<F>(&mut pt, &xbar, &vtx, setup, mask, nv, np);
                    state = S_REFLECT;
                }
            }
            if done {
                let mut result = u32::new(STATUS_MAX_ITERATIONS as i64);
                if converged {
                    result = STATUS_CONVERGED;
                }
                voxel = finish_fit::<F>(
                    out, status, counter, &vtx, setup, fv[0], stats, result, it, voxel, nvox, mask,
                    inf, nan, np, persistent,
                );
                fresh = true;
            }
        }
    }
}

/// Write the fit of `voxel` (minimum `x` of cost `cost`, status `result`: failed where the
/// cost is not finite, at a bound where a converged fit's free parameter is within 1e-4 of
/// its range from one) and return the unit's next voxel: from `counter[0]` for persistent
/// units, else none (`nvox`).
#[cube]
#[allow(clippy::too_many_arguments)]
fn finish_fit<F: Float>(
    out: &mut Array<F>,
    status: &mut Array<u32>,
    counter: &mut Array<Atomic<u32>>,
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
    #[comptime] persistent: bool,
) -> u32 {
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
    let mut next = nvox;
    if comptime!(persistent) {
        next = counter[0].fetch_add(1u32);
    }
    next
}

/// The unit's first voxel: its own position, or for persistent units the next from
/// `counter[0]` (units past `units`, the last cube's rest, take none: `nvox`).
#[cube]
fn first_voxel(
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
fn take_valid_voxel<F: Float>(
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
fn load_shared_inputs<F: Float>(grid: &Array<F>, inputs: &mut SharedMemory<F>, nt: u32) {
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
fn load_curve<F: Float>(
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

/// Word of a fit launch's counter that holds the voxels whose curves are on the device
/// (word 0: the next voxel for persistent units). A cache line away from word 0, so that
/// units waiting on it do not slow the units taking voxels.
pub const READY_WORD: usize = 32;
/// Words of a fit launch's counter.
pub const COUNTER_WORDS: usize = READY_WORD + 1;
/// Dependent integer steps between two reads of the ready count by a waiting unit (about
/// 40 us on an H100): units that outrun the upload would otherwise keep one L2 slice busy
/// with their atomic reads and may slow every unit (LM on the H100, runs 36-37: some
/// launches took 33 ms instead of 18). The pause also leaves units idle after their piece
/// has landed (run 38: LM 25-29 ms end to end instead of 23 in the fast case); a shorter one
/// is not measured yet.
const WAIT_STEPS: u32 = 16384;

/// Wait until the ready count (`counter[READY_WORD]`: the voxels whose curves are on the
/// device, raised by the host as pieces land while the kernel runs) passes `voxel`, reading
/// it every [`WAIT_STEPS`] steps; returns `voxel` computed from the word read (`voxel +
/// (ready >> 31)`: launches hold at most 2^20 voxels, so the same value), so that the
/// curve's loads depend on that read and cannot be issued before it. The host uploads pieces
/// of whole 32-voxel groups into rows padded to such groups, so no cache line holds samples
/// of a voxel not yet ready.
#[cube]
fn await_curve(counter: &Array<Atomic<u32>>, voxel: u32) -> u32 {
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

/// Stable sort of the vertices by cost (fixed network, as the CPU). Unless `whole`, only
/// the worst vertex changed: the network's earlier passes, which would swap nothing, are
/// skipped.
#[cube]
fn sort_simplex<F: Float>(
    vtx: &mut Array<F>,
    fv: &mut Array<F>,
    whole: bool,
    #[comptime] nv: u32,
    #[comptime] np: u32,
) {
    #[unroll]
    for i in 1..nv {
        if comptime!(i + 1 < nv) {
            if whole {
                sort_pass::<F>(vtx, fv, i, np);
            }
        } else {
            sort_pass::<F>(vtx, fv, i, np);
        }
    }
}

/// Pass `i` of [`sort_simplex`]: vertex `i` moved down to its rank among vertices 0..i.
#[cube]
fn sort_pass<F: Float>(
    vtx: &mut Array<F>,
    fv: &mut Array<F>,
    #[comptime] i: u32,
    #[comptime] np: u32,
) {
    #[unroll]
    for jj in 0..i {
        let a = i - jj;
        if fv[a as usize] < fv[(a - 1) as usize] {
            let t = fv[a as usize];
            fv[a as usize] = fv[(a - 1) as usize];
            fv[(a - 1) as usize] = t;
            #[unroll]
            for p in 0..np {
                let tv = vtx[(a * 5 + p) as usize];
                vtx[(a * 5 + p) as usize] = vtx[((a - 1) * 5 + p) as usize];
                vtx[((a - 1) * 5 + p) as usize] = tv;
            }
        }
    }
}

/// The stopping rule: vertex costs within `tol_fun` and vertices within `tol_x`, each
/// floored at `10 eps |value|` (NaN spreads never pass).
#[cube]
#[allow(clippy::too_many_arguments)]
fn nm_stop<F: Float>(
    vtx: &Array<F>,
    fv: &Array<F>,
    mask: u32,
    tol_fun: F,
    tol_x: F,
    ten_eps: F,
    #[comptime] nv: u32,
    #[comptime] np: u32,
) -> bool {
    let mut spread_f = F::new(0.0);
    #[unroll]
    for k in 1..nv {
        let d = F::abs(fv[k as usize] - fv[0]);
        if !(d <= spread_f) {
            spread_f = d;
        }
    }
    let floor_f = ten_eps * F::abs(fv[0]);
    let mut tol_f = tol_fun;
    if floor_f > tol_fun {
        tol_f = floor_f;
    }
    // The vertex spread only where the costs pass (most updates stop at the costs).
    let mut stop = false;
    if spread_f <= tol_f {
        let mut spread_x = F::new(0.0);
        let mut top_x = F::new(0.0);
        #[unroll]
        for p in 0..np {
            if is_free(mask, p) {
                let a = F::abs(vtx[p as usize]);
                if a > top_x {
                    top_x = a;
                }
                #[unroll]
                for k in 1..nv {
                    let d = F::abs(vtx[(k * 5 + p) as usize] - vtx[p as usize]);
                    if !(d <= spread_x) {
                        spread_x = d;
                    }
                }
            }
        }
        let floor_x = ten_eps * top_x;
        let mut tol_xx = tol_x;
        if floor_x > tol_x {
            tol_xx = floor_x;
        }
        stop = spread_x <= tol_xx;
    }
    stop
}

/// Parameters, SSE, R^2 and status of one voxel (NaN parameters for invalid input).
#[cube]
fn write_result<F: Float>(
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

/// Whether parameter `u` is held this LM step: fixed, or on a bound with the gradient
/// pointing out of the box (perfusion-core's `lm::blocked`).
#[cube]
fn blocked<F: Float>(x: &Array<F>, g: &Array<F>, setup: &Array<F>, mask: u32, u: u32) -> bool {
    let lo = setup[(5 + u) as usize];
    let hi = setup[(10 + u) as usize];
    let gu = g[u as usize];
    let xu = x[u as usize];
    !is_free(mask, u) || (xu <= lo && gu > F::new(0.0)) || (xu >= hi && gu < F::new(0.0))
}

/// Largest |cosine| between residuals and a free, unblocked Jacobian column.
#[cube]
fn gradient_cosine<F: Float>(
    x: &Array<F>,
    jtj: &Array<F>,
    jtr: &Array<F>,
    setup: &Array<F>,
    mask: u32,
    cost: F,
    #[comptime] np: u32,
) -> F {
    let mut worst = F::new(0.0);
    if cost > F::new(0.0) {
        #[unroll]
        for u in 0..np {
            let d = jtj[comptime!(tri(u, u))];
            if !blocked::<F>(x, jtr, setup, mask, u) && d > F::new(0.0) {
                let c = F::abs(jtr[u as usize]) / F::sqrt(d * cost);
                if c > worst {
                    worst = c;
                }
            }
        }
    }
    worst
}

/// LM damping schedule and stopping settings.
#[derive(CubeType, Clone, Copy)]
struct LmConfig<F: Float> {
    max_iter: u32,
    tol: F,
    tol_grad: F,
    stall: F,
    floor_rel: F,
    max_delay_step: F,
    delay_mask: u32,
    lambda_start: F,
    lambda_min: F,
    lambda_max: F,
    damp_floor: F,
}

/// Bounded Levenberg-Marquardt fits (perfusion-core's `levenberg_marquardt`, with the
/// delay grid first). Outputs as [`nelder_mead_kernel`].
///
/// One flat loop with one evaluation of the normal equations per turn (the fit's start,
/// then each trial point), as Nelder-Mead's: a unit whose fit ends writes it and starts its
/// next voxel at the top of the next turn while the other units of its warp go on. With
/// `shared_nt = 0` a unit fits voxel `ABSOLUTE_POS` only; with `shared_nt >= nt` units are
/// persistent (voxels from `counter[0]`, curves and inputs in shared memory), as
/// Nelder-Mead's. One voxel per unit, a warp ran as long as its slowest fit: 65 iterations
/// on average against a mean of 16 (the paper's liver, CNR 20). Each voxel's fit is the
/// same operations either way.
#[cube(launch_unchecked)]
pub fn levenberg_marquardt_kernel<F: Float + CubeElement>(
    data: &Array<f32>,
    grid: &Array<F>,
    setup: &Array<F>,
    out: &mut Array<F>,
    status: &mut Array<u32>,
    counter: &mut Array<Atomic<u32>>,
    nvox: u32,
    stride: u32,
    units: u32,
    nt: u32,
    mask: u32,
    rate_scale: F,
    inv_dt: F,
    max_iter: u32,
    tol: F,
    tol_grad: F,
    stall: F,
    floor_rel: F,
    max_delay_step: F,
    delay_mask: u32,
    lambda_start: F,
    lambda_min: F,
    lambda_max: F,
    damp_floor: F,
    grid_start: F,
    grid_step: F,
    grid_count: u32,
    delay1: u32,
    delay2: u32,
    inf: F,
    nan: F,
    big: F,
    #[comptime] model: u32,
    #[comptime] shared_nt: u32,
) {
    let cfg = LmConfig::<F> {
        max_iter,
        tol,
        tol_grad,
        stall,
        floor_rel,
        max_delay_step,
        delay_mask,
        lambda_start,
        lambda_min,
        lambda_max,
        damp_floor,
    };
    let ds = DelaySearch::<F> {
        start: grid_start,
        step: grid_step,
        count: grid_count,
        d1: delay1,
        d2: delay2,
    };
    let np = comptime!(n_params(model));
    let persistent = comptime!(shared_nt > 0);
    let stash = comptime!(model & LM_STASH != 0);
    let cube = comptime!(model::cube_of(model));
    let mut curve = SharedMemory::<f32>::new(comptime!(if shared_nt > 0 {
        (cube * shared_nt) as usize
    } else {
        1usize
    }));
    let mut inputs = SharedMemory::<F>::new(comptime!(if shared_nt > 0 {
        shared_inputs_len(shared_nt) as usize
    } else {
        1usize
    }));
    let mut keep = SharedMemory::<F>::new(comptime!(if model & LM_STASH != 0 {
        (30 * model::cube_of(model)) as usize
    } else {
        1usize
    }));
    if comptime!(persistent) {
        load_shared_inputs::<F>(grid, &mut inputs, nt);
    }
    let lane = UNIT_POS;
    let mut voxel = first_voxel(counter, nvox, units, persistent);
    let total = grid_total::<F>(ds);
    let ten = F::new(10.0);
    let mut ctx = Ctx::<F> {
        voxel,
        lane,
        stride,
        nt,
        rate_scale,
        inv_dt,
    };
    let mut stats = Voxel::<F> {
        valid: false,
        sst: F::new(0.0),
        sumsq: F::new(0.0),
    };
    let mut x = Array::<F>::new(5usize);
    let mut trial = Array::<F>::new(5usize);
    let mut d = Array::<F>::new(comptime!(chain_len(model)));
    let mut jtj = Array::<F>::new(15usize);
    let mut jtr = Array::<F>::new(5usize);
    let mut jtj2 = Array::<F>::new(15usize);
    let mut jtr2 = Array::<F>::new(5usize);
    let mut jac = Array::<F>::new(5usize);
    let mut m = Array::<F>::new(25usize);
    let mut rhs = Array::<F>::new(5usize);
    let mut delta = Array::<F>::new(5usize);
    let mut cost = nan;
    let mut result = u32::new(STATUS_MAX_ITERATIONS as i64);
    let mut it = 0u32;
    let mut lambda = cfg.lambda_start;
    let mut cosine = F::new(0.0);
    let mut floor = F::new(0.0);
    // The evaluation at hand is the fit's start (else a trial point).
    let mut first = true;
    let mut active = true;
    let mut fresh = true;
    while active {
        if fresh {
            voxel = take_valid_voxel::<F>(
                data, &mut curve, counter, out, status, &x, ctx, &mut stats, voxel, nvox, nan, big,
                model, np, persistent,
            );
            ctx.voxel = voxel;
            active = voxel < nvox;
            if active {
                #[unroll]
                for p in 0..np {
                    x[p as usize] = setup[p as usize];
                }
                project::<F>(&mut x, setup, mask, np);
                // Coarse delay grid: the start, then every combination; strictly better wins.
                if total > 0 {
                    copy::<F>(&mut trial, &x, np);
                    let mut best = nm_cost::<F>(
                        data, &curve, &inputs, grid, setup, ctx, &trial, mask, inf, model,
                    );
                    for g in 1..total + 1 {
                        grid_point::<F>(&mut delta, &trial, setup, mask, ds, g, np);
                        let f = nm_cost::<F>(
                            data, &curve, &inputs, grid, setup, ctx, &delta, mask, inf, model,
                        );
                        if f < best {
                            best = f;
                            copy::<F>(&mut x, &delta, np);
                        }
                    }
                }
                copy::<F>(&mut trial, &x, np);
                floor = cfg.floor_rel * cfg.floor_rel * stats.sumsq;
                lambda = cfg.lambda_start;
                result = STATUS_MAX_ITERATIONS;
                it = 0;
                first = true;
            }
            fresh = false;
        }
        if active {
            chain::<F>(&trial, rate_scale, &mut d, model);
            let cht = chain_small::<F>(&trial, rate_scale, model);
            let ct = canonical::<F>(&trial, rate_scale, model);
            // The accepted point's normal equations, x and the trial point wait in shared
            // memory while the trial is evaluated (fewer live registers in the time loop).
            if comptime!(stash) {
                #[unroll]
                for k in 0..15u32 {
                    keep[(k * cube + lane) as usize] = jtj[k as usize];
                }
                #[unroll]
                for k in 0..np {
                    keep[((15 + k) * cube + lane) as usize] = jtr[k as usize];
                    keep[((20 + k) * cube + lane) as usize] = x[k as usize];
                    keep[((25 + k) * cube + lane) as usize] = trial[k as usize];
                }
            }
            let ft = normal::<F>(
                data, &curve, grid, ctx, ct, cht, &d, &mut jtj2, &mut jtr2, &mut jac, model,
            );
            if comptime!(stash) {
                #[unroll]
                for k in 0..15u32 {
                    jtj[k as usize] = keep[(k * cube + lane) as usize];
                }
                #[unroll]
                for k in 0..np {
                    jtr[k as usize] = keep[((15 + k) * cube + lane) as usize];
                    x[k as usize] = keep[((20 + k) * cube + lane) as usize];
                    trial[k as usize] = keep[((25 + k) * cube + lane) as usize];
                }
            }
            let mut done = false;
            if first {
                first = false;
                cost = ft;
                #[unroll]
                for k in 0..15u32 {
                    jtj[k as usize] = jtj2[k as usize];
                }
                copy::<F>(&mut jtr, &jtr2, np);
            } else if ft < cost {
                let mut step_small = true;
                #[unroll]
                for u in 0..np {
                    let xu = x[u as usize];
                    if F::abs(trial[u as usize] - xu) > cfg.tol * (F::abs(xu) + cfg.tol) {
                        step_small = false;
                    }
                }
                let cost_small = cost - ft <= cfg.tol * ft;
                copy::<F>(&mut x, &trial, np);
                cost = ft;
                #[unroll]
                for k in 0..15u32 {
                    jtj[k as usize] = jtj2[k as usize];
                }
                copy::<F>(&mut jtr, &jtr2, np);
                lambda /= ten;
                if lambda < cfg.lambda_min {
                    lambda = cfg.lambda_min;
                }
                if step_small || cost_small {
                    result = STATUS_CONVERGED;
                    done = true;
                }
            } else {
                lambda *= ten;
                if lambda > cfg.lambda_max {
                    // No descent left: a minimum only if the gradient is about zero.
                    result = STATUS_FAILED;
                    if cost <= floor || cosine <= cfg.stall {
                        result = STATUS_CONVERGED;
                    }
                    done = true;
                }
            }
            // Iterations up to the next trial point (a failed factorisation raises the
            // damping and iterates again without an evaluation), or the end of the fit.
            let mut seeking = !done;
            while seeking {
                if it >= cfg.max_iter {
                    seeking = false;
                    done = true;
                } else {
                    it += 1;
                    if !(cost < inf) {
                        result = STATUS_FAILED;
                        seeking = false;
                        done = true;
                    } else {
                        cosine = gradient_cosine::<F>(&x, &jtj, &jtr, setup, mask, cost, np);
                        if cost <= floor || cosine <= cfg.tol_grad {
                            result = STATUS_CONVERGED;
                            seeking = false;
                            done = true;
                        } else if lm_trial::<F>(
                            &x, &jtj, &jtr, &mut m, &mut rhs, &mut delta, &mut trial, setup, mask,
                            lambda, cfg, np,
                        ) {
                            seeking = false;
                        } else {
                            lambda *= ten;
                            if lambda > cfg.lambda_max {
                                result = STATUS_FAILED;
                                seeking = false;
                                done = true;
                            }
                        }
                    }
                }
            }
            if done {
                voxel = finish_fit::<F>(
                    out, status, counter, &x, setup, cost, stats, result, it, voxel, nvox, mask,
                    inf, nan, np, persistent,
                );
                fresh = true;
            }
        }
    }
}

/// The damped, bounded Gauss-Newton step from `x`: the normal equations with Marquardt's
/// damping `lambda` (blocked parameters, at a bound with the gradient pushing out, fixed
/// at 0), delay steps shortened to one sampling interval, the trial point projected onto
/// the bounds into `trial`. False when the factorisation fails.
#[cube]
#[allow(clippy::too_many_arguments)]
fn lm_trial<F: Float>(
    x: &Array<F>,
    jtj: &Array<F>,
    jtr: &Array<F>,
    m: &mut Array<F>,
    rhs: &mut Array<F>,
    delta: &mut Array<F>,
    trial: &mut Array<F>,
    setup: &Array<F>,
    mask: u32,
    lambda: F,
    cfg: LmConfig<F>,
    #[comptime] np: u32,
) -> bool {
    #[unroll]
    for u in 0..np {
        #[unroll]
        for w in u..np {
            m[(u * 5 + w) as usize] = jtj[comptime!(tri(u, w))];
        }
    }
    #[unroll]
    for u in 0..np {
        if blocked::<F>(x, jtr, setup, mask, u) {
            #[unroll]
            for w in 0..np {
                m[(u * 5 + w) as usize] = F::new(0.0);
                m[(w * 5 + u) as usize] = F::new(0.0);
            }
            m[(u * 5 + u) as usize] = F::new(1.0);
            rhs[u as usize] = F::new(0.0);
        } else {
            let dd = jtj[comptime!(tri(u, u))];
            let mut sc = cfg.damp_floor;
            if dd > cfg.damp_floor {
                sc = dd;
            }
            m[(u * 5 + u) as usize] = dd + lambda * sc;
            rhs[u as usize] = -jtr[u as usize];
        }
    }
    #[unroll]
    for u in 0..5u32 {
        delta[u as usize] = F::new(0.0);
    }
    let solved = cholesky_solve::<F>(m, rhs, delta, 5u32, np);
    if solved {
        // Delay steps longer than one sampling interval are shortened.
        let mut scale = F::new(1.0);
        #[unroll]
        for u in 0..np {
            let a = F::abs(delta[u as usize]);
            if is_free(cfg.delay_mask, u) && a > cfg.max_delay_step {
                let f = cfg.max_delay_step / a;
                if f < scale {
                    scale = f;
                }
            }
        }
        if scale < F::new(1.0) {
            #[unroll]
            for u in 0..np {
                delta[u as usize] *= scale;
            }
        }
        #[unroll]
        for u in 0..np {
            trial[u as usize] = x[u as usize] + delta[u as usize];
        }
        project::<F>(trial, setup, mask, np);
    }
    solved
}

fn invalid(kernel: &str, why: String) -> Error {
    Error::InvalidLaunch {
        kernel: kernel.into(),
        why,
    }
}

/// Check the buffers of a fit launch against `p`.
fn check<F: KernelFloat>(
    name: &str,
    p: &FitParams,
    data: &GpuArray<f32>,
    grid: &GpuArray<F>,
    setup: &GpuArray<F>,
    out: &GpuArray<F>,
    status: &GpuArray<u32>,
) -> Result<()> {
    let (v, nt) = (p.voxels as usize, p.nt as usize);
    let np = n_params(p.model) as usize;
    if p.stride < p.voxels {
        return Err(invalid(
            name,
            format!("time rows of {} values for {v} voxels", p.stride),
        ));
    }
    if p.model > MODEL_2CXM {
        return Err(invalid(name, format!("unknown model id {}", p.model)));
    }
    if nt < 2 {
        return Err(invalid(name, format!("{nt} time points")));
    }
    if p.n_free() == 0 {
        return Err(invalid(name, "no free parameter".into()));
    }
    if data.len() < p.stride as usize * nt
        || grid.len() < grid_len(nt)
        || setup.len() < SETUP_LEN
        || out.len() < (np + 2) * v
        || status.len() < v
    {
        return Err(invalid(
            name,
            format!("buffers too short for {v} voxels x {nt} time points"),
        ));
    }
    if v as u64 * nt as u64 > u64::from(u32::MAX) {
        return Err(invalid(
            name,
            format!("{v} voxels x {nt} time points: more than 2^32 samples in one launch"),
        ));
    }
    if !CUBES.contains(&p.cube) {
        return Err(invalid(
            name,
            format!("cube of {} units; use one of {CUBES:?}", p.cube),
        ));
    }
    Ok(())
}

/// Launch [`nelder_mead_kernel`]: `data` holds `nt * voxels` f32 values (time-major),
/// `grid` the shared grid ([`grid_values`]), `setup` start/lower/upper; `out` receives
/// `(np + 2) * voxels` values, `status` one word per voxel (status | iterations << 8).
/// `counter` holds [`COUNTER_WORDS`] words: word 0 the next voxel for persistent units (zero
/// at launch) and [`READY_WORD`] the voxels whose curves are on the device (`voxels` if all
/// are; else the host raises it while the kernel runs, in whole groups of 32 voxels, and
/// units wait for their voxel's curve).
/// (Passed in rather than made here: a new buffer would wait for the queued work.)
#[allow(clippy::too_many_arguments)]
pub fn nelder_mead<R: Runtime, F: KernelFloat>(
    gpu: &Gpu<R>,
    data: &GpuArray<f32>,
    grid: &GpuArray<F>,
    setup: &GpuArray<F>,
    p: &FitParams,
    out: &GpuArray<F>,
    status: &GpuArray<u32>,
    counter: &GpuArray<u32>,
) -> Result<()> {
    let name = "perfusion_nelder_mead";
    check(name, p, data, grid, setup, out, status)?;
    if counter.len() < COUNTER_WORDS {
        return Err(invalid(
            name,
            format!("the counter needs {COUNTER_WORDS} words"),
        ));
    }
    if p.voxels == 0 {
        return Ok(());
    }
    let (gs, gstep, gcount) = p.grid.unwrap_or((0.0, 1.0, 0));
    let shared_nt = p.shared_nt(
        gpu.client().properties().hardware.max_shared_memory_size,
        std::mem::size_of::<F>(),
    );
    let (units, word) = if shared_nt > 0 {
        (
            p.voxels.min(p.units),
            p.model_word() | SHARED_CURVE | cube_word(p.cube),
        )
    } else {
        (p.voxels, p.model_word())
    };
    let count = gpu.cube_count_1d(name, units as usize, p.cube)?;
    let f = F::from_f64;
    gpu.launch(name, count, |count| {
        // SAFETY: lengths checked above; voxel v < voxels (a unit's own, or one taken from
        // the counter) reads data[t * voxels + v] for t < nt, grid[..6 nt], setup[..15], and
        // writes out[q * voxels + v] for q < np + 2 and status[v]; a unit's shared column
        // holds shared_nt >= nt samples.
        unsafe {
            nelder_mead_kernel::launch_unchecked::<F, R>(
                gpu.client(),
                count,
                CubeDim::new_1d(p.cube),
                data.arg(),
                grid.arg(),
                setup.arg(),
                out.arg(),
                status.arg(),
                ArrayArg::from_raw_parts(counter.handle().clone(), COUNTER_WORDS),
                p.voxels,
                p.stride,
                units,
                p.nt,
                p.free_mask,
                f(p.rate_scale),
                f(p.inv_dt),
                p.max_iterations,
                f(p.tol_fun),
                f(p.tol_x),
                f(p.ten_eps),
                f(gs),
                f(gstep),
                gcount,
                p.delays[0],
                p.delays[1],
                f(f64::INFINITY),
                f(f64::NAN),
                f(f64::from(f32::MAX)),
                word,
                p.n_free(),
                shared_nt,
            );
        };
    })
}

/// Launch [`levenberg_marquardt_kernel`]; buffers as [`nelder_mead`] (`counter`'s
/// [`READY_WORD`]: the voxels whose curves are on the device).
#[allow(clippy::too_many_arguments)]
pub fn levenberg_marquardt<R: Runtime, F: KernelFloat>(
    gpu: &Gpu<R>,
    data: &GpuArray<f32>,
    grid: &GpuArray<F>,
    setup: &GpuArray<F>,
    p: &FitParams,
    out: &GpuArray<F>,
    status: &GpuArray<u32>,
    counter: &GpuArray<u32>,
) -> Result<()> {
    let name = "perfusion_levenberg_marquardt";
    check(name, p, data, grid, setup, out, status)?;
    if counter.len() < COUNTER_WORDS {
        return Err(invalid(
            name,
            format!("the counter needs {COUNTER_WORDS} words"),
        ));
    }
    if p.voxels == 0 {
        return Ok(());
    }
    // The stash takes 30 values per unit; use it where two cubes' fit in shared memory,
    // and persistent units where their curves and inputs fit beside it.
    let elem = std::mem::size_of::<F>();
    let stash_bytes = 30 * p.cube as usize * elem;
    let max_shared = gpu.client().properties().hardware.max_shared_memory_size;
    let stash = p.persistent && 2 * stash_bytes <= max_shared;
    let shared_nt = if stash {
        p.shared_nt(max_shared - stash_bytes, elem)
    } else {
        0
    };
    let mut word = p.model_word();
    if stash {
        word |= LM_STASH | cube_word(p.cube);
    }
    let units = if shared_nt > 0 {
        word |= SHARED_CURVE;
        p.voxels.min(p.units)
    } else {
        p.voxels
    };
    let (gs, gstep, gcount) = p.grid.unwrap_or((0.0, 1.0, 0));
    let count = gpu.cube_count_1d(name, units as usize, p.cube)?;
    let f = F::from_f64;
    gpu.launch(name, count, |count| {
        // SAFETY: as in `nelder_mead`.
        unsafe {
            levenberg_marquardt_kernel::launch_unchecked::<F, R>(
                gpu.client(),
                count,
                CubeDim::new_1d(p.cube),
                data.arg(),
                grid.arg(),
                setup.arg(),
                out.arg(),
                status.arg(),
                ArrayArg::from_raw_parts(counter.handle().clone(), COUNTER_WORDS),
                p.voxels,
                p.stride,
                units,
                p.nt,
                p.free_mask,
                f(p.rate_scale),
                f(p.inv_dt),
                p.max_iterations,
                f(p.tol),
                f(p.tol_grad),
                f(p.stall),
                f(p.floor_rel),
                f(p.max_delay_step),
                p.delay_mask,
                f(p.lambda[0]),
                f(p.lambda[1]),
                f(p.lambda[2]),
                f(p.lambda[3]),
                f(gs),
                f(gstep),
                gcount,
                p.delays[0],
                p.delays[1],
                f(f64::INFINITY),
                f(f64::NAN),
                f(f64::from(f32::MAX)),
                word,
                shared_nt,
            );
        };
    })
}

/// This module's kernels as the wrappers configure them: both methods for every model in
/// f64 (CUDA), and the dual-input model in f32 (wgpu), all parameters free, cube 128,
/// both methods with persistent units (curves of up to 128 samples in shared memory; LM
/// with its stash), and the dual-input Nelder-Mead in f64 also one voxel per unit
/// (`nm_dual_input_f64_one`).
pub(crate) fn catalog<R: Runtime>(client: &ComputeClient<R>) -> Vec<CatalogEntry> {
    let mut entries = Vec::new();
    let names = ["dual_input", "tofts", "extended_tofts", "patlak", "2cxm"];
    for model in 0..5u32 {
        let n = n_params(model);
        entries.push(nm_entry::<R, f64>(
            client,
            model,
            n,
            names[model as usize],
            "f64",
            true,
        ));
        entries.push(lm_entry::<R, f64>(
            client,
            model,
            names[model as usize],
            "f64",
        ));
    }
    entries.push(nm_entry::<R, f64>(
        client,
        MODEL_DUAL_INPUT,
        5,
        "dual_input",
        "f64_one",
        false,
    ));
    entries.push(nm_entry::<R, f32>(
        client,
        MODEL_DUAL_INPUT,
        5,
        "dual_input",
        "f32",
        true,
    ));
    entries.push(lm_entry::<R, f32>(
        client,
        MODEL_DUAL_INPUT,
        "dual_input",
        "f32",
    ));
    entries
}

fn leak(s: String) -> &'static str {
    Box::leak(s.into_boxed_str())
}

fn nm_entry<R: Runtime, F: KernelFloat>(
    client: &ComputeClient<R>,
    model: u32,
    n_free: u32,
    name: &str,
    ty: &str,
    persistent: bool,
) -> CatalogEntry {
    let (word, shared_nt) = if persistent {
        (
            model | UNIFORM_GRID | SHARED_CURVE | cube_word(CUBE_FIT),
            128,
        )
    } else {
        (model | UNIFORM_GRID, 0)
    };
    let k = nelder_mead_kernel::NelderMeadKernel::<F, R>::new(
        settings_1d(CUBE_FIT),
        client.clone(),
        array(),
        array(),
        array(),
        array(),
        array(),
        array(),
        (),
        (),
        (),
        (),
        (),
        (),
        (),
        (),
        (),
        (),
        (),
        (),
        (),
        (),
        (),
        (),
        (),
        (),
        (),
        word,
        n_free,
        shared_nt,
    );
    entry("perfusion", leak(format!("nm_{name}_{ty}")), k)
}

fn lm_entry<R: Runtime, F: KernelFloat>(
    client: &ComputeClient<R>,
    model: u32,
    name: &str,
    ty: &str,
) -> CatalogEntry {
    let k = levenberg_marquardt_kernel::LevenbergMarquardtKernel::<F, R>::new(
        settings_1d(CUBE_FIT),
        client.clone(),
        array(),
        array(),
        array(),
        array(),
        array(),
        array(),
        (),
        (),
        (),
        (),
        (),
        (),
        (),
        (),
        (),
        (),
        (),
        (),
        (),
        (),
        (),
        (),
        (),
        (),
        (),
        (),
        (),
        (),
        (),
        (),
        (),
        (),
        model | UNIFORM_GRID | LM_STASH | SHARED_CURVE | cube_word(CUBE_FIT),
        128,
    );
    entry("perfusion", leak(format!("lm_{name}_{ty}")), k)
}
