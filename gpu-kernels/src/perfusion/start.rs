//! The start search kernel (perfusion-core's `model/start.rs` and `cpu/start.rs`): per
//! voxel, linear least squares on the model's integral form over a grid of delays; the
//! best distinct candidates ([`CANDIDATES`] for the dual-input model, one otherwise) are
//! refined, turned into parameters and left in the fit's `starts` buffer, where the fit
//! kernel compares them with the given start (and Levenberg-Marquardt restarts from them).
//! One unit per voxel; the voxel-independent basis tables are read by every unit alike.

use super::model::n_params;
use super::voxel::{await_curve, project};
use super::{
    CANDIDATES, COUNTER_WORDS, FitBuffers, KernelFloat, KernelParams, MODEL_DUAL_INPUT,
    MODEL_EXTENDED_TOFTS, MODEL_PATLAK, MODEL_TOFTS,
};
use crate::configured::{array, settings_1d};
use crate::linalg::cholesky_solve;
use cubecl::prelude::*;
use gpu_runtime::{Error, Result};
use gpu_runtime::{Gpu, GpuArray};

/// One delay axis of the search, as perfusion-core's `DelayAxis`: fine grid `start + k
/// step`, `k < count`, scanned every `stride` points from `first`; the parameter it sets
/// (`u32::MAX`: none) and whether it is searched.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StartAxis {
    pub start: f64,
    pub step: f64,
    pub count: u32,
    pub stride: u32,
    pub first: u32,
    pub param: u32,
    pub free: bool,
}

/// The search of a launch: its axes and the offsets of the basis tables in the tables
/// array (integral of the delayed arterial input, the delayed arterial input, its double
/// integral, the integral of the delayed portal input; `u32::MAX` where unused). The array
/// starts with the `nt` sampling intervals.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StartParams {
    pub axes: [StartAxis; 2],
    pub tables: [u32; 4],
    /// Dual-input model: coarse points per axis (at most [`MAX_COARSE`]) and the offsets of
    /// the input products and norms (`u32::MAX` for other models).
    pub coarse: [u32; 2],
    pub cross: u32,
    pub norms: u32,
}

/// Coefficients solved per model (perfusion-core's `n_coefficients`).
pub(crate) const fn n_coefficients(model: u32) -> u32 {
    match model & 0xF {
        MODEL_TOFTS | MODEL_PATLAK => 2,
        MODEL_DUAL_INPUT | MODEL_EXTENDED_TOFTS => 3,
        _ => 4,
    }
}

/// Where a voxel's search reads: its curve, the tables, the rows of its candidate.
#[derive(CubeType, Clone, Copy)]
struct Reads {
    voxel: u32,
    stride: u32,
    nt: u32,
    a1: u32,
    v1: u32,
    aa1: u32,
    a2: u32,
}

