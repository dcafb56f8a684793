//! Device choice: parse a request (`auto`, `cpu`, `cuda:1`, `wgpu`, ...), probe what the
//! machine has, and pick one.
//!
//! `auto` prefers a CUDA GPU (driver and NVRTC present), then a hardware wgpu adapter
//! (Vulkan/Metal/DX12), then the CPU. A software Vulkan adapter such as Mesa's lavapipe is
//! never chosen silently: only `wgpu:software`, or a caller that allows it (the test
//! harness), gets one.

use std::sync::mpsc::{Receiver, channel};
use std::sync::{Arc, Mutex, OnceLock};

mod cpu;
mod cuda;
mod nvml;
pub(crate) use cuda::{free_memory_now, make_current, panic_text};
mod wgpu_probe;

use crate::error::{Error, Result};
use serde::Serialize;
use std::fmt;
use std::str::FromStr;

/// Environment variable that names the device when no flag does.
pub const DEVICE_ENV: &str = "BIOGPU_DEVICE";

/// The compute backend a device runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Backend {
    /// NVIDIA GPU through the CUDA driver; kernels compiled by NVRTC at run time.
    Cuda,
    /// Any Vulkan/Metal/DX12 GPU through wgpu; kernels compiled to WGSL.
    Wgpu,
    /// The CPU reference path (rayon).
    Cpu,
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Backend::Cuda => "cuda",
            Backend::Wgpu => "wgpu",
            Backend::Cpu => "cpu",
        })
    }
}

/// What the user asked for, before probing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum DeviceRequest {
    /// Best available: CUDA, then a hardware wgpu adapter, then the CPU.
    #[default]
    Auto,
    /// The CPU reference path.
    Cpu,
    /// CUDA device by ordinal.
    Cuda(usize),
    /// The N-th hardware wgpu adapter.
    Wgpu(usize),
    /// A software wgpu adapter (lavapipe, SwiftShader, WARP): for tests and CI.
    WgpuSoftware,
}

impl FromStr for DeviceRequest {
    type Err = Error;

    /// Parse `auto`, `cpu`, `cuda`, `cuda:N`, `wgpu`, `wgpu:N`, `wgpu:software`.
    ///
    /// ```
    /// use gpu_runtime::DeviceRequest;
    /// assert_eq!("cuda:1".parse::<DeviceRequest>().unwrap(), DeviceRequest::Cuda(1));
    /// assert!("tpu".parse::<DeviceRequest>().is_err());
    /// ```
    fn from_str(s: &str) -> Result<Self> {
        let t = s.trim().to_ascii_lowercase();
        let bad = || Error::BadDeviceName {
            given: s.to_string(),
        };
        let (kind, index) = match t.split_once(':') {
            Some((k, i)) => (k, Some(i)),
            None => (t.as_str(), None),
        };
        let ordinal = |i: Option<&str>| -> Result<usize> {
            i.map_or(Ok(0), |i| i.parse::<usize>().map_err(|_| bad()))
        };
        match kind {
            "auto" if index.is_none() => Ok(DeviceRequest::Auto),
            "cpu" if index.is_none() => Ok(DeviceRequest::Cpu),
            "cuda" => Ok(DeviceRequest::Cuda(ordinal(index)?)),
            "wgpu" if matches!(index, Some("software" | "sw")) => Ok(DeviceRequest::WgpuSoftware),
            "wgpu" => Ok(DeviceRequest::Wgpu(ordinal(index)?)),
            _ => Err(bad()),
        }
    }
}

impl fmt::Display for DeviceRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DeviceRequest::Auto => f.write_str("auto"),
            DeviceRequest::Cpu => f.write_str("cpu"),
            DeviceRequest::Cuda(i) => write!(f, "cuda:{i}"),
            DeviceRequest::Wgpu(i) => write!(f, "wgpu:{i}"),
            DeviceRequest::WgpuSoftware => f.write_str("wgpu:software"),
        }
    }
}

impl DeviceRequest {
    /// The request named by `BIOGPU_DEVICE`, or `auto` when it is unset or empty.
    pub fn from_env() -> Result<Self> {
        match std::env::var(DEVICE_ENV) {
            Ok(v) if !v.trim().is_empty() => v.parse(),
            _ => Ok(DeviceRequest::Auto),
        }
    }
}

