//! FLIM kernels: every non-iterative lifetime method of a pixel in one pass over its decay,
//! one unit per pixel, f32 (see flim-core's `methods` for the formulas and the f64 CPU
//! reference).
//!
//! Decays are read in the instrument's layout (pixel after pixel, bins contiguous), as
//! 32-bit words (two u16 counts, one u32 or one f32 per word): the paper transposes to
//! bin-major order for coalescing, but a host transpose of a 134 MB cube costs more than
//! the whole kernel, and on current GPUs the L1 cache serves a thread's consecutive words.

use crate::CUBE_1D;
use crate::catalog::{CatalogEntry, array, entry, settings_1d};
use cubecl::prelude::*;
use gpu_runtime::{Error, Gpu, GpuArray, Result};

/// Counts stored as u16, two per word (little-endian).
pub const KIND_U16: u32 = 0;
/// Counts stored as u32.
pub const KIND_U32: u32 = 1;
/// Counts stored as f32.
pub const KIND_F32: u32 = 2;
/// Output planes: intensity, tau RLD, tau IEM, tau CMM, g, s, tau phase, tau modulation.
pub const PLANES: usize = 8;

/// Count `e` of the cube.
#[cube]
fn count(words: &Array<u32>, e: u32, #[comptime] kind: u32) -> f32 {
    if comptime!(kind == KIND_U16) {
        let w = words[(e >> 1) as usize];
        f32::cast_from((w >> ((e & 1) * 16)) & 0xFFFFu32)
    } else if comptime!(kind == KIND_U32) {
        f32::cast_from(words[e as usize])
    } else {
        f32::reinterpret(words[e as usize])
    }
}

/// e^x - 1 without cancellation for small x.
#[cube]
fn expm1(x: f32) -> f32 {
    let mut r = f32::exp(x) - 1.0f32;
    if f32::abs(x) < 1e-2f32 {
        r = x * (1.0f32 + x * (0.5f32 + x * (1.0f32 / 6.0f32 + x / 24.0f32)));
    }
    r
}

/// Mean bin index of a bin-integrated exponential with `a = h / tau`, cut at `m` bins.
#[cube]
fn mean_bin(a: f32, m: f32) -> f32 {
    1.0f32 / expm1(a) - m / expm1(a * m)
}

/// One pixel per unit: the eight values of flim-core's `LifetimeMaps` into
/// `out[q * pixels + p]`, and the status into `status[p]` (0 analysed, 1 masked).
/// `tables` holds Simpson weights, cos and sin of omega t_j, `m` values each.
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
    nan_bits: u32,
    #[comptime] kind: u32,
) {
    let p = ABSOLUTE_POS_X + ABSOLUTE_POS_Y * CUBE_COUNT_X * CUBE_DIM_X;
    if p < pixels {
        let k = m / 2;
        let base = p * stride + first;
        let mut n = 0.0f32;
        let mut m1 = 0.0f32;
        let mut simp = 0.0f32;
        let mut d0 = 0.0f32;
        let mut d1 = 0.0f32;
        let mut gc = 0.0f32;
        let mut gs = 0.0f32;
        let mut first_v = 0.0f32;
        let mut last_v = 0.0f32;
        for j in 0..m {
            let v = count(words, base + j, kind) - offset;
            n += v;
            m1 += f32::cast_from(j) * v;
            simp += tables[j as usize] * v;
            if j < k {
                d0 += v;
            } else if j < 2 * k {
                d1 += v;
            }
            gc += tables[(m + j) as usize] * v;
            gs += tables[(2 * m + j) as usize] * v;
            if j == 0 {
                first_v = v;
            }
            last_v = v;
        }
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
            if d1 > 0.0f32 && d0 > d1 {
                rld = f32::cast_from(k) * h / f32::ln(d0 / d1);
            }
            if first_v > last_v {
                iem = h * simp / (first_v - last_v);
            }
            // CMM: bisection on ln a for the window-cut mean bin index (as the CPU).
            let mu = m1 / n;
            let mf = f32::cast_from(m);
            if mu > 0.0f32 {
                if mu >= 0.5f32 * (mf - 1.0f32) {
                    cmm = f32::reinterpret(nan_bits & 0x7F80_0000u32); // +inf: flat decay
                } else {
                    let mut lo = f32::ln(1e-4f32);
                    let mut hi = f32::ln(60.0f32);
                    for _ in 0..40u32 {
                        let mid = 0.5f32 * (lo + hi);
                        if mean_bin(f32::exp(mid), mf) > mu {
                            lo = mid;
                        } else {
                            hi = mid;
                        }
                    }
                    cmm = h / f32::exp(0.5f32 * (lo + hi));
                }
            }
            let g0 = gc / n;
            let s0 = gs / n;
            g = cal_cos * g0 - cal_sin * s0;
            s = cal_sin * g0 + cal_cos * s0;
            tau_phase = s / (omega * g);
            tau_mod = f32::sqrt(1.0f32 / (g * g + s * s) - 1.0f32) / omega;
        }
        out[p as usize] = n;
        out[(pixels + p) as usize] = rld;
        out[(2 * pixels + p) as usize] = iem;
        out[(3 * pixels + p) as usize] = cmm;
        out[(4 * pixels + p) as usize] = g;
        out[(5 * pixels + p) as usize] = s;
        out[(6 * pixels + p) as usize] = tau_phase;
        out[(7 * pixels + p) as usize] = tau_mod;
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
    /// [`KIND_U16`], [`KIND_U32`] or [`KIND_F32`].
    pub kind: u32,
}

/// Launch [`lifetimes_kernel`]; checks every length first.
pub fn lifetimes<R: Runtime>(
    gpu: &Gpu<R>,
    words: &GpuArray<u32>,
    tables: &GpuArray<f32>,
    p: &LifetimeParams,
    out: &GpuArray<f32>,
    status: &GpuArray<u32>,
) -> Result<()> {
    let name = "flim_lifetimes";
    let per_word = if p.kind == KIND_U16 { 2 } else { 1 };
    let pixels = p.pixels as usize;
    let counts = pixels * p.stride as usize;
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
    if words.len() * per_word < counts
        || tables.len() < 3 * p.m as usize
        || out.len() < PLANES * pixels
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
    let count = gpu.cube_count_1d(name, pixels, CUBE_1D)?;
    gpu.launch(name, count, |count| {
        // SAFETY: lengths checked above; unit p < pixels reads counts p * stride + first + j
        // (j < m, first + m <= stride) and writes out[q * pixels + p], q < 8, status[p].
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
                p.m,
                p.h,
                p.omega,
                p.offset,
                p.threshold,
                p.cal.0,
                p.cal.1,
                0x7FC0_0000u32,
                p.kind,
            );
        };
    })
}

fn invalid(kernel: &str, why: String) -> Error {
    Error::InvalidLaunch {
        kernel: kernel.into(),
        why,
    }
}

/// This module's kernels, configured as their launch wrappers configure them.
pub(crate) fn catalog<R: Runtime>(client: &ComputeClient<R>) -> Vec<CatalogEntry> {
    [
        ("lifetimes_u16", KIND_U16),
        ("lifetimes_u32", KIND_U32),
        ("lifetimes_f32", KIND_F32),
    ]
    .into_iter()
    .map(|(name, kind)| {
        let k = lifetimes_kernel::LifetimesKernel::<R>::new(
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
            kind,
        );
        entry("flim", name, k)
    })
    .collect()
}
