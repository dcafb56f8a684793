//! An open GPU: the CubeCL client plus checked uploads, downloads, allocations and launches.
//!
//! Every fallible CubeCL call goes through here so that modality crates see
//! [`Error`](crate::Error) values, never panics, and get tracing spans for free.

use crate::buffer::GpuArray;
use crate::device::{DeviceHandle, DeviceInfo};
use crate::error::{Error, Result, first_lines};
use crate::memory::MemoryBudget;
use crate::raw_transfers::RawTransfers;
use cubecl::cuda::CudaRuntime;
use cubecl::prelude::*;
use cubecl::server::{LaunchError, ServerError};
use std::time::{Duration, Instant};

/// An opened device of runtime `R` (CUDA or wgpu).
pub struct Gpu<R: Runtime> {
    client: ComputeClient<R>,
    info: DeviceInfo,
    budget: MemoryBudget,
}

impl<R: Runtime> std::fmt::Debug for Gpu<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gpu")
            .field("device", &self.info.id)
            .field("client", &"ComputeClient")
            .field("budget", &self.budget)
            .finish()
    }
}

impl<R: Runtime> Gpu<R> {
    pub(crate) fn new(client: ComputeClient<R>, mut info: DeviceInfo, limit: Option<u64>) -> Self {
        crate::faults::install();
        // Selection does not read free CUDA memory (that would create the context twice);
        // the client just opened it, so read it now for the budget.
        if info.backend == crate::Backend::Cuda && info.free_memory.is_none() {
            info.free_memory = crate::device::free_memory_now(&info);
        }
        let budget = MemoryBudget::for_device(&info);
        let budget = limit.map_or(budget, |l| MemoryBudget::new(l.min(budget.bytes())));
        Gpu {
            client,
            info,
            budget,
        }
    }

    /// The CubeCL client, for kernel launch wrappers in `gpu-kernels`.
    pub fn client(&self) -> &ComputeClient<R> {
        &self.client
    }

    pub fn info(&self) -> &DeviceInfo {
        &self.info
    }

    /// How many bytes this process may keep on the device at once.
    pub fn budget(&self) -> &MemoryBudget {
        &self.budget
    }

    /// Copy `data` to a new device array.
    pub fn upload<T: CubeElement>(&self, data: &[T]) -> Result<GpuArray<T>> {
        let bytes = std::mem::size_of_val(data) as u64;
        let _span = tracing::debug_span!("upload", bytes, device = %self.info.id).entered();
        if let Some(cuda) = self.as_cuda() {
            // CubeCL 0.10's create_from_slice runs at well under 1 GB/s on CUDA (see
            // staging.rs); a driver copy from pageable memory runs at several GB/s.
            let dst = cuda.empty::<T>(data.len())?;
            // The new buffer may reuse memory a queued kernel still reads.
            cuda.sync()?;
            cuda.with_context(|| {
                <CudaRuntime as RawTransfers>::copy_to_device(
                    cuda.client(),
                    dst.handle(),
                    T::as_bytes(data),
                )
            })?;
            return Ok(dst);
        }
        self.check_alloc(bytes)?;
        let handle = self.client.create_from_slice(T::as_bytes(data));
        Ok(GpuArray::from_handle(handle, data.len()))
    }

    /// This device as a CUDA one, where biogpu's own driver copies replace CubeCL's uploads.
    /// (Downloads stay with CubeCL: a pageable driver copy was no faster, and slower for
    /// small buffers; bulk paths use pinned staging.)
    fn as_cuda(&self) -> Option<&Gpu<CudaRuntime>> {
        (self as &dyn std::any::Any).downcast_ref::<Gpu<CudaRuntime>>()
    }

    /// A new device array of `len` elements, contents undefined.
    pub fn empty<T: CubeElement>(&self, len: usize) -> Result<GpuArray<T>> {
        let bytes = (len * std::mem::size_of::<T>()) as u64;
        self.check_alloc(bytes)?;
        // Zero-sized buffers are not portable; keep one element of storage.
        let handle = self
            .client
            .empty((bytes as usize).max(std::mem::size_of::<T>()));
        Ok(GpuArray::from_handle(handle, len))
    }

