//! `biogpu perfusion fit`: standard-error maps and columns with the poorly-determined count
//! (summary.json and the console), and `--series` choosing one of several DICOM series
//! under a folder (the fixtures of perfusion-core, `tests/data/make_dicom.py`).

use crate::common::{self, scratch};
use std::path::{Path, PathBuf};
use std::process::Output;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../perfusion-core/tests/data/dicom")
        .join(name)
}

fn biogpu(args: &[&str]) -> Output {
    common::biogpu(&[&["perfusion"][..], args].concat())
}

fn text(o: &Output) -> String {
    format!(
        "stdout: {}\nstderr: {}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn check(o: &Output) {
    assert!(o.status.success(), "{}", text(o));
}

fn copy_fixture(name: &str, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(fixture(name)).unwrap() {
        let p = e.unwrap().path();
        std::fs::copy(&p, to.join(p.file_name().unwrap())).unwrap();
    }
}

/// An arterial input for the fixtures' 8 frames (values only: the series' times hold).
fn aif(dir: &Path) -> String {
    let path = dir.join("aif.csv");
    let text: String = std::iter::once("aif\n".to_string())
        .chain((0..8).map(|i| {
            let t = 4.5 * f64::from(i);
            format!("{}\n", 5.0 * t * (-t / 6.0).exp())
        }))
        .collect();
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

fn json(path: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

#[test]
fn perfusion_fit_writes_standard_errors_and_counts_poorly_determined_voxels() {
    let dir = scratch("pfit-se");
    let sim = dir.join("sim");
    check(&biogpu(&[
        "simulate",
        "--model",
        "tofts",
        "--truth",
        "ktrans=0.25,ve=0.3,tau=2",
        "--voxels",
        "6",
        "--cnr",
        "50",
        "--out",
        sim.to_str().unwrap(),
    ]));
    let out = dir.join("fit");
    let o = biogpu(&[
        "fit",
        "--model",
        "tofts",
        "--curves",
        sim.join("curves.csv").to_str().unwrap(),
        "--aif",
        &format!("{}:aif", sim.join("inputs.csv").display()),
        "--fix",
        "tau=2",
        "--out",
        out.to_str().unwrap(),
    ]);
    check(&o);
    // CSV: a column of standard errors per parameter, in the parameter's unit; the fixed
    // delay's is NaN.
    let csv = std::fs::read_to_string(out.join("results.csv")).unwrap();
    let mut lines = csv.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let col = |name: &str| header.iter().position(|h| *h == name).unwrap();
    let (k, kse, tse) = (
        col("ktrans (1/min)"),
        col("ktrans_se (1/min)"),
        col("tau_se (s)"),
    );
    for line in lines {
        let f: Vec<&str> = line.split(',').collect();
        let (v, se): (f64, f64) = (f[k].parse().unwrap(), f[kse].parse().unwrap());
        assert!(se > 0.0 && se < 0.1 * v, "{line}");
        assert_eq!(f[tse], "NaN", "{line}");
    }
    let summary = json(&out.join("summary.json"));
    let pd = &summary["flags"]["poorly-determined"];
    assert_eq!(pd["bit"], 8);
    assert_eq!(pd["voxels"], 0);
    assert!(summary["median_se"]["ktrans"].as_f64().unwrap() > 0.0);
    assert_eq!(summary["poorly_determined_se"], 0.5);

    // A NIfTI series: one `<param>_se.nii.gz` per free parameter on the maps' grid, and a
    // curve with no uptake counted as poorly determined, in summary.json and on the console.
    let dce = dir.join("dce");
    copy_fixture("series", &dce);
    let out = dir.join("maps");
    let o = biogpu(&[
        "fit",
        "--model",
        "tofts",
        "--dce",
        dce.to_str().unwrap(),
        "--aif",
        &aif(&dir),
        "--fix",
        "tau=0",
        "--out",
        out.to_str().unwrap(),
    ]);
    check(&o);
    assert!(out.join("ktrans_se.nii.gz").is_file());
    assert!(out.join("ve_se.nii.gz").is_file());
    assert!(
        !out.join("tau_se.nii.gz").exists(),
        "a fixed parameter has no SE map"
    );
    let summary = json(&out.join("summary.json"));
    let n = summary["flags"]["poorly-determined"]["voxels"]
        .as_u64()
        .unwrap();
    let console = String::from_utf8_lossy(&o.stdout);
    if n > 0 {
        assert!(
            console.contains(&format!("{n} poorly determined")),
            "{}",
            text(&o)
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn perfusion_fit_series_chooses_one_of_several_dicom_series() {
    let dir = scratch("pfit-series");
    let both = dir.join("study");
    copy_fixture("series", &both.join("a"));
    copy_fixture("midnight", &both.join("b"));
    let aif = aif(&dir);
    let run = |series: Option<&str>, out: &Path| {
        let mut args = vec![
            "fit",
            "--model",
            "tofts",
            "--dce",
            both.to_str().unwrap(),
            "--aif",
            &aif,
            "--out",
            out.to_str().unwrap(),
        ];
        if let Some(s) = series {
            args.extend(["--series", s]);
        }
        biogpu(&args)
    };
    // None chosen: an error listing both, pointing at --series.
    let o = run(None, &dir.join("none"));
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    for part in [
        "2 DICOM series",
        "--series",
        "1. 1.2.826.0.1.3680043.8.498.10 \"dce oblique\"",
        "2. 1.2.826.0.1.3680043.8.498.11 \"dce midnight\"",
    ] {
        assert!(err.contains(part), "`{part}` not in: {err}");
    }
    // By number and by UID.
    for (choice, name) in [("2", "two"), ("1.2.826.0.1.3680043.8.498.10", "uid")] {
        let out = dir.join(name);
        check(&run(Some(choice), &out));
        assert!(out.join("ktrans.nii.gz").is_file(), "{choice}");
    }
    // A number past the list: the error says so and lists them.
    let o = run(Some("3"), &dir.join("three"));
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("no series `3`") && err.contains("dce midnight"),
        "{err}"
    );
    // --series needs --dce.
    let o = biogpu(&["fit", "--curves", "x.csv", "--aif", &aif, "--series", "1"]);
    assert!(!o.status.success());
    std::fs::remove_dir_all(&dir).unwrap();
}
