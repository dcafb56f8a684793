//! Speckle benchmarks (issue 3): spatial K + SFI kernel time and end-to-end streaming on
//! the GPU against the host-link and memory-bandwidth bounds; the same workloads on the CPU;
//! temporal K over 25 frames; MESI (6 exposures) and tau_c maps per megapixel.

use crate::group::{Options, measurement};
use crate::report::Measurement;
use anyhow::Result;
use gpu_kernels::speckle::{self as kernels, PixelBits, SpatialParams};
use gpu_runtime::{Device, Gpu, KnownRuntime, Timing, bench, with_gpu};
use ndarray::{Array2, Array3};
use speckle_core::sim::simulate_mesi;
use speckle_core::{
    ContrastParams, FlowModel, FlowParams, Frame, GpuTuning, MesiInput, MesiOptions, MesiParams,
    RawStack, StreamParams, Window, contrast, flow, mesi, stream,
};

const SIZES: [(usize, usize); 3] = [(1392, 1040), (2048, 2048), (4000, 4000)];

fn frame_u16(w: usize, h: usize, seed: u64) -> Array2<u16> {
    let mut s = seed | 1;
    Array2::from_shape_fn((h, w), |_| {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        (200 + s % 3800) as u16
    })
}

pub fn run(device: &Device, opts: &Options, earlier: &[Measurement]) -> Result<Vec<Measurement>> {
    if device.is_gpu() {
        let link = link_rates(earlier);
        let bandwidth = earlier
            .iter()
            .find(|m| m.name.starts_with("axpy"))
            .map(|m| m.value);
        let mut out = with_gpu!(device, |gpu| kernel_times(gpu, opts, bandwidth))?;
        out.extend(streaming(device, opts, link)?);
        out.extend(temporal(device, opts)?);
        out.extend(flow_maps(device, opts)?);
        Ok(out)
    } else {
        let mut out = cpu_spatial(opts)?;
        out.extend(temporal(device, opts)?);
        out.extend(flow_maps(device, opts)?);
        Ok(out)
    }
}

/// (host→device, device→host) GB/s through pinned staging: the best rate measured at any
/// transfer size in the runtime group, so the bound derived from it is the tightest.
fn link_rates(earlier: &[Measurement]) -> Option<(f64, f64)> {
    let best = |prefix: &str| {
        earlier
            .iter()
            .filter(|m| m.name.starts_with(prefix) && m.name.ends_with("MiB pinned"))
            .map(|m| m.value)
            .reduce(f64::max)
    };
    Some((best("host→device")?, best("device→host")?))
}

/// Batches launched back to back per timed sample of the kernel benchmark.
const LAUNCHES: usize = 4;

