//! FLIM benchmarks (issue 4): throughput (pixels/s) of every method on `device`, end to end
//! (upload, compute, download and the host-side maps), on simulated u16 cubes of 256 bins
//! (12.8 ns window): 256x256 pixels for the non-iterative methods and for every GPU fit,
//! 64x64 pixels for the CPU fits and BCMM (they take seconds per full cube on 2 cores).
//! With `BIOGPU_FLIM_DATA` set to a `.sdt`/`.ptu`/`.npy` file (or the folder holding
//! `seminal_receptacle_FLIM_single_image.sdt`), its first image is measured too
//! (non-iterative methods and the MLE mono-exponential fit).
//!
//! On a GPU the paper's workload (512x512x256) is measured too: kernels alone, and the
//! non-iterative methods and BCMM end to end from ordinary and from page-locked memory.
//!
//! GPU repetitions are few (each fit of 65,536 pixels takes milliseconds on an H100-class
//! GPU); a measurement never runs more than a few seconds. Global analysis runs over
//! 32-pixel segments (the paper's GA-32) and the whole image on every device, and GA-32 on
//! the paper's 512x512x256 workload on a GPU (not with `--quick`).

use crate::group::{Options, measurement};
use crate::report::Measurement;
use anyhow::Result;
use flim_core::sim::{DecaySim, bi_exponential, mono_exponential};
use flim_core::{
    Analysis, AnyCube, Count, Cube, Donor, Estimator, FitOptions, FretOptions, GlobalOptions,
    GpuTuning, Methods, Model, Segments, Shift,
};
use gpu_runtime::{Device, Timing};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The GPU path's tuning (`BIOGPU_FLIM_*`), read once by [`run`].
static TUNING: OnceLock<GpuTuning> = OnceLock::new();

fn tuning() -> GpuTuning {
    TUNING.get().copied().unwrap_or_default()
}

fn analyse_on<T: Count>(cube: &Cube<T>, opts: &Analysis, device: &Device) -> Result<()> {
    flim_core::analyse(cube, &opts.with_tuning(tuning()), device)?;
    Ok(())
}

fn analyse_any_on(cube: &AnyCube, opts: &Analysis, device: &Device) -> Result<()> {
    flim_core::analyse_any(cube, &opts.with_tuning(tuning()), device)?;
    Ok(())
}

fn analyse_fret_on<T: Count>(
    cube: &Cube<T>,
    opts: &Analysis,
    donor: Donor,
    device: &Device,
) -> Result<()> {
    let opts = FretOptions::new(donor).with_analysis(opts.with_tuning(tuning()));
    flim_core::analyse_fret(cube, &opts, device)?;
    Ok(())
}

fn fit_on<T: Count>(cube: &Cube<T>, opts: &FitOptions, device: &Device) -> Result<()> {
    flim_core::fit(cube, &opts.clone().with_tuning(tuning()), device)?;
    Ok(())
}

fn fit_global_on<T: Count>(
    cube: &Cube<T>,
    opts: &FitOptions,
    segments: &Segments,
    device: &Device,
) -> Result<()> {
    let opts = GlobalOptions::new(opts.clone().with_tuning(tuning()), segments.clone());
    flim_core::fit_global(cube, &opts, device)?;
    Ok(())
}

const BINS: usize = 256;
const BIN_NS: f64 = 0.05;
const PERIOD_NS: f64 = 12.8;

/// Median of `reps` timed runs after one warm-up (the warm-up compiles GPU kernels).
fn time(reps: usize, mut f: impl FnMut() -> Result<()>) -> Result<Timing> {
    f()?;
    let mut times: Vec<Duration> = Vec::with_capacity(reps);
    let start = Instant::now();
    // Short runs repeat for at least half a second (at most 50 times): a median of three
    // runs of ~10 ms on a shared 2-core host moved by up to 2x between invocations.
    while times.len() < reps.max(1)
        || (times.len() < 50 && start.elapsed() < Duration::from_millis(500))
    {
        let t = Instant::now();
        f()?;
        times.push(t.elapsed());
    }
    Ok(Timing::from_durations(&times))
}

/// A workload: its name and one run on a cube.
type Work<'a> = (&'a str, Box<dyn Fn(&Cube<u16>) -> Result<()> + 'a>);

