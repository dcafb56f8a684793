//! The bounded Levenberg-Marquardt fit kernel (perfusion-core's
//! `cpu/levenberg_marquardt.rs`, with the start comparison first and the restarts of
//! `cpu/fit.rs` after), its launch wrapper and its configuration.

use super::model::{self, Ctx, canonical, chain, chain_len, chain_small, n_params, normal, tri};
use super::voxel::{
    Voxel, copy, first_voxel, is_free, load_shared_inputs, next_voxel, nm_cost, project,
    record_fit, start_point, take_valid_voxel,
};
use super::{
    CANDIDATES, COUNTER_WORDS, FitBuffers, KINK_ESCAPE, KINK_NEAR, KernelFloat, KernelParams,
    LM_STASH, STATUS_CONVERGED, STATUS_FAILED, STATUS_MAX_ITERATIONS, cube_word, shared_inputs_len,
};
use crate::configured::{array, settings_1d};
use crate::linalg::cholesky_solve;
use cubecl::prelude::*;
use gpu_runtime::{Gpu, Result};
use model::SHARED_CURVE;

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
/// start comparison first). Outputs as [`nelder_mead_kernel()`](super::nelder_mead_kernel()).
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
    seeded: u32,
    kink_near: F,
    kink_escape: F,
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
    let total = seeded;
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
    // The run of the voxel's fit (0 the first, then restarts), the searched start it began
    // from (0: the given one) and the cost of the fit recorded so far.
    let mut run = 0u32;
    let mut chosen = 0u32;
    let mut best_cost = inf;
    let escapes = comptime!(2 * n_params(model));
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
                // The given start, then the searched ones (seeded launches); strictly better
                // wins.
                run = 0u32;
                chosen = 0u32;
                if total > 0 {
                    copy::<F>(&mut trial, &x, np);
                    let mut best = nm_cost::<F>(
                        data, &curve, &inputs, grid, setup, ctx, &trial, mask, inf, model,
                    );
                    for g in 1..total + 1 {
                        start_point::<F>(
                            &mut delta, &trial, starts, setup, mask, voxel, nvox, g, np,
                        );
                        let f = nm_cost::<F>(
                            data, &curve, &inputs, grid, setup, ctx, &delta, mask, inf, model,
                        );
                        if f < best {
                            best = f;
                            chosen = g;
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
                    // The cap reached at a point that passes the stopping test converged.
                    if cost < inf {
                        let c = gradient_cosine::<F>(&x, &jtj, &jtr, setup, mask, cost, np);
                        if cost <= floor || c <= cfg.tol_grad {
                            result = STATUS_CONVERGED;
                        }
                    }
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
                                if cost <= floor || cosine <= cfg.stall {
                                    result = STATUS_CONVERGED;
                                }
                                seeking = false;
                                done = true;
                            }
                        }
                    }
                }
            }
            if done {
                // A run that stalls on a kink of a delay's cost ended at a minimum.
                if result == STATUS_FAILED
                    && cost < inf
                    && on_kink::<F>(&x, cfg.delay_mask & mask, inv_dt, kink_near, np)
                {
                    result = STATUS_CONVERGED;
                }
                // The first run is recorded, a restart only with a strictly lower cost.
                if run == 0u32 || cost < best_cost {
                    record_fit::<F>(
                        out, status, &x, setup, cost, stats, result, it, voxel, nvox, mask, inf,
                        nan, np,
                    );
                    best_cost = cost;
                }
                // The next restart: the other searched starts, then either side of each
                // kink that a free delay of the recorded fit sits on.
                let mut again = false;
                while !again && run < total + escapes {
                    run += 1u32;
                    if run <= total {
                        if run != chosen {
                            start_point::<F>(
                                &mut x, &trial, starts, setup, mask, voxel, nvox, run, np,
                            );
                            again = true;
                        }
                    } else {
                        let e = run - total - 1u32;
                        let u = e / 2u32;
                        if ((cfg.delay_mask & mask) >> u) & 1u32 == 1u32 && inv_dt > F::new(0.0) {
                            let frames = out[(u * nvox + voxel) as usize] * inv_dt;
                            let kink = F::floor(frames + F::new(0.5));
                            if F::abs(frames - kink) < kink_near {
                                #[unroll]
                                for p in 0..np {
                                    x[p as usize] = out[(p * nvox + voxel) as usize];
                                }
                                let side = select((e & 1u32) == 0u32, -kink_escape, kink_escape);
                                x[u as usize] = (kink + side) / inv_dt;
                                project::<F>(&mut x, setup, mask, np);
                                again = true;
                            }
                        }
                    }
                }
                if again {
                    copy::<F>(&mut trial, &x, np);
                    lambda = cfg.lambda_start;
                    result = STATUS_MAX_ITERATIONS;
                    it = 0;
                    first = true;
                } else {
                    voxel = next_voxel(counter, nvox, persistent);
                    fresh = true;
                }
            }
        }
    }
}

