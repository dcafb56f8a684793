//! DCE perfusion fits, one unit per voxel, generic over the float type: f64 on CUDA (the
//! paper's precision), f32 on wgpu (WGSL has no f64).
//!
//! Both kernels port perfusion-core's CPU fits operation by operation (`cpu/nelder_mead.rs`,
//! `cpu/levenberg_marquardt.rs`, `cpu/conv.rs`), so that f64 results follow the same path.
//! One file per kernel, with its launch wrapper and configuration: `nelder_mead.rs`,
//! `levenberg_marquardt.rs`; the per-voxel steps both share in `voxel.rs`, the model
//! evaluation (cost, normal equations) in `model.rs`; here the constants, the launch settings
//! ([`KernelParams`]), the buffers ([`FitBuffers`]) and the catalog. They are written as
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

mod levenberg_marquardt;
pub(crate) mod model;
mod nelder_mead;
mod start;
mod voxel;

pub use levenberg_marquardt::{levenberg_marquardt, levenberg_marquardt_kernel};
pub use model::WEIGHT_SERIES;
pub use nelder_mead::{nelder_mead, nelder_mead_kernel};
pub use start::{MAX_COARSE, StartAxis, StartParams, start_kernel, start_search};

use crate::configured::{CatalogEntry, entry};
use cubecl::prelude::*;
use gpu_runtime::{Error, GpuArray, Result};
use model::{CUBE_SHIFT, UNIFORM_GRID, n_params};

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

/// Searched starts per voxel (perfusion-core's `CANDIDATES`): the dual-input search's best
/// distinct candidates; the other models' searches fill the first and mark the rest absent
/// (NaN).
pub const CANDIDATES: u32 = 3;
/// Levenberg-Marquardt restarts from either side of a kink of the cost where a fitted
/// delay lies within `KINK_NEAR` sampling intervals of a whole number of them, at
/// `KINK_ESCAPE` intervals from it (perfusion-core's `model::start`).
pub const KINK_NEAR: f64 = 0.05;
pub const KINK_ESCAPE: f64 = 0.5;

/// Units per cube the fit kernels take. On CUDA the cube also caps registers per unit
/// (`__launch_bounds__(cube)`: 65,536 / cube, at most 255): 384 gives 170 (12 warps per
/// multiprocessor), 512 gives 128 (16 warps).
pub const CUBES: [u32; 6] = [32, 64, 128, 256, 384, 512];

