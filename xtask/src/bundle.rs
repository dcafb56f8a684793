//! `cargo xtask gpu-bundle`: everything needed to check a GPU machine that has no Rust.

use anyhow::{Context, Result, bail};
use std::path::Path;
use std::process::Command;

/// The bundle must travel to the GPU machine, whose transfer limit is 64 MiB.
const MAX_BYTES: u64 = 64 << 20;

const RUN_SH: &str = r#"#!/usr/bin/env bash
# Check this machine's GPU with biogpu: list devices, run the GPU-vs-CPU tests and the demo on
# the GPU, run the benchmark suite (and a baseline build's, for an A/B on the same machine).
# Results go to $OUT (default ./out).
# Usage: ./run.sh            (device: cuda)
#        BIOGPU_DEVICE=wgpu ./run.sh;  BENCH_ARGS="--filter speckle" ./run.sh
#        TEST_ARGS="perfusion" SKIP_BENCH=1 SKIP_DEMO=1 ./run.sh
#        BASELINE=/path/to/old/biogpu-bench ./run.sh   (the same benches with an older build)
set -u
here="$(cd "$(dirname "$0")" && pwd)"
OUT="${OUT:-$here/out}"; mkdir -p "$OUT"
DEVICE="${BIOGPU_DEVICE:-cuda}"
export BIOGPU_KERNEL_CACHE="${BIOGPU_KERNEL_CACHE:-$here/kernel-cache}"
status=0
"$here/biogpu" devices | tee "$OUT/devices.txt" || status=1
for t in "$here"/tests/*; do
  echo "== $(basename "$t") on $DEVICE"
  BIOGPU_DEVICE="$DEVICE" BIOGPU_REQUIRE_GPU=1 "$t" ${TEST_ARGS:-} 2>&1 | tee -a "$OUT/tests.log"
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
done
if [ "${SKIP_DEMO:-0}" != 1 ]; then
  rm -rf "$here/demo"
  "$here/biogpu" --device "$DEVICE" demo --out "$here/demo" 2>&1 | tee "$OUT/demo.log"
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
fi
if [ "${SKIP_BENCH:-0}" != 1 ]; then
  "$here/biogpu-bench" --device "$DEVICE" --out "$OUT/bench-${DEVICE//:/_}.json" ${BENCH_ARGS:-} || status=1
  if [ -n "${BASELINE:-}" ]; then
    "$BASELINE" --device "$DEVICE" --out "$OUT/bench-baseline-${DEVICE//:/_}.json" ${BENCH_ARGS:-} || status=1
  fi
fi
echo "run.sh: exit status $status"
exit $status
"#;

pub fn run(root: &Path, out: &Path) -> Result<()> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let status = Command::new(&cargo)
        .current_dir(root)
        .args([
            "build",
            "--release",
            "-p",
            "biogpu-cli",
            "-p",
            "xtask",
            "--bin",
            "biogpu",
            "--bin",
            "biogpu-bench",
        ])
        .status()?;
    if !status.success() {
        bail!("cargo build failed");
    }
    let output = Command::new(&cargo)
        .current_dir(root)
        .args([
            "test",
            "--release",
            "-p",
            "biogpu-tests",
            "--no-run",
            "--message-format=json",
        ])
        .output()?;
    if !output.status.success() {
        bail!(
            "building the test binaries failed:\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let tests: Vec<String> = String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| {
            v["reason"] == "compiler-artifact"
                && v["profile"]["test"] == true
                && v["target"]["kind"][0] == "test"
        })
        .filter_map(|v| v["executable"].as_str().map(str::to_string))
        .collect();
    if tests.is_empty() {
        bail!("no integration test binaries found for biogpu-tests");
    }
    if out.exists() {
        std::fs::remove_dir_all(out).with_context(|| format!("clearing {}", out.display()))?;
    }
    std::fs::create_dir_all(out.join("tests"))?;
    let bin = root.join("target/release");
    copy_stripped(&bin.join("biogpu"), &out.join("biogpu"))?;
    copy_stripped(&bin.join("biogpu-bench"), &out.join("biogpu-bench"))?;
    for t in &tests {
        let src = Path::new(t);
        let name = src.file_name().and_then(|n| n.to_str()).unwrap_or("test");
        let short = name.rsplit_once('-').map_or(name, |(a, _)| a);
        copy_stripped(src, &out.join("tests").join(short))?;
    }
    let script = out.join("run.sh");
    std::fs::write(&script, RUN_SH)?;
    make_executable(&script)?;
    let size = dir_size(out)?;
    // What travels is one xz archive beside the folder (`.gpu-xz/bundle.tar.xz`, ignored
    // by git): about a quarter of the folder's size.
    let archive_dir = out.with_file_name(format!(
        "{}-xz",
        out.file_name().and_then(|n| n.to_str()).unwrap_or("gpu")
    ));
    std::fs::create_dir_all(&archive_dir)?;
    let archive = archive_dir.join("bundle.tar.xz");
    let status = Command::new("tar")
        .arg("-C")
        .arg(out)
        .arg("-cJf")
        .arg(&archive)
        .arg(".")
        .status()
        .context("running tar")?;
    if !status.success() {
        bail!("tar failed writing {}", archive.display());
    }
    let packed = std::fs::metadata(&archive)?.len();
    println!(
        "gpu-bundle: {} ({:.1} MiB): biogpu, biogpu-bench, {} test binar(ies), run.sh; packed as {} ({:.1} MiB)",
        out.display(),
        size as f64 / 1048576.0,
        tests.len(),
        archive.display(),
        packed as f64 / 1048576.0
    );
    if packed > MAX_BYTES {
        bail!("bundle archive is {packed} bytes, over the {MAX_BYTES}-byte limit");
    }
    Ok(())
}

fn copy_stripped(from: &Path, to: &Path) -> Result<()> {
    std::fs::copy(from, to).with_context(|| format!("copying {}", from.display()))?;
    // Debug info and symbols are most of a binary's size; the bundle only needs to run.
    let stripped = Command::new("strip")
        .arg("--strip-all")
        .arg(to)
        .status()
        .is_ok_and(|s| s.success());
    if !stripped {
        eprintln!(
            "gpu-bundle: `strip` unavailable; {} keeps its debug info",
            to.display()
        );
    }
    Ok(())
}

fn make_executable(path: &Path) -> Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))?;
    }
    Ok(())
}

fn dir_size(dir: &Path) -> Result<u64> {
    let mut total = 0;
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let meta = entry.metadata()?;
        total += if meta.is_dir() {
            dir_size(&entry.path())?
        } else {
            meta.len()
        };
    }
    Ok(total)
}
