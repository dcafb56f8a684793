//! `auto` between a GPU and the CPU, job by job.
//!
//! A GPU pays fixed costs before its first kernel (driver context and the compiled kernels
//! on disk: about 0.15 s on a server GPU, and 1-5 s of kernel compilation on the first run
//! of a build), so a small job finishes sooner on the CPU cores. Each modality estimates its
//! job from rates measured in `docs/benchmarks.md`; [`Device::for_job`] compares the two.
//! Only a device that `auto` picked is ever swapped: `--device cuda` stays on the GPU.

use crate::device::{Backend, Device};

/// Seconds a GPU takes to open before its first kernel, kernels already compiled: the CUDA
/// driver's start (0.1-0.2 s; the probe no longer pays it, NVML answers), its context and
/// the compiled-kernel cache (~0.13 s). Measured on an H200, docs/benchmarks.md "CLI costs"
/// and "the CUDA driver's floor".
pub const GPU_OPEN_SECONDS: f64 = 0.3;

/// Seconds of kernel compilation on the first run of a build, before the kernel cache holds
/// them, where a modality does not say (NVRTC on an H200: speckle 0.3 s, FLIM 0.5 s, Monte
/// Carlo 0.6 s, the f64 perfusion kernels 0.9-2.8 s).
pub const FIRST_COMPILE_SECONDS: f64 = 2.0;

/// A job's expected cost on each side, from its modality's calibrated rates.
///
/// ```
/// use gpu_runtime::JobEstimate;
/// // 262,144 pixels x 256 bins of maximum-likelihood fits (flim-core's rates).
/// let job = JobEstimate::per_item(262_144.0 * 256.0, 1.2e-8, 1.2e-10);
/// assert!(job.cpu_seconds(16) > job.gpu_seconds);
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct JobEstimate {
    /// Seconds the whole job takes one CPU core (the CPU path splits it over every core).
    pub cpu_core_seconds: f64,
    /// Seconds of GPU work: kernels and transfers, without the fixed opening costs.
    pub gpu_seconds: f64,
    /// Seconds to compile the job's kernels on the first CUDA run of a build.
    pub first_compile_seconds: f64,
}

impl JobEstimate {
    /// `items` units of work at `cpu_core_seconds` and `gpu_seconds` per unit.
    pub fn per_item(items: f64, cpu_core_seconds: f64, gpu_seconds: f64) -> Self {
        JobEstimate {
            cpu_core_seconds: items * cpu_core_seconds,
            gpu_seconds: items * gpu_seconds,
            first_compile_seconds: FIRST_COMPILE_SECONDS,
        }
    }

    /// `n` such jobs run one after the other on one opened device (a batch of inputs): the
    /// GPU opens and compiles once for all of them.
    pub fn times(mut self, n: usize) -> Self {
        self.cpu_core_seconds *= n as f64;
        self.gpu_seconds *= n as f64;
        self
    }

    /// The same job whose kernels take `seconds` to compile on a build's first CUDA run.
    pub fn with_first_compile(mut self, seconds: f64) -> Self {
        self.first_compile_seconds = seconds;
        self
    }

    /// Expected seconds on `cores` CPU cores.
    pub fn cpu_seconds(&self, cores: usize) -> f64 {
        self.cpu_core_seconds / cores.max(1) as f64
    }
}

/// The device a job runs on, and why.
#[derive(Debug, Clone)]
pub struct Choice {
    pub device: Device,
    /// One line for `-v` and the run summary.
    pub reason: String,
}

