//! The public verbs, one form: `op(cube, &Params, &Device) -> Result<(Maps, RunInfo)>`.
//! On a GPU device the f32 kernels run (`gpu/`), otherwise the f64 CPU references (`cpu/`);
//! this file holds the crate's only CPU-vs-GPU branch. GPU and CPU agree within the f32
//! error bounds stated in tests/tests/gpu_vs_cpu/flim*.rs.

use crate::cpu;
use crate::error::{Error, Result, invalid};
use crate::gpu;
use crate::io::maps::MapSet;
use crate::io::prepare::Prepared;
use crate::model::cube::{AnyCube, Count, Cube, with_cube};
use crate::model::fit::{FitMaps, FitOptions, GlobalOptions, Model};
use crate::model::fret::{Donor, FretMaps, FretOptions};
use crate::model::info::RunInfo;
use crate::model::lifetimes::{Analysis, LifetimeMaps, Methods};
use crate::model::method::{Method, MethodOptions};
use crate::model::preprocess::Irf;
use gpu_runtime::Device;
use std::time::Instant;

pub use crate::cpu::fit::fit_decay;

/// What [`run_method`] costs on each side for `p`, for `auto`'s choice between a GPU and
/// the CPU ([`Device::for_job`]). Rates per pixel x bin of the call (transfers and maps
/// included): CPU seconds per thread from MLE mono on the real 512x512x256 `.sdt` (0.40 s
/// on the 2-core CI machine: 1.2e-8; ~0.09 s on the H200 host's 16 threads: 2.1e-8, the
/// larger taken), GPU seconds from the H100/H200 end-to-end benchmarks (docs/benchmarks.md:
/// 15-28 M pixels/s at 256 bins; bi-exponential 7.6 M); first compilation 0.5 s (H200).
///
/// ```
/// use flim_core::{Method, MethodOptions, job_estimate_for};
/// let one_frame = job_estimate_for(512 * 512, 256, Method::Mle, &MethodOptions::default());
/// assert!(one_frame.cpu_seconds(2) > one_frame.gpu_seconds);
/// // On 16 threads the CPU fits it before a GPU has opened (measured: 0.31 s vs 0.47 s).
/// assert!(one_frame.cpu_seconds(16) < gpu_runtime::GPU_OPEN_SECONDS);
/// ```
pub fn job_estimate_for(
    pixels: usize,
    bins: usize,
    method: Method,
    opts: &MethodOptions,
) -> gpu_runtime::JobEstimate {
    let (cpu, gpu) = match method {
        Method::Iem | Method::Cmm | Method::Rld | Method::Phasor => (2.0e-9, 1.5e-10),
        Method::Lsq | Method::Mle if opts.model == Model::Mono => (2.0e-8, 2.5e-10),
        Method::Bcmm | Method::Lsq | Method::Mle | Method::Global => (1.0e-7, 6.0e-10),
    };
    gpu_runtime::JobEstimate::per_item((pixels * bins) as f64, cpu, gpu).with_first_compile(0.5)
}

/// [`job_estimate_for`] a prepared image.
///
/// ```
/// use flim_core::io::{PrepOptions, RangeSpec, prepare_cube};
/// use flim_core::{Method, MethodOptions, job_estimate, sim::mono_exponential};
/// let cube = mono_exponential(&[2.5], 8, 8, 256, 0.05, 12.8, 5_000.0, 1)?;
/// let p = prepare_cube(cube.into(), String::new(), &PrepOptions::default(), RangeSpec::All)?;
/// let e = job_estimate(&p, Method::Cmm, &MethodOptions::default());
/// // 64 pixels: one CPU core is done long before a GPU has opened, so `auto` keeps the CPU.
/// assert!(e.cpu_seconds(1) < 1e-3 && e.cpu_seconds(1) < gpu_runtime::GPU_OPEN_SECONDS);
/// # Ok::<(), flim_core::Error>(())
/// ```
pub fn job_estimate(
    p: &Prepared,
    method: Method,
    opts: &MethodOptions,
) -> gpu_runtime::JobEstimate {
    let (h, w) = p.cube.shape();
    job_estimate_for(h * w, p.cube.bins(), method, opts)
}

