//! Harness for GPU-vs-CPU tests: which device to test on, and named tolerances.
//!
//! Each GPU test is written once with [`gpu_test!`] and instantiated per backend (`cuda`,
//! `wgpu`); software adapters such as lavapipe are allowed here, unlike in the CLI. An
//! instance whose backend is absent prints `SKIPPED (no <backend> device): ...` and passes,
//! unless `BIOGPU_REQUIRE_GPU` names that backend (`cuda`, `wgpu`, or `1` for the backend
//! of `BIOGPU_DEVICE`; CI and the GPU bundle set it), in which case it fails.

use gpu_runtime::{Backend, Device, DeviceRequest};
use std::sync::{Mutex, MutexGuard, PoisonError};

/// GPU tests take turns: CubeCL reports kernel-build faults per process, so two tests
/// compiling kernels at once could see each other's faults; one device is shared anyway.
static GPU_TURN: Mutex<()> = Mutex::new(());

/// The device under test, held exclusively for the life of the value.
#[derive(Debug)]
pub struct GpuLease {
    device: Device,
    _turn: MutexGuard<'static, ()>,
}

impl std::ops::Deref for GpuLease {
    type Target = Device;
    fn deref(&self) -> &Device {
        &self.device
    }
}

/// Environment variable that turns a missing GPU into a test failure.
pub const REQUIRE_GPU_ENV: &str = "BIOGPU_REQUIRE_GPU";

/// Proptest settings with `default` cases, or `PROPTEST_CASES` where set: CI keeps the
/// default, a run on the GPU machine can search wider.
pub fn proptest_cases(default: u32) -> proptest::test_runner::Config {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default);
    proptest::test_runner::Config {
        cases,
        ..proptest::test_runner::Config::default()
    }
}

/// The backends every GPU test is instantiated for (see [`gpu_test!`]): the test's module
/// gets one `#[test]` per entry, named as here.
pub const BACKENDS: [Backend; 2] = [Backend::Cuda, Backend::Wgpu];

/// The device a test instance for `backend` runs on: the one `BIOGPU_DEVICE` names when it
/// is of that backend (`cuda:1`, `wgpu:0`), else `cuda:0` or the software wgpu adapter
/// (lavapipe), which CI uses.
fn request_for(backend: Backend) -> DeviceRequest {
    let named = DeviceRequest::from_env().unwrap_or_else(|e| panic!("{e}"));
    match (backend, named) {
        (Backend::Cuda, DeviceRequest::Cuda(i)) => DeviceRequest::Cuda(i),
        (Backend::Cuda, _) => DeviceRequest::Cuda(0),
        (Backend::Wgpu, r @ (DeviceRequest::Wgpu(_) | DeviceRequest::WgpuSoftware)) => r,
        (Backend::Wgpu, _) => DeviceRequest::WgpuSoftware,
        (Backend::Cpu, _) => DeviceRequest::Cpu,
    }
}

/// Whether a missing `backend` fails its tests: `BIOGPU_REQUIRE_GPU` lists backends
/// (`cuda`, `wgpu`, comma-separated), or is `1` for the backend `BIOGPU_DEVICE` names.
fn required(backend: Backend) -> bool {
    let Ok(value) = std::env::var(REQUIRE_GPU_ENV) else {
        return false;
    };
    value.split(',').map(str::trim).any(|v| match v {
        "1" => match DeviceRequest::from_env() {
            Ok(DeviceRequest::Cuda(_)) => backend == Backend::Cuda,
            Ok(DeviceRequest::Wgpu(_) | DeviceRequest::WgpuSoftware) => backend == Backend::Wgpu,
            _ => false,
        },
        name => name.split(':').next() == Some(&backend.to_string()),
    })
}

/// The `backend` device under test, held exclusively for the life of the value, or `None`
/// (after printing `SKIPPED`) when this machine has none.
///
/// # Panics
/// When the backend is missing and required (`BIOGPU_REQUIRE_GPU`).
pub fn lease(backend: Backend, test: &str) -> Option<GpuLease> {
    let turn = GPU_TURN.lock().unwrap_or_else(PoisonError::into_inner);
    let why = match Device::select(request_for(backend), true) {
        Ok(sel) if sel.device.is_gpu() => {
            return Some(GpuLease {
                device: sel.device,
                _turn: turn,
            });
        }
        Ok(sel) => sel.notes.join("; "),
        Err(e) => e.to_string(),
    };
    assert!(
        !required(backend),
        "{test} on {backend}: the backend is required ({REQUIRE_GPU_ENV}) but not usable: {why}"
    );
    eprintln!("SKIPPED (no {backend} device): {test}: {why}");
    None
}

