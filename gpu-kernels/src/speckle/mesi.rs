//! Per-pixel multi-exposure (MESI) Levenberg-Marquardt fits, one pixel per unit, in f32:
//! the port of speckle-core's f64 `cpu::mesi::fit_mesi` (same model terms, same bounded LM
//! with an active set and the same statuses). What changes with f32 is stated where it
//! matters: the convergence tests use tolerances above f32 rounding, so a GPU fit stops
//! where f32 can no longer tell the steps apart.

// CubeCL evaluates `if comptime!(..)` at expansion time; merging it with a runtime
// condition would turn it into a runtime branch.
#![allow(clippy::collapsible_if)]
// `!(x > 0.0)` is meant: it is also true for NaN. Ranges are written as CubeCL 0.10 parses them.
#![allow(
    clippy::neg_cmp_op_on_partial_ord,
    clippy::if_not_else,
    clippy::range_plus_one
)]

use super::model::lorentzian;
use super::{
    F32_TOLERANCE, MAX_EXPOSURES, STATUS_CONVERGED, STATUS_FAILED, STATUS_INVALID,
    STATUS_MAX_ITERATIONS,
};
use crate::CUBE_1D;
use crate::configured::{CatalogEntry, array, entry, settings_1d};
use crate::linalg::cholesky_solve;
use cubecl::prelude::*;
use gpu_runtime::{Error, Gpu, GpuArray, Result};

/// Relative K^2 residuals this small are f32 rounding: the data are fitted exactly.
const ROUNDOFF_RESIDUAL: f32 = 1e-6;
/// Gradient cosine accepted as stationary when no step reduces the cost (CPU: 1e-6).
const STALL_COSINE: f32 = 1e-3;
const BETA_MIN: f32 = 1e-6;
const BETA_MAX: f32 = 10.0;

/// Per-pixel MESI data and bounds.
#[derive(CubeType, Clone, Copy)]
struct Fit {
    pixel: u32,
    pixels: u32,
    n: u32,
    beta_fixed: f32,
    ln_tau_lo: f32,
    ln_tau_hi: f32,
}

/// Clamp a trial point into the bounds (projection), as the CPU does.
#[cube]
fn project(fit: Fit, p: &mut Array<f32>, #[comptime] free_beta: bool) {
    p[0] = f32::clamp(p[0], fit.ln_tau_lo, fit.ln_tau_hi);
    p[1] = f32::clamp(p[1], 0.0f32, 1.0f32);
    p[2] = f32::max(p[2], 0.0f32);
    if comptime!(free_beta) {
        p[3] = f32::clamp(p[3], BETA_MIN, BETA_MAX);
    }
}

/// Cost `sum r_i^2` of relative K^2 residuals; with `jac`, also J^T J (upper triangle,
/// row-major 4x4), J^T r and the squared column norms of J.
#[cube]
fn mesi_eval(
    k: &Array<f32>,
    exposures: &Array<f32>,
    fit: Fit,
    p: &Array<f32>,
    a: &mut Array<f32>,
    g: &mut Array<f32>,
    cn: &mut Array<f32>,
    #[comptime] jac: bool,
    #[comptime] free_beta: bool,
) -> f32 {
    let np = comptime!(if free_beta { 4u32 } else { 3u32 });
    let tau = f32::exp(p[0]);
    let rho = p[1];
    let v = p[2];
    let mut beta = fit.beta_fixed;
    if comptime!(free_beta) {
        beta = p[3];
    }
    let a2 = rho * rho;
    let a1 = 4.0f32 * rho * (1.0f32 - rho);
    let a0 = (1.0f32 - rho) * (1.0f32 - rho);
    let mut j = Array::<f32>::new(4usize);
    if comptime!(jac) {
        #[unroll]
        for u in 0..4u32 {
            g[u as usize] = 0.0f32;
            cn[u as usize] = 0.0f32;
            #[unroll]
            for w in 0..4u32 {
                a[(u * 4 + w) as usize] = 0.0f32;
            }
        }
    }
    let mut cost = 0.0f32;
    for i in 0..fit.n {
        let kv = k[(i * fit.pixels + fit.pixel) as usize];
        let d = kv * kv;
        let x = exposures[i as usize] / tau;
        let lt = lorentzian(x);
        let mt = lorentzian(0.5f32 * x);
        let l = lt.f;
        let m = 0.5f32 * mt.f;
        let core = a2 * l + a1 * m + a0;
        let inv_d = 1.0f32 / d;
        let r = (beta * core + v - d) * inv_d;
        cost += r * r;
        if comptime!(jac) {
            // d m / d ln tau = -x dm/dx; x dM/dx = s_L(x/2) / 2.
            j[0] = -beta * (a2 * lt.s + 2.0f32 * rho * (1.0f32 - rho) * mt.s) * inv_d;
            j[1] = beta
                * (2.0f32 * rho * l + 4.0f32 * (1.0f32 - 2.0f32 * rho) * m
                    - 2.0f32 * (1.0f32 - rho))
                * inv_d;
            j[2] = inv_d;
            j[3] = core * inv_d;
            #[unroll]
            for u in 0..np {
                g[u as usize] += j[u as usize] * r;
                cn[u as usize] += j[u as usize] * j[u as usize];
                for w in u..np {
                    a[(u * 4 + w) as usize] += j[u as usize] * j[w as usize];
                }
            }
        }
    }
    cost
}

