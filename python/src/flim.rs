//! FLIM: readers, non-iterative lifetimes (RLD, IEM, CMM, phasor) and per-pixel or global
//! iterative fits.
//!
//! Decays come in as C-contiguous (y, x, bin) arrays of uint16, uint32 or float32 (the
//! Python layer reshapes single decays and lists of decays to that form).

use crate::device::{for_job, resolve};
use crate::error::{IntoPyResult, compute, value_error};
use flim_core::io::ReadOptions;
use flim_core::{
    Analysis, AnyCube, Calibration, Cube, Estimator, FitMaps, FitOptions, FitStatus, GlobalOptions,
    Method, MethodOptions, Methods, Model, Offset, Segments, Shift,
};
use ndarray::{Array2, Array3, Axis};
use numpy::{IntoPyArray, PyReadonlyArray1, PyReadonlyArray2, PyReadonlyArray3};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use std::path::PathBuf;

/// Apply `$body` to the cube inside an [`AnyCube`], whatever its count type.
macro_rules! with_cube {
    ($any:expr, |$c:ident| $body:expr) => {
        match $any {
            AnyCube::U16($c) => $body,
            AnyCube::U32($c) => $body,
            AnyCube::F32($c) => $body,
        }
    };
}

/// The cube in `decays` with its bin width and laser period (one copy of the counts).
fn cube(decays: &Bound<'_, PyAny>, bin_ns: f64, period_ns: Option<f64>) -> PyResult<AnyCube> {
    fn make<T: flim_core::Count + numpy::Element>(
        a: &PyReadonlyArray3<'_, T>,
        bin_ns: f64,
        period_ns: Option<f64>,
    ) -> PyResult<AnyCube>
    where
        AnyCube: From<Cube<T>>,
    {
        let c = Cube::new(a.as_array().to_owned(), bin_ns).py()?;
        let c = match period_ns {
            Some(p) => c.with_period_ns(p).py()?,
            None => c,
        };
        Ok(c.into())
    }
    if let Ok(a) = decays.extract::<PyReadonlyArray3<'_, u16>>() {
        return make(&a, bin_ns, period_ns);
    }
    if let Ok(a) = decays.extract::<PyReadonlyArray3<'_, u32>>() {
        return make(&a, bin_ns, period_ns);
    }
    if let Ok(a) = decays.extract::<PyReadonlyArray3<'_, f32>>() {
        return make(&a, bin_ns, period_ns);
    }
    Err(value_error(
        "decays must be a (y, x, bin) array of uint16, uint32 or float32 photon counts",
    ))
}

/// The counts of a cube as a numpy array (y, x, bin), in the file's count type.
fn counts<'py>(py: Python<'py>, c: &AnyCube) -> Bound<'py, PyAny> {
    match c {
        AnyCube::U16(c) => c.counts().to_owned().into_pyarray(py).into_any(),
        AnyCube::U32(c) => c.counts().to_owned().into_pyarray(py).into_any(),
        AnyCube::F32(c) => c.counts().to_owned().into_pyarray(py).into_any(),
    }
}

/// Every image of a TCSPC file, with its metadata; see `biogpu.flim.read`.
#[pyfunction]
#[pyo3(signature = (path, bin_ns, period_ns, channel, block, sum_frames, binning))]
fn flim_read(
    py: Python<'_>,
    path: PathBuf,
    bin_ns: Option<f64>,
    period_ns: Option<f64>,
    channel: Option<usize>,
    block: Option<usize>,
    sum_frames: bool,
    binning: usize,
) -> PyResult<Bound<'_, PyDict>> {
    let mut opts = ReadOptions::default()
        .with_sum_frames(sum_frames)
        .with_binning(binning);
    if let Some(b) = bin_ns {
        opts = opts.with_bin_ns(b);
    }
    if let Some(p) = period_ns {
        opts = opts.with_period_ns(p);
    }
    if let Some(c) = channel {
        opts = opts.with_channel(c);
    }
    if let Some(b) = block {
        opts = opts.with_block(b);
    }
    let rec = compute(py, || flim_core::io::read(&path, &opts).py())?;
    let images = PyList::empty(py);
    for image in &rec.images {
        let d = PyDict::new(py);
        d.set_item("counts", counts(py, &image.cube))?;
        d.set_item("bin_ns", image.cube.bin_ns())?;
        d.set_item("period_ns", image.cube.period_ns())?;
        d.set_item("block", image.block)?;
        d.set_item("frame", image.frame)?;
        d.set_item("channel", image.channel)?;
        images.append(d)?;
    }
    let out = PyDict::new(py);
    out.set_item("images", images)?;
    out.set_item("format", format!("{:?}", rec.format).to_lowercase())?;
    let header = PyDict::new(py);
    for (k, v) in &rec.metadata {
        header.set_item(k, v)?;
    }
    out.set_item("header", header)?;
    Ok(out)
}