/// Run `cpu` or `gpu` as `device` asks, timing the call.
fn run<M>(
    device: &Device,
    pixels: usize,
    cpu: impl FnOnce() -> Result<M>,
    gpu: impl FnOnce() -> Result<M>,
) -> Result<(M, RunInfo)> {
    let t0 = Instant::now();
    let started = std::time::SystemTime::now();
    let maps = if device.is_gpu() { gpu()? } else { cpu()? };
    // GPU kernels compute in f32; the CPU reference in f64.
    let precision = if device.is_gpu() { "f32" } else { "f64" };
    Ok((
        maps,
        RunInfo {
            backend: device.backend(),
            device: device.info().id.clone(),
            pixels,
            elapsed: t0.elapsed(),
            provenance: gpu_runtime::Provenance::new(device, precision, started),
        },
    ))
}

fn pixels<T: Count>(cube: &Cube<T>) -> usize {
    let (h, w) = cube.shape();
    h * w
}

/// Every non-iterative lifetime (RLD, IEM, CMM, phasor) of every pixel.
///
/// ```
/// use flim_core::{Analysis, analyse, sim::mono_exponential};
/// use gpu_runtime::Device;
/// let cube = mono_exponential(&[2.5], 8, 8, 256, 0.05, 12.8, 20_000.0, 1)?;
/// let (maps, _) = analyse(&cube, &Analysis::default(), &Device::cpu())?;
/// // CMM uses every photon; at 20,000 photons its spread is about 0.8%.
/// let tau = maps.tau_cmm[[4, 4]];
/// assert!((tau - 2.5).abs() < 0.1, "{tau}");
/// let cube = mono_exponential(&[3.0], 4, 4, 128, 0.1, 12.8, 5_000.0, 2)?;
/// let (maps, _) = analyse(&cube, &Analysis::default(), &Device::cpu())?;
/// assert!((maps.tau_rld[[0, 0]] - 3.0).abs() < 0.3);
/// # Ok::<(), flim_core::Error>(())
/// ```
pub fn analyse<T: Count>(
    cube: &Cube<T>,
    opts: &Analysis,
    device: &Device,
) -> Result<(LifetimeMaps, RunInfo)> {
    run(
        device,
        pixels(cube),
        || cpu::lifetimes::analyse(cube, opts),
        || gpu::lifetimes::analyse(cube, opts, device),
    )
}

/// [`analyse`] for a cube of whichever count type it holds.
///
/// ```
/// use flim_core::{Analysis, AnyCube, analyse_any, sim::mono_exponential};
/// // Two bars, 2 ns (left) and 4 ns (right), as a reader returns them: an `AnyCube`.
/// let cube: AnyCube = mono_exponential(&[2.0, 4.0], 4, 8, 256, 0.05, 12.8, 20_000.0, 3)?.into();
/// let (maps, _) = analyse_any(&cube, &Analysis::default(), &gpu_runtime::Device::cpu())?;
/// assert!((maps.tau_cmm[[0, 0]] - 2.0).abs() < 0.1, "{}", maps.tau_cmm[[0, 0]]);
/// assert!((maps.tau_cmm[[0, 7]] - 4.0).abs() < 0.2, "{}", maps.tau_cmm[[0, 7]]);
/// # Ok::<(), flim_core::Error>(())
/// ```
pub fn analyse_any(
    cube: &AnyCube,
    opts: &Analysis,
    device: &Device,
) -> Result<(LifetimeMaps, RunInfo)> {
    with_cube!(cube, |c| analyse(c, opts, device))
}

/// BCMM and PM maps (fast bi-exponential FRET analysis) of every pixel.
///
/// ```
/// use flim_core::{Analysis, Donor, FretOptions, analyse_fret, sim::{DecaySim, bi_exponential}};
/// let sim = DecaySim::new(256, 0.05, 200_000.0)?;
/// let cube = bi_exponential(0.8, 2.5, 2, 4, &sim)?;
/// let (maps, _) = analyse_fret(&cube, &FretOptions::new(Donor::Known(2.5)), &gpu_runtime::Device::cpu())?;
/// // f_D falls from 0.8 (left) to 0.2 (right).
/// assert!((maps.f_d_pm[[0, 0]] - 0.8).abs() < 0.02);
/// assert!((maps.f_d_bcmm[[1, 3]] - 0.2).abs() < 0.05);
/// # Ok::<(), flim_core::Error>(())
/// ```
pub fn analyse_fret<T: Count>(
    cube: &Cube<T>,
    opts: &FretOptions,
    device: &Device,
) -> Result<(FretMaps, RunInfo)> {
    run(
        device,
        pixels(cube),
        || cpu::fret::analyse_fret(cube, &opts.analysis, opts.donor),
        || gpu::fret::analyse_fret(cube, &opts.analysis, opts.donor, device),
    )
}