/// Whether parameter `u` sits on a bound that the descent direction `-g` points out of.
#[cube]
fn blocked(fit: Fit, p: &Array<f32>, g: &Array<f32>, u: u32) -> bool {
    let mut b = (p[3] <= BETA_MIN && g[3] > 0.0f32) || (p[3] >= BETA_MAX && g[3] < 0.0f32);
    if u == 0 {
        b = (p[0] <= fit.ln_tau_lo && g[0] > 0.0f32) || (p[0] >= fit.ln_tau_hi && g[0] < 0.0f32);
    } else if u == 1 {
        b = (p[1] <= 0.0f32 && g[1] > 0.0f32) || (p[1] >= 1.0f32 && g[1] < 0.0f32);
    } else if u == 2 {
        b = p[2] <= 0.0f32 && g[2] > 0.0f32;
    }
    b
}

/// Largest cosine between residuals and a column of J over unblocked parameters.
#[cube]
fn gradient_cosine(
    fit: Fit,
    p: &Array<f32>,
    g: &Array<f32>,
    cn: &Array<f32>,
    cost: f32,
    #[comptime] free_beta: bool,
) -> f32 {
    let np = comptime!(if free_beta { 4u32 } else { 3u32 });
    let mut worst = 0.0f32;
    if cost > 0.0f32 {
        #[unroll]
        for u in 0..np {
            if !blocked(fit, p, g, u) && cn[u as usize] > 0.0f32 {
                worst = f32::max(
                    worst,
                    f32::abs(g[u as usize]) / f32::sqrt(cn[u as usize] * cost),
                );
            }
        }
    }
    worst
}