/// Facts about one device, for users (`biogpu devices`) and for sizing work.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DeviceInfo {
    /// Name to select it with (`cuda:0`, `wgpu:1`, `wgpu:software`, `cpu`).
    pub id: String,
    /// Product name as the driver reports it.
    pub name: String,
    pub backend: Backend,
    /// Total device memory in bytes, where the backend reports it.
    pub total_memory: Option<u64>,
    /// Free device memory in bytes when probed, where the backend reports it.
    pub free_memory: Option<u64>,
    /// CUDA compute capability (major, minor).
    pub compute_capability: Option<(u32, u32)>,
    /// Streaming multiprocessors (CUDA) or CPU threads.
    pub compute_units: Option<u32>,
    /// Largest single buffer in bytes (wgpu binding limit).
    pub max_buffer_bytes: Option<u64>,
    /// Whether kernels may use f64 (CUDA and CPU; not wgpu, whose WGSL lacks it and
    /// whose software adapters silently miscompute f64 transcendentals).
    pub supports_f64: bool,
    /// A software rasteriser posing as a GPU (lavapipe): correct but slow.
    pub software: bool,
    /// Driver or API version, when known.
    pub driver: Option<String>,
}

/// A usable device: its facts and the backend handle needed to open it.
#[derive(Debug, Clone)]
pub struct Device {
    info: DeviceInfo,
    handle: DeviceHandle,
    memory_limit: Option<u64>,
    /// `auto` picked it: [`Device::for_job`] may trade it for the CPU on a small job.
    picked_by_auto: bool,
    /// `auto` still probing on a background thread ([`Device::auto_in_background`]): every
    /// accessor waits for its pick, which is then used in place of this value's fields.
    pending: Option<Arc<PendingAuto>>,
}

/// `auto`'s pick, arriving from the thread that probes (and then opens) the device.
struct PendingAuto {
    receive: Mutex<Option<Receiver<Device>>>,
    picked: OnceLock<Device>,
    /// Set when a job went to the CPU without waiting: the thread then opens nothing.
    abandoned: Arc<std::sync::atomic::AtomicBool>,
}

impl fmt::Debug for PendingAuto {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PendingAuto")
            .field("picked", &self.picked.get().map(|d| &d.info.id))
            .finish_non_exhaustive()
    }
}

#[derive(Debug, Clone)]
#[doc(hidden)]
pub enum DeviceHandle {
    Cuda(usize),
    Wgpu(cubecl::wgpu::WgpuDevice),
    Cpu,
}

/// What probing found: every device, the one `auto` picks, and why others were skipped.
#[derive(Debug, Clone, Serialize)]
pub struct Inventory {
    pub devices: Vec<DeviceInfo>,
    /// `id` of the device `auto` selects.
    pub auto: String,
    /// One line per backend that is unavailable, with the reason.
    pub notes: Vec<String>,
}

/// A device chosen for a request, with notes worth one line to the user
/// (for example why `auto` fell back to the CPU).
#[derive(Debug, Clone)]
pub struct Selection {
    pub device: Device,
    pub notes: Vec<String>,
}

impl Device {
    /// The CPU device (always available).
    pub fn cpu() -> Self {
        Device {
            info: cpu::info(),
            handle: DeviceHandle::Cpu,
            memory_limit: None,
            picked_by_auto: false,
            pending: None,
        }
    }