/// Kernel time: frames resident on the device, K + SFI written. Timed two ways: a batch
/// of frames in one launch (as the streaming pipeline launches them; per-frame device time,
/// the figure compared with the bandwidth bound), and one frame per launch + sync (the
/// latency a caller sees for a single frame).
fn kernel_times<R: KnownRuntime>(
    gpu: &Gpu<R>,
    opts: &Options,
    bandwidth: Option<f64>,
) -> gpu_runtime::Result<Vec<Measurement>> {
    let mut out = Vec::new();
    let sizes: &[(usize, usize)] = if opts.quick { &SIZES[..1] } else { &SIZES };
    for &(w, h) in sizes {
        let n = w * h;
        // About 32 Mi pixels per launch: 24 frames of 1392x1040, 8 of 2048^2, 3 of 4000^2.
        let batch = (32usize << 20).div_ceil(n).clamp(1, 32);
        let frame = frame_u16(w, h, 7);
        let words: Vec<u32> = frame
            .as_slice()
            .expect("standard")
            .chunks(2)
            .map(|c| u32::from(c[0]) | (u32::from(c[1]) << 16))
            .collect();
        let words = words.repeat(batch);
        let input = gpu.upload(&words)?;
        let (k, sfi, flags) = (
            gpu.empty::<f32>(n * batch)?,
            gpu.empty::<f32>(n * batch)?,
            gpu.empty::<u32>(1)?,
        );
        for size in [5u32, 7] {
            let params = |frames: usize| SpatialParams {
                width: w as u32,
                height: h as u32,
                frames: frames as u32,
                radius: size / 2,
                border: kernels::BORDER_REFLECT,
                pixel: PixelBits::U16,
                sfi_scale: Some(100.0),
                saturation: None,
            };
            let reps = if opts.quick { 5 } else { 50 };
            let (one, many) = (params(1), params(batch));
            // A GPU left idle drops its clocks and takes tens of milliseconds to raise them:
            // keep it busy for a while first so that the figure is the sustained rate a
            // stream sees, not the ramp.
            let ramp = std::time::Instant::now();
            while ramp.elapsed() < std::time::Duration::from_millis(300) {
                kernels::spatial_contrast(gpu, &input, &many, &k, &sfi, &flags)?;
                gpu.sync()?;
            }
            // Device time per frame: LAUNCHES batches back to back, then one sync, so the
            // launch and sync latency is shared by LAUNCHES x batch frames.
            let batched = bench(5, reps, || {
                for _ in 0..LAUNCHES {
                    kernels::spatial_contrast(gpu, &input, &many, &k, &sfi, &flags)?;
                }
                gpu.sync()
            })?
            .per_item(batch * LAUNCHES);
            let single = bench(5, reps, || {
                kernels::spatial_contrast(gpu, &input, &one, &k, &sfi, &flags)?;
                gpu.sync()
            })?;
            let bytes = (n * (2 + 8)) as f64;
            let gbs = bytes / batched.median_ms / 1e6;
            let bound = bandwidth.map_or(String::new(), |b| {
                format!(
                    "; {:.2}x the time device bandwidth allows ({b:.0} GB/s axpy)",
                    batched.median_ms / (bytes / (b * 1e6))
                )
            });
            out.push(measurement(
                "speckle",
                &format!("kernel {w}x{h} u16 {size}x{size} K+SFI"),
                batched.median_ms,
                "ms/frame",
                batched,
                format!("{LAUNCHES} launches of {batch} frames, one sync; {gbs:.0} GB/s effective (2 B in + 8 B out per pixel){bound}"),
            ));
            out.push(measurement(
                "speckle",
                &format!("launch + sync, one {w}x{h} frame, {size}x{size} K+SFI"),
                single.median_ms,
                "ms",
                single,
                "one frame per launch, launch and sync latency included".into(),
            ));
        }
    }
    Ok(out)
}

