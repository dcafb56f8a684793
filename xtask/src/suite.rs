//! The benchmark suite. Each group measures one thing honestly: warm-up first, device
//! work synchronised inside the timed region, median of repetitions, fresh non-zero data.

pub use crate::group::Options;
use crate::group::measurement;
use crate::report::{DeviceSummary, Measurement, Run};
use anyhow::Result;
use gpu_kernels::base;
use gpu_runtime::{Device, Gpu, KnownRuntime, bench, with_gpu};

/// Run every group that applies to `device`.
pub fn run(device: &Device, command: &str, opts: &Options) -> Result<Run> {
    let mut measurements = Vec::new();
    let wanted = |group: &str| {
        opts.filter
            .as_deref()
            .is_none_or(|f| f.split(',').any(|f| group.contains(f.trim())))
    };
    if device.is_gpu() && wanted("runtime") {
        eprintln!("bench: runtime (transfers, memory bandwidth, launch latency) on {device}");
        measurements.extend(with_gpu!(device, |gpu| runtime_group(gpu, opts))?);
    }
    if wanted("speckle") {
        eprintln!("bench: speckle on {device}");
        measurements.extend(crate::speckle_bench::run(device, opts, &measurements)?);
    }
    if wanted("flim") {
        eprintln!("bench: flim on {device}");
        measurements.extend(crate::flim_bench::run(device, opts, &measurements)?);
    }
    if wanted("montecarlo") {
        eprintln!("bench: montecarlo on {device}");
        measurements.extend(crate::montecarlo_bench::run(device, opts, &measurements)?);
    }
    let perfusion = crate::perfusion_bench::Groups {
        end_to_end: wanted("perfusion-end-to-end"),
        kernels: wanted("perfusion-kernels"),
        cpu: wanted("perfusion-cpu"),
    };
    if perfusion.end_to_end || perfusion.kernels || perfusion.cpu {
        eprintln!("bench: perfusion on {device} ({perfusion:?})");
        measurements.extend(crate::perfusion_bench::run(
            device,
            opts,
            perfusion,
            &measurements,
        )?);
    }
    Ok(Run {
        date: crate::report::today(),
        command: command.to_string(),
        device: DeviceSummary::from(device.info()),
        measurements,
        notes: Vec::new(),
    })
}

/// Host link, device memory bandwidth and launch latency: the bounds every modality's
/// end-to-end and kernel times are compared with.
fn runtime_group<R: KnownRuntime>(
    gpu: &Gpu<R>,
    opts: &Options,
) -> gpu_runtime::Result<Vec<Measurement>> {
    let (reps, mib) = if opts.quick {
        (3, 16usize)
    } else {
        (20, 256usize)
    };
    let n = mib << 18; // f32 elements in `mib` MiB
    let host: Vec<f32> = (0..n).map(|i| (i % 977) as f32 * 0.25 + 1.0).collect();
    let bytes = (n * 4) as f64;
    let mut out = Vec::new();

    // Transfers at the sizes the modalities move: a speckle frame (~4 MiB), a FLIM cube
    // (~128 MiB) and a large chunk. CubeCL stages uploads through pinned memory and reads
    // through pinned memory up to 100 MB, pageable above.
    for size_mib in if opts.quick {
        vec![4usize, 16]
    } else {
        vec![4, 32, 128, 256]
    } {
        let part = &host[..size_mib << 18];
        let b = (part.len() * 4) as f64;
        let t = bench(3, reps, || gpu.upload(part).and_then(|_| gpu.sync()))?;
        out.push(measurement(
            "runtime",
            &format!("host→device {size_mib} MiB"),
            b / t.median_ms / 1e6,
            "GB/s",
            t,
            "Gpu::upload (driver copy from pageable memory on CUDA, CubeCL create_from_slice elsewhere) + sync".into(),
        ));
        let d = gpu.upload(part)?;
        let t = bench(3, reps, || gpu.download(&d).map(|_| ()))?;
        out.push(measurement(
            "runtime",
            &format!("device→host {size_mib} MiB"),
            b / t.median_ms / 1e6,
            "GB/s",
            t,
            "Gpu::download (CubeCL read_one) into a Vec".into(),
        ));
    }
    // The same through biogpu's pinned staging (CUDA: page-locked buffers and driver
    // copies; other backends fall back to CubeCL's transfers).
    for size_mib in if opts.quick {
        vec![4usize]
    } else {
        vec![4, 32, 128]
    } {
        let b = (size_mib << 20) as f64;
        let mut staging = gpu.host_staging(size_mib << 20);
        staging
            .as_bytes_mut()
            .copy_from_slice(bytemuck_bytes(&host[..size_mib << 18]));
        let d = gpu.empty::<f32>(size_mib << 18)?;
        let t = bench(3, reps, || {
            gpu.upload_staged_into(&staging, &d).or_else(|_| {
                gpu.upload_staged::<f32>(&staging, size_mib << 18)
                    .map(|_| ())
            })
        })?;
        out.push(measurement(
            "runtime",
            &format!("host→device {size_mib} MiB pinned"),
            b / t.median_ms / 1e6,
            "GB/s",
            t,
            format!("Gpu::upload_staged_into (pinned: {})", staging.is_pinned()),
        ));
        let t = bench(3, reps, || gpu.download_staged(&d, &mut staging))?;
        out.push(measurement(
            "runtime",
            &format!("device→host {size_mib} MiB pinned"),
            b / t.median_ms / 1e6,
            "GB/s",
            t,
            format!("Gpu::download_staged (pinned: {})", staging.is_pinned()),
        ));
    }
    let dev = gpu.upload(&host)?;

    let y = gpu.upload(&host)?;
    // Ten launches back to back, one sync: the device's rate, not the host's launch latency.
    let launches = 10;
    let t = bench(3, reps, || {
        for _ in 0..launches {
            base::axpy(gpu, 1.0001, &dev, &y)?;
        }
        gpu.sync()
    })?;
    out.push(measurement(
        "runtime",
        &format!("axpy {mib} MiB (device bandwidth)"),
        f64::from(launches) * 3.0 * bytes / t.median_ms / 1e6,
        "GB/s",
        t,
        format!("bytes read + written / time; {launches} launches back to back, then one sync"),
    ));

    let t = bench(3, reps, || base::sum(gpu, &dev).map(|_| ()))?;
    out.push(measurement(
        "runtime",
        &format!("block sum {mib} MiB"),
        bytes / t.median_ms / 1e6,
        "GB/s",
        t,
        "incl. download of per-cube partials".into(),
    ));

    let small = gpu.empty::<f32>(1024)?;
    let t = bench(10, reps * 5, || {
        base::fill(gpu, &small, 1.0)?;
        gpu.sync()
    })?;
    out.push(measurement(
        "runtime",
        "launch + sync latency (fill 1024)",
        t.median_ms * 1e3,
        "µs",
        t,
        String::new(),
    ));
    Ok(out)
}

fn bytemuck_bytes(v: &[f32]) -> &[u8] {
    <f32 as cubecl::prelude::CubeElement>::as_bytes(v)
}
