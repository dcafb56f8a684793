//! The public verbs, one form each: `op(input, &OpParams, &Device) -> Result<(OpMaps, OpInfo)>`
//! ([`stream`] hands each frame's maps to a sink and returns its report). This file holds
//! the crate's only CPU-vs-GPU branch: every verb runs the f64 CPU reference of [`crate::cpu`]
//! on the CPU device and the kernels through `crate::gpu` on a GPU, with the same
//! parameters and the same result types.

use crate::cpu;
use crate::error::{Error, Result};
use crate::gpu;
use crate::io::FrameSource;
use gpu_runtime::Provenance;

/// The arithmetic of integer frames' contrast, on either path.
const INTEGER_SUMS: &str = "exact integer window sums, f32 maps";
/// The arithmetic of float frames' contrast (CPU path only).
const FLOAT_SUMS: &str = "f64 window sums of f32 frames, f32 maps";

use crate::model::beta::{Calibration, CalibrationInfo, CalibrationParams};
use crate::model::contrast::{ContrastInfo, ContrastMaps, ContrastParams, Mode};
use crate::model::flags;
use crate::model::flow::{FlowInfo, FlowParams, TauMap, check_beta, check_exposure};
use crate::model::frame::Frame;
use crate::model::mesi::{MesiInfo, MesiInput, MesiMaps, MesiOptions, check_inputs};
use crate::model::roi::{RoiInfo, RoiParams, Table};
use crate::model::stream::{FrameMaps, StreamParams, StreamReport};
use crate::model::types::RawStack;
use gpu_runtime::{Backend, Device};
use ndarray::{ArrayView2, ArrayView3};
use std::sync::mpsc::sync_channel;
use std::time::{Duration, Instant};

/// What [`contrast`] or [`stream`] costs on each side for `frames` frames of `pixels`
/// pixels, for `auto`'s choice between a GPU and the CPU ([`Device::for_job`]). Rates per
/// pixel and frame, reading and writing excluded (they are the same on both): the CPU's
/// sliding sums from the 2-core CI machine (one 1280x1024 frame, 7x7 window: ~50 ms of
/// compute on 2 cores), the GPU's from transfers at ~10 GB/s (2 bytes up, 8 down); first
/// compilation 0.3 s (H200).
///
/// ```
/// let frame = speckle_core::job_estimate(1280 * 1024, 1);
/// assert!(frame.cpu_seconds(16) < gpu_runtime::GPU_OPEN_SECONDS);
/// ```
pub fn job_estimate(pixels: usize, frames: usize) -> gpu_runtime::JobEstimate {
    gpu_runtime::JobEstimate::per_item((pixels * frames) as f64, 7.5e-8, 1.0e-9)
        .with_first_compile(0.3)
}

/// Contrast of `stack` on `device`: the GPU kernels for integer pixels on a GPU, the CPU
/// reference otherwise (float pixels always run on the CPU, which sums them in f64).
///
/// ```
/// use ndarray::Array3;
/// use speckle_core::{ContrastParams, RawStack, Window, contrast};
/// let stack = RawStack::U16(Array3::from_shape_fn((2, 32, 40), |(t, y, x)| ((t + 3 * y + 7 * x) % 23 + 10) as u16));
/// let params = ContrastParams::spatial(Window::new(5)?);
/// let (maps, info) = contrast(&stack, &params, &gpu_runtime::Device::cpu())?;
/// assert_eq!(maps.k.dim(), (2, 32, 40));
/// assert_eq!(info.backend, gpu_runtime::Backend::Cpu);
/// # Ok::<(), speckle_core::Error>(())
/// ```
pub fn contrast(
    stack: &RawStack,
    params: &ContrastParams,
    device: &Device,
) -> Result<(ContrastMaps, ContrastInfo)> {
    let started = std::time::SystemTime::now();
    if device.is_gpu() {
        let on_gpu = |maps| {
            Ok((
                maps,
                ContrastInfo {
                    backend: device.backend(),
                    provenance: Provenance::new(device, INTEGER_SUMS, started),
                },
            ))
        };
        match stack {
            RawStack::U8(s) => return on_gpu(gpu::contrast::contrast(s.view(), params, device)?),
            RawStack::U16(s) => return on_gpu(gpu::contrast::contrast(s.view(), params, device)?),
            RawStack::F32(_) => tracing::warn!(
                "float frames run on the CPU path (the GPU kernels sum integers exactly)"
            ),
        }
    }
    let maps = match stack {
        RawStack::U8(s) => cpu::contrast::contrast(s.view(), params)?,
        RawStack::U16(s) => cpu::contrast::contrast(s.view(), params)?,
        RawStack::F32(s) => cpu::contrast::contrast(s.view(), params)?,
    };
    let precision = match stack {
        RawStack::F32(_) => FLOAT_SUMS,
        _ => INTEGER_SUMS,
    };
    Ok((
        maps,
        ContrastInfo {
            backend: Backend::Cpu,
            provenance: Provenance::new(&Device::cpu(), precision, started),
        },
    ))
}

