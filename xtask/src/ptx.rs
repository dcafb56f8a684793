//! `cargo xtask build-ptx`: every kernel to CUDA C++ and PTX for sm_80 and sm_90, with a
//! per-kernel resource report (registers, shared memory, stack, spills) from ptxas.
//!
//! CubeCL 0.10 needs an opened device to build a kernel's IR (its `define()` reads the
//! client's properties), so this task opens CUDA where present, else any wgpu adapter
//! (lavapipe in CI), builds the IR there, and compiles it with CubeCL's CUDA C++ compiler.
//! NVCC and ptxas come from the toolkit (`CUDA_PATH`, `PATH`) or from PyPI wheels installed
//! under `target/cuda-tools`.

use anyhow::{Context, Result, bail};
use cubecl::Compiler as _;
use cubecl::cuda::CudaCompiler;
use cubecl::server::ExecutionMode;
use cubecl_cpp::shared::{CompilationOptions, CppSupportedFeatures};
use gpu_kernels::catalog::{self, CatalogEntry};
use gpu_runtime::{Backend, Device, DeviceRequest, with_gpu};
use serde::Serialize;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

/// GPU architectures we ship PTX for: Ampere (A100) and Hopper (H100/H200).
const ARCHES: [u32; 2] = [80, 90];
/// The CUDA wheels that provide nvcc, ptxas and headers; 13.0 matches the GPU machine.
const WHEELS: [&str; 5] = [
    "nvidia-cuda-nvcc==13.0.*",
    "nvidia-nvvm==13.0.*",
    "nvidia-cuda-crt==13.0.*",
    "nvidia-cuda-runtime==13.0.*",
    "nvidia-cuda-cccl==13.0.*",
];

#[derive(Debug, Serialize)]
struct KernelReport {
    kernel: String,
    arch: String,
    registers: Option<u32>,
    shared_bytes: Option<u32>,
    stack_bytes: Option<u32>,
    spill_store_bytes: Option<u32>,
    spill_load_bytes: Option<u32>,
    constant_bytes: Option<u32>,
}

pub fn run(root: &Path) -> Result<()> {
    let out = root.join("target/ptx");
    std::fs::create_dir_all(&out)?;
    let sources = generate_sources(&out)?;
    println!(
        "build-ptx: wrote CUDA C++ for {} kernel x arch pairs under {}",
        sources.len(),
        out.display()
    );
    let tools = find_tools(root)?;
    let mut reports = Vec::new();
    for src in &sources {
        let (name, arch) = (&src.name, src.arch);
        let ptx = src.path.with_extension("ptx");
        nvcc_ptx(&tools, &src.path, &ptx, arch)
            .with_context(|| format!("nvcc failed for kernel `{name}` (sm_{arch})"))?;
        let mut report = ptxas_report(&tools, name, &ptx, arch)
            .with_context(|| format!("ptxas failed for `{name}`"))?;
        report.shared_bytes = Some(report.shared_bytes.unwrap_or(0) + src.shared_bytes);
        reports.push(report);
    }
    let table = render(&reports);
    std::fs::write(out.join("report.md"), &table)?;
    std::fs::write(
        out.join("report.json"),
        serde_json::to_string_pretty(&reports)?,
    )?;
    println!("{table}");
    let spilling: Vec<_> = reports
        .iter()
        .filter(|r| r.spill_store_bytes.unwrap_or(0) > 0)
        .map(|r| format!("{} ({})", r.kernel, r.arch))
        .collect();
    if !spilling.is_empty() {
        println!("warning: register spills in {}", spilling.join(", "));
    }
    println!("build-ptx: PTX and report in {}", out.display());
    Ok(())
}

/// One generated CUDA C++ file.
struct Source {
    name: String,
    arch: u32,
    path: PathBuf,
    /// Dynamic shared memory the kernel declares (ptxas cannot see it).
    shared_bytes: u32,
}

