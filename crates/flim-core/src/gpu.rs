//! The GPU path of the non-iterative methods: the cube goes up as its own bytes (u16 counts
//! two per word) through page-locked staging, in chunks of pixels that fit device memory,
//! and the eight maps come back.

use crate::cube::{Count, Cube};
use crate::error::Result;
use crate::methods::{Analysis, LifetimeMaps, STATUS_MASKED};
use gpu_kernels::flim::lifetimes::{self as kernels, LifetimeParams, plane_of, planes};
use gpu_runtime::{Device, with_gpu};
use ndarray::Array2;
use rayon::prelude::*;

/// [`crate::analyse`] on `device`: the GPU kernel (f32) where the device is a GPU, the f64
/// CPU reference otherwise. GPU and CPU agree within the tolerances stated in
/// tests/tests/gpu_vs_cpu/flim.rs.
///
/// ```
/// use flim_core::{Analysis, gpu::analyse_on, sim::mono_exponential};
/// let cube = mono_exponential(&[3.0], 4, 4, 128, 0.1, 12.8, 5_000.0, 2)?;
/// let maps = analyse_on(&cube, &Analysis::default(), &gpu_runtime::Device::cpu())?;
/// assert!((maps.tau_rld[[0, 0]] - 3.0).abs() < 0.3);
/// # Ok::<(), flim_core::Error>(())
/// ```
pub fn analyse_on<T: Count>(
    cube: &Cube<T>,
    opts: &Analysis,
    device: &Device,
) -> Result<LifetimeMaps> {
    if !device.is_gpu() {
        return crate::analyse(cube, opts);
    }
    let su = opts.setup(cube.bins(), cube.bin_ns(), cube.period_ns())?;
    let (h, w) = cube.shape();
    let pixels = h * w;
    let bins = cube.bins();
    let mut maps = LifetimeMaps::zeros(h, w);
    if pixels == 0 {
        return Ok(maps);
    }
    let tables: Vec<f32> = su
        .simpson
        .iter()
        .chain(&su.cos_t)
        .chain(&su.sin_t)
        .map(|&v| v as f32)
        .collect();
    let bytes: &[u8] = bytemuck::cast_slice(cube.as_slice());
    let px_bytes = bins * std::mem::size_of::<T>();
    let methods = su.methods.bits();
    let nplanes = planes(methods);
    let mut status = vec![0u32; pixels];
    with_gpu!(device, |gpu| {
        let tables_dev = gpu.upload(&tables)?;
        // Even pixel counts per chunk keep u16 chunks word-aligned.
        let plan = gpu.budget().plan(
            pixels.div_ceil(2),
            2 * (px_bytes + nplanes * 4 + 4) as u64,
            0,
        )?;
        let mut staging = gpu.host_staging(0);
        for pairs in plan.chunks() {
            let first_px = pairs.start * 2;
            let n = (pairs.end * 2).min(pixels) - first_px;
            let len = n * px_bytes;
            let words = len.div_ceil(4);
            let need = (words * 4).max(n * nplanes * 4);
            if staging.len() < need {
                staging = gpu.host_staging(need);
            }
            let src = &bytes[first_px * px_bytes..first_px * px_bytes + len];
            let dst = &mut staging.as_bytes_mut()[..words * 4];
            dst[..len]
                .par_chunks_mut(1 << 20)
                .zip(src.par_chunks(1 << 20))
                .for_each(|(d, s)| d.copy_from_slice(s));
            dst[len..].fill(0);
            let words_dev = gpu.upload_staged::<u32>(&staging, words)?;
            let out = gpu.empty::<f32>(n * nplanes)?;
            let st = gpu.empty::<u32>(n)?;
            let p = LifetimeParams {
                pixels: n as u32,
                stride: bins as u32,
                first: su.first as u32,
                m: su.m as u32,
                h: su.h as f32,
                omega: su.omega as f32,
                offset: su.offset as f32,
                threshold: su.threshold as f32,
                cal: (su.cal_cos as f32, su.cal_sin as f32),
                table_sums: (su.sum_simpson as f32, su.sum_cos as f32, su.sum_sin as f32),
                kind: T::KIND,
                methods,
            };
            kernels::lifetimes(gpu, &words_dev, &tables_dev, &p, &out, &st)?;
            gpu.download_staged(&out, &mut staging)?;
            let vals: &[f32] = bytemuck::cast_slice(&staging.as_bytes()[..n * nplanes * 4]);
            for (q, plane) in maps.planes_mut().into_iter().enumerate() {
                let dst =
                    &mut plane.as_slice_mut().expect("standard layout")[first_px..first_px + n];
                match plane_of(methods, q as u32) {
                    Some(i) => dst.copy_from_slice(&vals[i as usize * n..(i as usize + 1) * n]),
                    None => dst.fill(f32::NAN),
                }
            }
            gpu.download_staged(&st, &mut staging)?;
            status[first_px..first_px + n]
                .copy_from_slice(bytemuck::cast_slice(&staging.as_bytes()[..n * 4]));
        }
        Ok(())
    })?;
    maps.status = Array2::from_shape_vec(
        (h, w),
        status
            .into_iter()
            .map(|s| if s == 0 { 0 } else { STATUS_MASKED })
            .collect(),
    )
    .expect("h * w statuses");
    Ok(maps)
}