    /// Pick a device for `request`. Software wgpu adapters are used only for
    /// `wgpu:software`, or for `wgpu`/`wgpu:N` when `allow_software` is set (tests).
    ///
    /// ```
    /// use gpu_runtime::{Device, DeviceRequest};
    /// let sel = Device::select(DeviceRequest::Cpu, false).unwrap();
    /// assert_eq!(sel.device.info().id, "cpu");
    /// ```
    pub fn select(request: DeviceRequest, allow_software: bool) -> Result<Selection> {
        match request {
            DeviceRequest::Cpu => Ok(Selection {
                device: Device::cpu(),
                notes: vec![],
            }),
            DeviceRequest::Cuda(i) => {
                let devices = cuda::probe(false)?;
                let n = devices.len();
                devices
                    .into_iter()
                    .nth(i)
                    .map(|info| Selection {
                        device: Device {
                            info,
                            handle: DeviceHandle::Cuda(i),
                            memory_limit: None,
                            picked_by_auto: false,
                            pending: None,
                        },
                        notes: vec![],
                    })
                    .ok_or_else(|| Error::NoSuchDevice {
                        name: format!("cuda:{i}"),
                        why: format!("this machine has {n} CUDA device(s)"),
                    })
            }
            DeviceRequest::Wgpu(i) => {
                let adapters = wgpu_probe::probe();
                let hardware: Vec<_> = adapters.iter().filter(|a| !a.info.software).collect();
                if let Some(a) = hardware.get(i) {
                    return Ok(Selection {
                        device: a.to_device(),
                        notes: vec![],
                    });
                }
                let software = adapters.iter().find(|a| a.info.software);
                match software {
                    Some(a) if allow_software && i == 0 => Ok(Selection {
                        device: a.to_device(),
                        notes: vec![format!(
                            "wgpu: no hardware adapter; using software adapter {}",
                            a.info.name
                        )],
                    }),
                    _ => Err(Error::NoSuchDevice {
                        name: format!("wgpu:{i}"),
                        why: format!(
                            "{} hardware wgpu adapter(s) found{}",
                            hardware.len(),
                            if software.is_some() {
                                "; a software adapter exists: ask for wgpu:software"
                            } else {
                                ""
                            }
                        ),
                    }),
                }
            }
            DeviceRequest::WgpuSoftware => wgpu_probe::probe()
                .into_iter()
                .find(|a| a.info.software)
                .map(|a| Selection {
                    device: a.to_device(),
                    notes: vec![],
                })
                .ok_or_else(|| Error::NoSuchDevice {
                    name: "wgpu:software".into(),
                    why: "no software Vulkan adapter (install mesa-vulkan-drivers for lavapipe)"
                        .into(),
                }),
            DeviceRequest::Auto => Ok(Self::auto()),
        }
    }

    /// `auto`'s pick, as [`Device::inventory`] names it (CUDA device 0, else the first
    /// hardware wgpu adapter, else the CPU), probing no further than needed: a machine with
    /// CUDA never starts a Vulkan instance (a third of a second on a GPU server).
    fn auto() -> Selection {
        let mut notes = Vec::new();
        match cuda::probe(false) {
            Ok(list) => {
                if let Some(info) = list.into_iter().next() {
                    return Selection {
                        device: Device {
                            info,
                            handle: DeviceHandle::Cuda(0),
                            memory_limit: None,
                            picked_by_auto: true,
                            pending: None,
                        },
                        notes,
                    };
                }
            }
            Err(e) => notes.push(e.to_string()),
        }
        let adapters = wgpu_probe::probe();
        if let Some(a) = adapters.iter().find(|a| !a.info.software) {
            let mut device = a.to_device();
            device.picked_by_auto = true;
            return Selection {
                device,
                notes: vec![],
            };
        }
        notes.push(if adapters.is_empty() {
            "wgpu: no Vulkan/Metal/DX12 adapter".into()
        } else {
            "wgpu: only a software adapter (not used unless asked for as wgpu:software)".into()
        });
        Selection {
            device: Device::cpu(),
            notes: vec![format!(
                "no GPU found ({}); running on the CPU",
                notes.join("; ")
            )],
        }
    }

    /// Every device of `backend`, in ordinal order: each CUDA device (`cuda:0`, `cuda:1`,
    /// ...), each hardware wgpu adapter (software ones are never included, as `auto` never
    /// picks them), or the CPU. For work that splits over every GPU of a host
    /// (`--device cuda:all`). None found is an error named `cuda:all` / `wgpu:all` saying
    /// why (driver missing, no device), never an empty list.
    ///
    /// ```
    /// use gpu_runtime::{Backend, Device};
    /// assert_eq!(Device::all_of(Backend::Cpu)?.len(), 1);
    /// match Device::all_of(Backend::Cuda) {
    ///     Ok(gpus) => assert!(gpus.iter().all(|d| d.backend() == Backend::Cuda)),
    ///     // A machine without CUDA: the reason, e.g. "no such device `cuda:all`: CUDA driver missing: ..."
    ///     Err(e) => assert!(e.to_string().contains("cuda:all")),
    /// }
    /// # Ok::<(), gpu_runtime::Error>(())
    /// ```
    pub fn all_of(backend: Backend) -> Result<Vec<Device>> {
        let none = |why: String| Error::NoSuchDevice {
            name: format!("{backend}:all"),
            why,
        };
        match backend {
            Backend::Cpu => Ok(vec![Device::cpu()]),
            Backend::Cuda => {
                let list = cuda::probe(false).map_err(|e| none(e.to_string()))?;
                if list.is_empty() {
                    return Err(none("the driver reports no CUDA device".into()));
                }
                Ok(list
                    .into_iter()
                    .enumerate()
                    .map(|(i, info)| Device {
                        info,
                        handle: DeviceHandle::Cuda(i),
                        memory_limit: None,
                        picked_by_auto: false,
                        pending: None,
                    })
                    .collect())
            }
            Backend::Wgpu => {
                let adapters = wgpu_probe::probe();
                let software = adapters.iter().filter(|a| a.info.software).count();
                let hardware: Vec<Device> = adapters
                    .iter()
                    .filter(|a| !a.info.software)
                    .map(wgpu_probe::Adapter::to_device)
                    .collect();
                if hardware.is_empty() {
                    return Err(none(format!(
                        "no hardware Vulkan/Metal/DX12 adapter ({software} software adapter(s), \
                         not used by wgpu:all)"
                    )));
                }
                Ok(hardware)
            }
        }
    }

