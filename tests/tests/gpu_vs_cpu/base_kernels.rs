//! GPU vs CPU for the runtime's own kernels (fill, axpy, block sum, atomic add), and the
//! runtime's error paths on a real device.

use biogpu_tests::{Tolerance, assert_close, gpu_test};
use gpu_kernels::base;
use gpu_runtime::{Error, with_gpu};
use proptest::prelude::*;

/// Element-wise f32 kernels do the same IEEE operations as the CPU; FMA contraction on
/// the GPU may differ by one rounding: 2^-23 relative of |a x| + |y|.
const ELEMENTWISE: Tolerance = Tolerance::new("elementwise f32", 2.5e-7, 1e-30);
/// f32 unit roundoff.
const U: f64 = 5.97e-8;

/// A tree sum of depth d (8 levels for 256-unit cubes) errs by at most (d + 1) u sum|x|
/// (Higham, Accuracy and Stability, 4.2); the f64 sum of partials adds nothing visible.
fn tree_sum_tolerance(abs_sum: f64) -> Tolerance {
    Tolerance::new("f32 tree sum, depth 8", 0.0, 9.0 * U * abs_sum + 1e-30)
}

/// Sequential (atomic) accumulation of k terms errs by at most (k - 1) u sum|x|.
fn sequential_sum_tolerance(k: usize, abs_sum: f64) -> Tolerance {
    Tolerance::new("f32 sequential sum", 0.0, k as f64 * U * abs_sum + 1e-30)
}

fn config() -> ProptestConfig {
    ProptestConfig {
        cases: 24,
        ..ProptestConfig::default()
    }
}

gpu_test! {
    fn fill_writes_every_element(device) {
        proptest!(config(), |(len in 1usize..5000, value in -1e6f32..1e6)| {
            let got: Vec<f32> = with_gpu!(device, |gpu| {
                let out = gpu.upload(&vec![f32::NAN; len])?;
                base::fill(gpu, &out, value)?;
                gpu.download(&out)
            }).unwrap();
            prop_assert!(got.iter().all(|&v| v == value));
        });
    }
}

gpu_test! {
    fn axpy_matches_cpu(device) {
        proptest!(config(), |(x in prop::collection::vec(-1e3f32..1e3, 1..4000), a in -10f32..10.0, seed in 0u32..1000)| {
            let y: Vec<f32> = x.iter().enumerate().map(|(i, v)| v * 0.5 + (i as u32 ^ seed) as f32 * 1e-3).collect();
            let got: Vec<f32> = with_gpu!(device, |gpu| {
                let (xd, yd) = (gpu.upload(&x)?, gpu.upload(&y)?);
                base::axpy(gpu, a, &xd, &yd)?;
                gpu.download(&yd)
            }).unwrap();
            let want: Vec<f64> = x.iter().zip(&y).map(|(&xi, &yi)| f64::from(a.mul_add(xi, yi))).collect();
            let scale: Vec<f64> = x.iter().zip(&y).map(|(&xi, &yi)| f64::from((a * xi).abs() + yi.abs())).collect();
            for i in 0..got.len() {
                let tol = Tolerance::new(ELEMENTWISE.name, 0.0, ELEMENTWISE.rel * scale[i] + ELEMENTWISE.abs);
                assert_close("axpy", &[f64::from(got[i])], &[want[i]], tol);
            }
        });
    }
}

gpu_test! {
    fn block_sum_matches_f64_sum(device) {
        proptest!(config(), |(x in prop::collection::vec(-1f32..1.0, 1..20_000))| {
            let got = with_gpu!(device, |gpu| base::sum(gpu, &gpu.upload(&x)?)).unwrap();
            let want: f64 = x.iter().map(|&v| f64::from(v)).sum();
            let abs_sum: f64 = x.iter().map(|&v| f64::from(v.abs())).sum();
            assert_close("sum", &[got], &[want], tree_sum_tolerance(abs_sum));
        });
    }
}

