//! Many inputs in one run: every good input gets its folder, a bad one is reported by name
//! and skipped, and the command fails at the end saying how many failed.

use crate::common::{biogpu, scratch, stderr as text};
use std::path::Path;

#[test]
fn speckle_contrast_runs_every_frame_file_of_a_folder() {
    let dir = scratch("batch-speckle");
    let data = dir.join("frames");
    std::fs::create_dir_all(&data).unwrap();
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("../speckle-core/tests/data");
    for name in ["imagej_frames.tif", "zstd_frames.tif"] {
        std::fs::copy(fixtures.join(name), data.join(name)).unwrap();
    }
    std::fs::write(data.join("corrupt.tif"), b"II*\0 not really").unwrap();
    let out = dir.join("out");
    let o = biogpu(&[
        "speckle",
        "contrast",
        data.to_str().unwrap(),
        "--window",
        "3",
        "--out",
        out.to_str().unwrap(),
    ]);
    let err = text(&o);
    assert!(!o.status.success(), "one bad file fails the run: {err}");
    assert!(err.contains("1 of 3 inputs failed"), "{err}");
    assert!(err.contains("corrupt.tif"), "{err}");
    for name in ["imagej_frames", "zstd_frames"] {
        let summary = out.join(name).join("summary.json");
        assert!(summary.exists(), "{}: {err}", summary.display());
    }
    assert!(!out.join("corrupt").exists());
}

/// `speckle roi` over several files: a time course per good file in its folder, the bad
/// one named and skipped.
#[test]
fn speckle_roi_measures_every_file() {
    let dir = scratch("batch-roi");
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("../speckle-core/tests/data");
    let bad = dir.join("truncated.tif");
    std::fs::create_dir_all(&dir).unwrap();
    let good = std::fs::read(fixtures.join("imagej_frames.tif")).unwrap();
    std::fs::write(&bad, &good[..good.len() / 2]).unwrap();
    let out = dir.join("out");
    let paths = [
        fixtures.join("imagej_frames.tif"),
        bad,
        fixtures.join("zstd_frames.tif"),
    ];
    let mut args = vec!["speckle", "roi"];
    args.extend(paths.iter().map(|p| p.to_str().unwrap()));
    args.extend([
        "--window",
        "3",
        "--roi",
        "0,0,4,4",
        "--out",
        out.to_str().unwrap(),
    ]);
    let o = biogpu(&args);
    let err = text(&o);
    assert!(!o.status.success(), "one bad file fails the run: {err}");
    assert!(err.contains("1 of 3 inputs failed"), "{err}");
    assert!(err.contains("truncated.tif"), "{err}");
    for name in ["imagej_frames", "zstd_frames"] {
        let csv = std::fs::read_to_string(out.join(name).join("roi.csv")).unwrap();
        assert!(csv.lines().count() > 1, "{name}: {csv}");
    }
    assert!(!out.join("truncated").exists());
    // --sfi without an exposure is refused once, before any file is read.
    let o = biogpu(&[
        "speckle",
        "roi",
        paths[0].to_str().unwrap(),
        paths[2].to_str().unwrap(),
        "--roi",
        "0,0,4,4",
        "--sfi",
        "--out",
        dir.join("out2").to_str().unwrap(),
    ]);
    assert!(!o.status.success());
    assert!(text(&o).contains("--sfi needs --exposure"), "{}", text(&o));
    assert!(!dir.join("out2").exists());
}