/// Run `body` on the `backend` device when there is one (see [`lease`]).
pub fn run_on(backend: Backend, test: &str, body: impl FnOnce(&Device)) {
    if let Some(device) = lease(backend, test) {
        body(&device);
    }
}

/// Define a GPU-vs-CPU test once and instantiate it for every backend in [`BACKENDS`]:
///
/// ```ignore
/// biogpu_tests::gpu_test! {
///     /// What the test shows.
///     fn sums_match(device) {
///         // `device: &gpu_runtime::Device`, exclusively held
///     }
/// }
/// ```
///
/// expands to `mod sums_match { #[test] fn cuda() .. #[test] fn wgpu() .. }`; an instance
/// whose backend is absent prints `SKIPPED` (or fails where `BIOGPU_REQUIRE_GPU` asks for
/// it). Property tests put the closure form of `proptest!` in the body.
#[macro_export]
macro_rules! gpu_test {
    ($(#[$meta:meta])* fn $name:ident($device:ident) $body:block) => {
        $(#[$meta])*
        mod $name {
            #[allow(unused_imports)]
            use super::*;

            fn body($device: &::gpu_runtime::Device) $body

            #[test]
            fn cuda() {
                $crate::run_on(::gpu_runtime::Backend::Cuda, module_path!(), body);
            }

            #[test]
            fn wgpu() {
                $crate::run_on(::gpu_runtime::Backend::Wgpu, module_path!(), body);
            }
        }
    };
}

/// A named tolerance: |got - want| <= abs + rel * |want|.
#[derive(Debug, Clone, Copy)]
pub struct Tolerance {
    pub name: &'static str,
    pub rel: f64,
    pub abs: f64,
}

impl Tolerance {
    pub const fn new(name: &'static str, rel: f64, abs: f64) -> Self {
        Tolerance { name, rel, abs }
    }

    pub fn accepts(&self, got: f64, want: f64) -> bool {
        if got.is_nan() || want.is_nan() {
            return got.is_nan() && want.is_nan();
        }
        if got.is_infinite() || want.is_infinite() {
            return got == want;
        }
        (got - want).abs() <= self.abs + self.rel * want.abs()
    }

    /// Index and values of the first element outside the tolerance, if any.
    pub fn first_violation(&self, got: &[f64], want: &[f64]) -> Option<(usize, f64, f64)> {
        assert_eq!(got.len(), want.len(), "{}: lengths differ", self.name);
        got.iter()
            .zip(want)
            .enumerate()
            .find(|(_, (g, w))| !self.accepts(**g, **w))
            .map(|(i, (g, w))| (i, *g, *w))
    }
}

/// Assert that `got` matches `want` element-wise within `tol`, naming the first failure.
#[track_caller]
pub fn assert_close(what: &str, got: &[f64], want: &[f64], tol: Tolerance) {
    if let Some((i, g, w)) = tol.first_violation(got, want) {
        panic!(
            "{what}: element {i}: got {g}, want {w} (tolerance {}: rel {}, abs {})",
            tol.name, tol.rel, tol.abs
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tolerance_treats_nan_and_inf_strictly() {
        let t = Tolerance::new("t", 1e-6, 0.0);
        assert!(t.accepts(1.0, 1.0 + 1e-7));
        assert!(!t.accepts(1.0, 1.0 + 1e-5));
        assert!(t.accepts(f64::NAN, f64::NAN));
        assert!(!t.accepts(f64::NAN, 1.0));
        assert!(!t.accepts(1.0, f64::NAN));
        assert!(!t.accepts(f64::INFINITY, 1e300));
        assert_eq!(
            t.first_violation(&[1.0, 2.0], &[1.0, 3.0]),
            Some((1, 2.0, 3.0))
        );
    }
}
