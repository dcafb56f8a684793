//! Phasor calibration against a reference of known lifetime ([`phasor_calibration`]),
//! checked against phasorpy 0.7's `phasor_from_signal` + `phasor_calibrate` on the same
//! decays: `tests/data/make_phasor_calibration.py` wrote the reference recording
//! (`phasor_reference_2p5ns.npy`, 2.5 ns) and phasorpy's calibrated (g, s) of every pixel of
//! `bh_spc160_4x4.sdt` (`phasor_calibration.expected.csv`). Also the errors of a reference
//! that does not fit the data.

use flim_core::Error;
use flim_core::io::{
    PrepOptions, Prepared, RangeSpec, ReadOptions, phasor_calibration, prepare, read, write_npy,
};
use flim_core::{AnyCube, Cube, analyse_any};
use gpu_runtime::Device;
use ndarray::Array3;
use std::path::{Path, PathBuf};

fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name)
}

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("flim-phasor-cal-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d.join(name)
}

/// The .sdt fixture prepared with bins `first..first + m`, threshold 1.
fn prepared(first: usize, m: usize) -> Prepared {
    let rec = read(
        &data("bh_spc160_4x4.sdt"),
        &ReadOptions::default().with_sum_frames(true),
    )
    .unwrap();
    let opts = PrepOptions {
        threshold: 1.0,
        range: Some(RangeSpec::Bins(first, first + m)),
        ..PrepOptions::default()
    };
    prepare(&rec.images[0], &rec, &opts, RangeSpec::All).unwrap()
}

struct Row {
    case: usize,
    harmonic: u32,
    first: usize,
    bins: usize,
    frequency_mhz: f64,
    bin_ns: f64,
    ref_tau: f64,
    phi_zero: f64,
    mod_zero: f64,
    y: usize,
    x: usize,
    g: f64,
    s: f64,
}

fn expected() -> Vec<Row> {
    let text = std::fs::read_to_string(data("phasor_calibration.expected.csv")).unwrap();
    assert!(
        text.starts_with("# phasorpy 0.7,"),
        "made with phasorpy 0.7"
    );
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.starts_with("case"))
        .map(|l| {
            let v: Vec<&str> = l.split(',').collect();
            let f = |i: usize| v[i].parse::<f64>().unwrap();
            let u = |i: usize| v[i].parse::<usize>().unwrap();
            Row {
                case: u(0),
                harmonic: v[1].parse().unwrap(),
                first: u(2),
                bins: u(3),
                frequency_mhz: f(4),
                bin_ns: f(5),
                ref_tau: f(6),
                phi_zero: f(7),
                mod_zero: f(8),
                y: u(9),
                x: u(10),
                g: f(11),
                s: f(12),
            }
        })
        .collect()
}

#[test]
fn calibrated_phasors_match_phasorpy() {
    let rows = expected();
    let reference = data("phasor_reference_2p5ns.npy");
    for case in 0..2 {
        let case_rows: Vec<&Row> = rows.iter().filter(|r| r.case == case).collect();
        assert!(
            case_rows.len() >= 14,
            "case {case}: {} rows",
            case_rows.len()
        );
        let r0 = case_rows[0];
        let p = prepared(r0.first, r0.bins);
        // Same instrument numbers as phasorpy's script read with sdtfile.
        assert!((p.cube.bin_ns() - r0.bin_ns).abs() < 1e-12 * r0.bin_ns);
        assert!((1e3 / p.cube.period_ns() - r0.frequency_mhz).abs() < 1e-9 * r0.frequency_mhz);
        let cal = phasor_calibration(
            &p,
            Some(&reference),
            &ReadOptions::default(),
            r0.ref_tau,
            r0.harmonic,
        )
        .unwrap()
        .expect("a calibration");
        assert!(
            (cal.phase - r0.phi_zero).abs() < 1e-10,
            "{cal:?} vs {}",
            r0.phi_zero
        );
        assert!(
            (cal.modulation - r0.mod_zero).abs() < 1e-10,
            "{cal:?} vs {}",
            r0.mod_zero
        );
        let a = p.analysis.with_harmonic(r0.harmonic).with_calibration(cal);
        let (maps, _) = analyse_any(&p.cube, &a, &Device::cpu()).unwrap();
        for r in &case_rows {
            let (g, s) = (f64::from(maps.g[[r.y, r.x]]), f64::from(maps.s[[r.y, r.x]]));
            // The maps are f32.
            assert!(
                (g - r.g).abs() < 2e-6 && (s - r.s).abs() < 2e-6,
                "case {case} pixel ({}, {}): ({g}, {s}) vs phasorpy ({}, {})",
                r.y,
                r.x,
                r.g,
                r.s
            );
        }
    }
}