/// End to end: frames from host memory through the streaming pipeline and back.
fn streaming(
    device: &Device,
    opts: &Options,
    link: Option<(f64, f64)>,
) -> Result<Vec<Measurement>> {
    let (w, h) = SIZES[0];
    let frames = if opts.quick { 32 } else { 512 };
    let pool: Vec<Array2<u16>> = (0..8).map(|i| frame_u16(w, h, 100 + i)).collect();
    // Frames are in host memory before the clock starts, as a camera driver delivers them;
    // the pipeline then copies each once into pinned memory.
    let tuning = GpuTuning::from_lookup(|k| std::env::var(k).ok())?;
    let mut out = Vec::new();
    for (label, exposure, down_bytes, batch) in [
        ("K", None, 4.0, 8),
        ("K", None, 4.0, 32),
        ("K+SFI", Some(5e-3), 8.0, 8),
        ("K+SFI", Some(5e-3), 8.0, 32),
    ] {
        let params = ContrastParams::spatial(Window::new(5)?);
        let params = match exposure {
            Some(t) => params.with_exposure(t)?,
            None => params,
        };
        let mut times = Vec::new();
        let mut fps = 0.0;
        // One untimed run first: it page-locks the host buffers, which the pipeline keeps
        // between streams (a live camera pays this once, at start).
        for rep in 0..=if opts.quick { 1 } else { 3 } {
            let delivered: Vec<_> = (0..frames)
                .map(|i| Ok(Frame::U16(pool[i % pool.len()].clone())))
                .collect();
            let src = delivered.into_iter();
            let mut checksum = 0f64;
            let stream_params = StreamParams::new(params, batch).with_tuning(tuning);
            let report = stream(src, &stream_params, device, |m| {
                checksum += f64::from(m.k[[0, 0]]);
                Ok(())
            })?;
            anyhow::ensure!(checksum.is_finite(), "non-finite K in stream");
            if rep == 0 {
                continue;
            }
            times.push(std::time::Duration::from_secs_f64(
                report.seconds / frames as f64,
            ));
            fps = f64::max(fps, report.frames_per_second);
        }
        let t = Timing::from_durations(&times);
        let per_frame_fps = 1e3 / t.median_ms;
        let note = match link {
            Some((up, down)) => {
                let bound_ms =
                    (w * h * 2) as f64 / (up * 1e6) + (w * h) as f64 * down_bytes / (down * 1e6);
                format!(
                    "{frames} frames, batches of {batch}, after one warm-up stream; transfer bound {:.0} frames/s at the best measured pinned link ({up:.1} up, {down:.1} down GB/s, up and down one after the other): {:.2}x the bound; best rep {fps:.0} frames/s",
                    1e3 / bound_ms,
                    t.median_ms / bound_ms,
                )
            }
            None => format!("{frames} frames, batches of {batch}"),
        };
        out.push(measurement(
            "speckle",
            &format!("stream {w}x{h} u16 5x5 {label} end to end, batch {batch}"),
            per_frame_fps,
            "frames/s",
            t,
            note,
        ));
    }
    Ok(out)
}

/// Temporal K over 25 frames, per megapixel of output.
fn temporal(device: &Device, opts: &Options) -> Result<Vec<Measurement>> {
    let (w, h, frames) = if opts.quick {
        (256, 256, 30)
    } else {
        (1024, 1024, 50)
    };
    let stack = RawStack::U16(Array3::from_shape_fn((frames, h, w), |(t, y, x)| {
        (200 + (t * 7919 + y * 104_729 + x * 1_299_709) % 3800) as u16
    }));
    let params = ContrastParams::temporal(25);
    let t = bench(1, if opts.quick { 2 } else { 5 }, || {
        contrast(&stack, &params, device)
            .map(|_| ())
            .map_err(|e| gpu_runtime::Error::Backend {
                device: "speckle".into(),
                message: e.to_string(),
            })
    })?;
    let outputs = (frames - 24) as f64 * (w * h) as f64 / 1e6;
    Ok(vec![measurement(
        "speckle",
        &format!("temporal K, 25 frames, {w}x{h}x{frames} u16"),
        outputs / (t.median_ms / 1e3),
        "Mpx-frames/s",
        t,
        format!(
            "end to end on {} (upload, kernel, download)",
            device.info().id
        ),
    )])
}

/// CPU spatial K + SFI per frame (the CPU target is <= 3 ms at 1392x1040).
fn cpu_spatial(opts: &Options) -> Result<Vec<Measurement>> {
    let mut out = Vec::new();
    let sizes: &[(usize, usize)] = if opts.quick { &SIZES[..1] } else { &SIZES };
    for &(w, h) in sizes {
        let frame = frame_u16(w, h, 3);
        let (mut k, mut sfi) = (Array2::<f32>::zeros((h, w)), Array2::<f32>::zeros((h, w)));
        for size in [5usize, 7] {
            let win = Window::new(size)?;
            let t = bench(3, if opts.quick { 5 } else { 30 }, || {
                let o = speckle_core::cpu::ContrastOut::new(k.view_mut()).sfi(sfi.view_mut(), 5e-3);
                speckle_core::cpu::spatial_contrast_into(
                    frame.view(),
                    win,
                    speckle_core::Border::Reflect,
                    None,
                    o,
                )
                .map_err(|e| gpu_runtime::Error::Backend {
                    device: "cpu".into(),
                    message: e.to_string(),
                })
            })?;
            out.push(measurement(
                "speckle",
                &format!("cpu {w}x{h} u16 {size}x{size} K+SFI"),
                t.median_ms,
                "ms",
                t,
                format!(
                    "{} threads, spatial_contrast_into (no allocation)",
                    rayon_threads()
                ),
            ));
        }
    }
    Ok(out)
}