/// The search of every voxel; units past `nvox` do nothing.
#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
pub fn start_kernel<F: Float + CubeElement>(
    data: &Array<f32>,
    tables: &Array<F>,
    setup: &Array<F>,
    starts: &mut Array<F>,
    counter: &mut Array<Atomic<u32>>,
    nvox: u32,
    stride: u32,
    nt: u32,
    mask: u32,
    rate_scale: F,
    start0: F,
    step0: F,
    count0: u32,
    stride0: u32,
    first0: u32,
    param0: u32,
    start1: F,
    step1: F,
    count1: u32,
    stride1: u32,
    first1: u32,
    param1: u32,
    free_axes: u32,
    a1: u32,
    v1: u32,
    aa1: u32,
    a2: u32,
    coarse0: u32,
    coarse1: u32,
    cross: u32,
    norms: u32,
    inf: F,
    nan: F,
    #[comptime] model: u32,
) {
    let first = ABSOLUTE_POS_X + ABSOLUTE_POS_Y * CUBE_COUNT_X * CUBE_DIM_X;
    if first < nvox {
        let voxel = await_curve(counter, first);
        let np = comptime!(n_params(model));
        let reads = Reads {
            voxel,
            stride,
            nt,
            a1,
            v1,
            aa1,
            a2,
        };
        let grids = DualGrid {
            coarse0,
            coarse1,
            stride0,
            stride1,
            cross,
            norms,
        };
        let mut dd = F::new(0.0);
        for i in 0..nt {
            let d = F::cast_from(data[(i * stride + voxel) as usize]);
            dd += d * d;
        }
        let mut work = Work::<F> {
            g: Array::<F>::new(16usize),
            rhs: Array::<F>::new(4usize),
            m: Array::<F>::new(16usize),
            r: Array::<F>::new(4usize),
            y: Array::<F>::new(4usize),
            theta: Array::<F>::new(4usize),
        };
        let mut kept = Kept::<F> {
            residual: Array::<F>::new(comptime!(CANDIDATES as usize)),
            theta: Array::<F>::new(comptime!(4 * CANDIDATES as usize)),
            index0: Array::<u32>::new(comptime!(CANDIDATES as usize)),
            index1: Array::<u32>::new(comptime!(CANDIDATES as usize)),
            n: 0u32,
        };
        #[unroll]
        for c in 0..CANDIDATES {
            kept.residual[c as usize] = inf;
            kept.index0[c as usize] = first0;
            kept.index1[c as usize] = first1;
            #[unroll]
            for j in 0..4u32 {
                kept.theta[(4 * c + j) as usize] = F::new(0.0);
            }
        }
        let mut best = Best::<F> {
            residual: inf,
            theta: Array::<F>::new(4usize),
            index0: first0,
            index1: first1,
        };
        #[unroll]
        for j in 0..4u32 {
            best.theta[j as usize] = F::new(0.0);
        }
        if comptime!(model & 0xF == MODEL_DUAL_INPUT) {
            dual_grid::<F>(data, tables, reads, grids, dd, &mut work, &mut kept);
        } else {
            let mut k = 0u32;
            while k < count0 {
                candidate::<F>(
                    data, tables, reads, k, 0u32, dd, &mut work, &mut best, model,
                );
                k += stride0;
            }
            kept.residual[0] = best.residual;
            kept.index0[0] = best.index0;
            kept.index1[0] = best.index1;
            #[unroll]
            for j in 0..4u32 {
                kept.theta[j as usize] = best.theta[j as usize];
            }
            kept.n = select(best.residual < inf, 1u32, 0u32);
        }
        let mut x = Array::<F>::new(5usize);
        for c in 0..comptime!(CANDIDATES) {
            if c < kept.n {
                best.residual = kept.residual[c as usize];
                best.index0 = kept.index0[c as usize];
                best.index1 = kept.index1[c as usize];
                #[unroll]
                for j in 0..4u32 {
                    best.theta[j as usize] = kept.theta[(4 * c + j) as usize];
                }
                // Refinement around the candidate, a quarter step at a time, on each free
                // axis.
                for axis in 0..2u32 {
                    let on1 = axis == 1u32;
                    let count = select(on1, count1, count0);
                    let step = select(on1, stride1, stride0);
                    let centre = select(on1, best.index1, best.index0);
                    if ((free_axes >> axis) & 1u32) == 1u32 {
                        let lo = select(centre >= step - 1u32, centre - (step - 1u32), 0u32);
                        let up = centre + step - 1u32;
                        let hi = select(up < count - 1u32, up, count - 1u32);
                        for k in lo..hi + 1u32 {
                            let i0 = select(on1, best.index0, k);
                            let i1 = select(on1, k, best.index1);
                            candidate::<F>(
                                data, tables, reads, i0, i1, dd, &mut work, &mut best, model,
                            );
                        }
                    }
                }
                #[unroll]
                for p in 0..np {
                    x[p as usize] = setup[p as usize];
                }
                project::<F>(&mut x, setup, mask, np);
                parameters::<F>(&mut x, &best.theta, rate_scale, model);
                if param0 < 5u32 {
                    x[param0 as usize] = start0 + step0 * F::cast_from(best.index0);
                }
                if param1 < 5u32 {
                    x[param1 as usize] = start1 + step1 * F::cast_from(best.index1);
                }
                project::<F>(&mut x, setup, mask, np);
            } else {
                // No candidate: a start whose cost is NaN, never taken.
                #[unroll]
                for p in 0..np {
                    x[p as usize] = nan;
                }
            }
            #[unroll]
            for p in 0..np {
                starts[((c * np + p) * nvox + voxel) as usize] = x[p as usize];
            }
        }
    }
}

