//! Accuracy against known truth on simulated data (Poisson noise, seeded): bias and spread of
//! every method at 100, 1,000 and 10,000 photons; the bar phantom; calibration through a
//! delayed IRF; masking; bad settings.
//!
//! The spread is reported as the F-value `F = (sd(tau) / tau) sqrt(N)`: 1 is the photon
//! limit of an ideal estimator without a window (Gerritsen et al.; Koellner & Wolfrum), and a
//! 12.8 ns window on a 2.5 ns decay costs a little (F ~ 1.1 for the best use of the photons).

use flim_core::methods::{STATUS_MASKED, STATUS_OK};
use flim_core::sim::{DecaySim, mono_exponential};
use flim_core::{Analysis, Calibration, Cube, analyse};
use ndarray::Array3;

const TAU: f64 = 2.5;
const BINS: usize = 256;
const BIN_NS: f64 = 0.05;

/// Mean and sample standard deviation of the finite values.
fn stats(v: impl Iterator<Item = f32>) -> (f64, f64, usize) {
    let v: Vec<f64> = v.filter(|x| x.is_finite()).map(f64::from).collect();
    let n = v.len() as f64;
    let mean = v.iter().sum::<f64>() / n;
    let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0);
    (mean, var.sqrt(), v.len())
}

#[test]
fn bias_and_spread_per_method_at_100_1k_10k_photons() {
    println!("photons method   bias%   F-value  finite");
    for (photons, side) in [(100.0, 96), (1_000.0, 64), (10_000.0, 48)] {
        let cube = mono_exponential(
            &[TAU],
            side,
            side,
            BINS,
            BIN_NS,
            BINS as f64 * BIN_NS,
            photons,
            7,
        )
        .unwrap();
        let maps = analyse(&cube, &Analysis::default()).unwrap();
        let px = side * side;
        let methods = [
            ("RLD", &maps.tau_rld),
            ("IEM", &maps.tau_iem),
            ("CMM", &maps.tau_cmm),
            ("phase", &maps.tau_phase),
            ("mod", &maps.tau_mod),
        ];
        for (name, map) in methods {
            let (mean, sd, n) = stats(map.iter().copied());
            let bias = (mean / TAU - 1.0) * 100.0;
            let f = sd / TAU * photons.sqrt();
            println!("{photons:>7} {name:<6} {bias:>7.2} {f:>8.3} {n:>7}/{px}");
            // Standard error of the mean bias (percent), so the bounds below cannot be
            // met by luck nor missed by it.
            let se = sd / TAU / (n as f64).sqrt() * 100.0;
            if photons >= 1_000.0 {
                assert_eq!(
                    n, px,
                    "{name}: every pixel gives a lifetime at {photons} photons"
                );
                // CMM and phasor use every photon: near the photon limit, unbiased.
                if matches!(name, "CMM" | "phase") {
                    assert!(f < 1.35, "{name} F-value {f} at {photons} photons");
                    assert!(
                        bias.abs() < 0.5 + 4.0 * se,
                        "{name} bias {bias}% at {photons}"
                    );
                }
                // RLD with two gates of 6.4 ns: F ~ 1.5, bias O(1/N).
                if name == "RLD" {
                    assert!(f < 1.8, "RLD F-value {f}");
                    assert!(bias.abs() < 1.0 + 4.0 * se, "RLD bias {bias}%");
                }
            }
            if photons >= 10_000.0 {
                // IEM rests on the first and last bins, so it is the noisiest, but unbiased
                // up to Simpson's O(h^4) error.
                assert!(
                    bias.abs() < 1.0 + 4.0 * se,
                    "{name} bias {bias}% at 10k photons"
                );
            }
        }
        // Intensity is the photon count: mean N, Poisson spread sqrt(N).
        let (mean_n, sd_n, _) = stats(maps.intensity.iter().copied());
        assert!(
            (mean_n / photons - 1.0).abs() < 0.02,
            "mean photons {mean_n}"
        );
        assert!(
            (sd_n / photons.sqrt() - 1.0).abs() < 0.1,
            "photon spread {sd_n}"
        );
    }
}

#[test]
fn bar_phantom_lifetimes_are_recovered() {
    let taus = [2.0, 2.5, 3.0, 4.0];
    let cube = mono_exponential(&taus, 16, 64, BINS, BIN_NS, 12.8, 5_000.0, 3).unwrap();
    let maps = analyse(&cube, &Analysis::default()).unwrap();
    for (b, &tau) in taus.iter().enumerate() {
        let cols = b * 16..(b + 1) * 16;
        for (name, map) in [
            ("CMM", &maps.tau_cmm),
            ("phase", &maps.tau_phase),
            ("RLD", &maps.tau_rld),
        ] {
            let (mean, _, _) = stats(
                map.indexed_iter()
                    .filter(|((_, x), _)| cols.contains(x))
                    .map(|(_, v)| *v),
            );
            assert!(
                (mean / tau - 1.0).abs() < 0.01,
                "{name} bar {tau} ns: {mean}"
            );
        }
    }
}

