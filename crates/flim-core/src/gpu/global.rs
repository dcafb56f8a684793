//! Global analysis on the GPU ([`fit_global_on`]): the host picks the fitted pixels and
//! builds the segments exactly as [`crate::fit_global`] does (f64 photon counts, so
//! thresholds and masks agree to the pixel), copies the fitted pixels' decays segment by
//! segment into page-locked memory and sums each segment's decay (f64) on all cores; the
//! device fits the summed decays (the per-pixel fit kernel) and then every segment
//! (`gpu_kernels::flim::global`, one cube per segment); derived maps are built on the host.
//!
//! Segments are never split: work goes to the device in chunks of whole segments that fit
//! its memory budget, and a single segment that does not fit is an error that says so.

use crate::error::Result;
use crate::gpu::fit::fit_params;
use crate::model::cube::{Count, Cube};
use crate::model::fit::{FitMaps, FitOptions, FitStatus, MapPixel};
use crate::model::fit_model::{MAX_PARAMS, Offset};
use crate::model::segments::{Segments, segment_pixels};
use gpu_kernels::flim::fit::{self as fk, FitParams};
use gpu_kernels::flim::global::{global_fit, global_planes, scratch_fields};
use gpu_runtime::{Device, HostStaging, with_gpu};
use rayon::prelude::*;
use std::sync::Mutex;

/// Page-locked buffers kept between calls (locking a hundred megabytes costs more than the
/// analysis): the compact decays going up, the parameter planes coming down.
struct Staging {
    input: HostStaging,
    output: HostStaging,
}

static STAGING: Mutex<Option<Staging>> = Mutex::new(None);

/// Pixels whose decays are summed by one task (a whole image is summed on all cores).
const SUM_PIECE: usize = 1024;

/// Sum of the decays (all bins) of `seg`'s pixels, f64 (exact for integer counts).
fn segment_sum<T: Count>(data: &[T], bins: usize, seg: &[usize]) -> Vec<f64> {
    let add = |mut acc: Vec<f64>, px: &[usize]| {
        for &p in px {
            for (a, &c) in acc.iter_mut().zip(&data[p * bins..(p + 1) * bins]) {
                *a += c.into();
            }
        }
        acc
    };
    if seg.len() <= SUM_PIECE {
        return add(vec![0.0; bins], seg);
    }
    seg.par_chunks(SUM_PIECE)
        .fold(|| vec![0.0; bins], add)
        .reduce(
            || vec![0.0; bins],
            |mut a, b| {
                for (x, y) in a.iter_mut().zip(b) {
                    *x += y;
                }
                a
            },
        )
}

/// Consecutive runs of whole segments whose device buffers fit together: `per_pixel` and
/// `per_segment` bytes, at most `budget` in all and `max_buffer` per pixel-sized buffer
/// (`per_buffer` bytes per pixel for the largest). A segment alone over the limits is an
/// error naming its size.
fn chunks(
    segs: &[Vec<usize>],
    per_pixel: u64,
    per_segment: u64,
    per_buffer: u64,
    budget: u64,
    max_buffer: u64,
) -> Result<Vec<std::ops::Range<usize>>> {
    let mut out = Vec::new();
    let (mut start, mut bytes, mut pixels) = (0, 0u64, 0u64);
    for (s, seg) in segs.iter().enumerate() {
        let n = seg.len() as u64;
        let need = n * per_pixel + per_segment;
        if need > budget || n * per_buffer > max_buffer {
            return Err(gpu_runtime::Error::InvalidLaunch {
                kernel: "flim_global".into(),
                why: format!(
                    "a segment of {n} pixels needs {need} bytes on the device ({} in one buffer), more than its budget of {budget} ({max_buffer} per buffer): use smaller segments or the CPU",
                    n * per_buffer
                ),
            }
            .into());
        }
        if s > start && (bytes + need > budget || (pixels + n) * per_buffer > max_buffer) {
            out.push(start..s);
            (start, bytes, pixels) = (s, 0, 0);
        }
        bytes += need;
        pixels += n;
    }
    if start < segs.len() {
        out.push(start..segs.len());
    }
    Ok(out)
}