/// Data-driven start (the CPU's `initial_guess`): tau_c where K^2 crosses half-way, rho
/// from the long-exposure plateau, v_noise = 0.
#[cube]
fn initial_guess(
    k: &Array<f32>,
    exposures: &Array<f32>,
    fit: Fit,
    p: &mut Array<f32>,
    #[comptime] free_beta: bool,
) {
    let mut i_min = 0u32;
    let mut i_max = 0u32;
    for i in 0..fit.n {
        if exposures[i as usize] < exposures[i_min as usize] {
            i_min = i;
        }
        if exposures[i as usize] > exposures[i_max as usize] {
            i_max = i;
        }
    }
    let k_min = k[(i_min * fit.pixels + fit.pixel) as usize];
    let k_max = k[(i_max * fit.pixels + fit.pixel) as usize];
    let d_short = k_min * k_min;
    let d_long = k_max * k_max;
    let mut beta = fit.beta_fixed;
    let mut hi = fit.beta_fixed;
    if comptime!(free_beta) {
        beta = f32::clamp(f32::max(d_short, d_long), BETA_MIN, BETA_MAX);
        hi = d_short;
    }
    let lo = f32::min(d_long, beta);
    let rho = f32::clamp(1.0f32 - f32::sqrt(lo / beta), 0.05f32, 0.95f32);
    let half = 0.5f32 * (hi + lo);
    let mut t_above = 0.0f32;
    let mut t_below = 3.0e38f32;
    for i in 0..fit.n {
        let kv = k[(i * fit.pixels + fit.pixel) as usize];
        let t = exposures[i as usize];
        if kv * kv >= half {
            t_above = f32::max(t_above, t);
        } else {
            t_below = f32::min(t_below, t);
        }
    }
    let t_short = exposures[i_min as usize];
    let mut t_half = f32::sqrt(t_above * t_below);
    if t_above == 0.0f32 {
        // Every exposure is in the tail: K^2 - plateau ~ beta (4 rho - 3 rho^2) tau / T.
        let amp = beta * (4.0f32 * rho - 3.0f32 * rho * rho);
        t_half = f32::max(
            t_short * f32::max(d_short - lo, 1e-12f32) / amp,
            t_short * 1e-3f32,
        ) * 1.5f32;
    } else if t_below >= 3.0e38f32 {
        t_half = exposures[i_max as usize] * 3.0f32;
    }
    p[0] = f32::ln(t_half / 1.5f32);
    p[1] = rho;
    p[2] = 0.0f32;
    p[3] = beta;
    project(fit, p, free_beta);
}

