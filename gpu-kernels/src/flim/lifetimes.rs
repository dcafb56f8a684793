//! The non-iterative lifetime methods of flim-core's `methods` (RLD, IEM, window-corrected
//! CMM, phasor), one unit per pixel, one pass over its decay, in f32.
//!
//! Sums run over the raw counts (exact in f32 for integer counts below 2^24) and the
//! background offset is removed from each sum once, with the table sums, as the CPU does.
//! Only the planes of the selected methods are written, packed in the order intensity,
//! RLD, IEM, CMM, g, s, phase, modulation ([`plane_of`]).

use super::{
    KIND_F32, TILE, TILE_ROW, count, cube_first_pixel, decays, fetch_tile, holds_decays,
    store_tile, tile_count, u16_pairs,
};
use crate::CUBE_1D;
use crate::configured::{CatalogEntry, array, entry, settings_1d};
use cubecl::prelude::*;
use gpu_runtime::{Error, Gpu, GpuArray, Result};

/// Method bits (flim-core's `Methods`).
pub const RLD: u32 = 1;
pub const IEM: u32 = 2;
pub const CMM: u32 = 4;
pub const PHASOR: u32 = 8;
pub const ALL: u32 = 15;

/// Output plane indices of the full set: intensity, RLD, IEM, CMM, g, s, phase, modulation.
pub const PLANE_INTENSITY: u32 = 0;
pub const PLANE_RLD: u32 = 1;
pub const PLANE_IEM: u32 = 2;
pub const PLANE_CMM: u32 = 3;
pub const PLANE_G: u32 = 4;
pub const PLANE_S: u32 = 5;
pub const PLANE_PHASE: u32 = 6;
pub const PLANE_MOD: u32 = 7;

/// The method each full-set plane belongs to (0: always written).
const PLANE_METHOD: [u32; 8] = [0, RLD, IEM, CMM, PHASOR, PHASOR, PHASOR, PHASOR];

/// Where full-set plane `plane` lands in the packed output of `methods`, or `None` when
/// not written.
pub const fn plane_of(methods: u32, plane: u32) -> Option<u32> {
    let mine = PLANE_METHOD[plane as usize];
    if mine != 0 && methods & mine == 0 {
        return None;
    }
    let mut q = 0;
    let mut i = 0;
    while i < plane as usize {
        let mi = PLANE_METHOD[i];
        if mi == 0 || methods & mi != 0 {
            q += 1;
        }
        i += 1;
    }
    Some(q)
}

/// Planes written for `methods`.
pub const fn planes(methods: u32) -> usize {
    let mut n = 0;
    let mut i = 0;
    while i < 8 {
        let mi = PLANE_METHOD[i];
        if mi == 0 || methods & mi != 0 {
            n += 1;
        }
        i += 1;
    }
    n
}

/// Packed plane index for the kernel (`u32::MAX` when not written).
const fn slot(methods: u32, plane: u32) -> u32 {
    match plane_of(methods, plane) {
        Some(q) => q,
        None => u32::MAX,
    }
}

/// `B(x) = 1/(e^x - 1) - 1/x` for `x >= 0` without cancellation: Bernoulli series below 1
/// (terms to x^9; the next is below 6e-10), `u/(1 - u) - 1/x` with `u = e^-x` above.
#[cube]
#[allow(unused_assignments)] // CubeCL has no if-expressions: declared, then set per branch
pub(crate) fn b_fn(x: f32) -> f32 {
    let mut r = 0.0f32;
    if x < 1.0f32 {
        let x2 = x * x;
        r = -0.5f32
            + x * (f32::new(1.0 / 12.0)
                - x2 * (f32::new(1.0 / 720.0)
                    - x2 * (f32::new(1.0 / 30240.0)
                        - x2 * (f32::new(1.0 / 1_209_600.0) - x2 * f32::new(1.0 / 47_900_160.0)))));
    } else {
        let u = f32::exp(-x);
        r = u / (1.0f32 - u) - 1.0f32 / x;
    }
    r
}

