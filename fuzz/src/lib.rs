//! Shared by the fuzz targets: biogpu's readers take paths, so each input is written to a
//! per-process scratch file (in /dev/shm when it exists) named with the format's extension,
//! and the reader is called on it. Errors are the expected outcome for most inputs; a panic,
//! an abort, a timeout or an allocation over libFuzzer's `-malloc_limit_mb` is a finding.

use std::path::{Path, PathBuf};

/// Memory is bounded here rather than by libFuzzer's `-malloc_limit_mb` (which needs a
/// sanitizer's allocator): any allocation past 2 GiB of live heap aborts, naming its size.
#[global_allocator]
static ALLOC: bad_input::CappedAlloc = bad_input::CappedAlloc::new(2 << 30);

/// Scratch path for `name` (e.g. `in.sdt`), private to this process.
pub fn scratch(name: &str) -> PathBuf {
    let dir = if Path::new("/dev/shm").is_dir() {
        PathBuf::from("/dev/shm")
    } else {
        std::env::temp_dir()
    };
    dir.join(format!("biogpu-fuzz-{}-{name}", std::process::id()))
}

/// Write `data` to a scratch file with extension `ext` and call `read` on it.
pub fn read_as<T, E>(ext: &str, data: &[u8], read: impl FnOnce(&Path) -> Result<T, E>) {
    let path = scratch(&format!("in.{ext}"));
    std::fs::write(&path, data).expect("writing the scratch file");
    let _ = read(&path);
}

/// Two files from one input, split at the first NUL byte (MMC's node and element files).
pub fn read_pair<T, E>(
    ext: (&str, &str),
    data: &[u8],
    read: impl FnOnce(&Path, &Path) -> Result<T, E>,
) {
    let cut = data.iter().position(|&b| b == 0).unwrap_or(data.len());
    let a = scratch(&format!("a.{}", ext.0));
    let b = scratch(&format!("b.{}", ext.1));
    std::fs::write(&a, &data[..cut]).expect("writing the scratch file");
    std::fs::write(&b, data.get(cut + 1..).unwrap_or_default()).expect("writing the scratch file");
    let _ = read(&a, &b);
}

/// Generated meshes are work, not parsing: a simulation file may legitimately ask for up to
/// `montecarlo_core::sim::generate::MAX_GENERATED_TETS` (5e7) tetrahedra, gigabytes and
/// seconds per input. The `mc_config` target skips inputs that would generate more than this
/// (the cap itself is tested by montecarlo-core's `generated_meshes_above_the_cap_are_clear_errors`).
const MAX_FUZZ_GENERATED_TETS: f64 = 2e5;

/// Tetrahedra a simulation file's generated mesh (`box` or `slab`) would have, if it has one.
fn generated_tets(data: &[u8]) -> Option<f64> {
    let v: serde_json::Value = serde_json::from_slice(data).ok()?;
    let mesh = v.get("mesh")?;
    let num = |x: Option<&serde_json::Value>, default: f64| {
        x.and_then(serde_json::Value::as_f64).unwrap_or(default)
    };
    if let Some(b) = mesh.get("box") {
        let cell = num(b.get("cell"), 1.0);
        let cells: f64 = (0..3)
            .map(|i| {
                (num(b.get("size").and_then(|s| s.get(i)), 1.0) / cell)
                    .abs()
                    .ceil()
            })
            .product();
        return Some(cells * num(b.get("tets_per_cell"), 5.0));
    }
    let s = mesh.get("slab")?;
    let lateral = num(s.get("lateral_cells"), 10.0);
    let layers = s
        .get("layers")
        .and_then(serde_json::Value::as_array)
        .map_or(1, Vec::len) as f64;
    Some(
        lateral
            * lateral
            * layers
            * num(s.get("cells_per_layer"), 1.0)
            * num(s.get("tets_per_cell"), 5.0),
    )
}

/// Every target's name (the files in `fuzz_targets/`, and `BIOGPU_FUZZ_TARGET` for `all`).
pub const TARGETS: [&str; 24] = [
    "csv",
    "flim_tiff",
    "gmsh",
    "irf",
    "mc_config",
    "mmc",
    "nifti",
    "nifti_gz",
    "npy",
    "phu",
    "pt3",
    "ht3",
    "ptu",
    "sdt",
    "spc",
    "spc_set",
    "speckle_png",
    "speckle_raw",
    "speckle_tiff",
    "timos_mesh",
    "timos_opt",
    "timos_source",
    "vtk",
    "vtu",
];