/// [`crate::fit_global`] on a GPU `device`: lifetimes (and a fitted IRF shift) shared per
/// segment, amplitudes (and a fitted offset) per pixel, by the f32 kernel on a GPU (one
/// cube per segment). Pixels under the threshold, outside the
/// mask or outside every segment are masked; a failed segment's pixels are `Failed`, never
/// `Converged`. Tolerances in tests/tests/gpu_vs_cpu/flim_global.rs.
#[allow(clippy::too_many_lines)]
pub(crate) fn fit_global<T: Count>(
    cube: &Cube<T>,
    opts: &FitOptions,
    segments: &Segments,
    device: &Device,
) -> Result<FitMaps> {
    let (h, w) = cube.shape();
    let pixels = h * w;
    let bins = cube.bins();
    let su = opts.setup(bins, cube.bin_ns(), cube.period_ns(), (h, w))?;
    let k = su.k;
    let np = su.np();
    let data = cube.as_slice();
    let _span = tracing::debug_span!("flim_fit_global_on", pixels).entered();
    // Photons and fitted pixels as flim-core's fit_global counts them (f64).
    let photons: Vec<f64> = data
        .par_chunks(bins.max(1))
        .map(|px| {
            px[su.first..su.first + su.m]
                .iter()
                .map(|&c| c.into())
                .sum()
        })
        .collect();
    let mask = opts.mask().map(|m| m.as_standard_layout().into_owned());
    let mask = mask
        .as_ref()
        .map(|m| m.as_slice().expect("standard layout"));
    let fitted: Vec<bool> = (0..pixels)
        .map(|p| photons[p] >= opts.threshold() && photons[p] > 0.0 && mask.is_none_or(|m| m[p]))
        .collect();
    let segs = segment_pixels(segments, &fitted, (h, w))?;
    let mut px: Vec<MapPixel> = photons.iter().map(|&n| MapPixel::masked(n)).collect();
    if segs.is_empty() {
        return Ok(FitMaps::from_pixels(h, w, k, &px));
    }
    let params = fit_params::<T>(&su, opts, bins);
    let planes = global_planes(&params);
    let px_bytes = bins * std::mem::size_of::<T>();
    let fields = scratch_fields(np as u32) as u64;
    let irf: Vec<f32> = su
        .irf
        .as_ref()
        .map_or_else(|| vec![0.0], |v| v.iter().map(|&x| x as f32).collect());
    let mut init = [0.0f32; 3];
    if let Some(t) = opts.lifetimes() {
        for (d, s) in init.iter_mut().zip(t) {
            *d = *s as f32;
        }
    }
    // Degrees of freedom per pixel: its bins less its own parameters and its share of the
    // shared ones (as fit_global).
    let nl = k + usize::from(su.offset == Offset::Fitted);
    let dof = (su.m - np) as f64;
    let chi2 = |obj: f64, n: usize| obj / (dof + (np - nl) as f64 * (1.0 - 1.0 / n as f64));
    let bytes: &[u8] = bytemuck::cast_slice(data);
    with_gpu!(device, |gpu| {
        // Per pixel: decay, scratch, planes; per segment: its sum, start fit, status, CSR;
        // fixed: IRF and start lifetimes. A chunk gets under half of what is left: the last
        // chunk's buffers may not have gone back to the device's pool yet.
        let per_buffer = (2 * fields * 4).max(px_bytes as u64);
        let fixed = (irf.len() + 16) as u64 * 4;
        let runs = chunks(
            &segs,
            px_bytes as u64 + (2 * fields + planes as u64) * 4,
            bins as u64 * 4 + (planes as u64 + 8) * 4,
            per_buffer,
            gpu.budget().bytes().saturating_sub(fixed) / 20 * 9,
            gpu.info().max_buffer_bytes.unwrap_or(u64::MAX),
        )
        .map_err(|e| gpu_runtime::Error::Backend {
            device: gpu.info().id.clone(),
            message: e.to_string(),
        })?;
        let irf_dev = gpu.upload(&irf)?;
        let init_dev = gpu.upload(&init)?;
        let mut cache = STAGING
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        for run in runs {
            let segs = &segs[run];
            let order: Vec<usize> = segs.iter().flatten().copied().collect();
            let n = order.len();
            let mut offsets = Vec::with_capacity(segs.len() + 1);
            offsets.push(0u32);
            for s in segs {
                offsets.push(offsets[offsets.len() - 1] + s.len() as u32);
            }
            let words = (n * px_bytes).div_ceil(4);
            let out_bytes = planes * n * 4;
            let raw = gpu.can_write_in_place();
            let fits = cache.as_ref().is_some_and(|s| {
                s.input.is_pinned() == raw
                    && s.input.len() >= words * 4
                    && s.output.len() >= out_bytes
            });
            if !fits {
                *cache = None; // free the old buffers before locking new ones
                *cache = Some(Staging {
                    input: gpu.host_staging(words * 4),
                    output: gpu.host_staging(out_bytes),
                });
            }
            let staging = cache.as_mut().expect("allocated above");
            // Decays segment by segment, and each segment's sum, on all cores.
            let (sums, ()) = tracing::debug_span!("flim_global_stage", pixels = n).in_scope(|| {
                let dst = &mut staging.input.as_bytes_mut()[..words * 4];
                let (decays, pad) = dst.split_at_mut(n * px_bytes);
                rayon::join(
                    || {
                        segs.par_iter()
                            .flat_map_iter(|s| segment_sum(data, bins, s))
                            .map(|v| (v as f32).to_bits())
                            .collect::<Vec<u32>>()
                    },
                    || {
                        pad.fill(0);
                        decays
                            .par_chunks_mut(px_bytes)
                            .zip(order.par_iter())
                            .with_min_len(64)
                            .for_each(|(d, &p)| {
                                d.copy_from_slice(&bytes[p * px_bytes..(p + 1) * px_bytes]);
                            });
                    },
                )
            });
            let words_dev = gpu.upload_staged::<u32>(&staging.input, words)?;
            let sums_dev = gpu.upload(&sums)?;
            let out = gpu.empty::<f32>(planes * n)?;
            let status = gpu.empty::<u32>(segs.len())?;
            let p = FitParams {
                pixels: n as u32,
                ..params
            };
            global_fit(
                gpu, &words_dev, &sums_dev, &irf_dev, &init_dev, &offsets, &p, &out, &status,
            )?;
            gpu.download_staged(&out, &mut staging.output)?;
            let status = gpu.download(&status)?;
            let vals: &[f32] = bytemuck::cast_slice(&staging.output.as_bytes()[..out_bytes]);
            let _maps = tracing::debug_span!("flim_global_maps", pixels = n).entered();
            let done: Vec<MapPixel> = (0..segs.len())
                .into_par_iter()
                .flat_map_iter(|s| {
                    let word = status[s];
                    let st = if word & 0xFF == fk::FIT_CONVERGED {
                        FitStatus::Converged
                    } else {
                        FitStatus::Failed
                    };
                    let len = segs[s].len();
                    let chi2 = &chi2;
                    let (su, order, photons, vals) = (&su, &order, &photons, vals);
                    (offsets[s] as usize..offsets[s + 1] as usize).map(move |i| {
                        let mut theta = [0.0f64; MAX_PARAMS];
                        for (q, t) in theta.iter_mut().enumerate().take(np) {
                            *t = f64::from(vals[q * n + i]);
                        }
                        let obj = f64::from(vals[np * n + i]);
                        MapPixel::from_theta(su, &theta, obj, photons[order[i]], word >> 8, st)
                            .with_chi2_red(chi2(obj, len))
                    })
                })
                .collect();
            for (i, &p) in order.iter().enumerate() {
                px[p] = done[i];
            }
        }
        Ok(())
    })?;
    Ok(FitMaps::from_pixels(h, w, k, &px))
}