impl Device {
    /// The device for `job`: this one, unless `auto` picked it and the CPU is expected to
    /// finish first (the GPU's fixed opening costs included, and its first-run compilation
    /// when this build's kernel cache is still empty).
    ///
    /// ```
    /// use gpu_runtime::{Device, JobEstimate};
    /// let choice = Device::cpu().for_job(JobEstimate::per_item(1e9, 1e-6, 1e-9));
    /// assert_eq!(choice.device.info().id, "cpu"); // only auto's picks are ever swapped
    /// ```
    pub fn for_job(&self, job: JobEstimate) -> Choice {
        let cores = rayon::current_num_threads();
        let cpu = job.cpu_seconds(cores);
        // `auto` still probing: a job the CPU finishes before any GPU could open goes there
        // at once, and the probe opens nothing.
        if self.is_pending() && cpu < GPU_OPEN_SECONDS {
            self.abandon_pending();
            return Choice {
                device: Device::cpu(),
                reason: format!(
                    "auto chose the CPU: estimated {cpu:.2} s on {cores} CPU cores, less than a \
                     GPU takes to open ({GPU_OPEN_SECONDS} s)"
                ),
            };
        }
        if !self.is_gpu() || !self.picked_by_auto() {
            let why = if self.is_gpu() {
                "asked for"
            } else {
                "no GPU in use"
            };
            return Choice {
                device: self.clone(),
                reason: format!("{} ({why})", self.info().id),
            };
        }
        let compile = if self.backend() != Backend::Cuda || crate::kernel_cache::is_filled() {
            0.0
        } else {
            job.first_compile_seconds
        };
        let gpu = GPU_OPEN_SECONDS + compile + job.gpu_seconds;
        let estimate = format!(
            "estimated {gpu:.2} s on {} (open {GPU_OPEN_SECONDS} s{}) vs {cpu:.2} s on {cores} CPU cores",
            self.info().id,
            if compile > 0.0 {
                format!(", first-run compilation {compile} s")
            } else {
                String::new()
            }
        );
        if cpu < gpu {
            Choice {
                device: Device::cpu(),
                reason: format!("auto chose the CPU: {estimate}"),
            }
        } else {
            Choice {
                device: self.clone(),
                reason: format!("auto chose {}: {estimate}", self.info().id),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::{DeviceHandle, DeviceInfo};

    /// A CUDA device as `auto` (or `--device cuda`) would give it; never opened here.
    fn cuda(picked_by_auto: bool) -> Device {
        let info = DeviceInfo {
            id: "cuda:0".into(),
            name: "test GPU".into(),
            backend: Backend::Cuda,
            total_memory: None,
            free_memory: None,
            compute_capability: Some((9, 0)),
            compute_units: Some(132),
            max_buffer_bytes: None,
            supports_f64: true,
            software: false,
            driver: None,
        };
        Device::from_parts(info, DeviceHandle::Cuda(0), picked_by_auto)
    }

    #[test]
    fn auto_sends_a_small_job_to_the_cpu_and_keeps_a_large_one() {
        let small = JobEstimate::per_item(1e3, 1e-6, 1e-9);
        let choice = cuda(true).for_job(small);
        assert_eq!(choice.device.info().id, "cpu");
        assert!(
            choice.reason.starts_with("auto chose the CPU"),
            "{}",
            choice.reason
        );
        // Hours of one core, milliseconds of GPU: the GPU, whatever the cache holds.
        let large = JobEstimate::per_item(1e10, 1e-6, 1e-12);
        let choice = cuda(true).for_job(large);
        assert_eq!(choice.device.info().id, "cuda:0");
        assert!(
            choice.reason.starts_with("auto chose cuda:0"),
            "{}",
            choice.reason
        );
    }

    /// A job the CPU finishes before any GPU opens does not wait for `auto`'s probe.
    #[test]
    fn a_tiny_job_under_auto_goes_to_the_cpu_whatever_the_probe_finds() {
        let choice = Device::auto_in_background().for_job(JobEstimate::per_item(10.0, 1e-6, 1e-9));
        assert_eq!(choice.device.info().id, "cpu");
        assert!(
            choice.reason.starts_with("auto chose the CPU"),
            "{}",
            choice.reason
        );
    }

    #[test]
    fn a_device_asked_for_is_never_swapped() {
        let small = JobEstimate::per_item(1.0, 1e-9, 1.0);
        let choice = cuda(false).for_job(small);
        assert_eq!(choice.device.info().id, "cuda:0");
        assert_eq!(choice.reason, "cuda:0 (asked for)");
        let choice = Device::cpu().for_job(JobEstimate::per_item(1e12, 1.0, 1e-12));
        assert_eq!(choice.device.info().id, "cpu");
    }

    #[test]
    fn the_estimate_splits_cpu_work_over_the_cores() {
        let job = JobEstimate::per_item(100.0, 0.01, 0.0);
        assert!((job.cpu_seconds(4) - 0.25).abs() < 1e-12);
        assert!(
            (job.cpu_seconds(0) - 1.0).abs() < 1e-12,
            "0 cores counts as 1"
        );
    }
}