/// The valid `.set` and `.spc` that the `spc` and `spc_set` targets pair with their input.
const SPC_SET: &[u8] = include_bytes!("../../crates/flim-core/tests/data/spc150_point.set");
const SPC_STREAM: &[u8] = include_bytes!("../../crates/flim-core/tests/data/spc150_point.spc");

/// Write a fixed partner file once per process.
fn write_partner(name: &str, bytes: &[u8]) {
    let path = scratch(name);
    if !path.exists() {
        std::fs::write(&path, bytes).expect("writing the scratch file");
    }
}

/// Feed `data` to the reader of `target`.
pub fn fuzz(target: &str, data: &[u8]) {
    // libfuzzer-sys's panic hook aborts on every panic, even one a reader catches at a
    // third-party boundary (vtkio, nifti) and turns into an error. A panic that escapes the
    // reader still aborts: libfuzzer-sys catches it after the target returns.
    static QUIET: std::sync::Once = std::sync::Once::new();
    QUIET.call_once(|| std::panic::set_hook(Box::new(|_| {})));
    match target {
        "csv" => read_as("csv", data, perfusion_core::io::csv::read_table),
        "flim_tiff" => read_as("tif", data, |p| {
            flim_core::io::read(p, &flim_core::io::ReadOptions::default().with_bin_ns(0.1))
        }),
        "gmsh" => read_as("msh", data, montecarlo_core::io::gmsh::read_gmsh),
        "irf" => read_as("csv", data, |p| flim_core::Irf::from_file(p, Some(0.1))),
        "mc_config" => {
            if generated_tets(data).is_none_or(|n| n <= MAX_FUZZ_GENERATED_TETS) {
                read_as("json", data, montecarlo_core::Simulation::from_json);
            }
        }
        "mmc" => crate::read_pair(
            ("dat", "dat"),
            data,
            montecarlo_core::io::mmc::read_mmc_mesh,
        ),
        "nifti" => read_as("nii", data, |p| {
            let _ = perfusion_core::io::nifti::read_volume(p);
            perfusion_core::io::nifti::read_series(p)
        }),
        "nifti_gz" => read_as("nii.gz", data, |p| {
            let _ = perfusion_core::io::nifti::read_volume(p);
            perfusion_core::io::nifti::read_series(p)
        }),
        "npy" => read_as("npy", data, |p| {
            flim_core::io::read(p, &flim_core::io::ReadOptions::default().with_bin_ns(0.1))
        }),
        "phu" | "pt3" | "ht3" => read_as(target, data, |p| {
            flim_core::io::read(p, &flim_core::io::ReadOptions::default())
        }),
        // B&H streams need their .set beside them: the fuzzed file with a fixed valid
        // partner (an SPC-150 point measurement's, from flim-core's tests).
        "spc" => {
            write_partner("in.set", SPC_SET);
            read_as("spc", data, |p| {
                flim_core::io::read(p, &flim_core::io::ReadOptions::default())
            });
        }
        "spc_set" => {
            std::fs::write(scratch("in.set"), data).expect("writing the scratch file");
            write_partner("in.spc", SPC_STREAM);
            let _ = flim_core::io::read(&scratch("in.spc"), &flim_core::io::ReadOptions::default());
        }
        "ptu" => read_as("ptu", data, |p| {
            flim_core::io::read(p, &flim_core::io::ReadOptions::default())
        }),
        "sdt" => read_as("sdt", data, |p| {
            flim_core::io::read(p, &flim_core::io::ReadOptions::default())
        }),
        "speckle_png" => read_as("png", data, |p| {
            speckle_core::io::load_stack(p, &speckle_core::io::LoadOptions::default())
        }),
        "speckle_raw" => read_as("raw", data, |p| {
            let spec = speckle_core::io::RawSpec::new(16, 8, speckle_core::io::RawDtype::U16)
                .with_header_bytes(4);
            speckle_core::io::read_raw(p, &spec)
        }),
        "speckle_tiff" => read_as("tif", data, |p| {
            speckle_core::io::load_stack(p, &speckle_core::io::LoadOptions::default())
        }),
        "timos_mesh" => read_as("mesh", data, montecarlo_core::io::timos::read_mesh),
        "timos_opt" => read_as("opt", data, montecarlo_core::io::timos::read_opt),
        "timos_source" => read_as("source", data, montecarlo_core::io::timos::read_source),
        "vtk" => read_as("vtk", data, |p| montecarlo_core::io::vtk::read_vtk(p, None)),
        "vtu" => read_as("vtu", data, |p| montecarlo_core::io::vtk::read_vtk(p, None)),
        other => panic!("unknown fuzz target {other}; expected one of {TARGETS:?}"),
    }
}