    /// The device named by `BIOGPU_DEVICE` (or `auto`).
    pub fn from_env(allow_software: bool) -> Result<Selection> {
        Self::select(DeviceRequest::from_env()?, allow_software)
    }

    /// Every device on this machine, the one `auto` picks, and notes on missing backends.
    pub fn inventory() -> Inventory {
        Self::inventory_with_handles().0
    }

    /// Inventory plus the `auto` candidates in order of preference (CPU last).
    fn inventory_with_handles() -> (Inventory, Vec<Device>) {
        let mut devices = Vec::new();
        let mut candidates = Vec::new();
        let mut notes = Vec::new();
        // CUDA's devices (through NVML, else the CUDA driver) and wgpu's adapters (Vulkan's
        // start, ~0.1 s on a server) are probed at once.
        let (cuda_list, adapters) = std::thread::scope(|scope| {
            let wgpu = scope.spawn(wgpu_probe::probe);
            let cuda = cuda::probe(true);
            (cuda, wgpu.join())
        });
        let adapters = adapters.unwrap_or_else(|panic| {
            notes.push(format!(
                "wgpu: the adapter probe failed: {}",
                cuda::panic_text(&panic)
            ));
            Vec::new()
        });
        match cuda_list {
            Ok(list) => {
                for (i, info) in list.into_iter().enumerate() {
                    candidates.push(Device {
                        info: info.clone(),
                        handle: DeviceHandle::Cuda(i),
                        memory_limit: None,
                        picked_by_auto: false,
                        pending: None,
                    });
                    devices.push(info);
                }
            }
            Err(e) => notes.push(e.to_string()),
        }
        if adapters.is_empty() {
            notes.push("wgpu: no Vulkan/Metal/DX12 adapter".into());
        } else if adapters.iter().all(|a| a.info.software) {
            notes.push(
                "wgpu: only a software adapter (not used unless asked for as wgpu:software)".into(),
            );
        }
        for a in adapters {
            if !a.info.software {
                candidates.push(a.to_device());
            }
            devices.push(a.info);
        }
        let cpu = cpu::info();
        let auto = candidates
            .first()
            .map_or_else(|| cpu.id.clone(), |d| d.info.id.clone());
        devices.push(cpu);
        (
            Inventory {
                devices,
                auto,
                notes,
            },
            candidates,
        )
    }

    /// `auto`'s pick, probed on a background thread so that a command reads its input
    /// meanwhile (through NVML ~20 ms; the CUDA driver's start takes ~0.1 s on a server);
    /// where the probe had to start the CUDA driver, the thread then opens the GPU it picked
    /// (context and compiled kernels), else the first job on it does. The first call that
    /// needs a fact of the device waits for the probe, not for the opening. Notes (no GPU
    /// found, running on the CPU) are logged as warnings.
    ///
    /// ```
    /// let device = gpu_runtime::Device::auto_in_background();
    /// // ... read the input ...
    /// println!("running on {device}");
    /// ```
    pub fn auto_in_background() -> Device {
        let (send, receive) = channel();
        let abandoned = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let abandon = Arc::clone(&abandoned);
        // The probe may still be loading or starting the driver when a quick command ends
        // (`mc example`): the process must then end without the driver's tear-down, which
        // segfaults under a thread still inside it (seen on the H200).
        crate::gpu::note_cuda_started();
        let spawned = std::thread::Builder::new()
            .name("biogpu-auto".into())
            .spawn(move || {
                let Selection { device, notes } = Device::auto();
                for note in notes {
                    tracing::warn!("{note}");
                }
                let _ = send.send(device.clone());
                // Open now only where the probe already started the CUDA driver: after an
                // NVML probe a job that goes to the CPU would pay the driver's start and
                // tear-down (~0.1 s more at exit on an H200) for nothing, so a GPU picked
                // there opens when the job first runs on it.
                let eager = device.backend() != Backend::Cuda || cuda::driver_started();
                if eager && !abandon.load(std::sync::atomic::Ordering::Relaxed) {
                    device.open_quietly();
                }
            });
        if spawned.is_err() {
            return Device::auto().device;
        }
        Device {
            pending: Some(Arc::new(PendingAuto {
                receive: Mutex::new(Some(receive)),
                picked: OnceLock::new(),
                abandoned,
            })),
            ..Device::cpu()
        }
    }

