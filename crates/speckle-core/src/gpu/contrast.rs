//! Contrast of a stack on a GPU: packs integer frames into u32 words (the camera's own
//! bytes), runs the `gpu_kernels::speckle` kernels in chunks that fit device memory, and
//! unpacks the maps.

use crate::error::{Error, Result};
use crate::gpu::pixel::{PackedPixel, border_code, copy_into, spatial_params};
use crate::gpu::staging as staging_cache;
use crate::model::contrast::{ContrastMaps, ContrastParams, Mode};
use crate::model::flow;
use crate::model::window::contrast_shape;
use gpu_kernels::speckle as kernels;
use gpu_runtime::{Device, with_gpu};
use ndarray::{Array3, ArrayView3, s};

/// Contrast on the GPU `device`, same parameters and result as the CPU reference.
pub fn contrast<T: PackedPixel>(
    stack: ArrayView3<T>,
    params: &ContrastParams,
    device: &Device,
) -> Result<ContrastMaps> {
    let (nf, h, w) = stack.dim();
    let (h_out, w_out) = match params.window_for_shape() {
        Some(win) => contrast_shape(h, w, win, params.border)?,
        None => (h, w),
    };
    if params.mode != Mode::Spatial && (params.frames < 2 || params.frames > nf) {
        return Err(Error::InvalidTemporalWindow {
            frames: params.frames,
            why: format!("need 2 <= frames <= {nf} (the stack length)"),
        });
    }
    let out_frames = if params.mode == Mode::Spatial {
        nf
    } else {
        nf - params.frames + 1
    };
    let mut k = Array3::<f32>::zeros((out_frames, h_out, w_out));
    let mut sfi = params
        .exposure_s
        .map(|_| Array3::<f32>::zeros((out_frames, h_out, w_out)));
    let mut fl = Array3::<u8>::zeros((out_frames, h_out, w_out));
    let saturation = params
        .saturation
        .map(|s| s.ceil().clamp(1.0, f64::from(u32::MAX)) as u32);

    with_gpu!(device, |gpu| {
        let in_frame = (h * w * std::mem::size_of::<T>()) as u64 + 4;
        let out_frame = (h_out * w_out * 12) as u64;
        let overlap = if params.mode == Mode::Spatial {
            0
        } else {
            params.frames - 1
        };
        let plan =
            gpu.budget()
                .plan(out_frames, in_frame + out_frame, overlap as u64 * in_frame)?;
        let want_flags = saturation.is_some();
        for range in plan.chunks() {
            let (first_in, last_in) = (range.start, range.end + overlap);
            let chunk = stack.slice(s![first_in..last_in, .., ..]);
            let chunk = chunk.as_standard_layout();
            let bytes: &[u8] = bytemuck::cast_slice(chunk.as_slice().expect("standard layout"));
            let mut staging_in = staging_cache::take(gpu, 0, bytes.len().next_multiple_of(4));
            let n_words = staging_in.write_words(bytes);
            let input = gpu.upload_staged::<u32>(&staging_in, n_words)?;
            staging_cache::put(0, staging_in);
            let n_out = range.len() * h_out * w_out;
            let k_dev = gpu.empty::<f32>(n_out)?;
            // The temporal kernel always writes flags; the spatial one only with a saturation level.
            let flags_dev = gpu.empty::<u32>(if want_flags || params.mode != Mode::Spatial {
                n_out
            } else {
                1
            })?;
            let sfi_dev = gpu.empty::<f32>(if sfi.is_some() { n_out } else { 1 })?;
            match params.mode {
                Mode::Spatial => {
                    let p = spatial_params::<T>(params, w, h, range.len() as u32, saturation);
                    kernels::spatial_contrast(gpu, &input, &p, &k_dev, &sfi_dev, &flags_dev)?;
                }
                Mode::Temporal | Mode::SpatioTemporal => kernels::temporal_contrast(
                    gpu,
                    &input,
                    w as u32,
                    h as u32,
                    (last_in - first_in) as u32,
                    params.frames as u32,
                    params.radius() as u32,
                    border_code(params.border),
                    T::BITS,
                    saturation,
                    &k_dev,
                    &flags_dev,
                )?,
            }
            let mut staging_out = staging_cache::take(gpu, 1, n_out * 4);
            gpu.download_staged(&k_dev, &mut staging_out)?;
            copy_into(k.slice_mut(s![range.clone(), .., ..]), &staging_out);
            if want_flags {
                gpu.download_staged(&flags_dev, &mut staging_out)?;
                let words: &[u32] = bytemuck::cast_slice(&staging_out.as_bytes()[..n_out * 4]);
                for (dst, &f) in fl
                    .slice_mut(s![range.clone(), .., ..])
                    .iter_mut()
                    .zip(words)
                {
                    *dst = f as u8;
                }
            }
            if let Some(sfi) = sfi.as_mut()
                && params.mode == Mode::Spatial
            {
                gpu.download_staged(&sfi_dev, &mut staging_out)?;
                copy_into(sfi.slice_mut(s![range.clone(), .., ..]), &staging_out);
            }
            staging_cache::put(1, staging_out);
        }
        Ok(())
    })?;
    if saturation.is_none() {
        // Without a saturation level the only flag is "undefined", which K's NaN carries.
        ndarray::Zip::from(&mut fl).and(&k).par_for_each(|f, &k| {
            *f = if k.is_nan() {
                crate::model::flags::UNDEFINED
            } else {
                0
            }
        });
    }

    // The temporal kernels write K only; SFI follows from it exactly as on the CPU.
    if let (Some(sfi), Some(t), true) = (
        sfi.as_mut(),
        params.exposure_s,
        params.mode != Mode::Spatial,
    ) {
        ndarray::Zip::from(sfi)
            .and(&k)
            .par_for_each(|s, &k| *s = flow::sfi(f64::from(k), t) as f32);
    }
    Ok(ContrastMaps { k, sfi, flags: fl })
}
