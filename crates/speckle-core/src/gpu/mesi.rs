//! MESI fits of every pixel on a GPU with the `gpu_kernels::speckle::mesi` kernel (f32), in
//! chunks of pixels that fit device memory, through page-locked staging buffers kept
//! between calls. Results follow the CPU reference (`cpu::fit_mesi_map`) within the
//! tolerances stated in tests/tests/gpu_vs_cpu/speckle_flow.rs.

use crate::error::Result;
use crate::gpu::staging::{self as staging_cache, floats};
use crate::model::mesi::{BetaMode, MesiMaps, MesiOptions};
use gpu_kernels::speckle::{self as kernels, MesiFitParams};
use gpu_runtime::{Device, Gpu, KnownRuntime, with_gpu};
use ndarray::{Array2, ArrayView3};
use rayon::prelude::*;

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
    })?;
    maps.apply_residual_limit(ne, opts);
    Ok(maps)
}

/// Fit pixels `range` (of `pixels` per exposure plane in `src`) and fill their map entries.
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