#[test]
fn phasor_calibrated_through_a_delayed_irf() {
    // Both sample and reference go through the same 120 ps wide IRF delayed by 0.8 ns:
    // uncalibrated phase lifetimes are far off; calibrated with a 4 ns reference they are right.
    let sim = DecaySim::new(BINS, BIN_NS, 200_000.0)
        .unwrap()
        .with_irf(0.12, 0.8)
        .with_seed(5);
    let reference = sim.cube(4, 4, |_, _| vec![(1.0, 4.0)]).unwrap();
    let sample = sim
        .with_seed(6)
        .cube(4, 4, |_, _| vec![(1.0, 1.5)])
        .unwrap();
    let raw = analyse(&reference, &Analysis::default()).unwrap();
    let (g, s) = (f64::from(raw.g[[0, 0]]), f64::from(raw.s[[0, 0]]));
    let omega = 2.0 * std::f64::consts::PI / reference.period_ns();
    let cal = Calibration::from_reference(g, s, 4.0, omega).unwrap();
    let uncal = analyse(&sample, &Analysis::default()).unwrap();
    assert!(
        (f64::from(uncal.tau_phase[[1, 1]]) - 1.5).abs() > 0.5,
        "the IRF delay shifts the phase"
    );
    let maps = analyse(&sample, &Analysis::default().with_calibration(cal)).unwrap();
    for v in maps.tau_phase.iter().chain(maps.tau_mod.iter()) {
        assert!(
            (f64::from(*v) / 1.5 - 1.0).abs() < 0.01,
            "calibrated lifetime {v}"
        );
    }
}

#[test]
fn zero_photon_pixels_are_masked_and_do_not_touch_neighbours() {
    let mut cube = mono_exponential(&[TAU], 4, 4, 64, 0.2, 12.8, 2_000.0, 1).unwrap();
    let mut counts = cube.counts().to_owned();
    counts.slice_mut(ndarray::s![1, 2, ..]).fill(0);
    counts.slice_mut(ndarray::s![3, 0, ..]).fill(0);
    counts[[3, 0, 5]] = 3; // 3 photons: under a threshold of 10
    cube = Cube::new(counts, 0.2)
        .unwrap()
        .with_period_ns(12.8)
        .unwrap();
    let maps = analyse(&cube, &Analysis::default().with_threshold(10.0)).unwrap();
    for ((y, x), st) in maps.status.indexed_iter() {
        let masked = (y, x) == (1, 2) || (y, x) == (3, 0);
        assert_eq!(
            *st,
            if masked { STATUS_MASKED } else { STATUS_OK },
            "({y}, {x})"
        );
        for plane in &maps.planes()[1..] {
            assert_eq!(plane[[y, x]].is_nan(), masked, "({y}, {x})");
        }
    }
    assert_eq!(maps.intensity[[1, 2]], 0.0);
    assert_eq!(maps.intensity[[3, 0]], 3.0);
}

#[test]
fn background_offset_is_removed() {
    let sim = DecaySim::new(BINS, BIN_NS, 50_000.0)
        .unwrap()
        .with_background(20.0)
        .with_seed(9);
    let cube = sim.cube(4, 4, |_, _| vec![(1.0, TAU)]).unwrap();
    let biased = analyse(&cube, &Analysis::default()).unwrap();
    let maps = analyse(&cube, &Analysis::default().with_offset(20.0)).unwrap();
    let (mean, _, _) = stats(maps.tau_cmm.iter().copied());
    let (raw, _, _) = stats(biased.tau_cmm.iter().copied());
    assert!(
        (mean / TAU - 1.0).abs() < 0.01,
        "offset-corrected CMM {mean}"
    );
    assert!(
        (raw / TAU - 1.0).abs() > 0.2,
        "background biases CMM when ignored: {raw}"
    );
}

#[test]
fn fit_range_selects_bins() {
    // Counts only in bins 10..138: a range starting at 10 sees a clean decay from t = 0.
    let sim = DecaySim::new(128, 0.1, 100_000.0).unwrap().with_seed(4);
    let inner = sim.cube(2, 2, |_, _| vec![(1.0, 2.0)]).unwrap();
    let mut counts = Array3::<u16>::zeros((2, 2, 160));
    counts
        .slice_mut(ndarray::s![.., .., 10..138])
        .assign(&inner.counts());
    let cube = Cube::new(counts, 0.1)
        .unwrap()
        .with_period_ns(12.8)
        .unwrap();
    let maps = analyse(&cube, &Analysis::default().with_range(10, Some(128))).unwrap();
    assert!(
        (maps.tau_cmm[[0, 0]] / 2.0 - 1.0).abs() < 0.01,
        "{}",
        maps.tau_cmm[[0, 0]]
    );
    assert!(
        (maps.tau_phase[[1, 1]] / 2.0 - 1.0).abs() < 0.01,
        "{}",
        maps.tau_phase[[1, 1]]
    );
}

#[test]
fn bad_settings_name_the_field() {
    let cube = mono_exponential(&[TAU], 2, 2, 64, 0.2, 12.8, 100.0, 1).unwrap();
    let cases = [
        (Analysis::default().with_range(62, None), "fit range"),
        (Analysis::default().with_range(0, Some(65)), "fit range"),
        (Analysis::default().with_threshold(-1.0), "threshold"),
        (Analysis::default().with_offset(f64::NAN), "offset"),
        (Analysis::default().with_harmonic(0), "harmonic"),
        (
            Analysis::default().with_calibration(Calibration {
                phase: 0.0,
                modulation: 0.0,
            }),
            "calibration",
        ),
    ];
    for (opts, field) in cases {
        let e = analyse(&cube, &opts).unwrap_err().to_string();
        assert!(e.contains(field), "{e}");
    }
    assert!(Cube::new(Array3::<u16>::zeros((2, 2, 3)), 0.1).is_err());
    assert!(Cube::new(Array3::<u16>::zeros((2, 2, 8)), -0.1).is_err());
    assert!(Calibration::from_reference(0.0, 0.0, 1.0, 0.5).is_err());
}
