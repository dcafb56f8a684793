//! The Nelder-Mead fit kernel (perfusion-core's `cpu/nelder_mead.rs`, with the start
//! comparison first), its launch wrapper and its configuration.

use super::model::{self, Ctx, n_params};
use super::voxel::{
    Voxel, copy, first_voxel, hold_fixed, is_free, load_shared_inputs, next_voxel, nm_cost,
    project, record_fit, start_point, take_valid_voxel,
};
use super::{
    CANDIDATES, COUNTER_WORDS, FitBuffers, KernelFloat, KernelParams, STATUS_CONVERGED,
    STATUS_MAX_ITERATIONS, cube_word, shared_inputs_len,
};
use crate::configured::{array, settings_1d};
use cubecl::prelude::*;
use gpu_runtime::{Gpu, Result};
use model::SHARED_CURVE;

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

const S_GRID: u32 = 0;
const S_INIT: u32 = 1;
const S_REFLECT: u32 = 2;
const S_EXPAND: u32 = 3;
const S_OUTSIDE: u32 = 4;
const S_INSIDE: u32 = 5;
const S_SHRINK: u32 = 6;

/// Nelder-Mead fits (perfusion-core's `nelder_mead`, with the start comparison first).
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
    starts: &Array<F>,
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
    seeded: u32,
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
    let total = seeded;
    let usual = F::new(21.0) / F::new(20.0);
    let zero_term = F::new(1.0) / F::new(4000.0);
    let half = F::new(0.5);
    let inv_n = F::new(1.0) / F::cast_from(n_free);
    // The simplex, one vertex of 5 per row. During the start comparison, row 0 holds the start
    // and row 1 the better point; from the initial simplex on, row 0 is the start (then the
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
                    start_point::<F>(&mut pt, &vtx, starts, setup, mask, voxel, nvox, j, np);
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
                record_fit::<F>(
                    out, status, &vtx, setup, fv[0], stats, result, it, voxel, nvox, mask, inf,
                    nan, np,
                );
                voxel = next_voxel(counter, nvox, persistent);
                fresh = true;
            }
        }
    }
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

/// The comptime configuration of a Nelder-Mead launch of `p` where `max_shared` bytes of
/// shared memory are available: (units launched, model word, free parameters, shared samples
/// per unit). Persistent units where asked for and a cube's curves fit, else one voxel per
/// unit.
fn configure<F: KernelFloat>(p: &KernelParams, max_shared: usize) -> (u32, u32, u32, u32) {
    let shared_nt = p.shared_nt(max_shared, std::mem::size_of::<F>());
    let (units, word) = if shared_nt > 0 {
        (
            p.voxels.min(p.units),
            p.model_word() | SHARED_CURVE | cube_word(p.cube),
        )
    } else {
        (p.voxels, p.model_word())
    };
    (units, word, p.n_free(), shared_nt)
}

/// The kernel as a launch of `p` configures it, with no limit on shared memory (for the
/// catalog: `cargo xtask build-ptx`).
pub(crate) fn definition<R: Runtime, F: KernelFloat>(
    client: &ComputeClient<R>,
    p: &KernelParams,
) -> nelder_mead_kernel::NelderMeadKernel<F, R> {
    let (_, word, n_free, shared_nt) = configure::<F>(p, usize::MAX);
    nelder_mead_kernel::NelderMeadKernel::<F, R>::new(
        settings_1d(p.cube),
        client.clone(),
        array(),
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
        word,
        n_free,
        shared_nt,
    )
}

/// Launch [`nelder_mead_kernel()`] on `b` ([`FitBuffers`]) with the settings `p`.
pub fn nelder_mead<R: Runtime, F: KernelFloat>(
    gpu: &Gpu<R>,
    b: &FitBuffers<'_, F>,
    p: &KernelParams,
) -> Result<()> {
    let name = "perfusion_nelder_mead";
    b.check(name, p)?;
    if p.voxels == 0 {
        return Ok(());
    }
    let max_shared = gpu.client().properties().hardware.max_shared_memory_size;
    let (units, word, n_free, shared_nt) = configure::<F>(p, max_shared);
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
                b.data.arg(),
                b.grid.arg(),
                b.setup.arg(),
                b.out.arg(),
                b.starts.arg(),
                b.status.arg(),
                ArrayArg::from_raw_parts(b.counter.handle().clone(), COUNTER_WORDS),
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
                u32::from(p.seeded) * CANDIDATES,
                f(f64::INFINITY),
                f(f64::NAN),
                f(f64::from(f32::MAX)),
                word,
                n_free,
                shared_nt,
            );
        };
    })
}