/// Fit every pixel (per-pixel iterative fit); derived maps (sorting, fractions, means,
/// reduced chi^2) are computed from the parameters on the host on both paths.
///
/// ```
/// use flim_core::{FitOptions, Model, fit, sim::mono_exponential};
/// let cube = mono_exponential(&[2.0], 4, 4, 128, 0.1, 12.8, 5_000.0, 2)?;
/// let (maps, _) = fit(&cube, &FitOptions::new(Model::Mono), &gpu_runtime::Device::cpu())?;
/// assert!((maps.tau[0][[0, 0]] - 2.0).abs() < 0.2);
/// # Ok::<(), flim_core::Error>(())
/// ```
pub fn fit<T: Count>(
    cube: &Cube<T>,
    opts: &FitOptions,
    device: &Device,
) -> Result<(FitMaps, RunInfo)> {
    run(
        device,
        pixels(cube),
        || cpu::fit::fit(cube, opts),
        || gpu::fit::fit(cube, opts, device),
    )
}

/// Global analysis: lifetimes (and a fitted IRF shift) shared per segment, amplitudes (and
/// a fitted offset) per pixel. Pixels under the threshold, outside the mask or outside
/// every segment are masked; a failed segment's pixels are `Failed`, never `Converged`.
///
/// ```
/// use flim_core::{FitOptions, FitStatus, GlobalOptions, Model, Segments, fit_global};
/// use flim_core::sim::{DecaySim, bi_exponential};
/// use gpu_runtime::Device;
/// let sim = DecaySim::new(256, 0.05, 3_000.0)?;
/// let cube = bi_exponential(0.8, 2.5, 4, 8, &sim)?;
/// let opts = GlobalOptions::new(FitOptions::new(Model::Bi), Segments::Whole);
/// let (maps, _) = fit_global(&cube, &opts, &Device::cpu())?;
/// assert!((maps.tau[0][[0, 0]] - 0.8).abs() < 0.1 && (maps.tau[1][[0, 0]] - 2.5).abs() < 0.1);
/// let cube = bi_exponential(0.8, 2.5, 8, 8, &DecaySim::new(256, 0.05, 3_000.0)?)?;
/// let opts = GlobalOptions::new(FitOptions::new(Model::Bi), Segments::Runs(32));
/// let (maps, _) = fit_global(&cube, &opts, &Device::cpu())?;
/// assert_eq!(maps.status[[0, 0]], FitStatus::Converged);
/// assert!((maps.tau[0][[0, 0]] - 0.8).abs() < 0.1 && (maps.tau[1][[0, 0]] - 2.5).abs() < 0.2);
/// # Ok::<(), flim_core::Error>(())
/// ```
pub fn fit_global<T: Count>(
    cube: &Cube<T>,
    opts: &GlobalOptions,
    device: &Device,
) -> Result<(FitMaps, RunInfo)> {
    run(
        device,
        pixels(cube),
        || cpu::global::fit_global(cube, &opts.fit, &opts.segments),
        || gpu::global::fit_global(cube, &opts.fit, &opts.segments, device),
    )
}

/// Device time of the non-iterative kernel (the methods `opts` selects), or of the BCMM/PM
/// kernel when `fret` names the donor, over the whole of `cube` already on the device: the
/// median of `reps` rounds of four launches and one synchronisation, per launch. For
/// benchmarks: what the kernel costs apart from transfers. A GPU device only.
///
/// ```
/// use flim_core::{Analysis, kernel_time, sim::mono_exponential};
/// let cube = mono_exponential(&[2.5], 4, 4, 64, 0.2, 12.8, 1_000.0, 1)?;
/// // Without a GPU there is no kernel to time: the CPU device is an error, not a panic.
/// let cpu = gpu_runtime::Device::cpu();
/// let err = kernel_time(&cube, &Analysis::default(), None, &cpu, 5).unwrap_err();
/// assert!(err.to_string().contains("needs a GPU device"), "{err}");
/// # Ok::<(), flim_core::Error>(())
/// ```
pub fn kernel_time<T: Count>(
    cube: &Cube<T>,
    opts: &Analysis,
    fret: Option<Donor>,
    device: &Device,
    reps: usize,
) -> Result<std::time::Duration> {
    if !device.is_gpu() {
        return Err(Error::Gpu(gpu_runtime::Error::NotAGpu {
            what: "flim_core::kernel_time".into(),
        }));
    }
    gpu::lifetimes::kernel_time(cube, opts, fret, device, reps)
}

