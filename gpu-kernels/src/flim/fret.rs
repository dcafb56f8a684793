//! BCMM and the phasor method for FRET (flim-core's `fret`), one unit per pixel, in f32:
//! the sums `S0, K, S1, S2` and the phasor in one pass, then the window-exact BCMM solve
//! (BCMM1: bracketed secant in ln a_F; BCMM2: damped Newton in (ln a_F, ln a_D) from the
//! paper's closed form or spreads around the mono-exponential rate) and the paper's PM.

use super::lifetimes::{b_deriv, b_fn, cmm_rate};
use super::{
    KIND_F32, KIND_U16, TILE, TILE_ROW, count, cube_first_pixel, decays, fetch_tile, holds_decays,
    invalid, store_tile, tile_count, u16_pairs,
};
use crate::CUBE_1D;
use crate::catalog::{CatalogEntry, array, entry, settings_1d};
use cubecl::prelude::*;
use gpu_runtime::{Gpu, GpuArray, Result};

/// Output planes: intensity, BCMM tau_F, tau_D, f_D, tau_avg, PM tau_F, f_D, tau_avg.
pub const FRET_PLANES: usize = 8;

/// Largest `ln a`, `a = h / tau` (as flim-core); the smallest is `ln(0.1 / m)`.
const LN_A_MAX: f32 = 4.094_345;
/// Root and step tolerance on ln a (f32).
const TOL: f32 = 1e-6;
/// A BCMM2 solution must reproduce S1 and S2 to this relative residual (f32 sums).
const RESIDUAL: f32 = 1e-4;

/// e^x - 1 for x <= 0 without cancellation near 0.
#[cube]
fn expm1(x: f32) -> f32 {
    let mut r = f32::exp(x) - 1.0f32;
    if f32::abs(x) < 0.1f32 {
        r = x
            * (1.0f32
                + x * (0.5f32
                    + x * (f32::new(1.0 / 6.0)
                        + x * (f32::new(1.0 / 24.0)
                            + x * (f32::new(1.0 / 120.0) + x / 720.0f32)))));
    }
    r
}

/// Window sums `sum_{j<m} j^k e^{-a j}`, k = 0, 1, 2 (flim-core's `fret::unit_moments`).
#[derive(CubeType, Clone, Copy)]
struct Mom {
    s0: f32,
    s1: f32,
    s2: f32,
}

#[cube]
fn unit_moments(a: f32, m: f32) -> Mom {
    let s0 = expm1(-a * m) / expm1(-a);
    let mean = b_fn(a) - m * b_fn(a * m);
    let var = m * m * b_deriv(a * m) - b_deriv(a);
    Mom {
        s0,
        s1: s0 * mean,
        s2: s0 * (var + mean * mean),
    }
}

/// Sums of one decay, offset removed.
#[derive(CubeType, Clone, Copy)]
struct Sums {
    s0: f32,
    k: f32,
    s1: f32,
    s2: f32,
}

/// Running sums of one decay over raw counts: photons, first and second moments of the
/// bin index, and the phasor sums.
#[derive(CubeType, Clone, Copy)]
struct Moments {
    n: f32,
    s1: f32,
    s2: f32,
    gc: f32,
    gs: f32,
}

/// Add count `c` of bin `j`.
#[cube]
fn add(acc: &mut Moments, c: f32, j: u32, m: u32, tables: &Array<f32>) {
    let jf = f32::cast_from(j);
    acc.n += c;
    acc.s1 += jf * c;
    acc.s2 += jf * jf * c;
    acc.gc += tables[(m + j) as usize] * c;
    acc.gs += tables[(2 * m + j) as usize] * c;
}

/// Add tile element `v` (element `e` of the fit range: bins 2e and 2e + 1 with `pairs`,
/// else bin e).
#[cube]
fn add_element(
    acc: &mut Moments,
    v: u32,
    e: u32,
    m: u32,
    tables: &Array<f32>,
    #[comptime] kind: u32,
    #[comptime] pairs: bool,
) {
    if comptime!(pairs) {
        add(acc, f32::cast_from(v & 0xFFFFu32), 2 * e, m, tables);
        add(acc, f32::cast_from(v >> 16u32), 2 * e + 1, m, tables);
    } else {
        add(acc, tile_count(v, kind), e, m, tables);
    }
}

