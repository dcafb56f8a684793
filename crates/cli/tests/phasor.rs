//! `biogpu flim phasor` calibration: `--calibrate auto` (the IRF, estimated), a warning and a
//! `summary.json` entry when uncalibrated, clear errors for a reference without its lifetime,
//! and selections named in words; the default range of one laser period.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

fn biogpu(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_biogpu"))
        .args(["--device", "cpu", "flim", "phasor"])
        .args(args)
        .output()
        .expect("starting biogpu");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn data(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../flim-core/tests/data")
        .join(name)
        .display()
        .to_string()
}

fn out_dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("biogpu-phasor-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn calibration(dir: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(dir.join("summary.json")).unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    v["images"][0]["calibration"].clone()
}

#[test]
fn calibrate_auto_uses_the_estimated_irf_and_says_so() {
    let input = data("bh_spc160_4x4.sdt");
    let dir = out_dir("auto");
    let (ok, stdout, stderr) = biogpu(&[
        &input,
        "--calibrate",
        "auto",
        "--out",
        dir.to_str().unwrap(),
    ]);
    assert!(ok, "{stderr}");
    assert!(
        stdout.contains("calibrated from the IRF") && stdout.contains(" s on cpu"),
        "{stdout}"
    );
    assert!(!stderr.contains("not calibrated"), "{stderr}");
    let c = calibration(&dir);
    assert_eq!(c["source"], "irf", "{c}");
    assert!(c["phase_rad"].as_f64().unwrap().is_finite());
    assert!(dir.join("irf.csv").exists(), "the estimated IRF is written");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn an_uncalibrated_phasor_is_flagged_on_the_console_and_in_the_summary() {
    let input = data("bh_spc160_4x4.sdt");
    let dir = out_dir("none");
    let (ok, stdout, stderr) = biogpu(&[&input, "--out", dir.to_str().unwrap()]);
    assert!(ok, "{stderr}");
    assert_eq!(stderr.matches("not calibrated").count(), 1, "{stderr}");
    assert!(stdout.contains("uncalibrated"), "{stdout}");
    assert_eq!(calibration(&dir)["source"], "none");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn a_reference_needs_its_lifetime_and_a_lifetime_needs_a_reference() {
    let input = data("bh_spc160_4x4.sdt");
    let reference = data("picoharp.pt3");
    let dir = out_dir("bad");
    let o = dir.to_str().unwrap();
    let (ok, _, e) = biogpu(&[&input, "--calibrate", &reference, "--out", o]);
    assert!(
        !ok && e.contains("--ref-tau") && e.contains("--calibrate auto"),
        "{e}"
    );
    for bad in ["0", "-1", "nan"] {
        let (ok, _, e) = biogpu(&[
            &input,
            "--calibrate",
            &reference,
            &format!("--ref-tau={bad}"),
            "--out",
            o,
        ]);
        assert!(!ok && e.contains("> 0"), "{bad}: {e}");
    }
    let (ok, _, e) = biogpu(&[&input, "--ref-tau", "4", "--out", o]);
    assert!(!ok && e.contains("--calibrate FILE"), "{e}");
    // A reference of another bin width is refused with both shapes named.
    let (ok, _, e) = biogpu(&[
        &input,
        "--calibrate",
        &reference,
        "--ref-tau",
        "4",
        "--out",
        o,
    ]);
    assert!(!ok && e.contains("bins of"), "{e}");
    let written = std::fs::read_dir(&dir).map_or(0, Iterator::count);
    assert_eq!(written, 0, "nothing was written");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn selections_that_leave_nothing_are_named_in_words() {
    let input = data("bh_spc160_4x4.sdt");
    let dir = out_dir("block");
    let (ok, _, e) = biogpu(&[&input, "--block", "3", "--out", dir.to_str().unwrap()]);
    assert!(!ok && e.contains("selecting block 3"), "{e}");
    assert!(!e.contains("Some(") && !e.contains("None"), "{e}");
}

#[test]
fn an_irf_without_counts_is_refused() {
    let input = data("bh_spc160_4x4.sdt");
    let dir = out_dir("zero-irf");
    std::fs::create_dir_all(&dir).unwrap();
    // The .sdt's bin width, so that only the counts are wrong.
    let h = 0.048_860_911_844_306_19;
    let mut csv = String::from("time_ns,irf\n");
    for j in 0..256 {
        writeln!(csv, "{:.12},0", f64::from(j) * h).unwrap();
    }
    let irf = dir.join("zero_irf.csv");
    std::fs::write(&irf, csv).unwrap();
    let out = dir.join("out");
    let (ok, _, e) = biogpu(&[
        &input,
        "--irf",
        irf.to_str().unwrap(),
        "--calibrate",
        "auto",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(
        !ok && e.contains("zero_irf.csv") && e.contains("summing to 0"),
        "{e}"
    );
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn a_reference_of_known_lifetime_calibrates_as_phasorpy() {
    // phasor_reference_2p5ns.npy and phasorpy 0.7's phase and modulation corrections for it:
    // crates/flim-core/tests/data/make_phasor_calibration.py (case 0).
    let input = data("bh_spc160_4x4.sdt");
    let reference = data("phasor_reference_2p5ns.npy");
    let dir = out_dir("reference");
    let (ok, stdout, stderr) = biogpu(&[
        &input,
        "--calibrate",
        &reference,
        "--ref-tau",
        "2.5",
        "--threshold",
        "1",
        "--out",
        dir.to_str().unwrap(),
    ]);
    assert!(ok, "{stderr}");
    assert!(stdout.contains("calibrated from the reference"), "{stdout}");
    assert!(!stderr.contains("not calibrated"), "{stderr}");
    let c = calibration(&dir);
    assert_eq!(c["source"], "reference", "{c}");
    assert_eq!(c["ref_tau_ns"], 2.5, "{c}");
    assert!(
        c["reference"]
            .as_str()
            .unwrap()
            .ends_with("phasor_reference_2p5ns.npy")
    );
    let phase = c["phase_rad"].as_f64().unwrap();
    let modulation = c["modulation"].as_f64().unwrap();
    assert!((phase - -0.025_321_304_804_106_104).abs() < 1e-9, "{c}");
    assert!((modulation - 1.000_076_931_971_301_7).abs() < 1e-9, "{c}");
    std::fs::remove_dir_all(&dir).ok();
}

/// The real recordings of `../shared/data/flim` (or of `BIOGPU_FLIM_DATA`); ignored by default,
/// as a clone need not have that folder (`cargo test -- --ignored real` runs it). phasorpy 0.7
/// on the same decays, calibrated with the IRF that biogpu estimated (irf.csv), gives median
/// phase lifetimes of 1.0917 ns (hazelnut .ptu) and 1.1561 ns (seminal receptacle .sdt).
#[test]
#[ignore = "needs ../shared/data/flim (BIOGPU_FLIM_DATA)"]
fn calibrate_auto_on_the_real_recordings() {
    let folder = std::env::var_os("BIOGPU_FLIM_DATA").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/data/flim"),
        PathBuf::from,
    );
    for (file, tau) in [
        ("hazelnut_FLIM_single_image.ptu", 1.0917),
        ("seminal_receptacle_FLIM_single_image.sdt", 1.1561),
    ] {
        let input = folder.join(file);
        assert!(input.exists(), "{} is absent", input.display());
        let dir = out_dir(&format!("real-{}", &file[..8]));
        let (ok, stdout, stderr) = biogpu(&[
            input.to_str().unwrap(),
            "--calibrate",
            "auto",
            "--out",
            dir.to_str().unwrap(),
        ]);
        assert!(ok, "{file}: {stderr}");
        let text = std::fs::read_to_string(dir.join("summary.json")).unwrap();
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        let median = v["maps"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["map"] == "tau_phase_ns")
            .expect("tau_phase_ns")["stats"]["median"]
            .as_f64()
            .unwrap();
        assert!(
            (median - tau).abs() < 2e-3,
            "{file}: {median} vs {tau}; {stdout}"
        );
        std::fs::remove_dir_all(&dir).ok();
    }
}

/// A window longer than the laser period (160 bins of 0.1 ns, period 12.8 ns: 128 bins per
/// period, the decay carrying on past it as a recorder's would): the default range is the
/// bins that start within the period, said on the console and in `summary.json`, and gives
/// the lifetime; `--range all` uses every bin and warns.
#[test]
fn the_default_range_is_one_laser_period() {
    use flim_core::io::write_npy;
    use flim_core::sim::DecaySim;
    let dir = out_dir("period");
    std::fs::create_dir_all(&dir).unwrap();
    let cube = DecaySim::new(160, 0.1, 20_000.0)
        .unwrap()
        .with_period_ns(12.8)
        .unwrap()
        .with_seed(3)
        .cube(4, 4, |_, _| vec![(1.0, 2.0)])
        .unwrap();
    let npy = dir.join("long_window.npy");
    write_npy(&npy, &cube.into()).unwrap();
    let run = |tag: &str, extra: &[&str]| {
        let out = dir.join(tag);
        let mut args = vec![
            npy.to_str().unwrap(),
            "--bin-ns",
            "0.1",
            "--period-ns",
            "12.8",
            "--threshold",
            "1",
            "--out",
            out.to_str().unwrap(),
        ];
        args.extend(extra);
        let (ok, stdout, stderr) = biogpu(&args);
        assert!(ok, "{stderr}");
        let text = std::fs::read_to_string(out.join("summary.json")).unwrap();
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        let median = v["maps"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["map"] == "tau_phase_ns")
            .expect("tau_phase_ns")["stats"]["median"]
            .as_f64()
            .unwrap();
        (stdout, stderr, v["images"][0].clone(), median)
    };
    let (stdout, stderr, image, tau) = run("default", &[]);
    assert!(stdout.contains("over bins 0..128 "), "{stdout}");
    assert!(!stderr.contains("longer than one laser period"), "{stderr}");
    assert_eq!(image["range_bins"], serde_json::json!([0, 128]), "{image}");
    assert_eq!(image["bins_in_period"], 128, "{image}");
    assert!((tau - 2.0).abs() < 0.02, "one period: {tau} ns");
    let (stdout, stderr, image, all) = run("all", &["--range", "all"]);
    assert!(stdout.contains("over bins 0..160 "), "{stdout}");
    assert_eq!(
        stderr.matches("longer than one laser period").count(),
        1,
        "{stderr}"
    );
    assert_eq!(image["range_bins"], serde_json::json!([0, 160]), "{image}");
    assert!(all < 1.8, "every bin: {all} ns");
    std::fs::remove_dir_all(&dir).ok();
}
