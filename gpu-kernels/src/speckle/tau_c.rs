//! tau_c of every pixel from K, one pixel per unit, in f32: the port of speckle-core's f64
//! `model::flow::tau_c` (same model terms, same bracketed Newton inversion; see
//! [`super::model`]).

// CubeCL evaluates `if comptime!(..)` at expansion time; merging it with a runtime
// condition would turn it into a runtime branch.
#![allow(clippy::collapsible_if)]
// `!(x > 0.0)` is meant: it is also true for NaN. Ranges are written as CubeCL 0.10 parses them.
#![allow(
    clippy::neg_cmp_op_on_partial_ord,
    clippy::if_not_else,
    clippy::range_plus_one
)]

use super::model::x_from_k2;
use super::{FLAG_NO_CONTRAST, FLAG_NO_MOTION, FLAG_UNDEFINED};
use crate::CUBE_1D;
use crate::configured::{CatalogEntry, array, entry, settings_1d};
use cubecl::prelude::*;
use gpu_runtime::{Error, Gpu, GpuArray, Result};

/// tau_c (s) of every pixel from K, exposure T (s) and beta, with flag bits:
/// NaN or negative K -> NaN, UNDEFINED; K^2 >= beta -> +inf, NO_MOTION; K = 0 -> 0,
/// NO_CONTRAST. `special` holds the bits of +inf (0x7F80_0000) and is passed in because
/// CUDA C++ cannot reinterpret a literal. Launched unchecked: the wrapper checks lengths.
#[cube(launch_unchecked)]
pub fn tau_c_kernel(
    k: &Array<f32>,
    tau: &mut Array<f32>,
    flags: &mut Array<u32>,
    n: u32,
    exposure: f32,
    beta: f32,
    inf_bits: u32,
    #[comptime] gaussian_model: bool,
) {
    let p = ABSOLUTE_POS_X + ABSOLUTE_POS_Y * CUBE_COUNT_X * CUBE_DIM_X;
    if p < n {
        let kv = k[p as usize];
        let k2 = kv * kv;
        let mut out = f32::reinterpret(inf_bits | 0x0040_0000u32); // NaN
        let mut flag = u32::new(FLAG_UNDEFINED as i64);
        if kv >= 0.0f32 {
            if k2 >= beta {
                out = f32::reinterpret(inf_bits);
                flag = FLAG_NO_MOTION;
            } else if k2 == 0.0f32 {
                out = 0.0f32;
                flag = FLAG_NO_CONTRAST;
            } else {
                let x = x_from_k2(k2 / beta, (beta - k2) / beta, gaussian_model);
                out = exposure / x;
                flag = 0u32;
            }
        }
        tau[p as usize] = out;
        flags[p as usize] = flag;
    }
}

/// Launch [`tau_c_kernel()`] over `k.len()` pixels.
pub fn tau_c<R: Runtime>(
    gpu: &Gpu<R>,
    k: &GpuArray<f32>,
    exposure_s: f32,
    beta: f32,
    gaussian_model: bool,
    tau: &GpuArray<f32>,
    flags: &GpuArray<u32>,
) -> Result<()> {
    let name = "tau_c";
    let n = k.len();
    if tau.len() < n || flags.len() < n {
        return Err(Error::invalid_launch(
            name,
            format!("output buffers shorter than {n}"),
        ));
    }
    if !(exposure_s.is_finite() && exposure_s > 0.0 && beta.is_finite() && beta > 0.0) {
        return Err(Error::invalid_launch(
            name,
            format!("exposure {exposure_s} s and beta {beta} must be finite and > 0"),
        ));
    }
    let count = gpu.cube_count_1d(name, n, CUBE_1D)?;
    gpu.launch(name, count, |count| {
        // SAFETY: output lengths checked above; the kernel touches index p < n only.
        unsafe {
            tau_c_kernel::launch_unchecked::<R>(
                gpu.client(),
                count,
                CubeDim::new_1d(CUBE_1D),
                k.arg(),
                tau.arg(),
                flags.arg(),
                n as u32,
                exposure_s,
                beta,
                0x7F80_0000u32,
                gaussian_model,
            );
        };
    })
}

/// This file's kernels, configured as their launch wrappers configure them.
pub(crate) fn catalog<R: Runtime>(client: &ComputeClient<R>) -> Vec<CatalogEntry> {
    let s = || settings_1d(CUBE_1D);
    let mut entries = Vec::new();
    for (name, gaussian_model) in [("tau_c_lorentzian", false), ("tau_c_gaussian", true)] {
        let k = tau_c_kernel::TauCKernel::<R>::new(
            s(),
            client.clone(),
            array(),
            array(),
            array(),
            (),
            (),
            (),
            (),
            gaussian_model,
        );
        entries.push(entry("speckle_flow", name, k));
    }
    entries
}