/// A whole method of `biogpu flim fit` on a prepared image: the non-iterative methods
/// (their lifetime map first, then intensity, and g, s and the modulation lifetime for the
/// phasor), BCMM/PM ([`MapSet::from_fret`]) and the fits ([`MapSet::from_fit`], global
/// analysis over `opts.segments`), with the preparation's range, threshold, offset and
/// shifted IRF (a per-pixel shift map makes the shift a fitted parameter). The result's
/// first map is the main lifetime (`tau_<method>_ns`).
///
/// ```
/// use flim_core::io::{PrepOptions, RangeSpec, prepare_cube};
/// use flim_core::{Method, MethodOptions, run_method, sim::mono_exponential};
/// let cube = mono_exponential(&[2.5], 8, 8, 256, 0.05, 12.8, 20_000.0, 1)?;
/// let p = prepare_cube(cube.into(), String::new(), &PrepOptions::default(), RangeSpec::All)?;
/// let opts = MethodOptions::default(); // mono-exponential
/// let (set, _) = run_method(&p, Method::Mle, &opts, &gpu_runtime::Device::cpu())?;
/// assert_eq!(set.maps[0].0, "tau_mle_ns");
/// let tau = set.get("tau_mle_ns").unwrap()[[4, 4]];
/// assert!((tau - 2.5).abs() < 0.1, "{tau}");
/// # Ok::<(), flim_core::Error>(())
/// ```
pub fn run_method(
    p: &Prepared,
    method: Method,
    opts: &MethodOptions,
    device: &Device,
) -> Result<(MapSet, RunInfo)> {
    // The non-iterative methods compute only the one asked for.
    let (plane, only) = match method {
        Method::Iem => ("tau_iem_ns", Methods::IEM),
        Method::Cmm => ("tau_cmm_ns", Methods::CMM),
        Method::Rld => ("tau_rld_ns", Methods::RLD),
        Method::Phasor => ("tau_phase_ns", Methods::PHASOR),
        Method::Bcmm => {
            if opts.model == Model::Tri {
                return Err(invalid(
                    "model",
                    "tri",
                    "--method bcmm is bi-exponential: --model tri is not supported (use mono or bi)",
                ));
            }
            let donor = match opts.donor_tau {
                None => Donor::Unknown,
                Some(t) if t.is_finite() && t > 0.0 => Donor::Known(t),
                Some(t) => return Err(invalid("donor lifetime", t, "must be > 0 ns")),
            };
            let fret = FretOptions::new(donor).with_analysis(p.analysis);
            let (maps, info) = with_cube!(&p.cube, |c| analyse_fret(c, &fret, device))?;
            return Ok((MapSet::from_fret(&maps, donor != Donor::Unknown)?, info));
        }
        Method::Lsq | Method::Mle | Method::Global => {
            let fit_opts = opts.fit_options(
                method,
                p.range.map(|r| (r.first, r.bins)),
                p.threshold,
                p.offset,
                p.irf.as_ref().map(Irf::values),
                p.shift_map.is_some(),
            );
            let (maps, info) = if method == Method::Global {
                let global = GlobalOptions::new(fit_opts, opts.segments.clone());
                with_cube!(&p.cube, |c| fit_global(c, &global, device))?
            } else {
                with_cube!(&p.cube, |c| fit(c, &fit_opts, device))?
            };
            let set =
                MapSet::from_fit(method.name(), opts.fit_offset, p.shift_map.is_some(), &maps)?;
            return Ok((set, info));
        }
    };
    let analysis = p.analysis.with_methods(only);
    let (maps, info) = analyse_any(&p.cube, &analysis, device)?;
    let all = MapSet::from_lifetimes(&maps);
    let names: &[&str] = if method == Method::Phasor {
        &[plane, "intensity", "g", "s", "tau_mod_ns"]
    } else {
        &[plane, "intensity"]
    };
    Ok((all.select(names)?, info))
}