/// The cube size in the comptime model word (multiples of 32).
pub(crate) const fn cube_word(cube: u32) -> u32 {
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
pub struct KernelParams {
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
    /// Whether [`start_search`] left each voxel's [`CANDIDATES`] searched starts in
    /// [`FitBuffers::starts`], to be compared with the given start (and, under
    /// Levenberg-Marquardt, restarted from).
    pub seeded: bool,
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

impl KernelParams {
    pub(crate) fn n_free(&self) -> u32 {
        (self.free_mask & ((1 << n_params(self.model)) - 1)).count_ones()
    }

    /// The comptime model word: id plus the uniform-grid flag.
    pub(crate) fn model_word(&self) -> u32 {
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

/// Set in LM's comptime model word (with the cube size, as `SHARED_CURVE`) when the
/// accepted point's J^T J, J^T r, x and the trial point wait in shared memory (30 values
/// per unit) while the trial is evaluated.
pub const LM_STASH: u32 = 0x400;

/// Most persistent units per launch by default: more than any GPU keeps resident (units
/// beyond those find the counter exhausted and end at once).
pub const PERSISTENT_UNITS: u32 = 1 << 18;

/// Word of a fit launch's counter that holds the voxels whose curves are on the device
/// (word 0: the next voxel for persistent units). A cache line away from word 0, so that
/// units waiting on it do not slow the units taking voxels.
pub const READY_WORD: usize = 32;
/// Words of a fit launch's counter.
pub const COUNTER_WORDS: usize = READY_WORD + 1;

/// The buffers of one fit launch (either kernel). (The counter is passed in rather than made
/// by the wrapper: a new buffer would wait for the queued work.)
#[derive(Debug, Clone, Copy)]
pub struct FitBuffers<'a, F: KernelFloat> {
    /// `nt` time rows of `stride` f32 values (time-major curves).
    pub data: &'a GpuArray<f32>,
    /// The shared grid ([`grid_values`]).
    pub grid: &'a GpuArray<F>,
    /// Start, lower and upper bounds ([`SETUP_LEN`] values).
    pub setup: &'a GpuArray<F>,
    /// Receives `np + 2` planes of `voxels` values: parameters, SSE, R^2.
    pub out: &'a GpuArray<F>,
    /// The searched starts: [`CANDIDATES`] x `np` planes of `voxels` values, candidate
    /// major (written by [`start_search`]; any length where the launch is not seeded).
    pub starts: &'a GpuArray<F>,
    /// Receives one word per voxel: status | iterations << 8.
    pub status: &'a GpuArray<u32>,
    /// [`COUNTER_WORDS`] words: word 0 the next voxel for persistent units (zero at launch)
    /// and [`READY_WORD`] the voxels whose curves are on the device (`voxels` if all are;
    /// else the host raises it while the kernel runs, in whole groups of 32 voxels, and
    /// units wait for their voxel's curve).
    pub counter: &'a GpuArray<u32>,
}

impl<F: KernelFloat> FitBuffers<'_, F> {
    /// Check the buffers of a launch of kernel `name` against `p`.
    fn check(&self, name: &str, p: &KernelParams) -> Result<()> {
        let (data, grid, setup, out, status) =
            (self.data, self.grid, self.setup, self.out, self.status);
        let (v, nt) = (p.voxels as usize, p.nt as usize);
        let np = n_params(p.model) as usize;
        if p.stride < p.voxels {
            return Err(Error::invalid_launch(
                name,
                format!("time rows of {} values for {v} voxels", p.stride),
            ));
        }
        if p.model > MODEL_2CXM {
            return Err(Error::invalid_launch(
                name,
                format!("unknown model id {}", p.model),
            ));
        }
        if nt < 2 {
            return Err(Error::invalid_launch(name, format!("{nt} time points")));
        }
        if p.n_free() == 0 {
            return Err(Error::invalid_launch(name, "no free parameter"));
        }
        if data.len() < p.stride as usize * nt
            || grid.len() < grid_len(nt)
            || setup.len() < SETUP_LEN
            || out.len() < (np + 2) * v
            || status.len() < v
            || (p.seeded && self.starts.len() < CANDIDATES as usize * np * v)
        {
            return Err(Error::invalid_launch(
                name,
                format!("buffers too short for {v} voxels x {nt} time points"),
            ));
        }
        if v as u64 * nt as u64 > u64::from(u32::MAX) {
            return Err(Error::invalid_launch(
                name,
                format!("{v} voxels x {nt} time points: more than 2^32 samples in one launch"),
            ));
        }
        if !CUBES.contains(&p.cube) {
            return Err(Error::invalid_launch(
                name,
                format!("cube of {} units; use one of {CUBES:?}", p.cube),
            ));
        }
        if self.counter.len() < COUNTER_WORDS {
            return Err(Error::invalid_launch(
                name,
                format!("the counter needs {COUNTER_WORDS} words"),
            ));
        }
        Ok(())
    }
}

/// This module's kernels as the wrappers configure them: both methods for every model in
/// f64 (CUDA), and the dual-input model in f32 (wgpu), all parameters free, cube 128,
/// both methods with persistent units (curves of up to 128 samples in shared memory; LM
/// with its stash), the dual-input Nelder-Mead in f64 also one voxel per unit
/// (`nm_dual_input_f64_one`), and the start search of each.
pub(crate) fn catalog<R: Runtime>(client: &ComputeClient<R>) -> Vec<CatalogEntry> {
    let mut entries = Vec::new();
    let names = ["dual_input", "tofts", "extended_tofts", "patlak", "2cxm"];
    let name = |method: &str, model: u32, ty: &str| {
        leak(format!("{method}_{}_{ty}", names[model as usize]))
    };
    for model in 0..5u32 {
        let p = representative(model, true);
        entries.push(entry(
            "perfusion",
            name("nm", model, "f64"),
            nelder_mead::definition::<R, f64>(client, &p),
        ));
        entries.push(entry(
            "perfusion",
            name("lm", model, "f64"),
            levenberg_marquardt::definition::<R, f64>(client, &p),
        ));
        entries.push(entry(
            "perfusion",
            name("start", model, "f64"),
            start::definition::<R, f64>(client, &p),
        ));
    }
    let dual = representative(MODEL_DUAL_INPUT, true);
    entries.push(entry(
        "perfusion",
        name("nm", MODEL_DUAL_INPUT, "f64_one"),
        nelder_mead::definition::<R, f64>(client, &representative(MODEL_DUAL_INPUT, false)),
    ));
    entries.push(entry(
        "perfusion",
        name("nm", MODEL_DUAL_INPUT, "f32"),
        nelder_mead::definition::<R, f32>(client, &dual),
    ));
    entries.push(entry(
        "perfusion",
        name("lm", MODEL_DUAL_INPUT, "f32"),
        levenberg_marquardt::definition::<R, f32>(client, &dual),
    ));
    entries.push(entry(
        "perfusion",
        name("start", MODEL_DUAL_INPUT, "f32"),
        start::definition::<R, f32>(client, &dual),
    ));
    entries
}

/// The catalog's launch of `model`: every parameter free, a uniform grid of 128 samples,
/// cube [`CUBE_FIT`], with persistent units (curves in shared memory; LM with its stash) or
/// one voxel per unit. Only the comptime settings matter here.
fn representative(model: u32, persistent: bool) -> KernelParams {
    KernelParams {
        voxels: 1 << 16,
        stride: 1 << 16,
        nt: 128,
        model,
        free_mask: (1 << n_params(model)) - 1,
        rate_scale: 1.0,
        max_iterations: 600,
        tol_fun: 1e-8,
        tol_x: 1e-4,
        ten_eps: 10.0 * f64::EPSILON,
        tol: 1e-10,
        tol_grad: 0.0,
        stall: 0.0,
        floor_rel: 0.0,
        max_delay_step: 1.0,
        delay_mask: 0,
        lambda: [0.0; 4],
        seeded: true,
        uniform: true,
        inv_dt: 1.0,
        cube: CUBE_FIT,
        persistent,
        units: PERSISTENT_UNITS,
    }
}

fn leak(s: String) -> &'static str {
    Box::leak(s.into_boxed_str())
}