/// The dual-input model's coarse grid: points per axis, their strides on the fine grid, and
/// the offsets of the input products (arterial x portal) and norms in the tables.
#[derive(CubeType, Clone, Copy)]
struct DualGrid {
    coarse0: u32,
    coarse1: u32,
    stride0: u32,
    stride1: u32,
    cross: u32,
    norms: u32,
}

/// Most coarse points per delay axis of the dual-input grid (perfusion-core's
/// `MAX_COARSE`): the per-voxel portal products are kept for each.
pub const MAX_COARSE: u32 = 129;

/// Products of basis row `row` with the voxel's curve and with its running integral.
#[cube]
fn products<F: Float>(data: &Array<f32>, tables: &Array<F>, reads: Reads, row: u32) -> Line2<F> {
    let half = F::new(0.5);
    let mut q = F::new(0.0);
    let mut prev = F::new(0.0);
    let mut pd = F::new(0.0);
    let mut pq = F::new(0.0);
    for i in 0..reads.nt {
        let d = F::cast_from(data[(i * reads.stride + reads.voxel) as usize]);
        if i > 0u32 {
            q += half * tables[(i - 1u32) as usize] * (prev + d);
        }
        prev = d;
        let b = tables[(row + i) as usize];
        pd += b * d;
        pq += b * q;
    }
    Line2::<F> { d: pd, q: pq }
}

/// Two products of a basis row: with the curve and with its running integral.
#[derive(CubeType, Clone, Copy)]
struct Line2<F: Float> {
    d: F,
    q: F,
}

/// Every pair of coarse arterial and portal delays (perfusion-core's `dual_grid`).
#[cube]
#[allow(clippy::too_many_arguments)]
fn dual_grid<F: Float>(
    data: &Array<f32>,
    tables: &Array<F>,
    reads: Reads,
    grids: DualGrid,
    dd: F,
    work: &mut Work<F>,
    kept: &mut Kept<F>,
) {
    let nt = reads.nt;
    let half = F::new(0.5);
    let mut q = F::new(0.0);
    let mut prev = F::new(0.0);
    let mut qq = F::new(0.0);
    let mut qd = F::new(0.0);
    for i in 0..nt {
        let d = F::cast_from(data[(i * reads.stride + reads.voxel) as usize]);
        if i > 0u32 {
            q += half * tables[(i - 1u32) as usize] * (prev + d);
        }
        prev = d;
        qq += q * q;
        qd += q * d;
    }
    let mut portal_d = Array::<F>::new(comptime!(MAX_COARSE as usize));
    let mut portal_q = Array::<F>::new(comptime!(MAX_COARSE as usize));
    for p in 0..grids.coarse1 {
        let l = products::<F>(data, tables, reads, reads.a2 + p * grids.stride1 * nt);
        portal_d[p as usize] = l.d;
        portal_q[p as usize] = l.q;
    }
    for a in 0..grids.coarse0 {
        let la = products::<F>(data, tables, reads, reads.a1 + a * grids.stride0 * nt);
        for p in 0..grids.coarse1 {
            #[unroll]
            for k in 0..16u32 {
                work.g[k as usize] = F::new(0.0);
            }
            work.g[0] = tables[(grids.norms + a) as usize];
            work.g[1] = tables[(grids.cross + a * grids.coarse1 + p) as usize];
            work.g[2] = -la.q;
            work.g[5] = tables[(grids.norms + grids.coarse0 + p) as usize];
            work.g[6] = -portal_q[p as usize];
            work.g[10] = qq;
            work.rhs[0] = la.d;
            work.rhs[1] = portal_d[p as usize];
            work.rhs[2] = -qd;
            work.rhs[3] = F::new(0.0);
            let r = nnls::<F>(work, dd, 3u32);
            keep_distinct::<F>(kept, work, r, a * grids.stride0, p * grids.stride1, grids);
        }
    }
}