fn fit_opts(model: Model, est: Estimator) -> FitOptions {
    FitOptions::new(model).with_estimator(est)
}

pub fn run(device: &Device, opts: &Options, _earlier: &[Measurement]) -> Result<Vec<Measurement>> {
    let tuning = GpuTuning::from_lookup(|k| std::env::var(k).ok())?;
    let _ = TUNING.set(tuning);
    let gpu = device.is_gpu();
    let big = if opts.quick { 64 } else { 256 };
    let small = if opts.quick || !gpu { 64 } else { 256 };
    let reps = if opts.quick { 1 } else { 3 };
    let mono = mono_exponential(
        &[2.0, 2.5, 3.0, 4.0],
        big,
        big,
        BINS,
        BIN_NS,
        PERIOD_NS,
        1000.0,
        1,
    )?;
    let irf_sim = DecaySim::new(BINS, BIN_NS, 1000.0)?
        .with_irf(0.1, 1.0)
        .with_seed(2);
    let irf = irf_sim.irf_histogram().expect("an IRF was set");
    let mono_irf = irf_sim.cube(small, small, |_, _| vec![(1.0, 2.5)])?;
    let bi_sim = DecaySim::new(BINS, BIN_NS, 5000.0)?.with_seed(3);
    let bi = bi_exponential(0.8, 2.5, small, small, &bi_sim)?;
    let bi_irf = irf_sim.with_seed(4).cube(small, small, |_, x| {
        let f = 0.8 - 0.6 * x as f64 / (small - 1) as f64;
        vec![(f, 0.8), (1.0 - f, 2.5)]
    })?;
    let analysis = |m: Methods| Analysis::default().with_methods(m);
    let nonit: Vec<(&str, Methods)> = vec![
        ("phasor", Methods::PHASOR),
        ("CMM", Methods::CMM),
        ("IEM", Methods::IEM),
        ("RLD", Methods::RLD),
        ("IEM+CMM+RLD+phasor", Methods::ALL),
    ];
    let mut out = Vec::new();
    if gpu && !opts.quick {
        out.extend(paper_workload(device, &bi_sim, &irf_sim, &irf)?);
    }
    let mut record = |name: &str, cube_name: &str, pixels: usize, t: Timing, note: &str| {
        out.push(measurement(
            "flim",
            &format!("{name} {cube_name}"),
            pixels as f64 / (t.median_ms / 1e3),
            "pixels/s",
            t,
            format!("{note}; end to end on {device}"),
        ));
    };
    let shape = |c: &Cube<u16>| {
        let (h, w) = c.shape();
        (h * w, format!("{w}x{h}x{} u16", c.bins()))
    };
    let (n, label) = shape(&mono);
    for (name, m) in nonit {
        let t = time(reps, || {
            analyse_on(&mono, &analysis(m), device)?;
            Ok(())
        })?;
        record(name, &label, n, t, "bars 2/2.5/3/4 ns, 1000 photons");
    }
    let (n, label) = shape(&bi);
    for (name, donor) in [
        ("BCMM2 (donor unknown)", Donor::Unknown),
        ("BCMM1 + PM (donor known)", Donor::Known(2.5)),
    ] {
        let t = time(reps, || {
            analyse_fret_on(&bi, &Analysis::default(), donor, device)?;
            Ok(())
        })?;
        record(name, &label, n, t, "f_D 0.8-0.2, 0.8/2.5 ns, 5000 photons");
    }
    // Fits: (name, cube, options).
    let fits: Vec<Work<'_>> = vec![
        (
            "LSQ mono (Neyman)",
            Box::new(|c| {
                fit_on(
                    c,
                    &fit_opts(Model::Mono, Estimator::LeastSquaresNeyman),
                    device,
                )?;
                Ok(())
            }),
        ),
        (
            "MLE mono",
            Box::new(|c| {
                fit_on(
                    c,
                    &fit_opts(Model::Mono, Estimator::MaximumLikelihood),
                    device,
                )?;
                Ok(())
            }),
        ),
    ];
    let fit_cube = if gpu {
        mono.clone()
    } else {
        mono_exponential(
            &[2.0, 2.5, 3.0, 4.0],
            small,
            small,
            BINS,
            BIN_NS,
            PERIOD_NS,
            1000.0,
            1,
        )?
    };
    let (n, label) = shape(&fit_cube);
    for (name, f) in &fits {
        let t = time(reps, || f(&fit_cube))?;
        record(
            name,
            &label,
            n,
            t,
            "bars 2/2.5/3/4 ns, 1000 photons, tail fit",
        );
    }
    let (n, label) = shape(&bi);
    let t = time(reps, || {
        fit_on(
            &bi,
            &fit_opts(Model::Bi, Estimator::LeastSquaresNeyman),
            device,
        )?;
        Ok(())
    })?;
    record(
        "LSQ bi (Neyman)",
        &label,
        n,
        t,
        "f_D 0.8-0.2, 0.8/2.5 ns, 5000 photons, tail fit",
    );
    let (n, label) = shape(&mono_irf);
    let t = time(reps, || {
        let o = fit_opts(Model::Mono, Estimator::MaximumLikelihood).with_irf(&irf);
        fit_on(&mono_irf, &o, device)?;
        Ok(())
    })?;
    record(
        "MLE mono + IRF",
        &label,
        n,
        t,
        "2.5 ns, 1000 photons, Gaussian IRF 0.1 ns at 1 ns",
    );
    let t = time(reps, || {
        let o = fit_opts(Model::Bi, Estimator::MaximumLikelihood)
            .with_irf(&irf)
            .with_irf_shift(Shift::Fitted(0.0));
        fit_on(&bi_irf, &o, device)?;
        Ok(())
    })?;
    record(
        "MLE bi + IRF + fitted shift",
        &label,
        n,
        t,
        "f_D 0.8-0.2, 0.8/2.5 ns, 1000 photons, Gaussian IRF",
    );
    // Global analysis (the paper's GA case: bi-exponential, f_D 0.8-0.2, lifetimes shared by
    // 32-pixel runs), and the whole image as one segment (one cube on a GPU).
    let ga = fit_opts(Model::Bi, Estimator::MaximumLikelihood);
    let (n, label) = shape(&bi);
    for (name, segments) in [
        ("global MLE bi, 32-pixel segments", Segments::Runs(32)),
        ("global MLE bi, whole image", Segments::Whole),
    ] {
        let t = time(reps, || {
            fit_global_on(&bi, &ga, &segments, device)?;
            Ok(())
        })?;
        record(
            name,
            &label,
            n,
            t,
            "f_D 0.8-0.2, 0.8/2.5 ns, 5000 photons, tail fit",
        );
    }
    if gpu && !opts.quick {
        // GA-32 on the paper's workload itself (512x512x256 u16; K40: 3,314 ms).
        let paper_bi = bi_exponential(0.8, 2.5, 512, 512, &bi_sim.with_seed(6))?;
        let (n, label) = shape(&paper_bi);
        let t = time(reps, || {
            fit_global_on(&paper_bi, &ga, &Segments::Runs(32), device)?;
            Ok(())
        })?;
        record(
            "global MLE bi, 32-pixel segments",
            &label,
            n,
            t,
            "f_D 0.8-0.2, 0.8/2.5 ns, 5000 photons, tail fit; target <= 100 ms",
        );
    }
    if let Some(path) = std::env::var_os("BIOGPU_FLIM_DATA") {
        // A file, or the folder of the real recordings (as the optional tests take it).
        let mut path = std::path::PathBuf::from(path);
        if path.is_dir() {
            path = path.join("seminal_receptacle_FLIM_single_image.sdt");
        }
        out.extend(real_file(&path, device, reps)?);
    }
    Ok(out)
}

