//! BCMM and the phasor method for FRET (flim-core's `fret`), one unit per pixel, in f32:
//! the sums `S0, K, S1, S2` and the phasor in one pass, then the window-exact BCMM solve
//! (BCMM1: bracketed Newton in ln a_F; BCMM2: Newton along the curve where the S1 equation
//! holds, one window-sum evaluation per loop pass; flim-core's `fret` line by line) and the
//! paper's PM. The solvers use CUDA's fast division, exponential and logarithm (see `FAST`).

use super::{
    KIND_F32, KIND_U16, TILE, TILE_ROW, count, cube_first_pixel, decays, fetch_tile, holds_decays,
    store_tile, tile_count, u16_pairs,
};
use crate::configured::{CatalogEntry, array, entry, settings_1d};
use cubecl::ir::features::EnumSet;
use cubecl::prelude::*;
use gpu_runtime::{Error, Gpu, GpuArray, Result};

/// Units per cube. Smaller than the other FLIM kernels' 256: a cube holds its multiprocessor
/// until its slowest warp ends, and BCMM2's warps end at very different times.
const FRET_CUBE: u32 = 128;

/// Output planes: intensity, BCMM tau_F, tau_D, f_D, tau_avg, PM tau_F, f_D, tau_avg.
pub const FRET_PLANES: usize = 8;

/// Largest `ln a`, `a = h / tau` (as flim-core); the smallest is `ln(0.1 / m)`.
const LN_A_MAX: f32 = 4.094_345;
/// Convergence of a Newton step in ln a, relative to `1 + |ln a|` (f32).
const TOL: f32 = 1e-6;
/// BCMM2 has converged where the relative S1 and S2 residuals are this small (f32 sums).
const RESIDUAL_FLOOR: f32 = 1e-6;
/// A BCMM2 solution must reproduce S1 and S2 to this relative residual (f32 sums).
const RESIDUAL: f32 = 1e-4;
/// Newton steps of BCMM1 at most (flim-core: 60 in f64).
const BCMM1_STEPS: u32 = 30;
/// BCMM2's budget of window-sum evaluations per pixel (flim-core's `BCMM2_EVALUATIONS`).
const BCMM2_EVALUATIONS: u32 = 64;
/// Steps out of the donor rate's domain BCMM2 takes back (flim-core's `BCMM2_EXITS`).
const BCMM2_EXITS: u32 = 4;
/// BCMM2's inner (S1) solve stops at this Newton step (flim-core's `BCMM2_INNER_TOL`).
const BCMM2_INNER_TOL: f32 = 1e-3;

/// The solvers' divisions, exponentials and logarithms as CUDA's fast intrinsics
/// (`__fdividef`: 2 ulp; `__expf`: 2 + 1.2 |x| ulp; `__logf`) instead of the IEEE
/// sequences: the BCMM solve is bound by its instruction count, and its acceptance
/// (relative residuals of 1e-4) is far above these errors. wgpu ignores the modes.
const FAST: EnumSet<FastMath> = FastMath::all();
/// IEEE operations, whatever the caller allows.
const EXACT: EnumSet<FastMath> = EnumSet::empty();

/// e^x - 1 for x <= 0 without cancellation near 0. Exact intrinsics even where the
/// caller allows fast ones: `e^x - 1` near 0.1 would magnify `__expf`'s error tenfold.
#[cube(fast_math = EXACT)]
fn expm1(x: f32) -> f32 {
    let mut r = f32::exp(x) - 1.0f32;
    if f32::abs(x) < 0.1f32 {
        r = x
            * (1.0f32
                + x * (0.5f32
                    + x * (f32::new(1.0 / 6.0)
                        + x * (f32::new(1.0 / 24.0)
                            + x * (f32::new(1.0 / 120.0) + x * f32::new(1.0 / 720.0))))));
    }
    r
}