/// One MESI fit per pixel (the CPU's `fit_mesi`, in f32). `k` holds the contrast stack
/// exposure-major (`k[e * pixels + p]`, coalesced across a warp), `exposures` the times in
/// seconds (checked finite and > 0 by the wrapper). `out` receives five planes of `pixels`
/// values: tau_c (s), rho, v_noise, beta, residual sum of squares; `status` the status in
/// its low byte and the iterations above it. `nan_bits` is 0x7FC0_0000 (CUDA C++ cannot
/// reinterpret a literal).
#[cube(launch_unchecked)]
pub fn mesi_fit_kernel(
    k: &Array<f32>,
    exposures: &Array<f32>,
    out: &mut Array<f32>,
    status: &mut Array<u32>,
    pixels: u32,
    n: u32,
    beta_fixed: f32,
    max_iterations: u32,
    tol: f32,
    nan_bits: u32,
    #[comptime] free_beta: bool,
) {
    let pix = ABSOLUTE_POS_X + ABSOLUTE_POS_Y * CUBE_COUNT_X * CUBE_DIM_X;
    if pix < pixels {
        let np = comptime!(if free_beta { 4u32 } else { 3u32 });
        let mut t_min = 3.0e38f32;
        let mut t_max = 0.0f32;
        let mut valid = true;
        for i in 0..n {
            let kv = k[(i * pixels + pix) as usize];
            // False for NaN: only finite positive contrasts are fitted.
            if !(kv > 0.0f32 && kv <= 1.0e18f32) {
                valid = false;
            }
            t_min = f32::min(t_min, exposures[i as usize]);
            t_max = f32::max(t_max, exposures[i as usize]);
        }
        let fit = Fit {
            pixel: pix,
            pixels,
            n,
            beta_fixed,
            ln_tau_lo: f32::ln(t_min * 1e-3f32),
            ln_tau_hi: f32::ln(t_max * 1e3f32),
        };
        let nan = f32::reinterpret(nan_bits);
        let mut result = u32::new(STATUS_INVALID as i64);
        let mut iterations = 0u32;
        let mut p = Array::<f32>::new(4usize);
        let mut cost = nan;
        if valid {
            let mut a = Array::<f32>::new(16usize);
            let mut g = Array::<f32>::new(4usize);
            let mut cn = Array::<f32>::new(4usize);
            let mut m = Array::<f32>::new(16usize);
            let mut rhs = Array::<f32>::new(4usize);
            let mut delta = Array::<f32>::new(4usize);
            let mut trial = Array::<f32>::new(4usize);
            initial_guess(k, exposures, fit, &mut p, free_beta);
            cost = mesi_eval(
                k, exposures, fit, &p, &mut a, &mut g, &mut cn, true, free_beta,
            );
            let mut lambda = 1e-3f32;
            result = STATUS_MAX_ITERATIONS;
            let floor = f32::cast_from(n) * ROUNDOFF_RESIDUAL * ROUNDOFF_RESIDUAL;
            let mut running = true;
            while running && iterations < max_iterations {
                iterations += 1u32;
                if !(cost <= 3.0e38f32) {
                    result = STATUS_FAILED;
                    running = false;
                } else if cost <= floor || gradient_cosine(fit, &p, &g, &cn, cost, free_beta) <= tol
                {
                    result = STATUS_CONVERGED;
                    running = false;
                } else {
                    // Damped normal equations; blocked parameters are held (identity rows).
                    #[unroll]
                    for u in 0..np {
                        #[unroll]
                        for w in 0..4u32 {
                            m[(u * 4 + w) as usize] = a[(u * 4 + w) as usize];
                        }
                    }
                    #[unroll]
                    for u in 0..np {
                        if blocked(fit, &p, &g, u) {
                            #[unroll]
                            for w in 0..np {
                                m[(u * 4 + w) as usize] = 0.0f32;
                                m[(w * 4 + u) as usize] = 0.0f32;
                            }
                            m[(u * 4 + u) as usize] = 1.0f32;
                            rhs[u as usize] = 0.0f32;
                        } else {
                            let d = a[(u * 4 + u) as usize];
                            m[(u * 4 + u) as usize] =
                                d + lambda * f32::max(d, 1e-12f32 * (1.0f32 + d));
                            rhs[u as usize] = -g[u as usize];
                        }
                    }
                    if !cholesky_solve::<f32>(&m, &rhs, &mut delta, 4u32, np) {
                        lambda *= 10.0f32;
                        if lambda > 1e16f32 {
                            result = STATUS_FAILED;
                            running = false;
                        }
                    } else {
                        #[unroll]
                        for u in 0..4u32 {
                            trial[u as usize] = p[u as usize];
                        }
                        #[unroll]
                        for u in 0..np {
                            trial[u as usize] += delta[u as usize];
                        }
                        project(fit, &mut trial, free_beta);
                        let trial_cost = mesi_eval(
                            k, exposures, fit, &trial, &mut m, &mut rhs, &mut delta, false,
                            free_beta,
                        );
                        if trial_cost <= 3.0e38f32 && trial_cost < cost {
                            let mut step_small = true;
                            #[unroll]
                            for u in 0..np {
                                if f32::abs(trial[u as usize] - p[u as usize])
                                    > tol * (f32::abs(p[u as usize]) + tol)
                                {
                                    step_small = false;
                                }
                            }
                            let cost_small = cost - trial_cost <= tol * trial_cost;
                            #[unroll]
                            for u in 0..4u32 {
                                p[u as usize] = trial[u as usize];
                            }
                            cost = mesi_eval(
                                k, exposures, fit, &p, &mut a, &mut g, &mut cn, true, free_beta,
                            );
                            lambda = f32::max(lambda * 0.1f32, 1e-12f32);
                            if step_small || cost_small {
                                result = STATUS_CONVERGED;
                                running = false;
                            }
                        } else {
                            lambda *= 10.0f32;
                            if lambda > 1e16f32 {
                                // No descent left: a minimum only if the gradient is ~zero.
                                result = STATUS_FAILED;
                                if cost <= floor
                                    || gradient_cosine(fit, &p, &g, &cn, cost, free_beta)
                                        <= STALL_COSINE
                                {
                                    result = STATUS_CONVERGED;
                                }
                                running = false;
                            }
                        }
                    }
                }
            }
            let at_bound = p[0] <= fit.ln_tau_lo + 1e-6f32 * f32::abs(fit.ln_tau_lo)
                || p[0] >= fit.ln_tau_hi - 1e-6f32 * f32::abs(fit.ln_tau_hi);
            let finite = cost <= 3.0e38f32
                && f32::abs(p[0]) <= 3.0e38f32
                && f32::abs(p[1]) <= 3.0e38f32
                && f32::abs(p[2]) <= 3.0e38f32
                && f32::abs(p[3]) <= 3.0e38f32;
            if !finite || (result == STATUS_CONVERGED && at_bound) {
                result = STATUS_FAILED;
            }
        }
        let mut tau = nan;
        let mut rho = nan;
        let mut v = nan;
        let mut beta = nan;
        if valid {
            tau = f32::exp(p[0]);
            rho = p[1];
            v = p[2];
            beta = fit.beta_fixed;
            if comptime!(free_beta) {
                beta = p[3];
            }
        }
        out[pix as usize] = tau;
        out[(pixels + pix) as usize] = rho;
        out[(2 * pixels + pix) as usize] = v;
        out[(3 * pixels + pix) as usize] = beta;
        out[(4 * pixels + pix) as usize] = cost;
        status[pix as usize] = result | (iterations << 8);
    }
}

