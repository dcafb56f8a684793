//! tau_c of every pixel on a GPU with the `gpu_kernels::speckle::tau_c` kernel (f32), in
//! chunks of pixels that fit device memory, through page-locked staging buffers kept
//! between calls (allocating them costs milliseconds). Results follow the CPU reference
//! (`cpu::tau_c_map`) within the tolerances stated in tests/tests/gpu_vs_cpu/speckle_flow.rs.

use crate::error::Result;
use crate::gpu::staging::{self as staging_cache, floats};
use crate::model::flow::{FlowModel, TauMap};
use gpu_kernels::speckle as kernels;
use gpu_runtime::{Device, with_gpu};
use ndarray::{Array2, ArrayView2};
use rayon::prelude::*;

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
    })?;
    Ok(TauMap { tau_c: tau, flags })
}