    /// Copy a device array back to the host, waiting for the work that writes it.
    pub fn download<T: CubeElement>(&self, array: &GpuArray<T>) -> Result<Vec<T>> {
        let bytes = array.len() * std::mem::size_of::<T>();
        let _span = tracing::debug_span!("download", bytes, device = %self.info.id).entered();
        let raw = self
            .client
            .read_one(array.handle().clone())
            .map_err(|e| self.server_error("download", &e))?;
        self.check_faults("download")?;
        let all = T::from_bytes(&raw);
        all.get(..array.len())
            .map(<[T]>::to_vec)
            .ok_or_else(|| Error::Backend {
                device: self.info.id.clone(),
                message: format!(
                    "download returned {} elements, expected {}",
                    all.len(),
                    array.len()
                ),
            })
    }

    /// Launch through `launch` (a generated `kernel::launch` call) and surface compilation
    /// and launch errors under the kernel's `name`.
    pub fn launch(
        &self,
        name: &str,
        count: CubeCount,
        launch: impl FnOnce(CubeCount),
    ) -> Result<()> {
        let _span = tracing::debug_span!("kernel", name, device = %self.info.id).entered();
        self.check_count(name, &count)?;
        launch(count);
        self.client
            .flush()
            .map_err(|e| self.server_error(name, &e))?;
        let faults = crate::faults::take();
        if faults.is_empty() {
            Ok(())
        } else {
            Err(Error::KernelCompilation {
                kernel: name.to_string(),
                message: first_lines(&faults.join(" | "), 6),
            })
        }
    }

    /// An error for any device-thread fault recorded since the last check.
    fn check_faults(&self, what: &str) -> Result<()> {
        let faults = crate::faults::take();
        if faults.is_empty() {
            Ok(())
        } else {
            Err(Error::Backend {
                device: self.info.id.clone(),
                message: format!("{what}: {}", first_lines(&faults.join(" | "), 6)),
            })
        }
    }

    /// Wait until all queued work has finished.
    pub fn sync(&self) -> Result<()> {
        cubecl::future::block_on(self.client.sync()).map_err(|e| self.server_error("sync", &e))?;
        self.check_faults("sync")
    }

    /// Run `work`, wait for the device, and return its output with the wall time of the
    /// synchronised region (the device is drained before the clock starts).
    pub fn timed<T>(&self, work: impl FnOnce() -> Result<T>) -> Result<(T, Duration)> {
        self.sync()?;
        let start = Instant::now();
        let out = work()?;
        self.sync()?;
        Ok((out, start.elapsed()))
    }

    /// Cube count for `n` work items in cubes of `cube` units, checked against the grid
    /// limits (large 1-D counts spill into y).
    pub fn cube_count_1d(&self, name: &str, n: usize, cube: u32) -> Result<CubeCount> {
        let cubes = n.div_ceil(cube as usize).max(1);
        let max_x = self.client.properties().hardware.max_cube_count.0 as usize;
        let (x, y) = if cubes <= max_x {
            (cubes, 1)
        } else {
            (max_x, cubes.div_ceil(max_x))
        };
        let count = CubeCount::Static(x as u32, y as u32, 1);
        self.check_count(name, &count)?;
        Ok(count)
    }

    fn check_count(&self, name: &str, count: &CubeCount) -> Result<()> {
        if let CubeCount::Static(x, y, z) = *count {
            let (mx, my, mz) = self.client.properties().hardware.max_cube_count;
            if x == 0 || y == 0 || z == 0 || x > mx || y > my || z > mz {
                return Err(Error::InvalidLaunch {
                    kernel: name.to_string(),
                    why: format!("grid ({x}, {y}, {z}) outside 1..=({mx}, {my}, {mz})"),
                });
            }
        }
        Ok(())
    }

    fn check_alloc(&self, bytes: u64) -> Result<()> {
        let in_use = self.client.memory_usage().map_or(0, |u| u.bytes_in_use);
        let limit = self.budget.bytes();
        let per_buffer = self.info.max_buffer_bytes.unwrap_or(u64::MAX);
        if bytes > per_buffer {
            return Err(Error::OutOfDeviceMemory {
                device: self.info.id.clone(),
                requested: bytes,
                available: per_buffer,
            });
        }
        if in_use + bytes > limit {
            return Err(Error::OutOfDeviceMemory {
                device: self.info.id.clone(),
                requested: bytes,
                available: limit.saturating_sub(in_use),
            });
        }
        Ok(())
    }