/// BCMM1's equation in `y = ln a_F`: `psi(a_F) - target`.
#[cube]
fn psi(y: f32, d: Mom, mean_d: f32, target: f32, m: f32) -> f32 {
    let f = unit_moments(f32::exp(y), m);
    f.s0 * (f.s1 / f.s0 - mean_d) / (f.s0 - d.s0) - target
}

/// Relative residuals of the S1 and S2 equations at `(yf, yd)`, amplitudes from K and S0.
#[derive(CubeType, Clone, Copy)]
struct Res {
    r1: f32,
    r2: f32,
    alpha: f32,
    beta: f32,
}

#[cube]
fn residuals(s: Sums, yf: f32, yd: f32, m: f32) -> Res {
    let f = unit_moments(f32::exp(yf), m);
    let d = unit_moments(f32::exp(yd), m);
    let alpha = (s.s0 - s.k * d.s0) / (f.s0 - d.s0);
    let beta = s.k - alpha;
    Res {
        r1: (alpha * f.s1 + beta * d.s1 - s.s1) / s.s1,
        r2: (alpha * f.s2 + beta * d.s2 - s.s2) / s.s2,
        alpha,
        beta,
    }
}

/// One damped Newton run for BCMM2 from `(yf, yd)`; writes the log-rates into `sol` and
/// returns whether they solve the equations.
#[cube]
fn bcmm_newton(s: Sums, yf0: f32, yd0: f32, m: f32, sol: &mut Array<f32>) -> bool {
    let ln_a_min = f32::ln(0.1f32 / m);
    let mut yf = f32::clamp(yf0, ln_a_min, LN_A_MAX);
    let mut yd = f32::clamp(yd0, ln_a_min, LN_A_MAX);
    let r0 = residuals(s, yf, yd, m);
    // CubeCL cannot reassign a struct: the residual state as scalars.
    let mut r1 = r0.r1;
    let mut r2 = r0.r2;
    let mut alpha = r0.alpha;
    let mut beta = r0.beta;
    let mut norm = f32::sqrt(r1 * r1 + r2 * r2);
    let mut running = yf > yd;
    for _ in 0..40u32 {
        if running {
            let e = 1e-3f32;
            let rf = residuals(s, yf + e, yd, m);
            let rd = residuals(s, yf, yd + e, m);
            let j00 = (rf.r1 - r1) / e;
            let j01 = (rd.r1 - r1) / e;
            let j10 = (rf.r2 - r2) / e;
            let j11 = (rd.r2 - r2) / e;
            let det = j00 * j11 - j01 * j10;
            let df = -(j11 * r1 - j01 * r2) / det;
            let dd = -(-j10 * r1 + j00 * r2) / det;
            let mut t = 1.0f32;
            let mut accepted = false;
            for _ in 0..20u32 {
                if !accepted {
                    let nf = f32::clamp(yf + t * df, ln_a_min, LN_A_MAX);
                    let nd = f32::clamp(yd + t * dd, ln_a_min, LN_A_MAX);
                    let nr = residuals(s, nf, nd, m);
                    let nn = f32::sqrt(nr.r1 * nr.r1 + nr.r2 * nr.r2);
                    // False for NaN.
                    if nf > nd && nn < norm {
                        // Converged when the full Newton step is small (a step cut short
                        // by backtracking says nothing about convergence).
                        let step = f32::abs(df) + f32::abs(dd);
                        yf = nf;
                        yd = nd;
                        r1 = nr.r1;
                        r2 = nr.r2;
                        alpha = nr.alpha;
                        beta = nr.beta;
                        norm = nn;
                        accepted = true;
                        if step <= TOL * (f32::abs(yf) + f32::abs(yd) + 1.0f32) {
                            running = false;
                        }
                    }
                    t *= 0.5f32;
                }
            }
            if !accepted {
                running = false;
            }
        }
    }
    sol[0] = yf;
    sol[1] = yd;
    sol[2] = alpha;
    sol[3] = beta;
    norm < RESIDUAL && yd > ln_a_min + 1e-5f32
}

/// Amplitude fraction of the first component from sample amplitudes (binning and pile-up
/// undone, flim-core's `fret::amplitude_fraction`).
#[cube]
fn amplitude_fraction(alpha: f32, beta: f32, af: f32, ad: f32, h: f32, period: f32) -> f32 {
    let sf = (h / af) * (-expm1(-af)) / (-expm1(-period * af / h));
    let sd = (h / ad) * (-expm1(-ad)) / (-expm1(-period * ad / h));
    let x = alpha / sf;
    let y = beta / sd;
    x / (x + y)
}