/// tau_c of every pixel of the K map `k`: one GPU thread per pixel (f32 Newton inversion,
/// `gpu_kernels::speckle::tau_c`) on a GPU, the f64 CPU reference otherwise.
///
/// ```
/// use ndarray::array;
/// use speckle_core::{FlowParams, flow};
/// let k = array![[0.2f32, 0.9], [f32::NAN, 0.0]];
/// let (m, _) = flow(k.view(), &FlowParams::new(5e-3, 0.5), &gpu_runtime::Device::cpu())?;
/// assert_eq!(m.tau_c[[0, 1]], f32::INFINITY); // K^2 = 0.81 >= beta
/// # Ok::<(), speckle_core::Error>(())
/// ```
pub fn flow(
    k: ArrayView2<f32>,
    params: &FlowParams,
    device: &Device,
) -> Result<(TauMap, FlowInfo)> {
    let started = std::time::SystemTime::now();
    if !device.is_gpu() {
        let map = cpu::tau_c::tau_c_map(k, params.exposure_s, params.beta, params.model)?;
        let info = FlowInfo::of(&map, Backend::Cpu, Provenance::new(device, "f64", started));
        return Ok((map, info));
    }
    let t = check_exposure(params.exposure_s)?;
    let beta = check_beta(params.beta)?;
    let map = gpu::tau_c::tau_c_map(k, t, beta, params.model, device)?;
    let info = FlowInfo::of(
        &map,
        device.backend(),
        Provenance::new(device, "f32", started),
    );
    Ok((map, info))
}

/// MESI fit of every pixel of a multi-exposure K stack: one GPU thread per pixel (f32,
/// `gpu_kernels::speckle::mesi_fit`) on a GPU, the f64 CPU reference otherwise. Every
/// pixel has a [`crate::FitStatus`] (`maps.status`) and a residual (`maps.rss`,
/// [`MesiMaps::residual_rms`]); [`MesiMaps::masked`] blanks the fits that did not converge,
/// and `info.status_counts` counts each status.
///
/// ```
/// use ndarray::Array3;
/// use speckle_core::{FitStatus, MesiInput, MesiOptions, MesiParams, mesi, sim::simulate_mesi};
/// // Seven exposures of a 2x3 image, every pixel the MESI curve of tau_c = 1 ms.
/// let truth = MesiParams { tau_c: 1e-3, rho: 0.9, v_noise: 0.001, beta: 0.5 };
/// let exposures = [5e-5, 1e-4, 5e-4, 1e-3, 5e-3, 1e-2, 5e-2];
/// let k = simulate_mesi(&truth, &exposures, 0.0, 1);
/// let stack = Array3::from_shape_fn((7, 2, 3), |(e, _, _)| k[e] as f32);
/// let input = MesiInput { k: stack.view(), exposures_s: &exposures };
/// let (maps, info) = mesi(input, &MesiOptions::fixed_beta(0.5), &gpu_runtime::Device::cpu())?;
/// assert_eq!(maps.status[[1, 2]], FitStatus::Converged as u8);
/// assert_eq!(info.status_counts[0], 6); // all six pixels converged
/// assert!((maps.tau_c[[1, 2]] / 1e-3 - 1.0).abs() < 0.01, "{}", maps.tau_c[[1, 2]]);
/// # Ok::<(), speckle_core::Error>(())
/// ```
pub fn mesi(
    input: MesiInput<'_>,
    params: &MesiOptions,
    device: &Device,
) -> Result<(MesiMaps, MesiInfo)> {
    let started = std::time::SystemTime::now();
    if !device.is_gpu() {
        let maps = cpu::mesi::fit_mesi_map(input.k, input.exposures_s, params)?;
        let info = MesiInfo {
            backend: Backend::Cpu,
            status_counts: maps.status_counts(),
            provenance: Provenance::new(device, "f64", started),
        };
        return Ok((maps, info));
    }
    check_inputs(input.k.dim().0, input.exposures_s, params)?;
    let maps = gpu::mesi::fit_mesi_map(input.k, input.exposures_s, params, device)?;
    let info = MesiInfo {
        backend: device.backend(),
        status_counts: maps.status_counts(),
        provenance: Provenance::new(device, "f32", started),
    };
    Ok((maps, info))
}