    fn server_error(&self, what: &str, e: &ServerError) -> Error {
        let device = self.info.id.clone();
        match e {
            ServerError::Launch(LaunchError::CompilationError(c)) => Error::KernelCompilation {
                kernel: what.to_string(),
                message: first_lines(&c.to_string(), 12),
            },
            ServerError::Launch(LaunchError::OutOfMemory { reason, .. }) => Error::Backend {
                device,
                message: format!("{what}: out of device memory: {}", first_lines(reason, 3)),
            },
            ServerError::Launch(LaunchError::TooManyResources(r)) => Error::InvalidLaunch {
                kernel: what.to_string(),
                why: first_lines(&r.to_string(), 3),
            },
            other => Error::Backend {
                device,
                message: format!("{what}: {}", first_lines(&other.to_string(), 6)),
            },
        }
    }
}

/// Work that runs on any GPU runtime. Implement it once, generic over `R`, and
/// [`Device::run`](crate::Device::run) instantiates it for CUDA or wgpu.
///
/// ```no_run
/// use gpu_runtime::{Device, Gpu, GpuJob, Result};
/// use cubecl::prelude::Runtime;
///
/// struct RoundTrip(Vec<f32>);
/// impl GpuJob for RoundTrip {
///     type Output = Vec<f32>;
///     fn run<R: Runtime>(self, gpu: &Gpu<R>) -> Result<Vec<f32>> {
///         let a = gpu.upload(&self.0)?;
///         gpu.download(&a)
///     }
/// }
/// let device = Device::from_env(false)?.device;
/// if device.is_gpu() {
///     assert_eq!(device.run(RoundTrip(vec![1.0, 2.0]))?, vec![1.0, 2.0]);
/// }
/// # Ok::<(), gpu_runtime::Error>(())
/// ```
pub trait GpuJob {
    type Output;
    fn run<R: Runtime>(self, gpu: &Gpu<R>) -> Result<Self::Output>;
}

/// The CubeCL runtimes biogpu opens, and how a [`Device`](crate::Device) maps to each.
pub trait KnownRuntime: Runtime + crate::raw_transfers::RawTransfers {
    #[doc(hidden)]
    fn runtime_device(handle: &DeviceHandle) -> Option<Self::Device>;
}

impl KnownRuntime for cubecl::cuda::CudaRuntime {
    fn runtime_device(handle: &DeviceHandle) -> Option<Self::Device> {
        match handle {
            DeviceHandle::Cuda(index) => Some(cubecl::cuda::CudaDevice { index: *index }),
            _ => None,
        }
    }
}

impl KnownRuntime for cubecl::wgpu::WgpuRuntime {
    fn runtime_device(handle: &DeviceHandle) -> Option<Self::Device> {
        match handle {
            DeviceHandle::Wgpu(dev) => Some(dev.clone()),
            _ => None,
        }
    }
}

