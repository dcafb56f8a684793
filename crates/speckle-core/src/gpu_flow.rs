//! The GPU path of the flow maps: tau_c inversion and MESI fits with the
//! `gpu_kernels::speckle_flow` kernels (f32), in chunks of pixels that fit device memory,
//! through page-locked staging buffers kept between calls (allocating them costs ms). Results follow the CPU references
//! (`flow::tau_c_map`, `mesi::fit_mesi_map`) within the tolerances stated in
//! tests/tests/gpu_vs_cpu/speckle_flow.rs.

use crate::error::{Error, Result};
use crate::flow::{FlowModel, TauMap};
use crate::gpu::staging_cache;
use crate::mesi::{BetaMode, MesiMaps, MesiOptions};
use gpu_kernels::speckle_flow::{self as kernels, MesiFitParams};
use gpu_runtime::{Device, Gpu, HostStaging, KnownRuntime, with_gpu};
use ndarray::{Array2, ArrayView2, ArrayView3};
use rayon::prelude::*;

fn gpu_err(e: gpu_runtime::Error) -> Error {
    Error::Gpu(e.to_string())
}

/// f32 values from page-locked bytes.
fn floats(staging: &HostStaging, n: usize) -> &[f32] {
    bytemuck::cast_slice(&staging.as_bytes()[..n * 4])
}

/// tau_c of every pixel of `k` on the GPU `device` (exposure and beta already checked).
pub(crate) fn tau_c_map(
    k: ArrayView2<f32>,
    exposure_s: f64,
    beta: f64,
    model: FlowModel,
    device: &Device,
) -> Result<TauMap> {
    let k = k.as_standard_layout();
    let src = k.as_slice().expect("standard layout");
    let (h, w) = k.dim();
    let mut tau = Array2::<f32>::zeros((h, w));
    let mut flags = Array2::<u8>::zeros((h, w));
    let gaussian = model == FlowModel::Gaussian;
    with_gpu!(device, |gpu| {
        let plan = gpu.budget().plan(src.len(), 4 + 8, 0)?;
        let tau_out = tau.as_slice_mut().expect("standard layout");
        let flags_out = flags.as_slice_mut().expect("standard layout");
        for range in plan.chunks() {
            let n = range.len();
            let mut staging = staging_cache::take(gpu, 2, n * 4);
            staging.as_bytes_mut()[..n * 4]
                .copy_from_slice(bytemuck::cast_slice(&src[range.clone()]));
            let k_dev = gpu.upload_staged::<f32>(&staging, n)?;
            let (tau_dev, flags_dev) = (gpu.empty::<f32>(n)?, gpu.empty::<u32>(n)?);
            kernels::tau_c(
                gpu,
                &k_dev,
                exposure_s as f32,
                beta as f32,
                gaussian,
                &tau_dev,
                &flags_dev,
            )?;
            gpu.download_staged(&tau_dev, &mut staging)?;
            tau_out[range.clone()].copy_from_slice(floats(&staging, n));
            gpu.download_staged(&flags_dev, &mut staging)?;
            let words: &[u32] = bytemuck::cast_slice(&staging.as_bytes()[..n * 4]);
            flags_out[range]
                .par_iter_mut()
                .zip(words.par_iter())
                .for_each(|(d, &f)| *d = f as u8);
            staging_cache::put(2, staging);
        }
        Ok(())
    })
    .map_err(gpu_err)?;
    Ok(TauMap { tau_c: tau, flags })
}

/// MESI fit of every pixel on the GPU `device` (inputs already checked by the caller).
pub(crate) fn fit_mesi_map(
    k: ArrayView3<f32>,
    exposures_s: &[f64],
    opts: &MesiOptions,
    device: &Device,
) -> Result<MesiMaps> {
    let (ne, h, w) = k.dim();
    let pixels = h * w;
    let k = k.as_standard_layout();
    let src = k.as_slice().expect("standard layout");
    let mut maps = MesiMaps {
        tau_c: Array2::zeros((h, w)),
        rho: Array2::zeros((h, w)),
        v_noise: Array2::zeros((h, w)),
        beta: Array2::zeros((h, w)),
        rss: Array2::zeros((h, w)),
        status: Array2::zeros((h, w)),
    };
    if pixels == 0 {
        return Ok(maps);
    }
    let beta = match opts.beta {
        BetaMode::Fixed(b) => Some(b as f32),
        BetaMode::Free => None,
    };
    let times: Vec<f32> = exposures_s.iter().map(|&t| t as f32).collect();
    with_gpu!(device, |gpu| {
        let exposures = gpu.upload(&times)?;
        let per_pixel = (ne * 4 + 5 * 4 + 4) as u64;
        let plan = gpu.budget().plan(pixels, per_pixel, 0)?;
        for range in plan.chunks() {
            fit_chunk(
                gpu, src, ne, pixels, range, &exposures, beta, opts, &mut maps,
            )?;
        }
        Ok(())
    })
    .map_err(gpu_err)?;
    Ok(maps)
}

/// Fit pixels `range` (of `pixels` per exposure plane in `src`) and fill their map entries.
#[allow(clippy::too_many_arguments)]
fn fit_chunk<R: KnownRuntime>(
    gpu: &Gpu<R>,
    src: &[f32],
    ne: usize,
    pixels: usize,
    range: std::ops::Range<usize>,
    exposures: &gpu_runtime::GpuArray<f32>,
    beta: Option<f32>,
    opts: &MesiOptions,
    maps: &mut MesiMaps,
) -> gpu_runtime::Result<()> {
    let n = range.len();
    // Exposure-major, as the kernel reads it: plane e of the chunk is src[e][range].
    let mut staging = staging_cache::take(gpu, 2, n * ne.max(5) * 4);
    staging.as_bytes_mut()[..n * ne * 4]
        .par_chunks_mut(n * 4)
        .enumerate()
        .for_each(|(e, dst)| {
            let plane = &src[e * pixels..(e + 1) * pixels];
            dst.copy_from_slice(bytemuck::cast_slice(&plane[range.clone()]));
        });
    let k_dev = gpu.upload_staged::<f32>(&staging, n * ne)?;
    let (out_dev, status_dev) = (gpu.empty::<f32>(5 * n)?, gpu.empty::<u32>(n)?);
    let params = MesiFitParams {
        pixels: n as u32,
        beta,
        max_iterations: opts.max_iterations,
        tolerance: opts.tolerance as f32,
    };
    kernels::mesi_fit(gpu, &k_dev, exposures, &params, &out_dev, &status_dev)?;
    gpu.download_staged(&out_dev, &mut staging)?;
    let out = floats(&staging, 5 * n);
    for (plane, map) in [
        &mut maps.tau_c,
        &mut maps.rho,
        &mut maps.v_noise,
        &mut maps.beta,
        &mut maps.rss,
    ]
    .into_iter()
    .enumerate()
    {
        map.as_slice_mut().expect("standard layout")[range.clone()]
            .copy_from_slice(&out[plane * n..(plane + 1) * n]);
    }
    gpu.download_staged(&status_dev, &mut staging)?;
    let words: &[u32] = bytemuck::cast_slice(&staging.as_bytes()[..n * 4]);
    for (d, &s) in maps.status.as_slice_mut().expect("standard layout")[range]
        .iter_mut()
        .zip(words)
    {
        *d = (s & 0xFF) as u8;
    }
    staging_cache::put(2, staging);
    Ok(())
}