/// Non-iterative lifetimes of every pixel; see `biogpu.flim.lifetimes` and `phasor`.
#[pyfunction]
#[pyo3(signature = (decays, bin_ns, period_ns, methods, first, bins, threshold, offset, harmonic, calibration, reference, reference_tau_ns, device))]
fn flim_lifetimes<'py>(
    py: Python<'py>,
    decays: &Bound<'py, PyAny>,
    bin_ns: f64,
    period_ns: Option<f64>,
    methods: Vec<String>,
    first: usize,
    bins: Option<usize>,
    threshold: f64,
    offset: f64,
    harmonic: u32,
    calibration: Option<(f64, f64)>,
    reference: Option<PyReadonlyArray1<'py, f64>>,
    reference_tau_ns: f64,
    device: &str,
) -> PyResult<Bound<'py, PyDict>> {
    let cube = cube(decays, bin_ns, period_ns)?;
    let mut set: Option<Methods> = None;
    for m in &methods {
        let bit = match m.to_ascii_lowercase().as_str() {
            "rld" => Methods::RLD,
            "iem" => Methods::IEM,
            "cmm" => Methods::CMM,
            "phasor" => Methods::PHASOR,
            other => {
                return Err(value_error(format!(
                    "unknown lifetime method `{other}`: expected rld, iem, cmm or phasor \
                     (the fits are biogpu.flim.fit)"
                )));
            }
        };
        set = Some(set.map_or(bit, |s| s | bit));
    }
    let set = set.ok_or_else(|| value_error("methods is empty: name at least one method"))?;
    let mut analysis = Analysis::default()
        .with_range(first, bins)
        .with_threshold(threshold)
        .with_offset(offset)
        .with_harmonic(harmonic)
        .with_methods(set);
    if let Some((phase, modulation)) = calibration {
        analysis = analysis.with_calibration(Calibration { phase, modulation });
    }
    if let Some(r) = reference {
        let r = r.as_array().to_vec();
        let cal = Calibration::from_reference_decay(
            &r,
            cube.bin_ns(),
            cube.period_ns(),
            reference_tau_ns,
            &analysis,
        )
        .py()?;
        analysis = analysis.with_calibration(cal);
    }
    let (h, w) = cube.shape();
    let device = resolve(py, device)?;
    let job =
        flim_core::job_estimate_for(h * w, cube.bins(), Method::Cmm, &MethodOptions::default());
    let device = for_job(&device, job);
    let (maps, info) = compute(py, || {
        flim_core::analyse_any(&cube, &analysis, &device).py()
    })?;
    let out = PyDict::new(py);
    out.set_item("intensity", maps.intensity.into_pyarray(py))?;
    let wanted = |m: Methods| set.contains(m);
    if wanted(Methods::RLD) {
        out.set_item("tau_rld", maps.tau_rld.into_pyarray(py))?;
    }
    if wanted(Methods::IEM) {
        out.set_item("tau_iem", maps.tau_iem.into_pyarray(py))?;
    }
    if wanted(Methods::CMM) {
        out.set_item("tau_cmm", maps.tau_cmm.into_pyarray(py))?;
    }
    if wanted(Methods::PHASOR) {
        out.set_item("g", maps.g.into_pyarray(py))?;
        out.set_item("s", maps.s.into_pyarray(py))?;
        out.set_item("tau_phase", maps.tau_phase.into_pyarray(py))?;
        out.set_item("tau_mod", maps.tau_mod.into_pyarray(py))?;
    }
    out.set_item("status", maps.status.into_pyarray(py))?;
    out.set_item("status_names", vec!["ok", "masked"])?;
    out.set_item("bin_ns", cube.bin_ns())?;
    out.set_item("period_ns", cube.period_ns())?;
    out.set_item("backend", info.backend.to_string())?;
    out.set_item("device", device.info().id.clone())?;
    Ok(out)
}