/// A CUDA C++ file for every kernel and arch.
fn generate_sources(out: &Path) -> Result<Vec<Source>> {
    let device = pick_device()?;
    println!("build-ptx: building kernel IR on {device}");
    // The IR's scopes are shared and consumed by compilation: define once per arch.
    let defs = with_gpu!(device, |gpu| Ok(
        ARCHES.map(|_| definitions(catalog::all(gpu.client())))
    ))?;
    let mut written = Vec::new();
    for (arch, arch_defs) in ARCHES.into_iter().zip(defs) {
        for (name, def, addr, unchecked) in arch_defs {
            let mode = if unchecked {
                ExecutionMode::Unchecked
            } else {
                ExecutionMode::Checked
            };
            let opts = options(arch);
            let compiled = CudaCompiler::default()
                .compile(def, &opts, mode, addr)
                .map_err(|e| {
                    anyhow::anyhow!("kernel `{name}` does not compile to CUDA C++: {e}")
                })?;
            let path = out.join(format!("{name}.sm_{arch}.cu"));
            std::fs::write(&path, compiled.to_string())?;
            written.push(Source {
                name: name.clone(),
                arch,
                path,
                shared_bytes: compiled.shared_memory_size() as u32,
            });
        }
    }
    Ok(written)
}

/// `BIOGPU_PTX_FILTER=text` builds only the kernels whose `module__name` contains `text`
/// (a quicker look at one module's registers).
const FILTER_ENV: &str = "BIOGPU_PTX_FILTER";

fn definitions(
    entries: Vec<CatalogEntry>,
) -> Vec<(
    String,
    cubecl::prelude::KernelDefinition,
    cubecl::ir::StorageType,
    bool,
)> {
    let filter = std::env::var(FILTER_ENV).unwrap_or_default();
    entries
        .into_iter()
        .filter(|e| format!("{}__{}", e.module, e.name).contains(&filter))
        .map(|e| {
            (
                format!("{}__{}", e.module, e.name),
                e.kernel.define(),
                e.kernel.address_type(),
                e.unchecked,
            )
        })
        .collect()
}

fn pick_device() -> Result<Device> {
    for request in [
        DeviceRequest::Cuda(0),
        DeviceRequest::Wgpu(0),
        DeviceRequest::WgpuSoftware,
    ] {
        if let Ok(sel) = Device::select(request, true) {
            return Ok(sel.device);
        }
    }
    let cpu = Device::select(DeviceRequest::Cpu, false)?.device;
    debug_assert_eq!(cpu.backend(), Backend::Cpu);
    bail!(
        "build-ptx needs a CUDA device or any Vulkan adapter to build kernel IR (CubeCL 0.10 reads \
         device properties while building it); install lavapipe with `apt-get install -y \
         mesa-vulkan-drivers` and retry"
    )
}

/// The options CubeCL's CUDA runtime uses for this architecture.
fn options(arch: u32) -> CompilationOptions {
    CompilationOptions {
        warp_size: 32,
        supports_features: CppSupportedFeatures {
            grid_constants: arch >= 70,
            clusters: arch >= 90,
            fast_math: true,
            fast_tanh: arch >= 75,
            elect_sync: arch >= 90,
        },
    }
}

struct Tools {
    nvcc: PathBuf,
    ptxas: PathBuf,
    includes: Vec<PathBuf>,
}

fn find_tools(root: &Path) -> Result<Tools> {
    let from_dir = |bin: PathBuf, top: PathBuf| {
        (bin.join("nvcc").is_file() && bin.join("ptxas").is_file()).then(|| Tools {
            nvcc: bin.join("nvcc"),
            ptxas: bin.join("ptxas"),
            includes: vec![top.join("include"), top.join("include/cccl")],
        })
    };
    let toolkit = std::env::var_os("CUDA_PATH")
        .map(PathBuf::from)
        .into_iter()
        .chain([PathBuf::from("/usr/local/cuda")]);
    for top in toolkit {
        if let Some(t) = from_dir(top.join("bin"), top.clone()) {
            return Ok(t);
        }
    }
    let wheels = root.join("target/cuda-tools");
    let top = wheels.join("nvidia/cu13");
    if let Some(t) = from_dir(top.join("bin"), top.clone()) {
        return Ok(t);
    }
    println!(
        "build-ptx: no CUDA toolkit found; installing {} from PyPI into {}",
        WHEELS.join(", "),
        wheels.display()
    );
    let status = Command::new("python3")
        .args(["-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--target"])
        .arg(&wheels)
        .args(WHEELS)
        .status()
        .context("could not run `python3 -m pip`; install Python 3 with pip, or a CUDA toolkit and set CUDA_PATH")?;
    if !status.success() {
        bail!(
            "pip could not install the CUDA compiler wheels ({}); install a CUDA toolkit and set CUDA_PATH",
            WHEELS.join(", ")
        );
    }
    from_dir(top.join("bin"), top.clone()).with_context(|| {
        format!(
            "the wheels installed, but {} has no nvcc/ptxas",
            top.display()
        )
    })
}

