//! Harness for GPU-vs-CPU tests: which device to test on, and named tolerances.
//!
//! Each GPU test is written once with [`gpu_test!`] and registered per backend (`cuda`,
//! `wgpu`) as `module::test::backend`; software adapters such as lavapipe are allowed here,
//! unlike in the CLI. The `gpu_vs_cpu` binary runs them with its own harness ([`harness`],
//! `harness = false`, on `libtest-mimic`, with libtest's command line): each backend is
//! probed once; the tests of one that is absent are reported **ignored** in the summary line
//! (`test result: ok. 0 passed; 0 failed; 112 ignored; ...`) and counted, with the reason,
//! in the binary's last line (`GPU tests skipped: 56 (56 with no cuda device: ...)`), unless
//! `BIOGPU_REQUIRE_GPU` names that backend (`cuda`, `wgpu`, or `1` for the backend of
//! `BIOGPU_DEVICE`; CI and the GPU bundle set it), in which case they fail. A body that
//! cannot run on the device it got (no f64) calls [`skip`], counted the same way.

use gpu_runtime::{Backend, Device};
use std::sync::Mutex;

pub mod harness;

pub use harness::skip;

#[doc(hidden)]
pub use inventory;

/// GPU tests take turns: CubeCL reports kernel-build faults per process, so two tests
/// compiling kernels at once could see each other's faults; one device is shared anyway.
static GPU_TURN: Mutex<()> = Mutex::new(());

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

/// The backends every GPU test is instantiated for (see [`gpu_test!`]), its name ending
/// in each entry's name.
pub const BACKENDS: [Backend; 2] = [Backend::Cuda, Backend::Wgpu];

/// One GPU test on one backend, as [`gpu_test!`] registers it for [`harness`].
#[derive(Debug)]
pub struct GpuTest {
    /// `module_path!()` of the test's module, crate first: `gpu_vs_cpu::speckle::chunked`.
    pub path: &'static str,
    pub backend: Backend,
    pub body: fn(&Device),
}

impl GpuTest {
    /// The test's name as libtest would give it: `speckle::chunked::cuda`.
    pub fn name(&self) -> String {
        let path = self.path.split_once("::").map_or(self.path, |(_, p)| p);
        format!("{path}::{}", self.backend)
    }
}

inventory::collect!(GpuTest);

/// Define a GPU-vs-CPU test once and register it for every backend in [`BACKENDS`]:
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
/// expands to `mod sums_match { fn body(device) .. }` and registers `sums_match::cuda` and
/// `sums_match::wgpu` for the binary's [`harness`] (a plain `#[test]` would not run
/// there): an instance whose backend is absent is ignored and counted as skipped (or fails
/// where `BIOGPU_REQUIRE_GPU` asks for it). Property tests put the closure form of
/// `proptest!` in the body; a body that cannot run on the device it got calls [`skip`].
#[macro_export]
macro_rules! gpu_test {
    ($(#[$meta:meta])* fn $name:ident($device:ident) $body:block) => {
        $(#[$meta])*
        mod $name {
            #[allow(unused_imports)]
            use super::*;

            fn body($device: &::gpu_runtime::Device) $body

            $crate::inventory::submit! {
                $crate::GpuTest {
                    path: module_path!(),
                    backend: ::gpu_runtime::Backend::Cuda,
                    body,
                }
            }

            $crate::inventory::submit! {
                $crate::GpuTest {
                    path: module_path!(),
                    backend: ::gpu_runtime::Backend::Wgpu,
                    body,
                }
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
