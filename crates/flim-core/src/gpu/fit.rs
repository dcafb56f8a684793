//! Per-pixel fits on the GPU (`gpu_kernels::flim::fit`), f32.

use crate::error::Result;
use crate::gpu::pipeline::{PixelJob, run_pixels};
use crate::model::cube::{Count, Cube};
use crate::model::fit::{Estimator, FitMaps, FitOptions, FitStatus, MapPixel};
use crate::model::fit_model::{MAX_PARAMS, ModelSetup, Offset, Shift};
use gpu_kernels::flim::fit::{self as fk, FitParams};
use gpu_runtime::{Device, Gpu, GpuArray, with_gpu};

/// Fewest pixels per fit launch: with two chunks in flight, about 1.5 waves of the fit
/// kernel on a 132-multiprocessor GPU (5 blocks of 256 units at 47 registers).
const FIT_CHUNK_PIXELS: usize = 1 << 17;

/// [`crate::fit`] on a GPU `device`: the f32 kernel (one unit per pixel); derived maps
/// (sorting, fractions, means, reduced chi^2) are computed from the parameters on the host
/// as on the CPU path. Tolerances in tests/tests/gpu_vs_cpu/flim.rs.
pub(crate) fn fit<T: Count>(cube: &Cube<T>, opts: &FitOptions, device: &Device) -> Result<FitMaps> {
    let (h, w) = cube.shape();
    let su = opts.setup(cube.bins(), cube.bin_ns(), cube.period_ns(), (h, w))?;
    let k = su.k;
    let np = su.np();
    let params = FitParams {
        threshold: opts.threshold() as f32,
        use_mask: opts.mask().is_some(),
        ..fit_params::<T>(&su, opts, cube.bins())
    };
    let planes = params.planes();
    let irf: Vec<f32> = su
        .irf
        .as_ref()
        .map_or_else(|| vec![0.0], |v| v.iter().map(|&x| x as f32).collect());
    let mask: Vec<u32> = opts
        .mask()
        .map_or_else(|| vec![0], |m| m.iter().map(|&b| u32::from(b)).collect());
    let mut init = [0.0f32; 3];
    if let Some(t) = opts.lifetimes() {
        for (d, s) in init.iter_mut().zip(t) {
            *d = *s as f32;
        }
    }
    let _span = tracing::debug_span!("flim_fit_on", pixels = h * w).entered();
    // Each chunk's maps are built (on all cores) as it comes back, while the GPU fits the
    // next one.
    let mut maps = FitMaps::unfilled(h, w, k);
    let mut sink = |range: std::ops::Range<usize>, vals: &[f32], status: &[u32]| {
        let (n, start) = (range.len(), range.start);
        let _maps = tracing::debug_span!("flim_fit_maps", pixels = n).entered();
        maps.fill(range, |p| {
            let i = p - start;
            let st = status[i];
            let photons = f64::from(vals[(np + 1) * n + i]);
            let code = st & 0xFF;
            if code == fk::FIT_MASKED {
                return MapPixel::masked(photons);
            }
            let mut theta = [0.0f64; MAX_PARAMS];
            for (q, t) in theta.iter_mut().enumerate().take(np) {
                *t = f64::from(vals[q * n + i]);
            }
            let status = if code == fk::FIT_CONVERGED {
                FitStatus::Converged
            } else {
                FitStatus::Failed
            };
            MapPixel::from_theta(
                &su,
                &theta,
                f64::from(vals[np * n + i]),
                photons,
                st >> 8,
                status,
            )
        });
    };
    with_gpu!(device, |gpu| {
        let irf_dev = gpu.upload(&irf)?;
        let mask_dev = gpu.upload(&mask)?;
        let init_dev = gpu.upload(&init)?;
        gpu.sync()?;
        let launch = |gpu: &Gpu<_>,
                      words: &GpuArray<u32>,
                      first: usize,
                      n: usize,
                      out: &GpuArray<f32>,
                      st: &GpuArray<u32>| {
            let p = FitParams {
                pixels: n as u32,
                mask_offset: first as u32,
                ..params
            };
            fk::fit(gpu, words, &irf_dev, &mask_dev, &init_dev, &p, out, st)
        };
        run_pixels(
            gpu,
            cube,
            &PixelJob {
                planes,
                min_chunk_pixels: FIT_CHUNK_PIXELS,
                launch: &launch,
                tuning: opts.tuning(),
            },
            &mut sink,
        )
    })?;
    Ok(maps)
}

/// The fit kernels' settings for `su` and `opts` with counts of type `T` (`pixels` = 0, no
/// threshold, no mask: global analysis picks its pixels on the host).
pub(crate) fn fit_params<T: Count>(su: &ModelSetup, opts: &FitOptions, bins: usize) -> FitParams {
    let (irf_mode, shift) = match (&su.irf, su.shift) {
        (None, _) => (fk::IRF_NONE, 0.0),
        (Some(_), Shift::Fixed(s)) => (fk::IRF_FIXED, s),
        (Some(_), Shift::Fitted(s)) => (fk::IRF_FITTED, s),
    };
    FitParams {
        pixels: 0,
        mask_offset: 0,
        stride: bins as u32,
        first: su.first as u32,
        m: su.m as u32,
        h: su.h as f32,
        period_bins: su.period_bins as f32,
        tau_bounds: (su.tau_min as f32, su.tau_max as f32),
        offset: match su.offset {
            Offset::Fixed(z) => z as f32,
            Offset::Fitted => 0.0,
        },
        shift: shift as f32,
        threshold: 0.0,
        max_iterations: opts.max_iterations(),
        tolerance: opts.tolerance() as f32,
        kind: T::KIND,
        components: su.k as u32,
        estimator: match opts.estimator() {
            Estimator::LeastSquaresNeyman => fk::EST_NEYMAN,
            Estimator::LeastSquaresPearson => fk::EST_PEARSON,
            Estimator::MaximumLikelihood => fk::EST_POISSON,
            Estimator::LeastSquaresModel => fk::EST_MODEL,
        },
        offset_fitted: su.offset == Offset::Fitted,
        irf_mode,
        use_mask: false,
    }
}