#[test]
fn the_reference_mean_lands_on_its_lifetime() {
    // Calibrating the reference against itself puts its mean phasor on the 2.5 ns point.
    let rec = read(
        &data("phasor_reference_2p5ns.npy"),
        &ReadOptions::default()
            .with_bin_ns(0.048_860_911_844_306_19)
            .with_sum_frames(true),
    )
    .unwrap();
    let p = prepare(
        &rec.images[0],
        &rec,
        &PrepOptions::default(),
        RangeSpec::All,
    )
    .unwrap();
    let path = data("phasor_reference_2p5ns.npy");
    let cal = phasor_calibration(&p, Some(&path), &ReadOptions::default(), 2.5, 1)
        .unwrap()
        .unwrap();
    let decay = flim_core::summed_decay(&p.cube);
    let omega = flim_core::io::phasor_omega(&p, 1);
    let (g, s) = flim_core::decay_phasor(&decay, 0, decay.len(), p.cube.bin_ns(), omega);
    let (c, sn) = (cal.phase.cos(), cal.phase.sin());
    let (gc, sc) = (
        cal.modulation * (g * c - s * sn),
        cal.modulation * (g * sn + s * c),
    );
    let wt = omega * 2.5;
    assert!((gc - 1.0 / (1.0 + wt * wt)).abs() < 1e-12, "{gc}");
    assert!((sc - wt / (1.0 + wt * wt)).abs() < 1e-12, "{sc}");
}

#[test]
fn no_reference_and_no_irf_is_no_calibration() {
    let p = prepared(0, 256);
    let none = phasor_calibration(&p, None, &ReadOptions::default(), 0.0, 1).unwrap();
    assert!(none.is_none());
}

fn message(e: Error) -> String {
    let m = e.to_string();
    assert!(
        !m.contains("Some(") && !m.contains("None"),
        "debug text: {m}"
    );
    m
}

#[test]
fn a_reference_that_does_not_fit_is_refused_in_words() {
    let p = prepared(0, 256);
    let reference = data("phasor_reference_2p5ns.npy");
    let o = ReadOptions::default();
    // A lifetime <= 0 or not finite.
    for bad in [0.0, -1.0, f64::NAN, f64::INFINITY] {
        let m = message(phasor_calibration(&p, Some(&reference), &o, bad, 1).unwrap_err());
        assert!(m.contains("lifetime") && m.contains("> 0"), "{bad}: {m}");
    }
    // Another number of bins (and bin width): both named.
    let m = message(phasor_calibration(&p, Some(&data("picoharp.pt3")), &o, 2.5, 1).unwrap_err());
    assert!(
        m.contains("picoharp.pt3") && m.contains("256 bins of"),
        "{m}"
    );
    // Another bin width only.
    let m = message(
        phasor_calibration(&p, Some(&reference), &o.clone().with_bin_ns(0.1), 2.5, 1).unwrap_err(),
    );
    assert!(m.contains("0.1 ns") && m.contains("0.0488"), "{m}");
    // Another laser period.
    let m = message(
        phasor_calibration(
            &p,
            Some(&reference),
            &o.clone().with_period_ns(25.0),
            2.5,
            1,
        )
        .unwrap_err(),
    );
    assert!(
        m.contains("laser period is 25.0000 ns") && m.contains("80.073 MHz"),
        "{m}"
    );
    // No counts.
    let zeros = tmp("zeros.npy");
    let cube =
        AnyCube::from(Cube::<u16>::new(Array3::zeros((2, 2, 256)), p.cube.bin_ns()).unwrap());
    write_npy(&zeros, &cube).unwrap();
    let m = message(phasor_calibration(&p, Some(&zeros), &o, 2.5, 1).unwrap_err());
    assert!(m.contains("zeros.npy") && m.contains("no counts"), "{m}");
    std::fs::remove_file(&zeros).ok();
}