/// Scratch arrays of one voxel's search.
#[derive(CubeType)]
struct Work<F: Float> {
    g: Array<F>,
    rhs: Array<F>,
    m: Array<F>,
    r: Array<F>,
    y: Array<F>,
    theta: Array<F>,
}

/// The best candidate so far: residual, coefficients, delay indices.
#[derive(CubeType)]
struct Best<F: Float> {
    residual: F,
    theta: Array<F>,
    index0: u32,
    index1: u32,
}

/// The best candidates of the coarse scan, ascending residual, pairwise not neighbours on
/// the coarse grid (perfusion-core's `Scan::kept`); `n` of them found.
#[derive(CubeType)]
struct Kept<F: Float> {
    residual: Array<F>,
    theta: Array<F>,
    index0: Array<u32>,
    index1: Array<u32>,
    n: u32,
}

/// Keep the coarse candidate at `i0`, `i1` (coefficients in `work.theta`) among the distinct
/// best (perfusion-core's `Scan::keep_distinct`): it replaces a kept neighbour it beats (else
/// it is dropped), or the worst kept one it beats; one pass of swaps from the end restores
/// the order.
#[cube]
fn keep_distinct<F: Float>(
    kept: &mut Kept<F>,
    work: &Work<F>,
    r: F,
    i0: u32,
    i1: u32,
    grids: DualGrid,
) {
    let none = u32::new(CANDIDATES as i64);
    let mut slot = u32::new(CANDIDATES as i64);
    let mut near = false;
    for j in 0..kept.n {
        let k0 = kept.index0[j as usize];
        let k1 = kept.index1[j as usize];
        let d0 = select(k0 > i0, k0 - i0, i0 - k0);
        let d1 = select(k1 > i1, k1 - i1, i1 - k1);
        if !near && d0 <= grids.stride0 && d1 <= grids.stride1 {
            near = true;
            if r < kept.residual[j as usize] {
                slot = j;
            }
        }
    }
    if !near {
        if kept.n < none {
            slot = kept.n;
            kept.n += 1u32;
        } else if r < kept.residual[(none - 1u32) as usize] {
            slot = none - 1u32;
        }
    }
    if slot < none {
        kept.residual[slot as usize] = r;
        kept.index0[slot as usize] = i0;
        kept.index1[slot as usize] = i1;
        #[unroll]
        for q in 0..4u32 {
            kept.theta[(4u32 * slot + q) as usize] = work.theta[q as usize];
        }
        let mut j = none - 1u32;
        while j > 0u32 {
            let i = j - 1u32;
            if kept.residual[j as usize] < kept.residual[i as usize] {
                let r0 = kept.residual[j as usize];
                kept.residual[j as usize] = kept.residual[i as usize];
                kept.residual[i as usize] = r0;
                let a = kept.index0[j as usize];
                kept.index0[j as usize] = kept.index0[i as usize];
                kept.index0[i as usize] = a;
                let b = kept.index1[j as usize];
                kept.index1[j as usize] = kept.index1[i as usize];
                kept.index1[i as usize] = b;
                #[unroll]
                for q in 0..4u32 {
                    let t = kept.theta[(4u32 * j + q) as usize];
                    kept.theta[(4u32 * j + q) as usize] = kept.theta[(4u32 * i + q) as usize];
                    kept.theta[(4u32 * i + q) as usize] = t;
                }
            }
            j -= 1u32;
        }
    }
}