/// `B'(x)`: series below 1, `1/x^2 - u/(1 - u)^2` above.
#[cube]
#[allow(unused_assignments)]
pub(crate) fn b_deriv(x: f32) -> f32 {
    let mut r = 0.0f32;
    if x < 1.0f32 {
        let x2 = x * x;
        r = f32::new(1.0 / 12.0)
            - x2 * (f32::new(1.0 / 240.0)
                - x2 * (f32::new(1.0 / 6048.0)
                    - x2 * (f32::new(1.0 / 172_800.0) - x2 * f32::new(1.0 / 5_322_240.0))));
    } else {
        let u = f32::exp(-x);
        let d = 1.0f32 - u;
        r = 1.0f32 / (x * x) - u / (d * d);
    }
    r
}

/// Convergence of `cmm_rate` on ln a (f32 cannot resolve much finer steps).
pub const CMM_TOLERANCE: f32 = 1e-6;

/// `a = h / tau` whose window-cut mean bin index `B(a) - m B(am)` is `mu` (flim-core's
/// `methods::cmm_rate` in f32): Newton on ln a inside a shrinking bracket [1e-6, 60],
/// bisection where Newton leaves it. `0 < mu < (m - 1) / 2` is checked by the caller.
#[cube]
pub(crate) fn cmm_rate(mu: f32, m: f32) -> f32 {
    let mut lo = f32::new(-13.815_511); // ln 1e-6
    let mut hi = f32::new(4.094_345); // ln 60
    let mut y = f32::clamp(f32::ln(f32::ln(1.0f32 + 1.0f32 / mu)), lo, hi);
    let mut done = false;
    for _ in 0..60u32 {
        if !done {
            let a = f32::exp(y);
            let r = b_fn(a) - m * b_fn(a * m) - mu;
            if r == 0.0f32 {
                done = true;
            } else {
                if r > 0.0f32 {
                    lo = y;
                } else {
                    hi = y;
                }
                let slope = a * (b_deriv(a) - m * m * b_deriv(a * m));
                let newton = y - r / slope;
                let mut next = 0.5f32 * (lo + hi);
                // False for NaN or infinite Newton steps.
                if newton > lo && newton < hi {
                    next = newton;
                }
                let step = f32::abs(next - y);
                y = next;
                if step <= CMM_TOLERANCE * f32::max(f32::abs(y), 1.0f32) || hi - lo <= CMM_TOLERANCE
                {
                    done = true;
                }
            }
        }
    }
    f32::exp(y)
}

/// Running sums of one decay over raw counts.
#[derive(CubeType, Clone, Copy)]
struct Acc {
    n: f32,
    m1: f32,
    simp: f32,
    d0: f32,
    gc: f32,
    gs: f32,
}

/// Add count `c` of bin `j` (of `m`, RLD gate `k`) to the sums the selected methods need.
#[cube]
fn add(
    acc: &mut Acc,
    c: f32,
    j: u32,
    k: u32,
    m: u32,
    tables: &Array<f32>,
    #[comptime] methods: u32,
) {
    acc.n += c;
    if comptime!(methods & RLD != 0) {
        if j < k {
            acc.d0 += c;
        }
    }
    if comptime!(methods & CMM != 0) {
        acc.m1 += f32::cast_from(j) * c;
    }
    if comptime!(methods & IEM != 0) {
        acc.simp += tables[j as usize] * c;
    }
    if comptime!(methods & PHASOR != 0) {
        acc.gc += tables[(m + j) as usize] * c;
        acc.gs += tables[(2 * m + j) as usize] * c;
    }
}

/// Add tile element `v` (element `e` of the fit range: two counts, bins 2e and 2e + 1,
/// with `pairs`; else one count, bin e).
#[cube]
fn add_element(
    acc: &mut Acc,
    v: u32,
    e: u32,
    k: u32,
    m: u32,
    tables: &Array<f32>,
    #[comptime] kind: u32,
    #[comptime] methods: u32,
    #[comptime] pairs: bool,
) {
    if comptime!(pairs) {
        add(
            acc,
            f32::cast_from(v & 0xFFFFu32),
            2 * e,
            k,
            m,
            tables,
            methods,
        );
        add(
            acc,
            f32::cast_from(v >> 16u32),
            2 * e + 1,
            k,
            m,
            tables,
            methods,
        );
    } else {
        add(acc, tile_count(v, kind), e, k, m, tables, methods);
    }
}