/// Coherence factor beta from a recording of a static target (paper, a fixed phantom):
/// the mean K^2 over the static pixels (`params.region`, or the whole frame), skipping
/// undefined and saturated windows, with the spread, the optics' maximum for the measured
/// speckle size and warnings (see [`crate::model::beta`]). Spatial mode only: temporal K
/// of a static target is near 0. Write the result with [`Calibration::write`] and give it to
/// flow maps as their beta.
///
/// ```
/// use speckle_core::sim::StaticSpeckle;
/// use speckle_core::{CalibrationParams, ContrastParams, RawStack, Window, calibrate};
/// let frame = StaticSpeckle::new(96, 96).with_speckle_size(3.0).with_seed(2).simulate()?;
/// let stack = RawStack::U16(frame.mapv(|v| (v * 1000.0).min(65535.0) as u16).insert_axis(ndarray::Axis(0)));
/// let params = CalibrationParams::new(ContrastParams::spatial(Window::new(7)?));
/// let (cal, _) = calibrate(&stack, &params, &gpu_runtime::Device::cpu())?;
/// assert!(cal.beta > 0.3 && cal.beta < 1.0, "{cal:?}");
/// assert_eq!(cal.window, Some(7));
/// # Ok::<(), speckle_core::Error>(())
/// ```
pub fn calibrate(
    stack: &RawStack,
    params: &CalibrationParams,
    device: &Device,
) -> Result<(Calibration, CalibrationInfo)> {
    let p = &params.contrast;
    if p.mode != Mode::Spatial {
        return Err(Error::InvalidParameter {
            name: "mode",
            value: format!("{:?}", p.mode).to_lowercase(),
            why: "beta is calibrated with spatial contrast: the temporal K of a static target \
                  is near 0; use --mode spatial with the window of the flow maps"
                .into(),
        });
    }
    let (maps, info) = contrast(stack, p, device)?;
    let k = cpu::rms_over_frames(maps.k.view());
    let (h, w) = k.dim();
    let saturated = maps.flags.map_axis(ndarray::Axis(0), |f| {
        f.iter().any(|&f| f & flags::SATURATED != 0)
    });
    let chosen: Vec<usize> = match &params.region {
        Some(r) => r.pixels(h, w)?,
        None => (0..h * w).collect(),
    };
    let (ks, sat) = (k.as_slice().expect("standard layout"), saturated.iter());
    let sat: Vec<bool> = sat.copied().collect();
    let mut k2 = Vec::with_capacity(chosen.len());
    let mut n_sat = 0usize;
    for &i in &chosen {
        if sat[i] {
            n_sat += 1;
        } else if ks[i].is_finite() {
            k2.push(f64::from(ks[i]) * f64::from(ks[i]));
        }
    }
    if k2.is_empty() {
        return Err(Error::InvalidParameter {
            name: "calibration region",
            value: format!("{} pixels", chosen.len()),
            why: "no pixel there has a finite, unsaturated K; choose a lit, unsaturated static \
                  region (or lower the exposure)"
                .into(),
        });
    }
    let n = k2.len() as f64;
    let beta = k2.iter().sum::<f64>() / n;
    let beta_sd = (k2.iter().map(|v| (v - beta) * (v - beta)).sum::<f64>() / n).sqrt();
    let lag1 = cpu::beta::stack_lag1_correlation(stack);
    let beta_max = lag1.map(|c| cpu::beta::beta_max_for(c, Some(p.window.size())));
    let saturated_fraction = n_sat as f64 / chosen.len() as f64;
    let mut warnings = Vec::new();
    if saturated_fraction > 0.01 {
        warnings.push(format!(
            "{:.1}% of the region's windows hold saturated pixels and were left out; lower the \
             exposure or the laser power",
            100.0 * saturated_fraction
        ));
    }
    if let Some(max) = beta_max
        && beta < cpu::beta::FAR_BELOW_BETA_MAX * max
    {
        warnings.push(format!(
            "beta {beta:.4} is far below the {max:.3} the optics allow for this speckle size: \
             is the target really static (no vibration, no scattering liquid)?"
        ));
    }
    if beta_sd > 0.5 * beta {
        warnings.push(format!(
            "K^2 varies by {:.0}% over the region: it may not be one static material",
            100.0 * beta_sd / beta
        ));
    }
    let cal = Calibration {
        beta,
        beta_sd,
        method: format!(
            "mean K^2 over {} static pixels (spatial {}x{} window, {:?} border, K^2 averaged \
             over {} frame(s))",
            k2.len(),
            p.window.size(),
            p.window.size(),
            p.border,
            stack.dim().0
        ),
        pixels: k2.len(),
        frames: stack.dim().0,
        mode: "spatial".into(),
        window: Some(p.window.size()),
        temporal_frames: None,
        border: format!("{:?}", p.border).to_lowercase(),
        exposure_s: p.exposure_s,
        bit_depth: None,
        saturated_fraction,
        lag1_correlation: lag1,
        beta_max,
        source: params.source.clone(),
        warnings,
    };
    Ok((
        cal,
        CalibrationInfo {
            backend: info.backend,
            provenance: info.provenance,
        },
    ))
}