/// Solve at delay indices `i0`, `i1`; keep the candidate in `best` if its residual is
/// strictly smaller (perfusion-core's `Scan::candidate`).
#[cube]
#[allow(clippy::too_many_arguments)]
fn candidate<F: Float>(
    data: &Array<f32>,
    tables: &Array<F>,
    reads: Reads,
    i0: u32,
    i1: u32,
    dd: F,
    work: &mut Work<F>,
    best: &mut Best<F>,
    #[comptime] model: u32,
) {
    normal_equations::<F>(
        data,
        tables,
        reads,
        i0,
        i1,
        &mut work.g,
        &mut work.rhs,
        model,
    );
    let r = nnls::<F>(work, dd, comptime!(n_coefficients(model)));
    keep::<F>(best, work, r, i0, i1);
}

/// Keep the candidate at `i0`, `i1` (coefficients in `work.theta`) if its residual `r` is
/// strictly the smallest so far (perfusion-core's `Scan::keep`).
#[cube]
fn keep<F: Float>(best: &mut Best<F>, work: &Work<F>, r: F, i0: u32, i1: u32) {
    if r < best.residual {
        best.residual = r;
        best.index0 = i0;
        best.index1 = i1;
        #[unroll]
        for j in 0..4u32 {
            best.theta[j as usize] = work.theta[j as usize];
        }
    }
}

/// Gram matrix (upper triangle, row-major 4 x 4) and right-hand side of the integral form
/// (perfusion-core's `normal_equations`, the same columns in the same order).
#[cube]
#[allow(clippy::too_many_arguments)]
fn normal_equations<F: Float>(
    data: &Array<f32>,
    tables: &Array<F>,
    reads: Reads,
    i0: u32,
    i1: u32,
    g: &mut Array<F>,
    rhs: &mut Array<F>,
    #[comptime] model: u32,
) {
    let l = comptime!(n_coefficients(model));
    #[unroll]
    for k in 0..16u32 {
        g[k as usize] = F::new(0.0);
    }
    #[unroll]
    for k in 0..4u32 {
        rhs[k as usize] = F::new(0.0);
    }
    let nt = reads.nt;
    let ra1 = reads.a1 + i0 * nt;
    let rv1 = reads.v1 + i0 * nt;
    let raa1 = reads.aa1 + i0 * nt;
    let ra2 = reads.a2 + i1 * nt;
    let half = F::new(0.5);
    let mut q = F::new(0.0);
    let mut qq = F::new(0.0);
    let mut prev = F::new(0.0);
    let mut c = Array::<F>::new(4usize);
    for i in 0..nt {
        let d = F::cast_from(data[(i * reads.stride + reads.voxel) as usize]);
        if i > 0u32 {
            let h = half * tables[(i - 1u32) as usize];
            let q_next = q + h * (prev + d);
            qq += h * (q + q_next);
            q = q_next;
        }
        prev = d;
        let mm = comptime!(model & 0xF);
        if comptime!(mm == MODEL_DUAL_INPUT) {
            c[0] = tables[(ra1 + i) as usize];
            c[1] = tables[(ra2 + i) as usize];
            c[2] = -q;
        } else if comptime!(mm == MODEL_TOFTS) {
            c[0] = tables[(ra1 + i) as usize];
            c[1] = -q;
        } else if comptime!(mm == MODEL_EXTENDED_TOFTS) {
            c[0] = tables[(rv1 + i) as usize];
            c[1] = tables[(ra1 + i) as usize];
            c[2] = -q;
        } else if comptime!(mm == MODEL_PATLAK) {
            c[0] = tables[(rv1 + i) as usize];
            c[1] = tables[(ra1 + i) as usize];
        } else {
            c[0] = tables[(ra1 + i) as usize];
            c[1] = -q;
            c[2] = tables[(raa1 + i) as usize];
            c[3] = -qq;
        }
        #[unroll]
        for j in 0..l {
            #[unroll]
            for k in j..l {
                g[(j * 4 + k) as usize] += c[j as usize] * c[k as usize];
            }
            rhs[j as usize] += c[j as usize] * d;
        }
    }
}