/// One (component, y, x) array of per-component maps.
fn stack(maps: &[Array2<f32>], shape: (usize, usize)) -> Array3<f32> {
    let views: Vec<_> = maps.iter().map(|m| m.view()).collect();
    if views.is_empty() {
        return Array3::zeros((0, shape.0, shape.1));
    }
    ndarray::stack(Axis(0), &views).expect("maps of one image share a shape")
}

/// The fit maps as a dict.
fn fit_dict(py: Python<'_>, maps: FitMaps, shape: (usize, usize)) -> PyResult<Bound<'_, PyDict>> {
    let out = PyDict::new(py);
    out.set_item("tau", stack(&maps.tau, shape).into_pyarray(py))?;
    out.set_item("amplitude", stack(&maps.amplitude, shape).into_pyarray(py))?;
    out.set_item("fraction", stack(&maps.fraction, shape).into_pyarray(py))?;
    out.set_item("intensity", maps.intensity.into_pyarray(py))?;
    out.set_item("offset", maps.offset.into_pyarray(py))?;
    out.set_item("shift", maps.shift.into_pyarray(py))?;
    out.set_item("tau_amp_mean", maps.tau_amp_mean.into_pyarray(py))?;
    out.set_item("tau_int_mean", maps.tau_int_mean.into_pyarray(py))?;
    out.set_item("chi2_red", maps.chi2_red.into_pyarray(py))?;
    out.set_item("iterations", maps.iterations.into_pyarray(py))?;
    out.set_item("status", maps.status.mapv(|s| s as u8).into_pyarray(py))?;
    let names: Vec<String> = [FitStatus::Converged, FitStatus::Masked, FitStatus::Failed]
        .iter()
        .map(|s| format!("{s:?}").to_lowercase())
        .collect();
    out.set_item("status_names", names)?;
    Ok(out)
}

/// Per-pixel (or global) iterative fit; see `biogpu.flim.fit`.
#[pyfunction]
#[pyo3(signature = (decays, bin_ns, period_ns, model, estimator, irf, irf_shift, fit_shift, offset, fit_offset, first, bins, threshold, mask, max_iterations, tolerance, initial_tau_ns, segments, device))]
fn flim_fit<'py>(
    py: Python<'py>,
    decays: &Bound<'py, PyAny>,
    bin_ns: f64,
    period_ns: Option<f64>,
    model: &str,
    estimator: &str,
    irf: Option<PyReadonlyArray1<'py, f64>>,
    irf_shift: f64,
    fit_shift: bool,
    offset: f64,
    fit_offset: bool,
    first: usize,
    bins: Option<usize>,
    threshold: f64,
    mask: Option<PyReadonlyArray2<'py, bool>>,
    max_iterations: u32,
    tolerance: f64,
    initial_tau_ns: Option<Vec<f64>>,
    segments: Option<&str>,
    device: &str,
) -> PyResult<Bound<'py, PyDict>> {
    let cube = cube(decays, bin_ns, period_ns)?;
    let model = match model.to_ascii_lowercase().as_str() {
        "mono" | "1" => Model::Mono,
        "bi" | "2" => Model::Bi,
        "tri" | "3" => Model::Tri,
        other => {
            return Err(value_error(format!(
                "unknown model `{other}`: expected mono, bi or tri"
            )));
        }
    };
    let estimator = match estimator.to_ascii_lowercase().as_str() {
        "mle" => Estimator::MaximumLikelihood,
        "lsq" | "lsq-neyman" => Estimator::LeastSquaresNeyman,
        "lsq-pearson" => Estimator::LeastSquaresPearson,
        "lsq-model" => Estimator::LeastSquaresModel,
        other => {
            return Err(value_error(format!(
                "unknown estimator `{other}`: expected mle, lsq (Neyman weights), \
                 lsq-pearson or lsq-model"
            )));
        }
    };
    let mut opts = FitOptions::new(model)
        .with_estimator(estimator)
        .with_offset(if fit_offset {
            Offset::Fitted
        } else {
            Offset::Fixed(offset)
        })
        .with_range(first, bins)
        .with_threshold(threshold)
        .with_max_iterations(max_iterations)
        .with_tolerance(tolerance);
    if let Some(irf) = &irf {
        opts = opts
            .with_irf(&irf.as_array().to_vec())
            .with_irf_shift(if fit_shift {
                Shift::Fitted(irf_shift)
            } else {
                Shift::Fixed(irf_shift)
            });
    }
    if let Some(m) = &mask {
        opts = opts.with_mask(m.as_array());
    }
    if let Some(t) = &initial_tau_ns {
        opts = opts.with_initial_lifetimes(t);
    }
    let segments = match segments.map(str::to_ascii_lowercase).as_deref() {
        None => None,
        Some("whole") => Some(Segments::Whole),
        Some(s) => match s.strip_prefix("runs:").map(str::parse::<usize>) {
            Some(Ok(n)) if n > 0 => Some(Segments::Runs(n)),
            _ => {
                return Err(value_error(format!(
                    "unknown segments `{s}`: expected \"whole\" or \"runs:N\" (N pixels per \
                     segment in raster order, e.g. runs:32)"
                )));
            }
        },
    };
    let shape = cube.shape();
    let device = resolve(py, device)?;
    let method = if segments.is_some() {
        Method::Global
    } else {
        Method::Mle
    };
    let method_opts = MethodOptions {
        model,
        ..MethodOptions::default()
    };
    let job = flim_core::job_estimate_for(shape.0 * shape.1, cube.bins(), method, &method_opts);
    let device = for_job(&device, job);
    let (maps, info) = compute(py, || match segments {
        Some(segments) => {
            let global = GlobalOptions::new(opts, segments);
            with_cube!(&cube, |c| flim_core::fit_global(c, &global, &device).py())
        }
        None => with_cube!(&cube, |c| flim_core::fit(c, &opts, &device).py()),
    })?;
    let out = fit_dict(py, maps, shape)?;
    out.set_item("estimator", estimator.name())?;
    out.set_item("goodness_of_fit", estimator.goodness_of_fit())?;
    out.set_item("bin_ns", cube.bin_ns())?;
    out.set_item("period_ns", cube.period_ns())?;
    out.set_item("backend", info.backend.to_string())?;
    out.set_item("device", device.info().id.clone())?;
    Ok(out)
}

/// The IRF estimated from the data's summed decay; see `biogpu.flim.estimate_irf`.
#[pyfunction]
#[pyo3(signature = (decays, bin_ns))]
fn flim_estimate_irf<'py>(
    py: Python<'py>,
    decays: &Bound<'py, PyAny>,
    bin_ns: f64,
) -> PyResult<Bound<'py, PyDict>> {
    let cube = cube(decays, bin_ns, None)?;
    let irf = compute(py, || flim_core::Irf::estimate(&cube).py())?;
    let out = PyDict::new(py);
    out.set_item("irf", irf.values().to_vec().into_pyarray(py))?;
    out.set_item("centroid_ns", irf.centroid_ns())?;
    out.set_item("fwhm_ns", irf.fwhm_ns())?;
    Ok(out)
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(flim_estimate_irf, m)?)?;
    m.add_function(wrap_pyfunction!(flim_read, m)?)?;
    m.add_function(wrap_pyfunction!(flim_lifetimes, m)?)?;
    m.add_function(wrap_pyfunction!(flim_fit, m)?)?;
    Ok(())
}
