//! Error messages as a user meets them: each cause said once, negative numbers taken as values.

use std::process::Command;

fn biogpu(args: &[&str]) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_biogpu"))
        .args(["--device", "cpu"])
        .args(args)
        .output()
        .expect("starting biogpu");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_missing_input_file_is_named_with_its_cause_once() {
    let dir = std::env::temp_dir().join(format!("biogpu-msg-{}", std::process::id()));
    let missing = dir.join("no-such-recording.tif");
    let (ok, err) = biogpu(&[
        "speckle",
        "contrast",
        missing.to_str().unwrap(),
        "--out",
        dir.join("out").to_str().unwrap(),
    ]);
    assert!(!ok, "a missing input must fail");
    assert!(err.contains("no-such-recording.tif"), "{err}");
    assert_eq!(err.matches("No such file").count(), 1, "{err}");
}

#[test]
fn a_negative_number_reaches_the_check_that_explains_it() {
    let dir = std::env::temp_dir().join(format!("biogpu-neg-{}", std::process::id()));
    let (ok, err) = biogpu(&[
        "perfusion",
        "simulate",
        "--cnr",
        "-5",
        "--out",
        dir.to_str().unwrap(),
    ]);
    assert!(!ok, "a negative contrast-to-noise ratio must fail");
    assert!(!err.contains("unexpected argument"), "{err}");
    assert!(err.contains("cnr") && err.contains("> 0"), "{err}");
}
