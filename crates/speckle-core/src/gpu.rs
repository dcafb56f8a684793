//! The GPU path: packs integer frames into u32 words (the camera's own bytes), runs the
//! `gpu_kernels::speckle` kernels in chunks that fit device memory, and unpacks the maps.

use crate::Border;
use crate::contrast::contrast_shape;
use crate::engine::{ContrastParams, ContrastResult, Mode};
use crate::error::{Error, Result};
use crate::types::Pixel;
use gpu_kernels::speckle::{self as kernels, PixelBits, SpatialParams};
use gpu_runtime::{Device, with_gpu};
use ndarray::{Array3, ArrayView3, s};

/// Integer pixels the kernels take, and how they pack into 32-bit words.
pub trait PackedPixel: Pixel {
    const BITS: PixelBits;
    fn pack(values: &[Self], out: &mut Vec<u32>);
}

impl PackedPixel for u8 {
    const BITS: PixelBits = PixelBits::U8;
    fn pack(values: &[u8], out: &mut Vec<u32>) {
        out.extend(values.chunks(4).map(|c| {
            c.iter()
                .enumerate()
                .fold(0u32, |w, (i, &b)| w | (u32::from(b) << (8 * i)))
        }));
    }
}

impl PackedPixel for u16 {
    const BITS: PixelBits = PixelBits::U16;
    fn pack(values: &[u16], out: &mut Vec<u32>) {
        out.extend(
            values
                .chunks(2)
                .map(|c| u32::from(c[0]) | c.get(1).map_or(0, |&v| u32::from(v) << 16)),
        );
    }
}

/// Contrast on the GPU `device`, same parameters and result as the CPU reference.
pub fn contrast<T: PackedPixel>(
    stack: ArrayView3<T>,
    params: &ContrastParams,
    device: &Device,
) -> Result<ContrastResult> {
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
    let backend = device.backend();
    let gpu_err = |e: gpu_runtime::Error| Error::Gpu(e.to_string());

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
        let mut words = Vec::new();
        for range in plan.chunks() {
            let (first_in, last_in) = (range.start, range.end + overlap);
            let chunk = stack.slice(s![first_in..last_in, .., ..]);
            words.clear();
            let chunk = chunk.as_standard_layout();
            T::pack(chunk.as_slice().expect("standard layout"), &mut words);
            let input = gpu.upload(&words)?;
            let n_out = range.len() * h_out * w_out;
            let k_dev = gpu.empty::<f32>(n_out)?;
            let flags_dev = gpu.empty::<u32>(n_out)?;
            let sfi_dev = if sfi.is_some() {
                gpu.empty::<f32>(n_out)?
            } else {
                gpu.empty::<f32>(1)?
            };
            match params.mode {
                Mode::Spatial => {
                    let p = SpatialParams {
                        width: w as u32,
                        height: h as u32,
                        frames: range.len() as u32,
                        radius: params.window.radius() as u32,
                        border: border_code(params.border),
                        pixel: T::BITS,
                        sfi_scale: params.exposure_s.map(|t| (1.0 / (2.0 * t)) as f32),
                        saturation: Some(saturation.unwrap_or(0)),
                    };
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
            let k_host = gpu.download(&k_dev)?;
            let flags_host = gpu.download(&flags_dev)?;
            copy_into(k.slice_mut(s![range.clone(), .., ..]), &k_host);
            for (dst, &f) in fl
                .slice_mut(s![range.clone(), .., ..])
                .iter_mut()
                .zip(&flags_host)
            {
                *dst = f as u8;
            }
            if let Some(sfi) = sfi.as_mut()
                && params.mode == Mode::Spatial
            {
                copy_into(
                    sfi.slice_mut(s![range.clone(), .., ..]),
                    &gpu.download(&sfi_dev)?,
                );
            }
        }
        Ok(())
    })
    .map_err(gpu_err)?;

    // The temporal kernels write K only; SFI follows from it exactly as on the CPU.
    if let (Some(sfi), Some(t), true) = (
        sfi.as_mut(),
        params.exposure_s,
        params.mode != Mode::Spatial,
    ) {
        ndarray::Zip::from(sfi)
            .and(&k)
            .par_for_each(|s, &k| *s = crate::flow::sfi(f64::from(k), t) as f32);
    }
    Ok(ContrastResult {
        k,
        sfi,
        flags: fl,
        backend,
    })
}

fn copy_into(mut dst: ndarray::ArrayViewMut3<f32>, src: &[f32]) {
    for (d, &v) in dst.iter_mut().zip(src) {
        *d = v;
    }
}

fn border_code(b: Border) -> u32 {
    match b {
        Border::Reflect => kernels::BORDER_REFLECT,
        Border::Zero => kernels::BORDER_ZERO,
        Border::Valid => kernels::BORDER_VALID,
    }
}
