//! `biogpu perfusion fit --dce <DICOM folder>` as a user coming from MADYM or dcmri runs it:
//! the fixture series of perfusion-core (`tests/data/make_dicom.py`), maps written on its
//! grid, and the SPGR flip angle and TR taken from the headers where not given.

use crate::common::{self, scratch};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn series() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../perfusion-core/tests/data/dicom/series")
}

fn biogpu(args: &[&str]) -> Output {
    common::biogpu(&[&["perfusion", "fit"][..], args].concat())
}

/// An arterial input for the fixture's 8 frames, 4.5 s apart.
fn aif(dir: &Path) -> String {
    let path = dir.join("aif.csv");
    let text: String = std::iter::once("time,aif\n".to_string())
        .chain((0..8).map(|i| {
            let t = 4.5 * f64::from(i);
            format!("{t},{}\n", 5.0 * t * (-t / 6.0).exp())
        }))
        .collect();
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

fn check(o: &Output) {
    assert!(
        o.status.success(),
        "stdout: {}\nstderr: {}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
}

#[test]
fn a_dicom_folder_is_fitted_into_maps() {
    let dir = scratch("dicom-fit");
    let out = dir.join("maps");
    let dce = series();
    let o = biogpu(&[
        "--dce",
        dce.to_str().unwrap(),
        "--model",
        "tofts",
        "--method",
        "lm",
        "--aif",
        &aif(&dir),
        "--out",
        out.to_str().unwrap(),
    ]);
    check(&o);
    for name in [
        "ktrans.nii.gz",
        "ve.nii.gz",
        "status.nii.gz",
        "summary.json",
    ] {
        assert!(out.join(name).is_file(), "{name} missing");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn spgr_takes_flip_angle_and_tr_from_the_headers_and_warns_on_a_different_option() {
    let dir = scratch("dicom-spgr");
    let dce = series();
    let aif = aif(&dir);
    let base = [
        "--dce",
        dce.to_str().unwrap(),
        "--model",
        "tofts",
        "--method",
        "lm",
        "--aif",
        &aif,
        "--convert",
        "spgr",
        "--t10",
        "1.4",
        "--baseline",
        "2",
    ];
    let out = dir.join("a");
    let o = biogpu(&[&base[..], &["--out", out.to_str().unwrap()]].concat());
    check(&o);
    let out = dir.join("b");
    let o = biogpu(
        &[
            &base[..],
            &["--flip-angle", "20", "--out", out.to_str().unwrap()],
        ]
        .concat(),
    );
    check(&o);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("--flip-angle 20 differs from the DICOM header's FlipAngle"),
        "{err}"
    );
    // Without DICOM headers the options are needed.
    let curves = dir.join("curves.csv");
    std::fs::write(
        &curves,
        "time,v\n0,1\n4.5,2\n9,3\n13.5,2\n18,2\n22.5,2\n27,2\n31.5,2\n",
    )
    .unwrap();
    let out = dir.join("c");
    let o = Command::new(env!("CARGO_BIN_EXE_biogpu"))
        .args([
            "--device",
            "cpu",
            "perfusion",
            "fit",
            "--model",
            "tofts",
            "--curves",
        ])
        .arg(&curves)
        .args(["--aif", &aif, "--convert", "spgr", "--t10", "1.4", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("--convert spgr needs --flip-angle"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}
