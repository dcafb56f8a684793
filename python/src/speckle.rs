//! Laser speckle: contrast (K, SFI, flags), tau_c from K, and MESI fits.
//!
//! Frames come in as C-contiguous (frame, row, column) arrays of uint8, uint16 or float32
//! (the Python layer adds the frame axis of a single frame and checks dtypes).

use crate::device::{for_job, resolve};
use crate::error::{IntoPyResult, compute, value_error};
use ndarray::Array3;
use numpy::{IntoPyArray, PyReadonlyArray2, PyReadonlyArray3, PyUntypedArrayMethods};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use speckle_core::{
    Border, ContrastParams, FlowModel, FlowParams, MesiInput, MesiOptions, Mode, RawStack, Window,
};

/// The stack in `frames` as a [`RawStack`] (one copy: the Rust API owns its frames).
fn raw_stack(frames: &Bound<'_, PyAny>) -> PyResult<RawStack> {
    fn owned<T: numpy::Element + Clone>(a: &PyReadonlyArray3<'_, T>) -> Array3<T> {
        a.as_array().to_owned()
    }
    if let Ok(a) = frames.extract::<PyReadonlyArray3<'_, u16>>() {
        return Ok(RawStack::U16(owned(&a)));
    }
    if let Ok(a) = frames.extract::<PyReadonlyArray3<'_, u8>>() {
        return Ok(RawStack::U8(owned(&a)));
    }
    if let Ok(a) = frames.extract::<PyReadonlyArray3<'_, f32>>() {
        return Ok(RawStack::F32(owned(&a)));
    }
    Err(value_error(
        "frames must be a 3-D (frame, row, column) array of uint8, uint16 or float32",
    ))
}

/// Speckle contrast of a stack; see `biogpu.speckle.contrast`.
#[pyfunction]
#[pyo3(signature = (frames, window, mode, temporal_frames, border, exposure, saturation, device))]
fn speckle_contrast<'py>(
    py: Python<'py>,
    frames: &Bound<'py, PyAny>,
    window: usize,
    mode: &str,
    temporal_frames: usize,
    border: &str,
    exposure: Option<f64>,
    saturation: Option<f64>,
    device: &str,
) -> PyResult<Bound<'py, PyDict>> {
    let stack = raw_stack(frames)?;
    let mode = mode.parse::<Mode>().py()?;
    let border = border.parse::<Border>().py()?;
    let window = Window::new(window).py()?;
    let mut params = match mode {
        Mode::Spatial => ContrastParams::spatial(window),
        Mode::Temporal => ContrastParams::temporal(temporal_frames),
        Mode::SpatioTemporal => ContrastParams::spatiotemporal(window, temporal_frames),
    }
    .with_border(border)
    .with_saturation(saturation);
    if let Some(t) = exposure {
        params = params.with_exposure(t).py()?;
    }
    let device = resolve(py, device)?;
    let (n, h, w) = stack.dim();
    let device = for_job(&device, speckle_core::job_estimate(h * w, n));
    let (maps, info) = compute(py, || speckle_core::contrast(&stack, &params, &device).py())?;
    let out = PyDict::new(py);
    out.set_item("k", maps.k.into_pyarray(py))?;
    if let Some(sfi) = maps.sfi {
        out.set_item("sfi", sfi.into_pyarray(py))?;
    }
    out.set_item("flags", maps.flags.into_pyarray(py))?;
    out.set_item("backend", info.backend.to_string())?;
    out.set_item("device", device.info().id.clone())?;
    Ok(out)
}

/// tau_c of every pixel of one K map; see `biogpu.speckle.tau_c`.
#[pyfunction]
#[pyo3(signature = (k, exposure, beta, model, device))]
fn speckle_flow<'py>(
    py: Python<'py>,
    k: PyReadonlyArray2<'py, f32>,
    exposure: f64,
    beta: f64,
    model: &str,
    device: &str,
) -> PyResult<Bound<'py, PyDict>> {
    let model = match model.to_ascii_lowercase().as_str() {
        "lorentzian" => FlowModel::Lorentzian,
        "gaussian" => FlowModel::Gaussian,
        other => {
            return Err(value_error(format!(
                "unknown flow model `{other}`: expected lorentzian (unordered motion) or \
                 gaussian (ordered flow)"
            )));
        }
    };
    let params = FlowParams::new(exposure, beta).with_model(model);
    let device = resolve(py, device)?;
    let k = k.as_array();
    let device = for_job(&device, speckle_core::job_estimate(k.len(), 1));
    let (map, info) = compute(py, || speckle_core::flow(k, &params, &device).py())?;
    let out = PyDict::new(py);
    out.set_item("tau_c", map.tau_c.into_pyarray(py))?;
    out.set_item("flags", map.flags.into_pyarray(py))?;
    out.set_item("no_motion", info.no_motion)?;
    out.set_item("no_contrast", info.no_contrast)?;
    out.set_item("undefined", info.undefined)?;
    out.set_item("backend", info.backend.to_string())?;
    out.set_item("device", device.info().id.clone())?;
    Ok(out)
}

