//! The non-iterative methods on the CPU (f64, pixels in parallel): one pass per pixel.

use crate::error::Result;
use crate::model::cube::{Count, Cube};
use crate::model::lifetimes::{
    Analysis, CmmStart, LifetimeMaps, Methods, Setup, finish, sums, sums_int,
};
use ndarray::Array2;
use rayon::prelude::*;

/// Pixels per parallel task: a few hundred kB of counts.
const TASK_PIXELS: usize = 1024;

/// All non-iterative lifetimes of every pixel on the CPU (f64, pixels in parallel).
pub(crate) fn analyse<T: Count>(cube: &Cube<T>, opts: &Analysis) -> Result<LifetimeMaps> {
    let mut su = opts.setup(cube.bins(), cube.bin_ns(), cube.period_ns())?;
    if su.methods.contains(Methods::CMM) {
        su.cmm_start = Some(CmmStart::new(su.m as f64));
    }
    let (h, w) = cube.shape();
    let bins = cube.bins();
    let data = cube.as_slice();
    let mut values = vec![[0.0f32; 8]; h * w];
    let mut status = vec![0u8; h * w];
    values
        .par_chunks_mut(TASK_PIXELS)
        .zip(status.par_chunks_mut(TASK_PIXELS))
        .enumerate()
        .for_each(|(t, (vals, st))| {
            let p0 = t * TASK_PIXELS;
            let px = &data[p0 * bins..(p0 + vals.len()) * bins];
            pixels_dispatch(px, bins, &su, vals, st);
        });
    // Planes of methods not asked for are NaN: filled, not gathered from `values`.
    let wanted = |q: usize| match q {
        0 => true,
        1 => su.methods.contains(Methods::RLD),
        2 => su.methods.contains(Methods::IEM),
        3 => su.methods.contains(Methods::CMM),
        _ => su.methods.contains(Methods::PHASOR),
    };
    let mut maps = LifetimeMaps::zeros(h, w);
    maps.planes_mut()
        .into_par_iter()
        .enumerate()
        .for_each(|(q, plane)| {
            if wanted(q) {
                for (dst, v) in plane.iter_mut().zip(&values) {
                    *dst = v[q];
                }
            } else {
                plane.fill(f32::NAN);
            }
        });
    maps.status = Array2::from_shape_vec((h, w), status).expect("h * w statuses");
    Ok(maps)
}

/// [`pixels_portable`] compiled for AVX2 where the CPU has it (detected at run time).
/// Both give bit-identical results: the same IEEE operations in the same order.
fn pixels_dispatch<T: Count>(
    data: &[T],
    bins: usize,
    su: &Setup,
    vals: &mut [[f32; 8]],
    st: &mut [u8],
) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx512f") {
        // SAFETY: `pixels_avx512` only requires AVX-512F, which the CPU has (checked above).
        unsafe { pixels_avx512(data, bins, su, vals, st) };
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: `pixels_avx2` only requires AVX2, which the CPU has (checked just above).
        unsafe { pixels_avx2(data, bins, su, vals, st) };
        return;
    }
    pixels_portable(data, bins, su, vals, st);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn pixels_avx2<T: Count>(
    data: &[T],
    bins: usize,
    su: &Setup,
    vals: &mut [[f32; 8]],
    st: &mut [u8],
) {
    pixels_portable(data, bins, su, vals, st);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
fn pixels_avx512<T: Count>(
    data: &[T],
    bins: usize,
    su: &Setup,
    vals: &mut [[f32; 8]],
    st: &mut [u8],
) {
    pixels_portable(data, bins, su, vals, st);
}

/// One pass per pixel: the sums (exact integer sums for integer counts, f64 for f32
/// counts), then the formulas.
#[inline(always)]
fn pixels_portable<T: Count>(
    data: &[T],
    bins: usize,
    su: &Setup,
    vals: &mut [[f32; 8]],
    st: &mut [u8],
) {
    let mut v = vec![0.0f64; su.m];
    let mut buf = Vec::with_capacity(su.m);
    for (p, (out, status)) in vals.iter_mut().zip(st.iter_mut()).enumerate() {
        let px = &data[p * bins + su.first..p * bins + su.first + su.m];
        // Integer weights (bin indices) stay below 2^16 up to 65,536 bins.
        let sums = match T::KIND {
            gpu_kernels::flim::KIND_U16 if su.m <= 1 << 16 => {
                sums_int(bytemuck::cast_slice::<T, u16>(px), su, &mut buf)
            }
            gpu_kernels::flim::KIND_U32 if su.m <= 1 << 16 => {
                sums_int(bytemuck::cast_slice::<T, u32>(px), su, &mut buf)
            }
            _ => {
                for (d, &c) in v.iter_mut().zip(px) {
                    *d = c.into();
                }
                sums(&v, su)
            }
        };
        let (x, s) = finish(&sums, su);
        for (o, x) in out.iter_mut().zip(x) {
            *o = x as f32;
        }
        *status = s;
    }
}
