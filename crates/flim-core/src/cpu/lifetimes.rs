//! The non-iterative methods on the CPU (f64, pixels in parallel): one pass per pixel.

use crate::error::Result;
use crate::model::cube::{Count, Cube};
use crate::model::lifetimes::{
    Analysis, CmmStart, LifetimeMaps, Methods, Setup, finish, sums, sums_int,
};
use rayon::prelude::*;

/// Pixels per parallel task: a few hundred kB of counts.
const TASK_PIXELS: usize = 1024;

/// How far ahead of the pixel being summed its successors' counts are prefetched (bytes).
/// Without it one thread stalls at the first bin of every pixel: on the real 512x512x256
/// `.sdt` RLD alone took 20.5 ms, 15.5-16.6 ms with it and the direct plane writes
/// (docs/flim-methods.md, Benchmarks; 4 pixels ahead beat 2, 8 and 16 on a busy machine).
const PREFETCH_BYTES: usize = 2048;

/// Ask for the cache lines of `bytes` (a hint: never faults, changes no result).
#[inline(always)]
fn prefetch(bytes: &[u8]) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
        let line = |o: usize| {
            // SAFETY: `o < bytes.len()`: an address inside `bytes`; prefetches never fault.
            unsafe { _mm_prefetch::<_MM_HINT_T0>(bytes.as_ptr().add(o).cast()) }
        };
        for o in (0..bytes.len()).step_by(64) {
            line(o);
        }
        if let Some(last) = bytes.len().checked_sub(1) {
            line(last);
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = bytes;
}

/// All non-iterative lifetimes of every pixel on the CPU (f64, pixels in parallel). Each
/// task writes its pixels' values straight into the planes of the methods asked for (and
/// the intensity); the other planes are NaN, filled on all cores, never gathered.
pub(crate) fn analyse<T: Count>(cube: &Cube<T>, opts: &Analysis) -> Result<LifetimeMaps> {
    let mut su = opts.setup(cube.bins(), cube.bin_ns(), cube.period_ns())?;
    if su.methods.contains(Methods::CMM) {
        su.cmm_start = Some(CmmStart::new(su.m as f64));
    }
    let (h, w) = cube.shape();
    let bins = cube.bins();
    let data = cube.as_slice();
    // The planes in the order of `finish`'s values: intensity, RLD, IEM, CMM, then g, s
    // and the phase and modulation lifetimes of the phasor.
    let wanted: [bool; 8] = std::array::from_fn(|q| match q {
        0 => true,
        1 => su.methods.contains(Methods::RLD),
        2 => su.methods.contains(Methods::IEM),
        3 => su.methods.contains(Methods::CMM),
        _ => su.methods.contains(Methods::PHASOR),
    });
    let mut maps = LifetimeMaps::with_planes(h, w, wanted);
    // Each task's piece of every written plane: (plane index, values).
    let tasks = (h * w).div_ceil(TASK_PIXELS);
    let mut pieces: Vec<Vec<(usize, &mut [f32])>> = (0..tasks).map(|_| Vec::new()).collect();
    let LifetimeMaps {
        intensity,
        tau_rld,
        tau_iem,
        tau_cmm,
        g,
        s,
        tau_phase,
        tau_mod,
        status,
    } = &mut maps;
    let planes = [
        intensity, tau_rld, tau_iem, tau_cmm, g, s, tau_phase, tau_mod,
    ];
    for (q, plane) in planes.into_iter().enumerate() {
        if !wanted[q] {
            continue;
        }
        let values = plane.as_slice_mut().expect("standard layout");
        for (t, piece) in values.chunks_mut(TASK_PIXELS).enumerate() {
            pieces[t].push((q, piece));
        }
    }
    let status = status.as_slice_mut().expect("standard layout");
    pieces
        .into_par_iter()
        .zip(status.par_chunks_mut(TASK_PIXELS))
        .enumerate()
        .for_each(|(t, (mut out, st))| {
            let p0 = t * TASK_PIXELS;
            let px = &data[p0 * bins..(p0 + st.len()) * bins];
            pixels_dispatch(px, bins, &su, &mut out, st);
        });
    Ok(maps)
}

/// [`pixels_portable`] compiled for AVX2 where the CPU has it (detected at run time).
/// Both give bit-identical results: the same IEEE operations in the same order. (An
/// AVX-512 build of the same code measured no faster: the sums are memory-bound.)
fn pixels_dispatch<T: Count>(
    data: &[T],
    bins: usize,
    su: &Setup,
    out: &mut [(usize, &mut [f32])],
    st: &mut [u8],
) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: `pixels_avx2` only requires AVX2, which the CPU has (checked just above).
        unsafe { pixels_avx2(data, bins, su, out, st) };
        return;
    }
    pixels_portable(data, bins, su, out, st);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn pixels_avx2<T: Count>(
    data: &[T],
    bins: usize,
    su: &Setup,
    out: &mut [(usize, &mut [f32])],
    st: &mut [u8],
) {
    pixels_portable(data, bins, su, out, st);
}

/// One pass per pixel: the sums (exact integer sums for integer counts, f64 for f32
/// counts), then the formulas.
#[inline(always)]
fn pixels_portable<T: Count>(
    data: &[T],
    bins: usize,
    su: &Setup,
    out: &mut [(usize, &mut [f32])],
    st: &mut [u8],
) {
    let mut v = vec![0.0f64; su.m];
    let mut buf = Vec::with_capacity(su.m);
    let range = |p: usize| p * bins + su.first..p * bins + su.first + su.m;
    // Prefetch distance in pixels: PREFETCH_BYTES of counts ahead.
    let ahead = (PREFETCH_BYTES / (bins * std::mem::size_of::<T>()).max(1)).max(1);
    for (p, status) in st.iter_mut().enumerate() {
        if let Some(next) = data.get(range(p + ahead)) {
            prefetch(bytemuck::cast_slice(next));
        }
        let px = &data[range(p)];
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
        for (q, plane) in out.iter_mut() {
            plane[p] = x[*q] as f32;
        }
        *status = s;
    }
}