/// `B(x) = 1/(e^x - 1) - 1/x`, `B'`, `B''` and `1 - e^{-x}` (flim-core's `fret::b_terms`;
/// series below 1 in f32, as the lifetimes kernel's `b_fn`, else one exponential).
#[derive(CubeType, Clone, Copy)]
struct BTerms {
    b: f32,
    d: f32,
    e: f32,
    q: f32,
}

#[cube(fast_math = FAST)]
#[allow(unused_assignments)] // CubeCL has no if-expressions: declared, then set per branch
fn b_terms(x: f32) -> BTerms {
    let mut b = 0.0f32;
    let mut d = 0.0f32;
    let mut e = 0.0f32;
    let mut q = 0.0f32;
    if x < 1.0f32 {
        let x2 = x * x;
        b = -0.5f32
            + x * (f32::new(1.0 / 12.0)
                - x2 * (f32::new(1.0 / 720.0)
                    - x2 * (f32::new(1.0 / 30240.0)
                        - x2 * (f32::new(1.0 / 1_209_600.0) - x2 * f32::new(1.0 / 47_900_160.0)))));
        d = f32::new(1.0 / 12.0)
            - x2 * (f32::new(1.0 / 240.0)
                - x2 * (f32::new(1.0 / 6048.0)
                    - x2 * (f32::new(1.0 / 172_800.0) - x2 * f32::new(1.0 / 5_322_240.0))));
        e = -x
            * (f32::new(1.0 / 120.0)
                - x2 * (f32::new(1.0 / 1512.0)
                    - x2 * (f32::new(1.0 / 28800.0)
                        - x2 * (f32::new(1.0 / 665_280.0) - x2 * f32::new(1.0 / 17_203_978.0)))));
        q = -expm1(-x);
    } else {
        let u = f32::exp(-x);
        q = 1.0f32 - u;
        let r = 1.0f32 / x;
        let iq = 1.0f32 / q;
        let w = u * iq;
        b = w - r;
        d = r * r - w * iq;
        e = w * (1.0f32 + u) * iq * iq - 2.0f32 * r * r * r;
    }
    BTerms { b, d, e, q }
}

/// Window sums `sum_{j<m} j^k e^{-a j}`, k = 0..3 (flim-core's `fret::unit_moments`).
#[derive(CubeType, Clone, Copy)]
struct Mom {
    s0: f32,
    s1: f32,
    s2: f32,
    s3: f32,
}