/// Flow maps per megapixel on `device`, end to end (for a GPU: K up, maps down): MESI with
/// 6 exposures and beta known or free (1% noise on K^2), and tau_c inversion of a K map.
fn flow_maps(device: &Device, opts: &Options) -> Result<Vec<Measurement>> {
    let gpu = device.is_gpu();
    let (w, h) = match (opts.quick, gpu) {
        (true, _) => (32, 32),
        (false, true) => (1024, 1024),
        (false, false) => (256, 256),
    };
    let exposures = [5e-5, 2e-4, 1e-3, 5e-3, 2e-2, 8e-2];
    let mut k = Array3::<f32>::zeros((6, h, w));
    for y in 0..h {
        for x in 0..w {
            let p = MesiParams {
                tau_c: 1e-4 * (1.0 + (x * 31 + y) as f64 % 50.0),
                rho: 0.9,
                v_noise: 0.0,
                beta: 0.6,
            };
            for (e, v) in simulate_mesi(&p, &exposures, 0.01, (y * w + x) as u64)
                .into_iter()
                .enumerate()
            {
                k[[e, y, x]] = v as f32;
            }
        }
    }
    let mpx = (w * h) as f64 / 1e6;
    let on = if gpu {
        device.info().id.clone()
    } else {
        "cpu".into()
    };
    let who = if gpu {
        format!("end to end on {on} (f32 kernel, pinned transfers)")
    } else {
        format!("{} threads, f64", rayon_threads())
    };
    let as_bench_err = |e: speckle_core::Error| gpu_runtime::Error::Backend {
        device: on.clone(),
        message: e.to_string(),
    };
    let mut out = Vec::new();
    for (label, mesi_opts) in [
        ("beta known", MesiOptions::fixed_beta(0.6)),
        ("beta free", MesiOptions::default()),
    ] {
        let mut converged = 0.0;
        let t = bench(1, 3, || {
            let input = MesiInput {
                k: k.view(),
                exposures_s: &exposures,
            };
            let (maps, _) = mesi(input, &mesi_opts, device).map_err(as_bench_err)?;
            converged = maps.status.iter().filter(|&&s| s == 0).count() as f64 / (w * h) as f64;
            Ok(())
        })?;
        out.push(measurement(
            "speckle",
            &format!("MESI fit, 6 exposures, {label}, {w}x{h}"),
            t.median_ms / 1e3 / mpx,
            "s/Mpx",
            t,
            format!(
                "{who}; Levenberg-Marquardt per pixel; {:.1}% converged",
                100.0 * converged
            ),
        ));
    }
    let plane = k.index_axis(ndarray::Axis(0), 2).to_owned();
    let t = bench(2, 5, || {
        let params = FlowParams::new(1e-3, 0.6).with_model(FlowModel::Lorentzian);
        flow(plane.view(), &params, device)
            .map(|_| ())
            .map_err(as_bench_err)
    })?;
    out.push(measurement(
        "speckle",
        &format!("tau_c map (Lorentzian), {w}x{h}"),
        t.median_ms / mpx,
        "ms/Mpx",
        t,
        format!("{who}; Newton inversion per pixel"),
    ));
    Ok(out)
}

fn rayon_threads() -> usize {
    std::thread::available_parallelism().map_or(1, std::num::NonZero::get)
}