/// Options of [`mesi_fit`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MesiFitParams {
    /// Pixels in each exposure's plane.
    pub pixels: u32,
    /// Known beta, or `None` to fit it (then >= 4 exposures).
    pub beta: Option<f32>,
    /// Iteration cap.
    pub max_iterations: u32,
    /// Relative tolerance; raised to [`F32_TOLERANCE`] if smaller.
    pub tolerance: f32,
}

/// Launch [`mesi_fit_kernel()`]: `k` holds `exposures.len() * pixels` contrasts
/// (exposure-major), `out` `5 * pixels` values, `status` `pixels` words.
pub fn mesi_fit<R: Runtime>(
    gpu: &Gpu<R>,
    k: &GpuArray<f32>,
    exposures: &GpuArray<f32>,
    p: &MesiFitParams,
    out: &GpuArray<f32>,
    status: &GpuArray<u32>,
) -> Result<()> {
    let name = "mesi_fit";
    let n = exposures.len();
    let pixels = p.pixels as usize;
    let need = if p.beta.is_some() { 3 } else { 4 };
    if n < need || n > MAX_EXPOSURES as usize {
        return Err(Error::invalid_launch(
            name,
            format!("{n} exposures; the fit needs {need} to {MAX_EXPOSURES}"),
        ));
    }
    if k.len() < n * pixels || out.len() < 5 * pixels || status.len() < pixels {
        return Err(Error::invalid_launch(
            name,
            format!("buffers too short for {pixels} pixels x {n} exposures"),
        ));
    }
    if let Some(b) = p.beta
        && !(b.is_finite() && b > 0.0)
    {
        return Err(Error::invalid_launch(
            name,
            format!("beta {b} must be finite and > 0"),
        ));
    }
    if pixels == 0 {
        return Ok(());
    }
    let count = gpu.cube_count_1d(name, pixels, CUBE_1D)?;
    gpu.launch(name, count, |count| {
        // SAFETY: lengths checked above; the kernel reads k[e * pixels + p] for e < n and
        // writes out[q * pixels + p] for q < 5 and status[p], all with p < pixels.
        unsafe {
            mesi_fit_kernel::launch_unchecked::<R>(
                gpu.client(),
                count,
                CubeDim::new_1d(CUBE_1D),
                k.arg(),
                exposures.arg(),
                out.arg(),
                status.arg(),
                p.pixels,
                n as u32,
                p.beta.unwrap_or(0.0),
                p.max_iterations,
                p.tolerance.max(F32_TOLERANCE),
                0x7FC0_0000u32,
                p.beta.is_none(),
            );
        };
    })
}

/// This file's kernels, configured as their launch wrappers configure them.
pub(crate) fn catalog<R: Runtime>(client: &ComputeClient<R>) -> Vec<CatalogEntry> {
    let s = || settings_1d(CUBE_1D);
    let mut entries = Vec::new();
    for (name, free_beta) in [("mesi_fit_beta_known", false), ("mesi_fit_beta_free", true)] {
        let k = mesi_fit_kernel::MesiFitKernel::<R>::new(
            s(),
            client.clone(),
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
            free_beta,
        );
        entries.push(entry("speckle_flow", name, k));
    }
    entries
}
