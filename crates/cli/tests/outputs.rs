//! The output policy, command by command, as a user meets it:
//! - a second run into the same folder stops before any work, naming every existing output,
//!   and changes nothing;
//! - an output folder that cannot be created is an error before any work, not a panic;
//! - a run that fails while writing (here: a file-size limit, as on a full disk) leaves no
//!   file behind, and with `--force` over an earlier run leaves the earlier files whole.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn biogpu(args: &[String], file_size_limit: Option<u64>) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_biogpu"));
    cmd.args(["--device", "cpu"]).args(args);
    #[cfg(unix)]
    if let Some(limit) = file_size_limit {
        use std::os::unix::process::CommandExt;
        // SAFETY: only async-signal-safe calls between fork and exec.
        unsafe {
            cmd.pre_exec(move || {
                // Writes past the limit fail with EFBIG instead of killing the process.
                libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
                let lim = libc::rlimit {
                    rlim_cur: limit,
                    rlim_max: limit,
                };
                if libc::setrlimit(libc::RLIMIT_FSIZE, &raw const lim) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }
    #[cfg(not(unix))]
    let _ = file_size_limit;
    cmd.output().expect("starting biogpu")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Every file under `dir` (relative path -> bytes).
fn snapshot(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                todo.push(p);
            } else {
                let rel = p.strip_prefix(dir).unwrap().to_string_lossy().into_owned();
                out.insert(rel, std::fs::read(&p).unwrap());
            }
        }
    }
    out
}

fn scratch(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("biogpu-outputs-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn s(p: &Path) -> String {
    p.to_str().unwrap().to_string()
}

/// An 8-bit grey PNG of speckle-like noise.
fn speckle_png(path: &Path, seed: u32) {
    let (w, h) = (32u32, 32u32);
    let file = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    let mut png = png::Encoder::new(file, w, h);
    png.set_color(png::ColorType::Grayscale);
    png.set_depth(png::BitDepth::Eight);
    let mut x = seed.wrapping_mul(2_654_435_761).max(1);
    let pixels: Vec<u8> = (0..w * h)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            40 + (x % 160) as u8
        })
        .collect();
    png.write_header()
        .unwrap()
        .write_image_data(&pixels)
        .unwrap();
}