static CUDA_OPENED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Whether this process may have started the CUDA driver (probed or opened a device, or
/// begun to on a background thread): a program may then end with `_exit`, skipping the
/// driver's slow tear-down of its contexts at exit (and never tearing down under a thread
/// still inside the driver).
pub fn cuda_was_started() -> bool {
    CUDA_OPENED.load(std::sync::atomic::Ordering::Relaxed)
}

pub(crate) fn note_cuda_started() {
    CUDA_OPENED.store(true, std::sync::atomic::Ordering::Relaxed);
}

impl crate::Device {
    /// Open this device as runtime `R`; an error if it is not an `R` device or the
    /// backend fails to start.
    pub fn open<R: KnownRuntime>(&self) -> Result<Gpu<R>> {
        let info = self.info().clone();
        let dev = R::runtime_device(self.handle()).ok_or_else(|| Error::NoSuchDevice {
            name: info.id.clone(),
            why: format!("it is not a {} device", std::any::type_name::<R>()),
        })?;
        crate::kernel_cache::configure();
        if info.backend == crate::Backend::Cuda {
            CUDA_OPENED.store(true, std::sync::atomic::Ordering::Relaxed);
        }
        let _span = tracing::debug_span!("open_device", device = %info.id).entered();
        let client = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| R::client(&dev)))
            .map_err(|panic| Error::Backend {
                device: info.id.clone(),
                message: format!(
                    "could not open the device: {}",
                    first_lines(&crate::device::panic_text(&panic), 4)
                ),
            })?;
        Ok(Gpu::new(client, info, self.memory_limit()))
    }

    /// Start opening this GPU on a background thread: the driver context and the compiled
    /// kernels on disk (0.1-0.3 s on a server GPU), so that they overlap reading the input.
    /// The first [`Device::open`](crate::Device::open) or [`Device::run`](crate::Device::run) then finds the device ready (or waits
    /// for the rest). Does nothing on the CPU; a failure is left for that call to report.
    ///
    /// ```no_run
    /// let device = gpu_runtime::Device::from_env(false)?.device;
    /// device.open_in_background();
    /// // ... read the input while the GPU opens ...
    /// # Ok::<(), gpu_runtime::Error>(())
    /// ```
    pub fn open_in_background(&self) {
        // `auto`'s probing thread opens what it picks.
        if self.is_pending() || !self.is_gpu() {
            return;
        }
        let device = self.clone();
        let opened = std::thread::Builder::new()
            .name("biogpu-open".into())
            .spawn(move || device.open_quietly());
        if let Err(e) = opened {
            tracing::debug!(error = %e, "could not start opening the device in the background");
        }
    }

    /// Open this GPU now and keep it open for later calls; a failure is left for them.
    pub(crate) fn open_quietly(&self) {
        use cubecl::cuda::CudaRuntime;
        use cubecl::wgpu::WgpuRuntime;
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| match self.handle() {
            DeviceHandle::Cuda(_) => self.open::<CudaRuntime>().map(drop),
            DeviceHandle::Wgpu(_) => self.open::<WgpuRuntime>().map(drop),
            DeviceHandle::Cpu => Ok(()),
        }));
    }

    /// Run `job` on this device's runtime. A CPU device gives [`Error::NotAGpu`]: callers
    /// pick their CPU path before asking. Panics inside the backend become errors.
    pub fn run<J: GpuJob>(&self, job: J) -> Result<J::Output> {
        use cubecl::cuda::CudaRuntime;
        use cubecl::wgpu::WgpuRuntime;
        let id = self.info().id.clone();
        let outcome =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| match self.handle() {
                DeviceHandle::Cuda(_) => job.run(&self.open::<CudaRuntime>()?),
                DeviceHandle::Wgpu(_) => job.run(&self.open::<WgpuRuntime>()?),
                DeviceHandle::Cpu => Err(Error::NotAGpu {
                    what: std::any::type_name::<J>().to_string(),
                }),
            }));
        outcome.unwrap_or_else(|panic| {
            Err(Error::Backend {
                device: id,
                message: first_lines(&crate::device::panic_text(&panic), 6),
            })
        })
    }
}

/// Run a block with `gpu: &Gpu<R>` bound for whichever runtime `device` uses; the block is
/// compiled once per runtime. Evaluates to the block's `Result`; a CPU device gives
/// [`Error::NotAGpu`](crate::Error::NotAGpu).
///
/// ```no_run
/// use gpu_runtime::{with_gpu, Device};
/// let device = Device::from_env(false)?.device;
/// let back: Vec<f32> = with_gpu!(device, |gpu| {
///     let a = gpu.upload(&[1.0f32, 2.0])?;
///     gpu.download(&a)
/// })?;
/// # Ok::<(), gpu_runtime::Error>(())
/// ```
#[macro_export]
macro_rules! with_gpu {
    ($device:expr, |$gpu:ident| $body:expr) => {{
        let __device: &$crate::Device = &$device;
        match __device.backend() {
            $crate::Backend::Cuda => (|| {
                let $gpu = &__device.open::<$crate::cubecl::cuda::CudaRuntime>()?;
                $body
            })(),
            $crate::Backend::Wgpu => (|| {
                let $gpu = &__device.open::<$crate::cubecl::wgpu::WgpuRuntime>()?;
                $body
            })(),
            $crate::Backend::Cpu => Err($crate::Error::NotAGpu {
                what: "with_gpu!".into(),
            }),
        }
    }};
}