/// One pixel per unit: the selected planes into `out[q * pixels + p]` (packed, see
/// [`plane_of`]) and the status into `status[p]` (0 analysed, 1 masked). `tables` holds
/// Simpson weights, cos and sin of omega t_j (`m` values each); `sums` their sums and
/// `m (m - 1) / 2`, for the offset. With `pairs` (u16 counts, even `stride`, `first` and
/// `m`) each word is read once for its two bins.
#[cube(launch_unchecked)]
pub fn lifetimes_kernel(
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
    sum_simpson: f32,
    sum_cos: f32,
    sum_sin: f32,
    sum_index: f32,
    nan_bits: u32,
    #[comptime] kind: u32,
    #[comptime] methods: u32,
    #[comptime] pairs: bool,
) {
    let p = cube_first_pixel() + UNIT_POS_X;
    let active = p < pixels;
    let k = m / 2;
    let base = p * stride + first;
    let mut acc = Acc {
        n: 0.0f32,
        m1: 0.0f32,
        simp: 0.0f32,
        d0: 0.0f32,
        gc: 0.0f32,
        gs: 0.0f32,
    };
    // The cube reads its decays a tile at a time into shared memory, coalesced (see
    // fetch_tile), the next tile's loads in flight while each unit sums its own row.
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
                    let v = tile[(row + e) as usize];
                    add_element(&mut acc, v, t0 + e, k, m, tables, kind, methods, pairs);
                }
            } else {
                for e in 0..d.elements - t0 {
                    let v = tile[(row + e) as usize];
                    add_element(&mut acc, v, t0 + e, k, m, tables, kind, methods, pairs);
                }
            }
        }
        sync_cube();
        t0 += TILE;
    }
    if active {
        let mf = f32::cast_from(m);
        let n = acc.n - mf * offset;
        let nan = f32::reinterpret(nan_bits);
        let mut rld = nan;
        let mut iem = nan;
        let mut cmm = nan;
        let mut g = nan;
        let mut s = nan;
        let mut tau_phase = nan;
        let mut tau_mod = nan;
        let mut st = 1u32;
        if n >= threshold && n > 0.0f32 {
            st = 0u32;
            if comptime!(methods & RLD != 0) {
                // The gates hold bins 0..k and k..2k; an odd m leaves out the last bin.
                let kf = f32::cast_from(k);
                let mut tail = 0.0f32;
                if m > 2 * k {
                    tail = count(words, base + m - 1, kind);
                }
                let d0 = acc.d0 - kf * offset;
                let d1 = (acc.n - acc.d0 - tail) - kf * offset;
                if d1 > 0.0f32 && d0 > d1 {
                    rld = kf * h / f32::ln(d0 / d1);
                }
            }
            if comptime!(methods & IEM != 0) {
                let first_v = count(words, base, kind) - offset;
                let last_v = count(words, base + m - 1, kind) - offset;
                if first_v > last_v {
                    iem = h * (acc.simp - offset * sum_simpson) / (first_v - last_v);
                }
            }
            if comptime!(methods & CMM != 0) {
                let mu = (acc.m1 - offset * sum_index) / n;
                if mu > 0.0f32 {
                    if mu >= 0.5f32 * (mf - 1.0f32) {
                        cmm = f32::reinterpret(nan_bits & 0x7F80_0000u32); // +inf: flat decay
                    } else {
                        cmm = h / cmm_rate(mu, mf);
                    }
                }
            }
            if comptime!(methods & PHASOR != 0) {
                let g0 = (acc.gc - offset * sum_cos) / n;
                let s0 = (acc.gs - offset * sum_sin) / n;
                g = cal_cos * g0 - cal_sin * s0;
                s = cal_sin * g0 + cal_cos * s0;
                tau_phase = s / (omega * g);
                tau_mod = f32::sqrt(1.0f32 / (g * g + s * s) - 1.0f32) / omega;
            }
        }
        out[p as usize] = n;
        if comptime!(methods & RLD != 0) {
            out[(comptime!(slot(methods, PLANE_RLD)) * pixels + p) as usize] = rld;
        }
        if comptime!(methods & IEM != 0) {
            out[(comptime!(slot(methods, PLANE_IEM)) * pixels + p) as usize] = iem;
        }
        if comptime!(methods & CMM != 0) {
            out[(comptime!(slot(methods, PLANE_CMM)) * pixels + p) as usize] = cmm;
        }
        if comptime!(methods & PHASOR != 0) {
            out[(comptime!(slot(methods, PLANE_G)) * pixels + p) as usize] = g;
            out[(comptime!(slot(methods, PLANE_S)) * pixels + p) as usize] = s;
            out[(comptime!(slot(methods, PLANE_PHASE)) * pixels + p) as usize] = tau_phase;
            out[(comptime!(slot(methods, PLANE_MOD)) * pixels + p) as usize] = tau_mod;
        }
        status[p as usize] = st;
    }
}