/// Apply the whole policy to one command; `line(out)` is its argument list for folder `out`.
fn check_policy(tag: &str, line: &dyn Fn(&Path) -> Vec<String>) {
    let dir = scratch(tag);
    let out = dir.join("out");

    let first = biogpu(&line(&out), None);
    assert!(
        first.status.success(),
        "{tag}: first run failed: {}",
        stderr(&first)
    );
    let written = snapshot(&out);
    assert!(!written.is_empty(), "{tag}: no outputs");
    assert!(
        written.keys().all(|k| !k.contains(".biogpu-partial")),
        "{tag}: staging left behind: {:?}",
        written.keys()
    );

    // Again into the same folder: stopped before any work, every output named, nothing changed.
    let again = biogpu(&line(&out), None);
    let err = stderr(&again);
    assert!(!again.status.success(), "{tag}: a second run must refuse");
    assert!(
        err.contains("nothing was run") && err.contains("--force"),
        "{tag}: {err}"
    );
    for name in written.keys() {
        let file = Path::new(name).file_name().unwrap().to_str().unwrap();
        assert!(err.contains(file), "{tag}: {file} not listed in: {err}");
    }
    assert_eq!(
        snapshot(&out),
        written,
        "{tag}: a refused run changed the folder"
    );

    // A folder that cannot be created: a clear error, no panic.
    let blocker = dir.join("a-file");
    std::fs::write(&blocker, "not a folder").unwrap();
    let bad = biogpu(&line(&blocker.join("out")), None);
    let err = stderr(&bad);
    assert!(
        !bad.status.success(),
        "{tag}: an impossible folder must fail"
    );
    assert!(
        err.contains("output folder") && !err.contains("panicked"),
        "{tag}: {err}"
    );

    // Failing while writing (64-byte file limit, like a full disk): nothing left behind.
    #[cfg(unix)]
    {
        let fresh = dir.join("fresh");
        let failed = biogpu(&line(&fresh), Some(64));
        let err = stderr(&failed);
        assert!(
            !failed.status.success(),
            "{tag}: a failed write must fail the run"
        );
        assert!(!err.contains("panicked"), "{tag}: {err}");
        assert!(
            snapshot(&fresh).is_empty(),
            "{tag}: partial files: {:?}",
            snapshot(&fresh).keys()
        );
        assert!(
            std::fs::read_dir(&fresh).map_or(0, Iterator::count) == 0,
            "{tag}: staging folder left in {}",
            fresh.display()
        );
        // ... and over an earlier run with --force: the earlier files stay whole.
        let mut forced = line(&out);
        forced.push("--force".into());
        let failed = biogpu(&forced, Some(64));
        assert!(
            !failed.status.success(),
            "{tag}: a failed forced write must fail"
        );
        assert_eq!(
            snapshot(&out),
            written,
            "{tag}: a failed --force run damaged outputs"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

fn args(v: &[&str]) -> Vec<String> {
    v.iter().map(ToString::to_string).collect()
}

#[test]
fn speckle_commands_follow_the_output_policy() {
    let dir = scratch("speckle-in");
    let inputs: Vec<PathBuf> = (0..4).map(|i| dir.join(format!("e{i}.png"))).collect();
    for (i, p) in inputs.iter().enumerate() {
        speckle_png(p, i as u32 + 1);
    }
    let one = s(&inputs[0]);
    check_policy("contrast", &|out| {
        args(&[
            "speckle",
            "contrast",
            &one,
            "--window",
            "5",
            "--out",
            &s(out),
        ])
    });
    check_policy("flow", &|out| {
        args(&[
            "speckle",
            "flow",
            &one,
            "--exposure",
            "0.005",
            "--beta",
            "0.5",
            "--out",
            &s(out),
        ])
    });
    check_policy("roi", &|out| {
        args(&[
            "speckle",
            "roi",
            &one,
            "--roi",
            "0,0,16,16",
            "--out",
            &s(out),
        ])
    });
    let mut mesi: Vec<String> = args(&["speckle", "mesi"]);
    mesi.extend(inputs.iter().map(|p| s(p)));
    mesi.extend(args(&["--exposures", "0.001,0.005,0.02,0.05"]));
    check_policy("mesi", &|out| {
        let mut line = mesi.clone();
        line.extend(["--out".to_string(), s(out)]);
        line
    });
}

#[test]
fn flim_commands_follow_the_output_policy() {
    let sdt =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../flim-core/tests/data/bh_spc160_4x4.sdt");
    let sdt = s(&sdt);
    check_policy("flim-fit", &|out| {
        args(&["flim", "fit", &sdt, "--threshold", "0", "--out", &s(out)])
    });
    check_policy("flim-phasor", &|out| {
        args(&["flim", "phasor", &sdt, "--threshold", "0", "--out", &s(out)])
    });
    check_policy("flim-convert", &|out| {
        args(&["flim", "convert", &sdt, "--out", &s(out)])
    });
}

#[test]
fn mc_commands_follow_the_output_policy() {
    let dir = scratch("mc-in");
    let sim = dir.join("sim.json");
    let example = biogpu(&args(&["mc", "example"]), None);
    assert!(example.status.success(), "{}", stderr(&example));
    std::fs::write(&sim, &example.stdout).unwrap();
    let sim = s(&sim);
    check_policy("mc-run", &|out| {
        args(&["mc", "run", &sim, "--photons", "2000", "--out", &s(out)])
    });
    let mesh = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../montecarlo-core/tests/data/gmsh_22_ascii.msh");
    let mesh = s(&mesh);
    check_policy("mc-mesh", &|out| {
        args(&["mc", "mesh", &mesh, "--vtu", &s(&out.join("mesh.vtu"))])
    });
}

#[test]
fn perfusion_commands_follow_the_output_policy() {
    check_policy("perfusion-simulate", &|out| {
        args(&["perfusion", "simulate", "--voxels", "8", "--out", &s(out)])
    });
    let dir = scratch("perfusion-in");
    let sim = dir.join("sim");
    let made = biogpu(
        &args(&["perfusion", "simulate", "--voxels", "8", "--out", &s(&sim)]),
        None,
    );
    assert!(made.status.success(), "{}", stderr(&made));
    let (curves, aif, pv) = (
        s(&sim.join("curves.csv")),
        format!("{}:aif", s(&sim.join("inputs.csv"))),
        format!("{}:pv", s(&sim.join("inputs.csv"))),
    );
    check_policy("perfusion-fit", &|out| {
        args(&[
            "perfusion",
            "fit",
            "--model",
            "dual-input",
            "--curves",
            &curves,
            "--aif",
            &aif,
            "--pv",
            &pv,
            "--out",
            &s(out),
        ])
    });
}
