//! wgpu probe: lists adapters of the platform's native API (Vulkan, Metal or DX12) and maps
//! each to the `WgpuDevice` CubeCL opens for it.

use super::{Backend, Device, DeviceHandle, DeviceInfo};
use cubecl::wgpu::{AutoGraphicsApi, GraphicsApi, WgpuDevice};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::OnceLock;

#[derive(Clone)]
pub(super) struct Adapter {
    pub info: DeviceInfo,
    handle: WgpuDevice,
}

impl Adapter {
    pub fn to_device(&self) -> Device {
        Device {
            info: self.info.clone(),
            handle: DeviceHandle::Wgpu(self.handle.clone()),
            memory_limit: None,
            picked_by_auto: false,
            pending: None,
        }
    }
}

/// Every adapter, hardware first in enumeration order; empty when there is no loader.
/// Enumerated once per process: creating Vulkan instances is slow and noisy.
pub(super) fn probe() -> Vec<Adapter> {
    static ADAPTERS: OnceLock<Vec<Adapter>> = OnceLock::new();
    ADAPTERS
        .get_or_init(|| catch_unwind(AssertUnwindSafe(enumerate)).unwrap_or_default())
        .clone()
}

fn enumerate() -> Vec<Adapter> {
    let backend = AutoGraphicsApi::backend();
    let instance = wgpu::Instance::new(wgpu::InstanceDescriptor {
        backends: backend.into(),
        ..wgpu::InstanceDescriptor::new_without_display_handle()
    });
    let adapters = pollster_block_on(instance.enumerate_adapters(backend.into()));
    // CubeCL numbers adapters within their type, in enumeration order.
    let (mut discrete, mut integrated, mut virt) = (0usize, 0usize, 0usize);
    let mut hardware_index = 0usize;
    let mut out = Vec::new();
    for adapter in adapters {
        let ai = adapter.get_info();
        let limits = adapter.limits();
        let (handle, software) = match ai.device_type {
            wgpu::DeviceType::DiscreteGpu => {
                (WgpuDevice::DiscreteGpu(post_inc(&mut discrete)), false)
            }
            wgpu::DeviceType::IntegratedGpu => {
                (WgpuDevice::IntegratedGpu(post_inc(&mut integrated)), false)
            }
            wgpu::DeviceType::VirtualGpu => (WgpuDevice::VirtualGpu(post_inc(&mut virt)), false),
            wgpu::DeviceType::Cpu => (WgpuDevice::Cpu, true),
            wgpu::DeviceType::Other => continue,
        };
        let id = if software {
            "wgpu:software".to_string()
        } else {
            format!("wgpu:{}", post_inc(&mut hardware_index))
        };
        if software && out.iter().any(|a: &Adapter| a.info.software) {
            continue; // CubeCL opens only the first CPU adapter
        }
        out.push(Adapter {
            info: DeviceInfo {
                id,
                name: ai.name.clone(),
                backend: Backend::Wgpu,
                total_memory: None,
                free_memory: None,
                compute_capability: None,
                compute_units: None,
                max_buffer_bytes: Some(
                    limits
                        .max_storage_buffer_binding_size
                        .min(limits.max_buffer_size),
                ),
                supports_f64: false,
                software,
                driver: Some(
                    format!("{:?} {} {}", ai.backend, ai.driver, ai.driver_info)
                        .trim()
                        .to_string(),
                ),
            },
            handle,
        });
    }
    out.sort_by_key(|a| a.info.software);
    out
}

fn post_inc(n: &mut usize) -> usize {
    *n += 1;
    *n - 1
}

/// wgpu's enumeration is async in name only on native targets.
fn pollster_block_on<F: std::future::Future>(f: F) -> F::Output {
    cubecl::future::block_on(f)
}