/// The paper's workload, 512x512 pixels x 256 bins of u16 (134 MB; the bars phantom for
/// the single-lifetime methods, the f_D phantom for BCMM): the kernels alone (counts
/// already on the device), and end to end from a page-locked cube ([`Cube::pin_on`]: the
/// upload runs at the link's rate with no staging copy) and from an ordinary (pageable)
/// one (staged through pinned slots on all cores). Medians of 10 runs: single runs on
/// the shared host vary by up to 2.6x.
fn paper_workload(
    device: &Device,
    bi_sim: &DecaySim,
    irf_sim: &DecaySim,
    irf: &[f64],
) -> Result<Vec<Measurement>> {
    const REPS: usize = 10;
    let bars = mono_exponential(
        &[2.0, 2.5, 3.0, 4.0],
        512,
        512,
        BINS,
        BIN_NS,
        PERIOD_NS,
        1000.0,
        5,
    )?;
    let fd = bi_exponential(0.8, 2.5, 512, 512, bi_sim)?;
    let mono_irf = irf_sim.cube(512, 512, |_, _| vec![(1.0, 2.5)])?;
    let bi_irf = irf_sim.with_seed(4).cube(512, 512, |_, x| {
        let f = 0.8 - 0.6 * x as f64 / 511.0;
        vec![(f, 0.8), (1.0 - f, 2.5)]
    })?;
    let label = "512x512x256 u16";
    let all = Analysis::default().with_methods(Methods::ALL);
    let mut out = Vec::new();
    let kernels: [(&str, &Cube<u16>, Option<Donor>); 3] = [
        ("IEM+CMM+RLD+phasor", &bars, None),
        ("BCMM2 (donor unknown)", &fd, Some(Donor::Unknown)),
        ("BCMM1 + PM (donor known)", &fd, Some(Donor::Known(2.5))),
    ];
    for (name, cube, donor) in kernels {
        let d = flim_core::kernel_time(cube, &all.with_tuning(tuning()), donor, device, 5)?;
        let t = Timing::from_durations(&[d]);
        out.push(measurement(
            "flim",
            &format!("kernel only, {name} {label}"),
            t.median_ms,
            "ms",
            t,
            format!("device time per launch (median of 5 rounds of 4 launches and one sync), counts already on {device}; target <= 0.2 ms"),
        ));
    }
    let ms = |name: &str, t: Timing, note: &str| {
        measurement(
            "flim",
            &format!("{name} {label}"),
            t.median_ms,
            "ms",
            t,
            format!("{note}; end to end (counts up, maps down) on {device}"),
        )
    };
    let bars_note = "bars 2/2.5/3/4 ns, 1000 photons";
    let fd_note = "f_D 0.8-0.2, 0.8/2.5 ns, 5000 photons";
    let irf_note = "2.5 ns, 1000 photons, Gaussian IRF 0.1 ns at 1 ns";
    let mle_irf = fit_opts(Model::Mono, Estimator::MaximumLikelihood).with_irf(irf);
    let t = time(REPS, || {
        analyse_on(&bars, &all, device)?;
        Ok(())
    })?;
    out.push(ms(
        "IEM+CMM+RLD+phasor, pageable",
        t,
        &format!("{bars_note}, ordinary memory, median of {REPS}"),
    ));
    let t = time(5, || {
        fit_on(&mono_irf, &mle_irf, device)?;
        Ok(())
    })?;
    out.push(ms(
        "MLE mono + IRF, pageable",
        t,
        &format!("{irf_note}, ordinary memory, median of 5"),
    ));
    let (mut bars, mut fd, mut mono_irf, mut bi_irf) = (bars, fd, mono_irf, bi_irf);
    let t0 = Instant::now();
    bars.pin_on(device)?;
    let pin = Timing::from_durations(&[t0.elapsed()]);
    for c in [&mut fd, &mut mono_irf, &mut bi_irf] {
        c.pin_on(device)?;
    }
    out.push(measurement(
        "flim",
        &format!("page-locking one {label} cube (134 MB)"),
        pin.median_ms,
        "ms",
        pin,
        format!("Cube::pin_on on {device}, once per cube (plus the unlock when it drops)"),
    ));
    let single: [(&str, Methods); 5] = [
        ("phasor", Methods::PHASOR),
        ("CMM", Methods::CMM),
        ("IEM", Methods::IEM),
        ("RLD", Methods::RLD),
        ("IEM+CMM+RLD+phasor", Methods::ALL),
    ];
    for (name, m) in single {
        let opts = Analysis::default().with_methods(m);
        let t = time(REPS, || {
            analyse_on(&bars, &opts, device)?;
            Ok(())
        })?;
        let note = format!("{bars_note}, median of {REPS}; target <= 1.5x the link bound");
        out.push(ms(&format!("{name}, page-locked"), t, &note));
    }
    for (name, donor) in [
        ("BCMM2 (donor unknown)", Donor::Unknown),
        ("BCMM1 + PM (donor known)", Donor::Known(2.5)),
    ] {
        let t = time(REPS, || {
            analyse_fret_on(&fd, &Analysis::default(), donor, device)?;
            Ok(())
        })?;
        let note = format!("{fd_note}, median of {REPS}; target <= 1.5x the link bound");
        out.push(ms(&format!("{name}, page-locked"), t, &note));
    }
    let bi_irf_opts = fit_opts(Model::Bi, Estimator::MaximumLikelihood)
        .with_irf(irf)
        .with_irf_shift(Shift::Fitted(0.0));
    let fits: [(&str, &Cube<u16>, FitOptions, &str); 3] = [
        (
            "LSQ mono (Neyman), page-locked",
            &bars,
            fit_opts(Model::Mono, Estimator::LeastSquaresNeyman),
            "bars 2/2.5/3/4 ns, 1000 photons, tail fit; target <= 20 ms",
        ),
        (
            "MLE mono + IRF, page-locked",
            &mono_irf,
            mle_irf,
            "2.5 ns, 1000 photons, Gaussian IRF 0.1 ns at 1 ns; target <= 15 ms",
        ),
        (
            "MLE bi + IRF + fitted shift, page-locked",
            &bi_irf,
            bi_irf_opts,
            "f_D 0.8-0.2, 0.8/2.5 ns, 1000 photons, Gaussian IRF; target <= 100 ms",
        ),
    ];
    for (name, cube, o, note) in fits {
        let t = time(5, || {
            fit_on(cube, &o, device)?;
            Ok(())
        })?;
        out.push(ms(name, t, &format!("{note}, median of 5")));
    }
    Ok(out)
}