/// Non-negative least squares by every subset of active coefficients (perfusion-core's
/// `nnls`, the same Cholesky): returns the residual, the coefficients in `work.theta`.
#[cube]
fn nnls<F: Float>(work: &mut Work<F>, dd: F, #[comptime] l: u32) -> F {
    let zero = F::new(0.0);
    let one = F::new(1.0);
    let mut scale = Array::<F>::new(4usize);
    #[unroll]
    for j in 0..l {
        let d = work.g[(j * 5) as usize];
        scale[j as usize] = zero;
        if d > zero {
            scale[j as usize] = one / F::sqrt(d);
        }
    }
    let mut best = dd;
    #[unroll]
    for j in 0..4u32 {
        work.theta[j as usize] = zero;
    }
    // The full set first: where all its coefficients are positive it is the optimum.
    let full = comptime!((1u32 << l) - 1);
    let mut done = false;
    for s in 0..full {
        let set = full - s;
        if !done {
            #[unroll]
            for j in 0..l {
                let on_j = ((set >> j) & 1u32) == 1u32 && scale[j as usize] > zero;
                #[unroll]
                for k in j..l {
                    let on_k = ((set >> k) & 1u32) == 1u32 && scale[k as usize] > zero;
                    let mut v = zero;
                    if on_j && on_k {
                        v = work.g[(j * 4 + k) as usize] * scale[j as usize] * scale[k as usize];
                    } else if comptime!(j == k) {
                        v = one;
                    }
                    work.m[(j * 4 + k) as usize] = v;
                }
                work.r[j as usize] = zero;
                if on_j {
                    work.r[j as usize] = work.rhs[j as usize] * scale[j as usize];
                }
            }
            if cholesky_solve::<F>(&work.m, &work.r, &mut work.y, 4u32, l) {
                let mut feasible = true;
                let mut fit = zero;
                #[unroll]
                for j in 0..l {
                    if ((set >> j) & 1u32) == 1u32 && scale[j as usize] > zero {
                        let t = work.y[j as usize] * scale[j as usize];
                        if !(t > zero) {
                            feasible = false;
                        }
                        fit += t * work.rhs[j as usize];
                    }
                }
                if feasible && dd - fit < best {
                    best = dd - fit;
                    #[unroll]
                    for j in 0..l {
                        work.theta[j as usize] = zero;
                        if ((set >> j) & 1u32) == 1u32 && scale[j as usize] > zero {
                            work.theta[j as usize] = work.y[j as usize] * scale[j as usize];
                        }
                    }
                }
                if feasible && s == 0u32 {
                    done = true;
                }
            }
        }
    }
    best
}

/// Model parameters from the coefficients (perfusion-core's `parameters`; `x` holds the
/// projected start, kept where the coefficients leave a parameter undetermined).
#[cube]
fn parameters<F: Float>(x: &mut Array<F>, theta: &Array<F>, s: F, #[comptime] model: u32) {
    let zero = F::new(0.0);
    let mm = comptime!(model & 0xF);
    if comptime!(mm == MODEL_DUAL_INPUT) {
        x[0] = theta[0] / s;
        x[1] = theta[1] / s;
        x[2] = theta[2] / s;
    } else if comptime!(mm == MODEL_TOFTS) {
        x[0] = theta[0] / s;
        if theta[1] > zero && theta[0] > zero {
            x[1] = theta[0] / theta[1];
        }
    } else if comptime!(mm == MODEL_EXTENDED_TOFTS) {
        let d = theta[1] - theta[2] * theta[0];
        let g1 = select(d > zero, d, zero);
        x[0] = g1 / s;
        if theta[2] > zero && g1 > zero {
            x[1] = g1 / theta[2];
        }
        x[2] = theta[0];
    } else if comptime!(mm == MODEL_PATLAK) {
        x[0] = theta[1] / s;
        x[1] = theta[0];
    } else {
        let c1 = theta[0];
        let c2 = theta[1];
        let c3 = theta[2];
        let c4 = theta[3];
        if c1 > zero {
            x[0] = c1 / s;
            if c4 > zero && c3 > zero {
                let v = c3 / c4;
                let den = c2 - c4 * v / c1;
                if den > zero {
                    let vp = c1 / den;
                    if vp < v {
                        let ve = v - vp;
                        x[1] = c4 * vp * ve / c1 / s;
                        x[2] = ve;
                        x[3] = vp;
                    }
                }
            } else if c2 > zero {
                x[1] = zero;
                x[3] = c1 / c2;
            }
        }
    }
}

