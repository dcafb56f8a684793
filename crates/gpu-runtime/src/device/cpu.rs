//! The CPU as a device: its name, threads and memory, read from the OS where it tells.

use super::{Backend, DeviceInfo};

pub(super) fn info() -> DeviceInfo {
    let (total, free) = meminfo();
    DeviceInfo {
        id: "cpu".into(),
        name: cpu_name().unwrap_or_else(|| std::env::consts::ARCH.to_string()),
        backend: Backend::Cpu,
        total_memory: total,
        free_memory: free,
        compute_capability: None,
        compute_units: Some(rayon::current_num_threads() as u32),
        max_buffer_bytes: None,
        supports_f64: true,
        software: false,
        driver: None,
    }
}

fn cpu_name() -> Option<String> {
    let text = std::fs::read_to_string("/proc/cpuinfo").ok()?;
    text.lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split_once(':'))
        .map(|(_, v)| v.trim().to_string())
}

/// (MemTotal, MemAvailable) in bytes from /proc/meminfo, where it exists.
fn meminfo() -> (Option<u64>, Option<u64>) {
    let Ok(text) = std::fs::read_to_string("/proc/meminfo") else {
        return (None, None);
    };
    let field = |name: &str| {
        text.lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|kb| kb.parse::<u64>().ok())
            .map(|kb| kb * 1024)
    };
    (field("MemTotal:"), field("MemAvailable:"))
}
