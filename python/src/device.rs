//! The `device=` argument of every function, and `devices()`.
//!
//! Names as the CLI's `--device` takes them (`auto`, `cpu`, `cuda`, `cuda:N`, `wgpu`,
//! `wgpu:N`, `wgpu:software`), parsed by gpu-runtime. Each name is probed once per process
//! and kept: a GPU's probe costs ~0.1 s, far more than a small job. `auto` then trades its
//! GPU for the CPU job by job, as the CLI does, where the CPU is expected to finish first.

use crate::error::{IntoPyResult, value_error};
use gpu_runtime::{Device, DeviceRequest, JobEstimate};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::sync::{Mutex, PoisonError};

/// Devices already probed, by request.
static PROBED: Mutex<Vec<(DeviceRequest, Device)>> = Mutex::new(Vec::new());

/// The device `name` asks for (probed on first use, then reused).
pub(crate) fn resolve(py: Python<'_>, name: &str) -> PyResult<Device> {
    let text = name.trim().to_ascii_lowercase();
    if text.contains(',') || text.ends_with(":all") {
        return Err(value_error(format!(
            "device `{name}` names several devices: the Python package runs on one device \
             (e.g. cuda:0); several GPUs are for the CLI's `mc run` for now"
        )));
    }
    let request = name.parse::<DeviceRequest>().py()?;
    let probed = || PROBED.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some((_, d)) = probed().iter().find(|(r, _)| *r == request) {
        return Ok(d.clone());
    }
    let selection = py.detach(|| Device::select(request, false)).py()?;
    probed().push((request, selection.device.clone()));
    Ok(selection.device)
}

/// The device a job of cost `job` runs on: `device` itself, unless `auto` picked it and the
/// CPU is expected to finish first ([`Device::for_job`]).
pub(crate) fn for_job(device: &Device, job: JobEstimate) -> Device {
    device.for_job(job).device
}

/// Every device of this machine, as dicts.
#[pyfunction]
pub(crate) fn devices(py: Python<'_>) -> PyResult<Vec<Bound<'_, PyDict>>> {
    let inventory = py.detach(Device::inventory);
    inventory
        .devices
        .iter()
        .map(|d| {
            let dict = PyDict::new(py);
            dict.set_item("id", &d.id)?;
            dict.set_item("name", &d.name)?;
            dict.set_item("backend", d.backend.to_string())?;
            dict.set_item("memory", d.total_memory)?;
            dict.set_item("free_memory", d.free_memory)?;
            dict.set_item("compute_capability", d.compute_capability)?;
            dict.set_item("compute_units", d.compute_units)?;
            dict.set_item("max_buffer_bytes", d.max_buffer_bytes)?;
            dict.set_item("f64", d.supports_f64)?;
            dict.set_item("software", d.software)?;
            dict.set_item("driver", &d.driver)?;
            dict.set_item("auto", d.id == inventory.auto)?;
            Ok(dict)
        })
        .collect()
}

/// Why backends are missing (one line each), as `biogpu devices` prints them.
#[pyfunction]
pub(crate) fn device_notes(py: Python<'_>) -> Vec<String> {
    py.detach(Device::inventory).notes
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(devices, m)?)?;
    m.add_function(wrap_pyfunction!(device_notes, m)?)?;
    Ok(())
}