fn nvcc_ptx(tools: &Tools, cu: &Path, ptx: &Path, arch: u32) -> Result<()> {
    let mut cmd = Command::new(&tools.nvcc);
    // NVRTC's options as CubeCL 0.10 passes them at run time (no fast math: IEEE divisions
    // and exponentials unless a kernel asks for intrinsics), so that the report is what runs.
    cmd.args(["-ptx", "-lineinfo", "-std=c++17"])
        .arg(format!("-arch=sm_{arch}"));
    for inc in &tools.includes {
        cmd.arg(format!("-I{}", inc.display()));
    }
    cmd.arg("-o").arg(ptx).arg(cu);
    let out = cmd.output()?;
    if !out.status.success() {
        bail!("{}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(())
}

fn ptxas_report(tools: &Tools, name: &str, ptx: &Path, arch: u32) -> Result<KernelReport> {
    let out = Command::new(&tools.ptxas)
        .args(["-v", &format!("-arch=sm_{arch}"), "-o", "/dev/null"])
        .arg(ptx)
        .output()?;
    let text = String::from_utf8_lossy(&out.stderr).into_owned();
    if !out.status.success() {
        bail!("{text}");
    }
    Ok(parse_ptxas(name, arch, &text))
}

/// Read `ptxas -v` lines such as
/// `Used 12 registers, used 0 barriers, 1024 bytes smem, 380 bytes cmem[0]` and
/// `0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads`.
fn parse_ptxas(name: &str, arch: u32, text: &str) -> KernelReport {
    let number_before = |key: &str| -> Option<u32> {
        text.lines().find_map(|l| {
            let i = l.find(key)?;
            l[..i]
                .split([',', ':'])
                .next_back()?
                .split_whitespace()
                .next()?
                .parse()
                .ok()
        })
    };
    let registers = text.lines().find_map(|l| {
        let i = l.find("Used ")?;
        l[i + 5..].split_whitespace().next()?.parse().ok()
    });
    KernelReport {
        kernel: name.to_string(),
        arch: format!("sm_{arch}"),
        registers,
        shared_bytes: number_before("bytes smem"),
        stack_bytes: number_before("bytes stack frame"),
        spill_store_bytes: number_before("bytes spill stores"),
        spill_load_bytes: number_before("bytes spill loads"),
        constant_bytes: number_before("bytes cmem[0]"),
    }
}

fn render(reports: &[KernelReport]) -> String {
    let mut s = String::from(
        "| kernel | arch | registers | shared B | stack B | spill st B | spill ld B | cmem[0] B |\n|---|---|---|---|---|---|---|---|\n",
    );
    let f = |v: Option<u32>| v.map_or("-".to_string(), |v| v.to_string());
    for r in reports {
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} | {} | {} |",
            r.kernel,
            r.arch,
            f(r.registers),
            f(r.shared_bytes),
            f(r.stack_bytes),
            f(r.spill_store_bytes),
            f(r.spill_load_bytes),
            f(r.constant_bytes)
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_ptxas_verbose_output() {
        let text = "ptxas info    : Compiling entry function 'k' for 'sm_90'\n\
                    ptxas info    : Function properties for k\n\
                    \x20   8 bytes stack frame, 4 bytes spill stores, 4 bytes spill loads\n\
                    ptxas info    : Used 40 registers, used 1 barriers, 1024 bytes smem, 380 bytes cmem[0]\n";
        let r = parse_ptxas("k", 90, text);
        assert_eq!(r.registers, Some(40));
        assert_eq!(r.shared_bytes, Some(1024));
        assert_eq!(r.stack_bytes, Some(8));
        assert_eq!(r.spill_store_bytes, Some(4));
        assert_eq!(r.spill_load_bytes, Some(4));
        assert_eq!(r.constant_bytes, Some(380));
    }
}