/// Units per cube of the start kernel.
const CUBE_START: u32 = 64;

/// The kernel as [`start_search`] configures it for `p` (for the catalog).
pub(crate) fn definition<R: Runtime, F: KernelFloat>(
    client: &ComputeClient<R>,
    p: &KernelParams,
) -> start_kernel::StartKernel<F, R> {
    start_kernel::StartKernel::<F, R>::new(
        settings_1d(CUBE_START),
        client.clone(),
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
        (),
        (),
        p.model_word(),
    )
}

/// Launch [`start_kernel()`] over the voxels of `b` (curves, setup, and `starts`, which
/// receives [`CANDIDATES`] starts per voxel) with the search `s` and its `tables`.
pub fn start_search<R: Runtime, F: KernelFloat>(
    gpu: &Gpu<R>,
    b: &FitBuffers<'_, F>,
    tables: &GpuArray<F>,
    p: &KernelParams,
    s: &StartParams,
) -> Result<()> {
    let name = "perfusion_start";
    if p.voxels == 0 {
        return Ok(());
    }
    let nt = p.nt as usize;
    let rows = |t: u32, count: u32| {
        if t == u32::MAX {
            0
        } else {
            t as usize + count as usize * nt
        }
    };
    let needed = [
        rows(s.tables[0], s.axes[0].count),
        rows(s.tables[1], s.axes[0].count),
        rows(s.tables[2], s.axes[0].count),
        rows(s.tables[3], s.axes[1].count),
        nt,
    ];
    if needed.iter().any(|&n| n > tables.len())
        || s.axes.iter().any(|a| a.count == 0 || a.stride == 0)
        || s.coarse.iter().any(|&c| c > MAX_COARSE)
        || b.starts.len()
            < CANDIDATES as usize * super::model::n_params(p.model) as usize * p.voxels as usize
    {
        return Err(Error::invalid_launch(
            name,
            "start tables too short for the axes",
        ));
    }
    let count = gpu.cube_count_1d(name, p.voxels as usize, CUBE_START)?;
    let f = F::from_f64;
    let free = u32::from(s.axes[0].free) | u32::from(s.axes[1].free) << 1;
    // Absent tables read row 0 of the intervals (never used by the model's columns).
    let t = s.tables.map(|o| if o == u32::MAX { 0 } else { o });
    let [a0, a1] = s.axes;
    gpu.launch(name, count, |count| {
        // SAFETY: unit v < voxels reads data[t * stride + v] for t < nt (stride >= voxels,
        // checked with the fit's buffers), table rows checked above, setup[..15], and
        // writes starts[q * voxels + v] for q < CANDIDATES np (checked above).
        unsafe {
            start_kernel::launch_unchecked::<F, R>(
                gpu.client(),
                count,
                CubeDim::new_1d(CUBE_START),
                b.data.arg(),
                tables.arg(),
                b.setup.arg(),
                b.starts.arg(),
                ArrayArg::from_raw_parts(b.counter.handle().clone(), COUNTER_WORDS),
                p.voxels,
                p.stride,
                p.nt,
                p.free_mask,
                f(p.rate_scale),
                f(a0.start),
                f(a0.step),
                a0.count,
                a0.stride,
                a0.first,
                a0.param,
                f(a1.start),
                f(a1.step),
                a1.count,
                a1.stride,
                a1.first,
                a1.param,
                free,
                t[0],
                t[1],
                t[2],
                t[3],
                s.coarse[0],
                s.coarse[1],
                s.cross,
                s.norms,
                f(f64::INFINITY),
                f(f64::NAN),
                p.model_word(),
            );
        };
    })
}