/// The first image of a real recording: non-iterative methods and MLE mono (tail from the
/// peak of the summed decay).
fn real_file(path: &std::path::Path, device: &Device, reps: usize) -> Result<Vec<Measurement>> {
    let rec = flim_core::io::read(path, &flim_core::io::ReadOptions::default())?;
    let Some(image) = rec.images.first() else {
        anyhow::bail!("{}: no image", path.display());
    };
    let cube = &image.cube;
    let (h, w) = cube.shape();
    let range = flim_core::FitRange::from_peak(cube)?;
    let label = format!(
        "{} ({w}x{h}x{} {})",
        path.file_name()
            .map_or(path.display(), |n| std::path::Path::new(n).display()),
        cube.bins(),
        cube.dtype()
    );
    let mut out = Vec::new();
    let t = time(reps, || {
        analyse_any_on(cube, &range.apply(Analysis::default()), device)?;
        Ok(())
    })?;
    out.push(measurement(
        "flim",
        &format!("IEM+CMM+RLD+phasor {label}"),
        (h * w) as f64 / (t.median_ms / 1e3),
        "pixels/s",
        t,
        format!("real data, range from the peak; end to end on {device}"),
    ));
    if device.is_gpu() {
        let mut locked = cube.clone();
        locked.pin_on(device)?;
        let t = time(reps.max(10), || {
            analyse_any_on(&locked, &range.apply(Analysis::default()), device)?;
            Ok(())
        })?;
        out.push(measurement(
            "flim",
            &format!("IEM+CMM+RLD+phasor {label}, page-locked"),
            (h * w) as f64 / (t.median_ms / 1e3),
            "pixels/s",
            t,
            format!("real data, range from the peak, cube page-locked once (Cube::pin_on); end to end on {device}"),
        ));
    }
    let o = fit_opts(Model::Mono, Estimator::MaximumLikelihood)
        .with_range(range.first, Some(range.bins));
    let t = time(reps, || {
        match cube {
            AnyCube::U16(c) => fit_on(c, &o, device)?,
            AnyCube::U32(c) => fit_on(c, &o, device)?,
            AnyCube::F32(c) => fit_on(c, &o, device)?,
        }
        Ok(())
    })?;
    out.push(measurement(
        "flim",
        &format!("MLE mono {label}"),
        (h * w) as f64 / (t.median_ms / 1e3),
        "pixels/s",
        t,
        format!("real data, tail from the peak; end to end on {device}"),
    ));
    Ok(out)
}