/// One pixel per unit: the eight planes of flim-core's `FretMaps` into `out[q * pixels + p]`
/// and the status (0 analysed, 1 masked). `tables` as for the lifetimes kernel (Simpson
/// weights unused, cos and sin of omega t_j); `a_d = h / tau_D` when `donor_known`.
#[cube(launch_unchecked)]
pub fn fret_kernel(
    words: &Array<u32>,
    tables: &Array<f32>,
    out: &mut Array<f32>,
    status: &mut Array<u32>,
    pixels: u32,
    stride: u32,
    first: u32,
    m: u32,
    h: f32,
    omega: f32,
    offset: f32,
    threshold: f32,
    cal_cos: f32,
    cal_sin: f32,
    sum_cos: f32,
    sum_sin: f32,
    sum_j: f32,
    sum_j2: f32,
    a_d: f32,
    period: f32,
    nan_bits: u32,
    #[comptime] kind: u32,
    #[comptime] donor_known: bool,
    #[comptime] pairs: bool,
) {
    let p = cube_first_pixel() + UNIT_POS_X;
    let active = p < pixels;
    let base = p * stride + first;
    let mut acc = Moments {
        n: 0.0f32,
        s1: 0.0f32,
        s2: 0.0f32,
        gc: 0.0f32,
        gs: 0.0f32,
    };
    // Decays come a tile at a time through shared memory, read coalesced, the next tile's
    // loads in flight while each unit sums its own row (see fetch_tile).
    let d = decays(pixels, stride, first, m, pairs);
    let mut tile = SharedMemory::<u32>::new(comptime!((CUBE_1D * TILE_ROW) as usize));
    let mut regs = Array::<u32>::new(comptime!(TILE as usize));
    let row = UNIT_POS_X * TILE_ROW;
    fetch_tile(words, &mut regs, d, 0, CUBE_1D, kind, pairs);
    let mut t0 = 0u32;
    while t0 < d.elements {
        store_tile(&mut tile, &regs, CUBE_1D);
        sync_cube();
        if t0 + TILE < d.elements {
            fetch_tile(words, &mut regs, d, t0 + TILE, CUBE_1D, kind, pairs);
        }
        if active {
            if t0 + TILE <= d.elements {
                #[unroll]
                for e in 0..TILE {
                    add_element(
                        &mut acc,
                        tile[(row + e) as usize],
                        t0 + e,
                        m,
                        tables,
                        kind,
                        pairs,
                    );
                }
            } else {
                for e in 0..d.elements - t0 {
                    add_element(
                        &mut acc,
                        tile[(row + e) as usize],
                        t0 + e,
                        m,
                        tables,
                        kind,
                        pairs,
                    );
                }
            }
        }
        sync_cube();
        t0 += TILE;
    }
    let (n, s1, s2, gc, gs) = (acc.n, acc.s1, acc.s2, acc.gc, acc.gs);
    if active {
        let mf = f32::cast_from(m);
        let s = Sums {
            s0: n - mf * offset,
            k: count(words, base, kind) - offset,
            s1: s1 - offset * sum_j,
            s2: s2 - offset * sum_j2,
        };
        let nan = f32::reinterpret(nan_bits);
        let mut tf = nan;
        let mut td = nan;
        let mut fd = nan;
        let mut avg = nan;
        let mut pm_tf = nan;
        let mut pm_fd = nan;
        let mut pm_avg = nan;
        let mut st = 1u32;
        if s.s0 >= threshold && s.s0 > 0.0f32 {
            st = 0u32;
            let mut sol = Array::<f32>::new(4usize);
            let mut found = false;
            if comptime!(donor_known) {
                let d = unit_moments(a_d, mf);
                let mean_d = d.s1 / d.s0;
                let l0 = s.s0 - s.k * d.s0;
                let target = (s.s1 - mean_d * s.s0) / l0;
                // Illinois regula falsi on ln a_F in (ln a_D, ln 60].
                let mut lo = f32::ln(a_d) + 1e-4f32;
                let mut hi = f32::new(4.094_345); // LN_A_MAX
                let mut flo = psi(lo, d, mean_d, target, mf);
                let mut fhi = psi(hi, d, mean_d, target, mf);
                if flo * fhi <= 0.0f32 {
                    let mut side = u32::new(0);
                    let mut x = 0.5f32 * (lo + hi);
                    let mut done = false;
                    for _ in 0..100u32 {
                        if !done {
                            x = (lo * fhi - hi * flo) / (fhi - flo);
                            if !(x > lo && x < hi) {
                                x = 0.5f32 * (lo + hi);
                            }
                            let fx = psi(x, d, mean_d, target, mf);
                            if fx == 0.0f32 || hi - lo <= TOL * (1.0f32 + f32::abs(x)) {
                                done = true;
                            } else if (fx > 0.0f32) == (fhi > 0.0f32) {
                                hi = x;
                                fhi = fx;
                                if side == 1u32 {
                                    flo *= 0.5f32;
                                }
                                side = 1u32;
                            } else {
                                lo = x;
                                flo = fx;
                                if side == 2u32 {
                                    fhi *= 0.5f32;
                                }
                                side = 2u32;
                            }
                        }
                    }
                    let f = unit_moments(f32::exp(x), mf);
                    sol[0] = x;
                    sol[1] = f32::ln(a_d);
                    sol[2] = l0 / (f.s0 - d.s0);
                    sol[3] = s.k - sol[2];
                    found = true;
                }
            } else {
                // The paper's closed form (integrals to infinity, trapezoid) first.
                let kk = s.k;
                let nn = s.s0 - 0.5f32 * s.k;
                let xx = s.s1;
                let yy = 0.5f32 * s.s2;
                let g = (kk * yy - nn * xx) / (kk * xx - nn * nn);
                let pp = (nn * g - xx) / kk;
                let disc = g * g - 4.0f32 * pp;
                if disc >= 0.0f32 && pp > 0.0f32 && g > 0.0f32 {
                    let root = f32::sqrt(disc);
                    let t1 = 0.5f32 * (g - root);
                    let t2 = 0.5f32 * (g + root);
                    if t1 > 0.0f32 {
                        found = bcmm_newton(s, -f32::ln(t1), -f32::ln(t2), mf, &mut sol);
                    }
                }
                let mono = cmm_rate(s.s1 / s.s0, mf);
                let ym = f32::ln(mono);
                // Spreads around the mono-exponential rate: e^{0.4 i}, i = 1..4.
                for i in 1..5u32 {
                    if !found && mono > 0.0f32 {
                        let k = 0.4f32 * f32::cast_from(i);
                        found = bcmm_newton(s, ym + k, ym - k, mf, &mut sol);
                    }
                }
            }
            if found {
                let af = f32::exp(sol[0]);
                let ad = f32::exp(sol[1]);
                fd = amplitude_fraction(sol[2], sol[3], af, ad, h, period);
                tf = h / af;
                td = h / ad;
                avg = fd * tf + (1.0f32 - fd) * td;
            }
            if comptime!(donor_known) {
                let g0 = (gc - offset * sum_cos) / s.s0;
                let s0 = (gs - offset * sum_sin) / s.s0;
                let u = cal_cos * g0 - cal_sin * s0;
                let v = cal_sin * g0 + cal_cos * s0;
                let tdk = h / a_d;
                let w = omega;
                let t = (1.0f32 - u - v * tdk * w) / (w * (v - u * tdk * w));
                // The paper's f_D via the projection on the segment (flim-core's form).
                let wd = w * tdk;
                let wf = w * t;
                let ud = 1.0f32 / (1.0f32 + wd * wd);
                let vd = wd * ud;
                let uf = 1.0f32 / (1.0f32 + wf * wf);
                let vf = wf * uf;
                let du = uf - ud;
                let dv = vf - vd;
                let light = ((u - ud) * du + (v - vd) * dv) / (du * du + dv * dv);
                let den = light * tdk + (1.0f32 - light) * t;
                let f = light * tdk / den;
                if t > 0.0f32 && t < tdk {
                    pm_tf = t;
                    pm_fd = f;
                    pm_avg = t * tdk / den;
                }
            }
        }
        out[p as usize] = s.s0;
        out[(pixels + p) as usize] = tf;
        out[(2 * pixels + p) as usize] = td;
        out[(3 * pixels + p) as usize] = fd;
        out[(4 * pixels + p) as usize] = avg;
        out[(5 * pixels + p) as usize] = pm_tf;
        out[(6 * pixels + p) as usize] = pm_fd;
        out[(7 * pixels + p) as usize] = pm_avg;
        status[p as usize] = st;
    }
}

