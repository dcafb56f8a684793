//! `biogpu devices`: what this machine can compute on.

use gpu_runtime::{Device, DeviceInfo, KernelCache};

/// `--json` (global) prints the inventory as JSON instead of a table.
#[derive(Debug, clap::Args)]
pub struct Args {}

pub fn run(_args: &Args) -> anyhow::Result<()> {
    let inv = Device::inventory();
    let cache = KernelCache::of_this_build();
    if crate::record::json_mode() {
        let mut json = serde_json::to_value(&inv)?;
        json["kernel_cache"] = serde_json::json!({
            "dir": cache.dir.as_ref().map(|d| d.display().to_string()),
            "bytes": cache.bytes,
        });
        crate::record::set_result(json);
        return Ok(());
    }
    println!(
        "{:<14} {:<7} {:<34} {:>10} {:>10} {:>5} {:>6} {:>4}  notes",
        "ID", "BACKEND", "NAME", "MEMORY", "FREE", "CC", "UNITS", "F64"
    );
    for d in &inv.devices {
        println!(
            "{:<14} {:<7} {:<34} {:>10} {:>10} {:>5} {:>6} {:>4}  {}",
            d.id,
            d.backend.to_string(),
            truncate(&d.name, 34),
            gib(d.total_memory),
            gib(d.free_memory),
            d.compute_capability
                .map_or("-".into(), |(a, b)| format!("{a}.{b}")),
            d.compute_units.map_or("-".into(), |u| u.to_string()),
            if d.supports_f64 { "yes" } else { "no" },
            notes(d),
        );
    }
    println!(
        "\nauto selects: {} (small jobs still run on the CPU when it finishes first)",
        inv.auto
    );
    for note in &inv.notes {
        println!("  {note}");
    }
    match &cache.dir {
        Some(dir) => println!(
            "compiled GPU kernels of this build: {} ({:.1} MiB{})",
            dir.display(),
            cache.bytes as f64 / f64::from(1u32 << 20),
            if cache.is_filled() {
                ""
            } else {
                "; the first GPU run compiles them, 1-5 s"
            }
        ),
        None => println!(
            "compiled GPU kernels: not kept ({}=off): every GPU run compiles them",
            gpu_runtime::KERNEL_CACHE_ENV
        ),
    }
    Ok(())
}

fn notes(d: &DeviceInfo) -> String {
    let mut n = Vec::new();
    if d.software {
        n.push("software adapter, only used when asked for".to_string());
    }
    if let Some(v) = &d.driver {
        n.push(v.clone());
    }
    n.join("; ")
}

fn gib(bytes: Option<u64>) -> String {
    bytes.map_or("-".into(), |b| {
        format!("{:.1} GiB", b as f64 / f64::from(1u32 << 30))
    })
}

fn truncate(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        s.chars().take(n - 1).chain(std::iter::once('…')).collect()
    }
}