    /// For `auto`'s pick still being probed: stop there (a job went to the CPU without
    /// waiting for the probe), so that no GPU context is opened for nothing.
    pub(crate) fn abandon_pending(&self) {
        if let Some(p) = &self.pending {
            p.abandoned
                .store(true, std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// This device, or `auto`'s pick once the probe has answered.
    fn resolved(&self) -> &Device {
        let Some(pending) = &self.pending else {
            return self;
        };
        pending.picked.get_or_init(|| {
            let receive = pending.receive.lock().ok().and_then(|mut r| r.take());
            // A probe thread that died without an answer: probe here.
            receive
                .and_then(|r| r.recv().ok())
                .unwrap_or_else(|| Device::auto().device)
        })
    }

    /// Whether this is `auto`'s pick still being probed (nothing waits for it here).
    pub fn is_pending(&self) -> bool {
        self.pending
            .as_ref()
            .is_some_and(|p| p.picked.get().is_none())
    }

    pub fn info(&self) -> &DeviceInfo {
        &self.resolved().info
    }

    /// Cap the device memory work on this device may use (on top of what the device and
    /// `BIOGPU_MEMORY_LIMIT` allow): work is then split into more, smaller chunks.
    pub fn with_memory_limit(self, bytes: u64) -> Self {
        let mut device = self.resolved().clone();
        device.memory_limit = Some(bytes);
        device
    }

    #[cfg(test)]
    pub(crate) fn from_parts(info: DeviceInfo, handle: DeviceHandle, picked_by_auto: bool) -> Self {
        Device {
            info,
            handle,
            memory_limit: None,
            picked_by_auto,
            pending: None,
        }
    }

    /// Whether `auto` picked this device (so that a job may still go to the CPU).
    pub fn picked_by_auto(&self) -> bool {
        self.resolved().picked_by_auto
    }

    pub(crate) fn memory_limit(&self) -> Option<u64> {
        self.resolved().memory_limit
    }

    pub fn backend(&self) -> Backend {
        self.info().backend
    }

    pub fn is_gpu(&self) -> bool {
        self.info().backend != Backend::Cpu
    }

    pub(crate) fn handle(&self) -> &DeviceHandle {
        &self.resolved().handle
    }

    /// Fail with [`Error::UnsupportedPrecision`] unless the device computes in f64.
    pub fn require_f64(&self) -> Result<()> {
        if self.info().supports_f64 {
            Ok(())
        } else {
            Err(Error::UnsupportedPrecision {
                precision: "f64",
                device: self.info().id.clone(),
                why: "WGSL has no 64-bit floats; use cuda or cpu, or f32 where the method allows it",
            })
        }
    }
}

impl fmt::Display for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.info().id, self.info().name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_documented_name() {
        for (s, want) in [
            ("auto", DeviceRequest::Auto),
            ("CPU", DeviceRequest::Cpu),
            ("cuda", DeviceRequest::Cuda(0)),
            ("cuda:3", DeviceRequest::Cuda(3)),
            ("wgpu", DeviceRequest::Wgpu(0)),
            ("wgpu:2", DeviceRequest::Wgpu(2)),
            ("wgpu:software", DeviceRequest::WgpuSoftware),
        ] {
            assert_eq!(s.parse::<DeviceRequest>().unwrap(), want, "{s}");
            assert_eq!(want.to_string().parse::<DeviceRequest>().unwrap(), want);
        }
    }

    #[test]
    fn rejects_malformed_names_with_the_name() {
        for s in [
            "",
            "gpu",
            "cuda:x",
            "cuda:-1",
            "cpu:0",
            "auto:1",
            "wgpu:soft",
        ] {
            let e = s.parse::<DeviceRequest>().unwrap_err();
            assert!(e.to_string().contains(&format!("`{s}`")), "{e}");
        }
    }

    /// Where NVML answers for the CUDA devices, its list is the CUDA driver's: the same
    /// ids, names, memory, compute capability, multiprocessors and driver version, and free
    /// memory within 2% of the total. Nothing to compare without NVML (no NVIDIA driver) or
    /// where it rightly declines (MIG, GPUs of several kinds, CUDA's variables); a query
    /// that fails with NVML loaded is a failure.
    #[test]
    fn nvml_lists_what_the_cuda_driver_lists() {
        let fast = match nvml::devices(true) {
            Ok(list) => list,
            Err(nvml::Unlisted::Failed(step, e)) => panic!("NVML loaded but {step} failed: {e}"),
            Err(why) => {
                eprintln!("nothing to compare: {why:?}");
                return;
            }
        };
        let slow = cuda::query_devices(true).expect("NVML sees GPUs: so must the CUDA driver");
        assert_eq!(fast.len(), slow.len());
        for (a, b) in fast.iter().zip(&slow) {
            assert_eq!(
                (&a.id, &a.name, a.total_memory, a.compute_capability),
                (&b.id, &b.name, b.total_memory, b.compute_capability)
            );
            assert_eq!((a.compute_units, &a.driver), (b.compute_units, &b.driver));
            let (fa, fb, total) = (
                a.free_memory.unwrap() as f64,
                b.free_memory.unwrap() as f64,
                b.total_memory.unwrap() as f64,
            );
            assert!(
                (fa - fb).abs() < 0.02 * total,
                "{}: free {fa} vs {fb}",
                a.id
            );
        }
    }

    #[test]
    fn cpu_is_always_selectable_and_supports_f64() {
        let sel = Device::select(DeviceRequest::Cpu, false).unwrap();
        assert_eq!(sel.device.backend(), Backend::Cpu);
        sel.device.require_f64().unwrap();
        assert!(sel.device.info().compute_units.unwrap() >= 1);
    }

    /// `all_of` agrees with the inventory: as many CUDA devices (or an error naming
    /// `cuda:all` when there are none), only hardware wgpu adapters, and the one CPU.
    #[test]
    fn all_of_lists_every_device_of_a_backend_or_says_why_not() {
        let inv = Device::inventory();
        for backend in [Backend::Cuda, Backend::Wgpu] {
            let listed: Vec<&str> = inv
                .devices
                .iter()
                .filter(|d| d.backend == backend && !d.software)
                .map(|d| d.id.as_str())
                .collect();
            match Device::all_of(backend) {
                Ok(devices) => {
                    let ids: Vec<&str> = devices.iter().map(|d| d.info().id.as_str()).collect();
                    assert_eq!(ids, listed, "{backend}");
                }
                Err(e) => {
                    assert!(
                        listed.is_empty(),
                        "{backend}: {e} but inventory has {listed:?}"
                    );
                    assert!(e.to_string().contains(&format!("`{backend}:all`")), "{e}");
                }
            }
        }
        let cpu = Device::all_of(Backend::Cpu).unwrap();
        assert_eq!(cpu.len(), 1);
        assert_eq!(cpu[0].backend(), Backend::Cpu);
    }

    #[test]
    fn auto_never_fails_and_inventory_lists_the_cpu() {
        let sel = Device::select(DeviceRequest::Auto, false).unwrap();
        let inv = Device::inventory();
        assert_eq!(inv.auto, sel.device.info().id);
        assert!(inv.devices.iter().any(|d| d.backend == Backend::Cpu));
        assert!(
            !sel.device.info().software,
            "auto must never pick a software adapter"
        );
        if sel.device.backend() == Backend::Cpu {
            assert_eq!(
                sel.notes.len(),
                1,
                "falling back to the CPU says why, in one line"
            );
        }
    }

    /// `auto` probed in the background picks what `auto` picks in the foreground; its
    /// copies share the one pick, and it is marked as `auto`'s (so small jobs may go to
    /// the CPU).
    #[test]
    fn auto_in_the_background_picks_what_auto_picks() {
        let eager = Device::select(DeviceRequest::Auto, false).unwrap().device;
        let lazy = Device::auto_in_background();
        let copy = lazy.clone();
        assert_eq!(lazy.info().id, eager.info().id);
        assert!(!lazy.is_pending(), "answered once asked");
        assert!(!copy.is_pending(), "copies share the pick");
        assert_eq!(copy.backend(), eager.backend());
        assert_eq!(lazy.picked_by_auto(), eager.is_gpu());
        assert_eq!(format!("{lazy}"), format!("{eager}"));
        let capped = lazy.with_memory_limit(1 << 20);
        assert_eq!(capped.memory_limit(), Some(1 << 20));
        assert!(!capped.is_pending());
    }
}