/// Whether a delay of `x` among `delays` (bits) lies within `near` sampling intervals of a
/// whole number of them, `inv_dt` > 0 (perfusion-core's `model::start::on_kink`).
#[cube]
fn on_kink<F: Float>(x: &Array<F>, delays: u32, inv_dt: F, near: F, #[comptime] np: u32) -> bool {
    let mut on = false;
    #[unroll]
    for u in 0..np {
        if (delays >> u) & 1u32 == 1u32 && inv_dt > F::new(0.0) {
            let frames = x[u as usize] * inv_dt;
            if F::abs(frames - F::floor(frames + F::new(0.5))) < near {
                on = true;
            }
        }
    }
    on
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

/// The comptime configuration of an LM launch of `p` where `max_shared` bytes of shared
/// memory are available: (units launched, model word, shared samples per unit). The stash
/// takes 30 values per unit; use it where two cubes' fit in shared memory, and persistent
/// units where their curves and inputs fit beside it.
fn configure<F: KernelFloat>(p: &KernelParams, max_shared: usize) -> (u32, u32, u32) {
    let elem = std::mem::size_of::<F>();
    let stash_bytes = 30 * p.cube as usize * elem;
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
    (units, word, shared_nt)
}

/// The kernel as a launch of `p` configures it, with no limit on shared memory (for the
/// catalog: `cargo xtask build-ptx`).
pub(crate) fn definition<R: Runtime, F: KernelFloat>(
    client: &ComputeClient<R>,
    p: &KernelParams,
) -> levenberg_marquardt_kernel::LevenbergMarquardtKernel<F, R> {
    let (_, word, shared_nt) = configure::<F>(p, usize::MAX);
    levenberg_marquardt_kernel::LevenbergMarquardtKernel::<F, R>::new(
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
        shared_nt,
    )
}

/// Launch [`levenberg_marquardt_kernel()`] on `b` ([`FitBuffers`], as Nelder-Mead's) with the
/// settings `p`.
pub fn levenberg_marquardt<R: Runtime, F: KernelFloat>(
    gpu: &Gpu<R>,
    b: &FitBuffers<'_, F>,
    p: &KernelParams,
) -> Result<()> {
    let name = "perfusion_levenberg_marquardt";
    b.check(name, p)?;
    if p.voxels == 0 {
        return Ok(());
    }
    let max_shared = gpu.client().properties().hardware.max_shared_memory_size;
    let (units, word, shared_nt) = configure::<F>(p, max_shared);
    let count = gpu.cube_count_1d(name, units as usize, p.cube)?;
    let f = F::from_f64;
    gpu.launch(name, count, |count| {
        // SAFETY: as in `nelder_mead`.
        unsafe {
            levenberg_marquardt_kernel::launch_unchecked::<F, R>(
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
                u32::from(p.seeded) * CANDIDATES,
                f(KINK_NEAR),
                f(KINK_ESCAPE),
                f(f64::INFINITY),
                f(f64::NAN),
                f(f64::from(f32::MAX)),
                word,
                shared_nt,
            );
        };
    })
}