/// MESI fit of a multi-exposure K stack; see `biogpu.speckle.mesi`.
#[pyfunction]
#[pyo3(signature = (k, exposures, beta, max_iterations, tolerance, max_residual, device))]
fn speckle_mesi<'py>(
    py: Python<'py>,
    k: PyReadonlyArray3<'py, f32>,
    exposures: Vec<f64>,
    beta: Option<f64>,
    max_iterations: u32,
    tolerance: f64,
    max_residual: Option<f64>,
    device: &str,
) -> PyResult<Bound<'py, PyDict>> {
    if k.shape()[0] != exposures.len() {
        return Err(value_error(format!(
            "k holds {} exposures (axis 0) but {} exposure times were given",
            k.shape()[0],
            exposures.len()
        )));
    }
    let mut options = match beta {
        Some(b) => MesiOptions::fixed_beta(b),
        None => MesiOptions::default(),
    };
    options.max_iterations = max_iterations;
    options.tolerance = tolerance;
    options.max_residual_rms = max_residual;
    let device = resolve(py, device)?;
    let k = k.as_array();
    let input = MesiInput {
        k,
        exposures_s: &exposures,
    };
    let (maps, info) = compute(py, || speckle_core::mesi(input, &options, &device).py())?;
    let out = PyDict::new(py);
    out.set_item(
        "residual_rms",
        maps.residual_rms(exposures.len()).into_pyarray(py),
    )?;
    out.set_item("tau_c", maps.tau_c.into_pyarray(py))?;
    out.set_item("rho", maps.rho.into_pyarray(py))?;
    out.set_item("v_noise", maps.v_noise.into_pyarray(py))?;
    out.set_item("beta", maps.beta.into_pyarray(py))?;
    out.set_item("rss", maps.rss.into_pyarray(py))?;
    out.set_item("status", maps.status.into_pyarray(py))?;
    let names: Vec<String> = speckle_core::FitStatus::ALL
        .iter()
        .map(|s| format!("{s:?}"))
        .collect();
    out.set_item("status_names", names)?;
    out.set_item("status_counts", info.status_counts.to_vec())?;
    out.set_item("backend", info.backend.to_string())?;
    out.set_item("device", device.info().id.clone())?;
    Ok(out)
}

/// Frames of a TIFF (8/16-bit or float, multi-page, ImageJ/OME hyperstacks) or PNG file;
/// see `biogpu.speckle.read`.
#[pyfunction]
#[pyo3(signature = (path, bit_depth, frame_height, channel, slice))]
fn speckle_read(
    py: Python<'_>,
    path: std::path::PathBuf,
    bit_depth: Option<u32>,
    frame_height: Option<usize>,
    channel: Option<usize>,
    slice: Option<usize>,
) -> PyResult<Bound<'_, PyDict>> {
    let opts = speckle_core::io::LoadOptions {
        bit_depth,
        frame_height,
        pick: speckle_core::io::StackPick { channel, slice },
        ..Default::default()
    };
    let (stack, camera) = compute(py, || speckle_core::io::load_stack(&path, &opts).py())?;
    let out = PyDict::new(py);
    match stack {
        RawStack::U8(a) => out.set_item("frames", a.into_pyarray(py))?,
        RawStack::U16(a) => out.set_item("frames", a.into_pyarray(py))?,
        RawStack::F32(a) => out.set_item("frames", a.into_pyarray(py))?,
    }
    out.set_item("bit_depth", camera.bit_depth)?;
    out.set_item("saturation", camera.saturation())?;
    Ok(out)
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(speckle_contrast, m)?)?;
    m.add_function(wrap_pyfunction!(speckle_flow, m)?)?;
    m.add_function(wrap_pyfunction!(speckle_mesi, m)?)?;
    m.add_function(wrap_pyfunction!(speckle_read, m)?)?;
    Ok(())
}