/// Scalar settings of [`lifetimes`] (units: ns, rad/ns, counts).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LifetimeParams {
    /// Pixels in this launch.
    pub pixels: u32,
    /// Bins stored per pixel.
    pub stride: u32,
    /// First bin of the fit range.
    pub first: u32,
    /// Bins in the fit range.
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
    /// Sums of the Simpson, cos and sin tables (for the offset).
    pub table_sums: (f32, f32, f32),
    /// [`KIND_U16`](super::KIND_U16), [`KIND_U32`](super::KIND_U32) or [`KIND_F32`].
    pub kind: u32,
    /// Method bits ([`RLD`] | [`IEM`] | [`CMM`] | [`PHASOR`]).
    pub methods: u32,
}

/// Launch [`lifetimes_kernel()`]; checks every length first. `out` holds
/// `planes(p.methods) * pixels` values.
pub fn lifetimes<R: Runtime>(
    gpu: &Gpu<R>,
    words: &GpuArray<u32>,
    tables: &GpuArray<f32>,
    p: &LifetimeParams,
    out: &GpuArray<f32>,
    status: &GpuArray<u32>,
) -> Result<()> {
    let name = "flim_lifetimes";
    let pixels = p.pixels as usize;
    if p.m < 4 || p.first + p.m > p.stride || p.kind > KIND_F32 || p.methods & !ALL != 0 {
        return Err(Error::invalid_launch(
            name,
            format!(
                "bins {}..{} of {}, kind {}, methods {:#x}",
                p.first,
                p.first + p.m,
                p.stride,
                p.kind,
                p.methods
            ),
        ));
    }
    if !holds_decays(words, p.kind, pixels, p.stride)
        || tables.len() < 3 * p.m as usize
        || out.len() < planes(p.methods) * pixels
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
    let (m, mf) = (p.m, f64::from(p.m));
    let count = gpu.cube_count_1d(name, pixels, CUBE_1D)?;
    gpu.launch(name, count, |count| {
        // SAFETY: lengths checked above; unit p < pixels reads counts p * stride + first + j
        // (j < m, first + m <= stride), tables[j + i m] (i < 3), and writes
        // out[q * pixels + p] (q < planes(methods)) and status[p].
        unsafe {
            lifetimes_kernel::launch_unchecked::<R>(
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
                m,
                p.h,
                p.omega,
                p.offset,
                p.threshold,
                p.cal.0,
                p.cal.1,
                p.table_sums.0,
                p.table_sums.1,
                p.table_sums.2,
                (0.5 * mf * (mf - 1.0)) as f32,
                0x7FC0_0000u32,
                p.kind,
                p.methods,
                pairs,
            );
        };
    })
}

/// [`lifetimes_kernel`] configured as [`lifetimes`] configures it (count type `kind`, method
/// bits `methods`, u16 counts read two per word when `pairs`); the catalog's entries.
pub(crate) fn configured<R: Runtime>(
    client: &ComputeClient<R>,
    kind: u32,
    methods: u32,
    pairs: bool,
) -> lifetimes_kernel::LifetimesKernel<R> {
    lifetimes_kernel::LifetimesKernel::<R>::new(
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
        kind,
        methods,
        pairs,
    )
}

/// This module's kernels, configured as their launch wrappers configure them.
pub(crate) fn catalog<R: Runtime>(client: &ComputeClient<R>) -> Vec<CatalogEntry> {
    use super::{KIND_U16 as U16, KIND_U32 as U32};
    [
        ("lifetimes_u16_pairs", U16, ALL, true),
        ("lifetimes_u16", U16, ALL, false),
        ("lifetimes_u32", U32, ALL, false),
        ("lifetimes_f32", KIND_F32, ALL, false),
        ("rld_u16_pairs", U16, RLD, true),
        ("iem_u16_pairs", U16, IEM, true),
        ("cmm_u16_pairs", U16, CMM, true),
        ("phasor_u16_pairs", U16, PHASOR, true),
    ]
    .into_iter()
    .map(|(name, kind, methods, pairs)| {
        let k = configured(client, kind, methods, pairs);
        entry("flim", name, k)
    })
    .collect()
}