/// Scalar settings of [`fret`] (units: ns, rad/ns, counts).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FretParams {
    /// Pixels in this launch.
    pub pixels: u32,
    /// Bins stored per pixel.
    pub stride: u32,
    /// First bin of the range.
    pub first: u32,
    /// Bins in the range.
    pub m: u32,
    /// Bin width (ns).
    pub h: f32,
    /// Phasor angular frequency (rad/ns).
    pub omega: f32,
    /// Background per bin.
    pub offset: f32,
    /// Photon threshold.
    pub threshold: f32,
    /// Phasor calibration: modulation x cos(phase), modulation x sin(phase).
    pub cal: (f32, f32),
    /// Sums of the cos and sin tables (for the offset).
    pub table_sums: (f32, f32),
    /// Known donor lifetime (ns), or `None` (BCMM2).
    pub tau_d: Option<f32>,
    /// Laser period (ns).
    pub period: f32,
    /// Count type (`KIND_*`).
    pub kind: u32,
}

/// Launch [`fret_kernel`]; `out` holds `FRET_PLANES * pixels` values.
pub fn fret<R: Runtime>(
    gpu: &Gpu<R>,
    words: &GpuArray<u32>,
    tables: &GpuArray<f32>,
    p: &FretParams,
    out: &GpuArray<f32>,
    status: &GpuArray<u32>,
) -> Result<()> {
    let name = "flim_fret";
    let pixels = p.pixels as usize;
    if p.m < 4 || p.first + p.m > p.stride || p.kind > KIND_F32 {
        return Err(invalid(
            name,
            format!(
                "bins {}..{} of {}, kind {}",
                p.first,
                p.first + p.m,
                p.stride,
                p.kind
            ),
        ));
    }
    if let Some(t) = p.tau_d
        && !(t.is_finite() && t > 0.0)
    {
        return Err(invalid(name, format!("donor lifetime {t} ns must be > 0")));
    }
    if !holds_decays(words, p.kind, pixels, p.stride)
        || tables.len() < 3 * p.m as usize
        || out.len() < FRET_PLANES * pixels
        || status.len() < pixels
    {
        return Err(invalid(
            name,
            format!("buffers too short for {pixels} pixels x {} bins", p.stride),
        ));
    }
    if pixels == 0 {
        return Ok(());
    }
    let pairs = u16_pairs(p.kind, p.stride, p.first, p.m);
    let mf = f64::from(p.m);
    let count = gpu.cube_count_1d(name, pixels, CUBE_1D)?;
    gpu.launch(name, count, |count| {
        // SAFETY: lengths checked above; unit p < pixels reads counts p * stride + first + j
        // (j < m), tables[j + i m] (i < 3), writes out[q * pixels + p] (q < 8), status[p].
        unsafe {
            fret_kernel::launch_unchecked::<R>(
                gpu.client(),
                count,
                CubeDim::new_1d(CUBE_1D),
                words.arg(),
                tables.arg(),
                out.arg(),
                status.arg(),
                p.pixels,
                p.stride,
                p.first,
                p.m,
                p.h,
                p.omega,
                p.offset,
                p.threshold,
                p.cal.0,
                p.cal.1,
                p.table_sums.0,
                p.table_sums.1,
                (0.5 * mf * (mf - 1.0)) as f32,
                ((mf - 1.0) * mf * (2.0 * mf - 1.0) / 6.0) as f32,
                p.tau_d.map_or(1.0, |t| p.h / t),
                p.period,
                0x7FC0_0000u32,
                p.kind,
                p.tau_d.is_some(),
                pairs,
            );
        };
    })
}

/// This module's kernels, configured as their launch wrappers configure them.
pub(crate) fn catalog<R: Runtime>(client: &ComputeClient<R>) -> Vec<CatalogEntry> {
    [
        ("fret_donor_known_u16_pairs", KIND_U16, true, true),
        ("fret_donor_unknown_u16_pairs", KIND_U16, false, true),
        ("fret_donor_known_f32", KIND_F32, true, false),
        ("fret_donor_unknown_f32", KIND_F32, false, false),
    ]
    .into_iter()
    .map(|(name, kind, known, pairs)| {
        let k = fret_kernel::FretKernel::<R>::new(
            settings_1d(CUBE_1D),
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
            kind,
            known,
            pairs,
        );
        entry("flim", name, k)
    })
    .collect()
}