/// `speckle calibrate` of a folder of static recordings: one NAME.json per good file in the
/// --out folder, each the beta a single run of that file writes; the bad one named and
/// skipped.
#[test]
fn speckle_calibrate_writes_one_file_per_recording() {
    let dir = scratch("batch-calibrate");
    let data = dir.join("static");
    std::fs::create_dir_all(&data).unwrap();
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("../speckle-core/tests/data");
    for name in ["imagej_frames.tif", "zstd_frames.tif"] {
        std::fs::copy(fixtures.join(name), data.join(name)).unwrap();
    }
    std::fs::write(data.join("empty.tif"), b"").unwrap();
    let beta = |file: &Path| -> f64 {
        let text = std::fs::read_to_string(file).unwrap();
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        v["beta"].as_f64().unwrap()
    };
    let out = dir.join("betas");
    let o = biogpu(&[
        "speckle",
        "calibrate",
        data.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    let err = text(&o);
    assert!(!o.status.success(), "one bad file fails the run: {err}");
    assert!(err.contains("1 of 3 inputs failed"), "{err}");
    assert!(err.contains("empty.tif"), "{err}");
    assert!(!out.join("empty.json").exists());
    for name in ["imagej_frames", "zstd_frames"] {
        let single = dir.join(format!("{name}-single.json"));
        let o = biogpu(&[
            "speckle",
            "calibrate",
            data.join(format!("{name}.tif")).to_str().unwrap(),
            "--out",
            single.to_str().unwrap(),
        ]);
        assert!(o.status.success(), "{}", text(&o));
        let (b, s) = (beta(&out.join(format!("{name}.json"))), beta(&single));
        assert!(b > 0.0 && b < 1.0, "{name}: beta {b}");
        assert_eq!(b.to_bits(), s.to_bits(), "{name}: batch {b} vs single {s}");
    }
}

/// `flim convert` of a folder: each good recording's cube in its folder, the bad one named
/// and skipped, a bad --range refused before any file is read.
#[test]
fn flim_convert_takes_a_folder() {
    let dir = scratch("batch-convert");
    let data = dir.join("in");
    std::fs::create_dir_all(&data).unwrap();
    let sdt =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../flim-core/tests/data/bh_spc160_4x4.sdt");
    for name in ["a.sdt", "b.sdt"] {
        std::fs::copy(&sdt, data.join(name)).unwrap();
    }
    std::fs::write(data.join("broken.sdt"), b"not a Becker & Hickl file").unwrap();
    let out = dir.join("out");
    let (d, o) = (data.to_str().unwrap(), out.to_str().unwrap());
    let bad_range = biogpu(&["flim", "convert", d, "--range", "9:x", "--out", o]);
    assert!(!bad_range.status.success());
    assert!(
        !text(&bad_range).contains("inputs failed"),
        "{}",
        text(&bad_range)
    );
    assert!(!out.exists(), "nothing written");
    let run = biogpu(&["flim", "convert", d, "--out", o]);
    let err = text(&run);
    assert!(!run.status.success(), "one bad file fails the run: {err}");
    assert!(err.contains("1 of 3 inputs failed"), "{err}");
    assert!(err.contains("broken.sdt"), "{err}");
    let (a, b) = (out.join("a").join("a.npy"), out.join("b").join("b.npy"));
    assert!(a.exists() && b.exists(), "{err}");
    assert_eq!(std::fs::read(a).unwrap(), std::fs::read(b).unwrap());
    assert!(!out.join("broken").exists());
}

/// `speckle flow` over several files: the options are checked once, before any file is
/// read; each file gets its tau_c maps.
#[test]
fn speckle_flow_takes_several_files() {
    let dir = scratch("batch-flow");
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("../speckle-core/tests/data");
    let (a, b) = (
        fixtures.join("imagej_frames.tif"),
        fixtures.join("zstd_frames.tif"),
    );
    let (a, b) = (a.to_str().unwrap(), b.to_str().unwrap());
    let out = dir.join("out");
    let o = out.to_str().unwrap();
    let no_beta = biogpu(&["speckle", "flow", a, b, "--exposure", "0.005", "--out", o]);
    assert!(!no_beta.status.success());
    assert!(
        !text(&no_beta).contains("inputs failed"),
        "said once: {}",
        text(&no_beta)
    );
    assert!(!out.exists(), "nothing written");
    let args = [
        "--window",
        "3",
        "--exposure",
        "0.005",
        "--beta",
        "0.5",
        "--out",
        o,
    ];
    let run = biogpu(&[&["speckle", "flow", a, b][..], &args].concat());
    assert!(run.status.success(), "{}", text(&run));
    for name in ["imagej_frames", "zstd_frames"] {
        let summary = out.join(name).join("summary.json");
        let v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&summary).unwrap()).unwrap();
        assert!(
            v["input"]
                .as_str()
                .unwrap()
                .ends_with(&format!("{name}.tif")),
            "{v}"
        );
        assert_eq!(v["beta"], 0.5);
    }
}