/// Mean of each ROI in each frame of `stack` (frame, row, column), see
/// [`cpu::time_course`]. Runs on the CPU on every device: a time course reads each pixel
/// once, so a GPU would only add copies.
///
/// ```
/// use ndarray::Array3;
/// use speckle_core::{Roi, RoiParams, roi};
/// let k = Array3::from_shape_fn((3, 8, 8), |(f, _, _)| 0.1 * f as f32);
/// let (t, _) = roi(k.view(), &RoiParams::new(vec![Roi::rect(0, 0, 4, 4)]), &gpu_runtime::Device::cpu())?;
/// assert!((t.mean(2, 0) - 0.2).abs() < 1e-6);
/// # Ok::<(), speckle_core::Error>(())
/// ```
pub fn roi(
    stack: ArrayView3<'_, f32>,
    params: &RoiParams,
    device: &Device,
) -> Result<(Table, RoiInfo)> {
    let _ = device;
    let started = std::time::SystemTime::now();
    let mut table = cpu::roi::time_course(stack, &params.rois)?;
    if !params.names.is_empty() {
        table = table.with_names(params.names.clone())?;
    }
    Ok((
        table,
        RoiInfo {
            backend: Backend::Cpu,
            provenance: Provenance::new(&Device::cpu(), "f64 means", started),
        },
    ))
}