#[cube(fast_math = FAST)]
fn unit_moments(a: f32, m: f32) -> Mom {
    let ta = b_terms(a);
    let tm = b_terms(a * m);
    let k1 = ta.b - m * tm.b;
    let k2 = m * m * tm.d - ta.d;
    let k3 = ta.e - m * m * m * tm.e;
    let s0 = tm.q / ta.q;
    Mom {
        s0,
        s1: s0 * k1,
        s2: s0 * (k2 + k1 * k1),
        s3: s0 * (k3 + k1 * (3.0f32 * k2 + k1 * k1)),
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

/// The S1 equation for a donor with window sums `d` (flim-core's `fret::s1_equation`):
/// `rho(a_F) = (s1(a_F) - d1) / (s0(a_F) - d0) = target`, a root `a_F > a_D` iff `target`
/// lies strictly between `d2 / d1` (`a_F -> a_D`) and `d1 / (d0 - 1)` (`a_F -> inf`);
/// `near = d2 / d1 - target`.
#[derive(CubeType, Clone, Copy)]
struct S1Equation {
    target: f32,
    near: f32,
    solvable: bool,
}

#[cube]
fn s1_equation(s: Sums, d: Mom) -> S1Equation {
    let target = (s.s1 - s.k * d.s1) / (s.s0 - s.k * d.s0);
    let near = d.s2 / d.s1 - target;
    let far = d.s1 / (d.s0 - 1.0f32) - target;
    S1Equation {
        target,
        near,
        // False for NaN.
        solvable: near * far < 0.0f32,
    }
}

/// A bracket `[lo, hi]` in ln a_F.
#[derive(CubeType, Clone, Copy)]
struct Bracket {
    lo: f32,
    hi: f32,
}

/// The next point of a bracketed Newton step on the S1 equation and the Newton step's
/// length (flim-core's `fret::s1_step`); `a = e^y`, `f` the window sums at `a`.
#[derive(CubeType, Clone, Copy)]
struct Step {
    next: f32,
    len: f32,
}

#[cube(fast_math = FAST)]
fn s1_step(y: f32, a: f32, f: Mom, d: Mom, eq: S1Equation, br: &mut Bracket) -> Step {
    let iden = 1.0f32 / (f.s0 - d.s0);
    let h = (f.s1 - d.s1) * iden - eq.target;
    let slope = a * (f.s1 * (f.s1 - d.s1) * iden - f.s2) * iden;
    if (h > 0.0f32) == (eq.near > 0.0f32) {
        br.lo = y;
    } else {
        br.hi = y;
    }
    let step = -h / slope;
    let mut next = y + step;
    if !(next > br.lo && next < br.hi) {
        next = 0.5f32 * (br.lo + br.hi);
    }
    let mut len = f32::abs(step);
    if h == 0.0f32 {
        len = 0.0f32;
    }
    Step { next, len }
}

/// Relative residuals of the S1 and S2 equations at rates `(af, ad)` (amplitudes from K and S0),
/// their analytic Jacobian in the log-rates, and the amplitudes (flim-core's
/// `fret::bcmm2_point`).
#[derive(CubeType, Clone, Copy)]
struct Point {
    r1: f32,
    r2: f32,
    j00: f32,
    j01: f32,
    j10: f32,
    j11: f32,
    alpha: f32,
    beta: f32,
}

#[cube(fast_math = FAST)]
fn bcmm2_point(s: Sums, af: f32, ad: f32, f: Mom, d: Mom) -> Point {
    let den = f.s0 - d.s0;
    let alpha = (s.s0 - s.k * d.s0) / den;
    let beta = s.k - alpha;
    let alpha_f = alpha * af * f.s1 / den;
    let alpha_d = beta * ad * d.s1 / den;
    let u1 = 1.0f32 / s.s1;
    let u2 = 1.0f32 / s.s2;
    Point {
        r1: (alpha * f.s1 + beta * d.s1 - s.s1) * u1,
        r2: (alpha * f.s2 + beta * d.s2 - s.s2) * u2,
        j00: (alpha_f * (f.s1 - d.s1) - alpha * af * f.s2) * u1,
        j01: (alpha_d * (f.s1 - d.s1) - beta * ad * d.s2) * u1,
        j10: (alpha_f * (f.s2 - d.s2) - alpha * af * f.s3) * u2,
        j11: (alpha_d * (f.s2 - d.s2) - beta * ad * d.s3) * u2,
        alpha,
        beta,
    }
}

/// BCMM1 (flim-core's `fret::bcmm_known`): `(ln a_F, ln a_D, alpha, beta)` into `sol`;
/// whether a solution was found.
#[cube(fast_math = FAST)]
fn bcmm_known(s: Sums, a_d: f32, m: f32, sol: &mut Array<f32>) -> bool {
    let d = unit_moments(a_d, m);
    let eq = s1_equation(s, d);
    let mut found = false;
    if eq.solvable {
        let mut br = Bracket {
            lo: f32::ln(a_d),
            hi: LN_A_MAX,
        };
        // The paper's tau_F = (tau_D N - X) / (tau_D K - N) (bins; N by the trapezoid).
        let n = s.s0 - 0.5f32 * s.k;
        let mut y = f32::ln((s.k / a_d - n) / (n / a_d - s.s1));
        if !(y > br.lo && y < br.hi) {
            y = 0.5f32 * (br.lo + br.hi);
        }
        let mut f0 = 0.0f32;
        let mut steps = 0u32;
        let mut running = true;
        while running {
            let a = f32::exp(y);
            let f = unit_moments(a, m);
            let st = s1_step(y, a, f, d, eq, &mut br);
            steps += 1u32;
            let tol = TOL * (1.0f32 + f32::abs(y));
            if st.len <= tol || br.hi - br.lo <= tol || steps >= BCMM1_STEPS {
                f0 = f.s0;
                running = false;
            } else {
                y = st.next;
            }
        }
        if y < LN_A_MAX - 1e-5f32 {
            let alpha = (s.s0 - s.k * d.s0) / (f0 - d.s0);
            sol[0] = y;
            sol[1] = f32::ln(a_d);
            sol[2] = alpha;
            sol[3] = s.k - alpha;
            found = true;
        }
    }
    found
}

/// BCMM2 (flim-core's `fret::bcmm_unknown`, line by line in f32) from the start
/// `(x0, y0) = (ln a_D, ln a_F)`: Newton on the S2 residual along the curve where the S1
/// equation holds, one window-sum evaluation per loop pass (at the donor rate x or an inner
/// step at y), so that the units of a warp do the same work each pass. Writes
/// `(ln a_F, ln a_D, alpha, beta)` into `sol`; whether they solve the equations. Unlike
/// flim-core (f64, steps to 1e-10), a point whose residuals are below [`RESIDUAL`] is kept
/// when f32 rounding stops the steps from shrinking within the budget.
#[cube(fast_math = FAST)]
#[allow(clippy::too_many_lines)]
fn bcmm_unknown(s: Sums, x0: f32, y0: f32, m: f32, sol: &mut Array<f32>) -> bool {
    let xmin = f32::ln(0.1f32 / m);
    let mut x = f32::clamp(x0, xmin, LN_A_MAX - 1.0f32);
    let mut y = y0;
    let mut d = Mom {
        s0: 0.0f32,
        s1: 0.0f32,
        s2: 0.0f32,
        s3: 0.0f32,
    };
    let mut eq = S1Equation {
        target: 0.0f32,
        near: 0.0f32,
        solvable: false,
    };
    let mut br = Bracket {
        lo: 0.0f32,
        hi: 0.0f32,
    };
    let mut at_x = true;
    let mut a_x = 0.0f32;
    let mut has_good = false;
    let mut good = 0.0f32;
    let mut slope = 0.0f32;
    let mut correction = 0.0f32;
    let mut exits = 0u32;
    let mut has_out = false;
    let mut outside = 0.0f32;
    let mut bracket = false;
    let mut ra = 0.0f32;
    let mut ga = 0.0f32;
    let mut rb = 0.0f32;
    let mut has_prev = false;
    let mut px = 0.0f32;
    let mut pg = 0.0f32;
    let mut pstep = 0.0f32;
    // The last point of the curve's residual norm (sol holds the point).
    let mut last_norm = f32::new(1.0e30);
    let mut evals = 0u32;
    let mut running = true;
    while running {
        // The rate evaluated, kept for the steps below (the donor's for the next points).
        let a = f32::exp(select(at_x, x, y));
        let mo = unit_moments(a, m);
        evals += 1u32;
        if at_x {
            a_x = a;
            d.s0 = mo.s0;
            d.s1 = mo.s1;
            d.s2 = mo.s2;
            d.s3 = mo.s3;
            let e = s1_equation(s, d);
            if e.solvable {
                eq.target = e.target;
                eq.near = e.near;
                br.lo = x;
                br.hi = LN_A_MAX;
                if has_good {
                    y += slope * (x - good) + correction;
                }
                if !(y > br.lo && y < br.hi) {
                    y = f32::min(x + 1.0f32, 0.5f32 * (x + LN_A_MAX));
                }
                at_x = false;
            } else if !has_good {
                // The start lies outside the domain: try the smallest rate once.
                if x <= xmin {
                    running = false;
                } else {
                    x = xmin;
                }
            } else {
                exits += 1u32;
                if exits > BCMM2_EXITS {
                    // The curve ends short of a root.
                    last_norm = f32::new(1.0e30);
                    running = false;
                } else {
                    if bracket && (x - ra) * (x - rb) < 0.0f32 {
                        bracket = false;
                        has_prev = false;
                    }
                    has_out = true;
                    outside = x;
                    x = 0.5f32 * (x + good);
                }
            }
        } else {
            let st = s1_step(y, a, mo, d, eq, &mut br);
            let tol = BCMM2_INNER_TOL * (1.0f32 + f32::abs(y));
            if !(st.len <= tol || br.hi - br.lo <= tol) {
                y = st.next;
            } else {
                let p = bcmm2_point(s, a, a_x, mo, d);
                let det = p.j00 * p.j11 - p.j01 * p.j10;
                let g = p.r2 - p.j10 / p.j00 * p.r1;
                let dx = -g * p.j00 / det;
                let dy = -(p.j11 * p.r1 - p.j01 * p.r2) / det;
                let norm = f32::sqrt(p.r1 * p.r1 + p.r2 * p.r2);
                sol[0] = y;
                sol[1] = x;
                sol[2] = p.alpha;
                sol[3] = p.beta;
                last_norm = norm;
                // False for NaN and infinities.
                if !(f32::abs(dx) < 1.0e30f32 && f32::abs(dy) < 1.0e30f32) {
                    last_norm = f32::new(1.0e30);
                    running = false;
                } else if norm <= RESIDUAL_FLOOR
                    || (f32::abs(dx) <= TOL * (1.0f32 + f32::abs(x))
                        && f32::abs(dy) <= TOL * (1.0f32 + f32::abs(y)))
                {
                    running = false;
                } else {
                    has_good = true;
                    good = x;
                    slope = -p.j01 / p.j00;
                    correction = -p.r1 / p.j00;
                    let mut next = x + f32::clamp(dx, -1.0f32, 1.0f32);
                    if bracket || (has_prev && (g > 0.0f32) != (pg > 0.0f32)) {
                        if !bracket {
                            bracket = true;
                            ra = px;
                            ga = pg;
                            rb = x;
                        } else if (g > 0.0f32) == (ga > 0.0f32) {
                            ra = x;
                            ga = g;
                        } else {
                            rb = x;
                        }
                        // Bisect where Newton leaves the bracket, unless its step is below
                        // the tolerance: x + dx can round onto the end x itself, and
                        // bisecting there would throw away a converged donor rate.
                        if !(next > f32::min(ra, rb) && next < f32::max(ra, rb))
                            && f32::abs(dx) > TOL * (1.0f32 + f32::abs(x))
                        {
                            next = 0.5f32 * (ra + rb);
                        }
                    } else if (has_prev && (next - x) * pstep < 0.0f32)
                        || (x <= xmin && next <= xmin)
                    {
                        // Turned back with no sign change, or the root lies below the
                        // smallest rate: no solution.
                        last_norm = f32::new(1.0e30);
                        running = false;
                    } else {
                        next = f32::max(next, xmin);
                    }
                    if has_out && (next - outside) * (x - outside) <= 0.0f32 {
                        next = 0.5f32 * (x + outside);
                    }
                    has_prev = true;
                    px = x;
                    pg = g;
                    pstep = next - x;
                    x = next;
                    at_x = true;
                }
            }
        }
        if evals >= BCMM2_EVALUATIONS {
            running = false;
        }
    }
    // A solution on the search bound is the bound, not a solution. Converged or with the
    // budget spent, the last point of the curve counts if its residuals pass.
    last_norm < RESIDUAL && sol[1] > xmin + 1e-5f32
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
    let mut tile = SharedMemory::<u32>::new(comptime!((FRET_CUBE * TILE_ROW) as usize));
    let mut regs = Array::<u32>::new(comptime!(TILE as usize));
    let row = UNIT_POS_X * TILE_ROW;
    fetch_tile(words, &mut regs, d, 0, FRET_CUBE, kind, pairs);
    let mut t0 = 0u32;
    while t0 < d.elements {
        store_tile(&mut tile, &regs, FRET_CUBE);
        sync_cube();
        if t0 + TILE < d.elements {
            fetch_tile(words, &mut regs, d, t0 + TILE, FRET_CUBE, kind, pairs);
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
                found = bcmm_known(s, a_d, mf, &mut sol);
            } else {
                // The paper's closed form (integrals to infinity, trapezoid) as the start,
                // else the mono-exponential rate of the mean bin, untruncated, spread by
                // e^{+-0.4}.
                let kk = s.k;
                let nn = s.s0 - 0.5f32 * s.k;
                let xx = s.s1;
                let yy = 0.5f32 * s.s2;
                let g = (kk * yy - nn * xx) / (kk * xx - nn * nn);
                let pp = (nn * g - xx) / kk;
                let disc = g * g - 4.0f32 * pp;
                let mut start = false;
                let mut x0 = 0.0f32;
                let mut y0 = 0.0f32;
                if disc >= 0.0f32 && pp > 0.0f32 && g > 0.0f32 {
                    let root = f32::sqrt(disc);
                    let t1 = 0.5f32 * (g - root);
                    let t2 = 0.5f32 * (g + root);
                    if t1 > 0.0f32 {
                        x0 = -f32::ln(t2);
                        y0 = -f32::ln(t1);
                        start = true;
                    }
                }
                let mean = s.s1 / s.s0;
                if !start && mean > 0.0f32 && mean < 0.5f32 * (mf - 1.0f32) {
                    let ym = f32::ln(f32::ln(1.0f32 + 1.0f32 / mean));
                    x0 = ym - 0.4f32;
                    y0 = ym + 0.4f32;
                    start = true;
                }
                if start {
                    found = bcmm_unknown(s, x0, y0, mf, &mut sol);
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

/// Launch [`fret_kernel()`]; `out` holds `FRET_PLANES * pixels` values.
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
        return Err(Error::invalid_launch(
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
        return Err(Error::invalid_launch(
            name,
            format!("donor lifetime {t} ns must be > 0"),
        ));
    }
    if !holds_decays(words, p.kind, pixels, p.stride)
        || tables.len() < 3 * p.m as usize
        || out.len() < FRET_PLANES * pixels
        || status.len() < pixels
    {
        return Err(Error::invalid_launch(
            name,
            format!("buffers too short for {pixels} pixels x {} bins", p.stride),
        ));
    }
    if pixels == 0 {
        return Ok(());
    }
    let pairs = u16_pairs(p.kind, p.stride, p.first, p.m);
    let mf = f64::from(p.m);
    let count = gpu.cube_count_1d(name, pixels, FRET_CUBE)?;
    gpu.launch(name, count, |count| {
        // SAFETY: lengths checked above; unit p < pixels reads counts p * stride + first + j
        // (j < m), tables[j + i m] (i < 3), writes out[q * pixels + p] (q < 8), status[p].
        unsafe {
            fret_kernel::launch_unchecked::<R>(
                gpu.client(),
                count,
                CubeDim::new_1d(FRET_CUBE),
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

/// [`fret_kernel`] configured as [`fret`] configures it (count type `kind`, donor lifetime
/// `known` or not, u16 counts read two per word when `pairs`); the catalog's entries.
pub(crate) fn configured<R: Runtime>(
    client: &ComputeClient<R>,
    kind: u32,
    known: bool,
    pairs: bool,
) -> fret_kernel::FretKernel<R> {
    fret_kernel::FretKernel::<R>::new(
        settings_1d(FRET_CUBE),
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
    )
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
        let k = configured(client, kind, known, pairs);
        entry("flim", name, k)
    })
    .collect()
}