#[test]
fn mc_run_takes_several_simulation_files() {
    let dir = scratch("batch-mc");
    let example = biogpu(&["mc", "example"]);
    assert!(example.status.success(), "{}", text(&example));
    let (a, b, bad) = (dir.join("a.json"), dir.join("b.json"), dir.join("bad.json"));
    std::fs::write(&a, &example.stdout).unwrap();
    std::fs::write(&b, &example.stdout).unwrap();
    std::fs::write(&bad, b"{ not json").unwrap();
    let out = dir.join("out");
    let o = biogpu(&[
        "mc",
        "run",
        a.to_str().unwrap(),
        bad.to_str().unwrap(),
        b.to_str().unwrap(),
        "--photons",
        "2000",
        "--out",
        out.to_str().unwrap(),
    ]);
    let err = text(&o);
    assert!(!o.status.success(), "{err}");
    assert!(
        err.contains("1 of 3 inputs failed") && err.contains("bad.json"),
        "{err}"
    );
    let summary = |name: &str| -> serde_json::Value {
        let path = out.join(name).join("summary.json");
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
    };
    // Same file, same seed: the same result, each in its own folder.
    let absorbed = summary("a")["absorbed"]
        .as_f64()
        .expect("absorbed is a number");
    assert!(absorbed > 0.0 && absorbed < 1.0, "{absorbed}");
    assert_eq!(summary("b")["absorbed"].as_f64(), Some(absorbed));
}

/// `perfusion fit --studies`: each row of the list into its own folder, paths from the
/// list's folder, the shared options for what a row leaves empty; a study that cannot be
/// read is reported and listed in summary.csv, and the others complete.
#[test]
fn perfusion_fits_every_study_of_a_list() {
    let dir = scratch("batch-studies");
    let run = |args: &[&str]| biogpu(&[&["perfusion"][..], args].concat());
    let liver = dir.join("liver");
    let curves = dir.join("curves");
    for (out, extra) in [
        (&liver, &["--liver"][..]),
        (&curves, &["--voxels", "6"][..]),
    ] {
        let o = run(&[&["simulate", "--out", out.to_str().unwrap()][..], extra].concat());
        assert!(o.status.success(), "{}", text(&o));
    }
    let list = dir.join("studies.csv");
    std::fs::write(
        &list,
        "name,dce,curves,mask,aif,pv\n\
         volume,liver/dce.nii.gz,,liver/mask.nii.gz,liver/inputs.csv:aif,liver/inputs.csv:pv\n\
         gone,liver/missing.nii.gz,,liver/mask.nii.gz,,\n\
         ,,curves/curves.csv,,curves/inputs.csv:aif,curves/inputs.csv:pv\n",
    )
    .unwrap();
    let out = dir.join("fits");
    let o = out.to_str().unwrap();
    // The shared --aif serves the row that gives none (and fails there on the missing
    // series, not on the input).
    let aif = format!("{}:aif", liver.join("inputs.csv").display());
    let pv = format!("{}:pv", liver.join("inputs.csv").display());
    let args = [
        "fit",
        "--studies",
        list.to_str().unwrap(),
        "--aif",
        &aif,
        "--pv",
        &pv,
        "--out",
        o,
    ];
    let first = run(&args);
    let err = text(&first);
    assert!(!first.status.success(), "one study failed: {err}");
    assert!(err.contains("1 of 3 inputs failed"), "{err}");
    assert!(err.contains("missing.nii.gz"), "{err}");
    let said = String::from_utf8_lossy(&first.stdout);
    assert!(said.contains("2 of 3 studies fitted"), "{said}");
    for study in ["volume", "curves"] {
        let summary: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(out.join(study).join("summary.json")).unwrap(),
        )
        .unwrap();
        assert!(
            summary["voxels"].as_u64().unwrap() > 0,
            "{study}: {summary}"
        );
    }
    assert!(out.join("volume/ka.nii.gz").exists());
    assert!(out.join("curves/results.csv").exists());
    assert!(!out.join("gone").exists());
    let table = std::fs::read_to_string(out.join("summary.csv")).unwrap();
    let rows: Vec<&str> = table.lines().collect();
    assert_eq!(rows.len(), 4, "{table}");
    assert!(rows[0].starts_with("study,outcome,voxels"), "{table}");
    assert!(rows[1].starts_with("volume,ok,4336,"), "{table}");
    assert!(rows[2].starts_with("gone,error: "), "{table}");
    assert!(rows[3].starts_with("curves,ok,6,"), "{table}");
    // Nothing is overwritten without --force.
    let again = run(&args);
    assert!(!again.status.success());
    assert!(
        text(&again).contains("summary.csv exists"),
        "{}",
        text(&again)
    );
    // A bad list is refused before any study is read, naming the file and line.
    std::fs::write(&list, "name,dce,colour\nx,liver/dce.nii.gz,red\n").unwrap();
    let bad = run(&[
        "fit",
        "--studies",
        list.to_str().unwrap(),
        "--out",
        o,
        "--force",
    ]);
    assert!(!bad.status.success());
    let e = text(&bad);
    assert!(
        e.contains("studies.csv") && e.contains("line 1: unknown column `colour`"),
        "{e}"
    );
}