/// The GPU streaming path for one pixel type.
type StreamFn = fn(
    Frame,
    &std::sync::mpsc::Receiver<Result<Frame>>,
    &StreamParams,
    &Device,
    &mut dyn FnMut(FrameMaps<'_>) -> Result<()>,
) -> Result<usize>;

/// Spatial contrast of a stream of frames; `sink` sees every frame's maps in order.
///
/// ```
/// use ndarray::Array2;
/// use speckle_core::io::Frame;
/// use speckle_core::{ContrastParams, StreamParams, Window, stream};
/// let frames = (0..10u16).map(|t| Ok(Frame::U16(Array2::from_shape_fn((16, 20), |(y, x)| (x as u16 * 3 + y as u16 + t) % 40 + 1))));
/// let mut seen = Vec::new();
/// let params = StreamParams::new(ContrastParams::spatial(Window::new(5)?), 4);
/// let report = stream(frames, &params, &gpu_runtime::Device::cpu(), |m| {
///     seen.push(m.index);
///     Ok(())
/// })?;
/// assert_eq!(seen, (0..10).collect::<Vec<_>>());
/// assert_eq!(report.frames, 10);
/// # Ok::<(), speckle_core::Error>(())
/// ```
pub fn stream<S, F>(
    source: S,
    params: &StreamParams,
    device: &Device,
    mut sink: F,
) -> Result<StreamReport>
where
    S: FrameSource + Send,
    F: FnMut(FrameMaps<'_>) -> Result<()>,
{
    if params.contrast.mode != Mode::Spatial {
        return Err(Error::InvalidParameter {
            name: "mode",
            value: format!("{:?}", params.contrast.mode),
            why: "streaming computes spatial contrast; use the stack API for temporal contrast"
                .into(),
        });
    }
    let params = StreamParams {
        batch: params.batch.max(1),
        ..*params
    };
    let batch = params.batch;
    let start = Instant::now();
    let started = std::time::SystemTime::now();
    let mut done = 0usize;
    let mut ran_on_gpu = false;
    let mut float_frames = false;
    std::thread::scope(|scope| -> Result<()> {
        // Two batches in flight at most: one being read, one being computed.
        let (tx, rx) = sync_channel::<Result<Frame>>(2 * batch);
        scope.spawn(move || {
            for item in source {
                let stop = item.is_err();
                if tx.send(item).is_err() || stop {
                    break;
                }
            }
        });
        let first = match rx.recv() {
            Ok(item) => item?,
            Err(_) => return Ok(()), // empty stream
        };
        float_frames = matches!(first, Frame::F32(_));
        // Integer frames on a GPU take the overlapped zero-copy path; the rest the CPU one.
        if device.is_gpu() {
            let overlapped = match first {
                Frame::U16(_) => Some(gpu::stream::stream_spatial::<u16> as StreamFn),
                Frame::U8(_) => Some(gpu::stream::stream_spatial::<u8> as StreamFn),
                Frame::F32(_) => {
                    tracing::warn!(
                        "float frames run on the CPU path (the GPU kernels sum integers exactly)"
                    );
                    None
                }
            };
            if let Some(stream) = overlapped {
                ran_on_gpu = true;
                done = stream(first, &rx, &params, device, &mut sink)?;
                return Ok(());
            }
        }
        done = cpu::stream::run(first, &rx, &params.contrast, batch, &mut sink)?;
        Ok(())
    })?;
    let seconds = start
        .elapsed()
        .as_secs_f64()
        .max(Duration::from_nanos(1).as_secs_f64());
    let provenance = if ran_on_gpu {
        Provenance::new(device, INTEGER_SUMS, started)
    } else if float_frames {
        Provenance::new(&Device::cpu(), FLOAT_SUMS, started)
    } else {
        Provenance::new(&Device::cpu(), INTEGER_SUMS, started)
    };
    Ok(StreamReport {
        frames: done,
        seconds,
        frames_per_second: done as f64 / seconds,
        provenance,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::window::Window;
    use ndarray::{Array2, Axis};

    #[test]
    fn stream_results_equal_the_stack_results_in_order() {
        let frames: Vec<Array2<u16>> = (0..7u16)
            .map(|t| {
                Array2::from_shape_fn((12, 15), |(y, x)| {
                    (x as u16 * 7 + y as u16 * 3 + t * 11) % 90 + 1
                })
            })
            .collect();
        let params = ContrastParams::spatial(Window::new(3).unwrap())
            .with_exposure(1e-3)
            .unwrap();
        let views: Vec<_> = frames.iter().map(|f| f.view()).collect();
        let stack = RawStack::U16(ndarray::stack(Axis(0), &views).unwrap());
        let (want, _) = contrast(&stack, &params, &Device::cpu()).unwrap();
        let mut got = Vec::new();
        let src = frames.into_iter().map(|f| Ok(Frame::U16(f)));
        let report = stream(src, &StreamParams::new(params, 3), &Device::cpu(), |m| {
            got.push((m.index, m.k.to_owned(), m.sfi.map(|s| s.to_owned())));
            Ok(())
        })
        .unwrap();
        assert_eq!(report.frames, 7);
        for (i, (index, k, sfi)) in got.into_iter().enumerate() {
            assert_eq!(index, i);
            assert_eq!(k, want.k.index_axis(Axis(0), i));
            assert_eq!(
                sfi.unwrap(),
                want.sfi.as_ref().unwrap().index_axis(Axis(0), i)
            );
        }
    }

    #[test]
    fn a_frame_of_another_size_stops_the_stream_with_its_index() {
        let mut frames: Vec<Result<Frame>> = (0..4)
            .map(|_| Ok(Frame::U8(Array2::from_elem((8, 8), 5))))
            .collect();
        frames.push(Ok(Frame::U8(Array2::from_elem((8, 9), 5))));
        let err = stream(
            frames.into_iter(),
            &StreamParams::new(ContrastParams::spatial(Window::new(3).unwrap()), 8),
            &Device::cpu(),
            |_| Ok(()),
        )
        .unwrap_err();
        assert!(err.to_string().contains("stream frame 4"), "{err}");
    }

    #[test]
    fn a_source_error_is_returned_not_swallowed() {
        let frames = vec![
            Ok(Frame::U8(Array2::from_elem((8, 8), 5))),
            Err(Error::StreamClosed),
        ];
        assert!(
            stream(
                frames.into_iter(),
                &StreamParams::new(ContrastParams::spatial(Window::new(3).unwrap()), 1),
                &Device::cpu(),
                |_| Ok(())
            )
            .is_err()
        );
    }
}