gpu_test! {
    fn atomic_accumulate_matches_cpu_histogram(device) {
        proptest!(config(), |(n in 1usize..20_000, bins in 1usize..64, seed in any::<u32>())| {
            let mut s = seed | 1;
            let mut next = || { s ^= s << 13; s ^= s >> 17; s ^= s << 5; s };
            let idx: Vec<u32> = (0..n).map(|_| next() % (bins as u32 + 2)).collect(); // some out of range
            let vals: Vec<f32> = (0..n).map(|_| (next() % 1000) as f32 / 1000.0).collect();
            let got: Vec<f32> = with_gpu!(device, |gpu| {
                let tally = gpu.upload(&vec![0f32; bins])?;
                base::atomic_accumulate(gpu, &gpu.upload(&vals)?, &gpu.upload(&idx)?, &tally)?;
                gpu.download(&tally)
            }).unwrap();
            let mut want = vec![0f64; bins];
            for (&b, &v) in idx.iter().zip(&vals) {
                if (b as usize) < bins { want[b as usize] += f64::from(v); }
            }
            for b in 0..bins {
                let k = idx.iter().filter(|&&i| i as usize == b).count();
                assert_close(&format!("tally bin {b}"), &[f64::from(got[b])], &[want[b]], sequential_sum_tolerance(k, want[b]));
            }
        });
    }
}

gpu_test! {
    fn mismatched_lengths_are_an_invalid_launch_not_a_crash(device) {
        let err = with_gpu!(device, |gpu| {
            let (x, y) = (gpu.upload(&[1f32; 10])?, gpu.upload(&[1f32; 11])?);
            base::axpy(gpu, 1.0, &x, &y)
        })
        .unwrap_err();
        assert!(
            matches!(err, Error::InvalidLaunch { ref kernel, .. } if kernel == "axpy"),
            "{err}"
        );
    }
}

gpu_test! {
    fn allocation_beyond_the_budget_is_out_of_memory(device) {
        let err = with_gpu!(device, |gpu| {
            let too_many = (gpu.budget().bytes() / 4 + 1) as usize;
            gpu.empty::<f32>(too_many).map(|_| ())
        })
        .unwrap_err();
        assert!(matches!(err, Error::OutOfDeviceMemory { .. }), "{err}");
    }
}

gpu_test! {
    fn device_work_times_are_positive_and_synchronised(device) {
        let timing = with_gpu!(device, |gpu| {
            let a = gpu.empty::<f32>(1 << 16)?;
            gpu_runtime::bench(1, 3, || {
                base::fill(gpu, &a, 1.0)?;
                gpu.sync()
            })
        })
        .unwrap();
        assert!(
            timing.median_ms > 0.0
                && timing.min_ms <= timing.median_ms
                && timing.median_ms <= timing.max_ms
        );
    }
}

mod broken {
    use gpu_runtime::cubecl;
    use gpu_runtime::cubecl::prelude::*;

    /// Mutating a compile-time constant panics during kernel expansion on CubeCL's
    /// device thread; the runtime must report it instead of returning stale data.
    #[cube(launch)]
    pub fn broken_kernel(out: &mut Array<f32>, #[comptime] start: u32) {
        let mut k = start;
        k += 1;
        out[ABSOLUTE_POS] = k as f32;
    }
}

gpu_test! {
    fn a_kernel_that_fails_to_build_is_an_error_not_silent_zeros(device) {
        use gpu_runtime::cubecl::prelude::*;
        let err = with_gpu!(device, |gpu| {
            let out = gpu.upload(&[0f32; 4])?;
            gpu.launch("broken", CubeCount::Static(1, 1, 1), |count| {
                broken::broken_kernel::launch(gpu.client(), count, CubeDim::new_1d(4), out.arg(), 1);
            })?;
            gpu.download(&out)
        })
        .unwrap_err();
        assert!(
            matches!(err, Error::KernelCompilation { ref kernel, .. } if kernel == "broken"),
            "{err}"
        );
    }
}
