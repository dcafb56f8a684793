//! Beta is never guessed silently, and every MESI fit says whether it can be used
//! (issue 23, items 1 and 2): simulated fields with and without static tissue, calibration
//! on a static target, tau_c flags and counts, MESI statuses and residuals.

use gpu_runtime::Device;
use ndarray::{Array2, Array3, Axis};
use speckle_core::cpu::{estimate_beta, rms_over_frames, stack_lag1_correlation};
use speckle_core::model::mesi::mesi_k2;
use speckle_core::sim::{DynamicSpeckle, FlowPhantom, StaticSpeckle, simulate_mesi};
use speckle_core::{
    BetaOrigin, Calibration, CalibrationParams, ContrastParams, FitStatus, FlowParams, MesiInput,
    MesiOptions, MesiParams, RawStack, Roi, Window, calibrate, contrast, flags, flow, mesi,
};

fn to_u16(intensity: &Array3<f32>, mean: f32) -> RawStack {
    RawStack::U16(intensity.mapv(|v| (v * mean).round().min(65535.0) as u16))
}

fn k_rms(stack: &RawStack) -> Array2<f32> {
    let p = ContrastParams::spatial(Window::new(7).unwrap());
    let (maps, _) = contrast(stack, &p, &Device::cpu()).unwrap();
    rms_over_frames(maps.k.view())
}

/// A field with no static region (everything flows, x = T / tau_c = 10): the 99th
/// percentile of K^2 is far below beta, so the estimate must say it is unreliable, and
/// the pixels above it must be flagged and counted, never silently +inf.
#[test]
fn a_field_without_static_region_gives_an_unreliable_estimate_and_counted_flags() {
    let sim = DynamicSpeckle::new(96, 96, 4, 5e-3, 5e-4)
        .with_speckle_size(2.5)
        .with_frame_interval(1.0)
        .with_seed(11);
    let stack = to_u16(&sim.simulate().unwrap(), 1000.0);
    let k = k_rms(&stack);
    let lag1 = stack_lag1_correlation(&stack);
    assert!(lag1.unwrap() > 0.3, "speckle size 2.5 px: {lag1:?}");
    let e = estimate_beta(k.view(), lag1, Some(7), false).unwrap();
    assert!(!e.reliable, "{e:?}");
    assert!(!e.warnings.is_empty());
    // The true beta (point-sampled simulation) is 1; the estimate is far below it.
    assert!(e.beta < 0.5, "{e:?}");
    let origin = BetaOrigin::Estimated(e.clone());
    assert!(
        origin.describe().contains("UNRELIABLE"),
        "{}",
        origin.describe()
    );
    let (tau, info) = flow(k.view(), &FlowParams::new(5e-3, e.beta), &Device::cpu()).unwrap();
    let flagged = tau
        .flags
        .iter()
        .filter(|&&f| f & flags::NO_MOTION != 0)
        .count();
    assert_eq!(info.no_motion, flagged);
    assert!(
        flagged > 0 && flagged * 50 < info.pixels,
        "{flagged} of {}",
        info.pixels
    );
    let masked = tau.masked_tau_c();
    assert!(masked.iter().all(|v| !v.is_infinite()));
    assert_eq!(masked.iter().filter(|v| v.is_nan()).count(), flagged);
}

/// The flow phantom has static background around a channel: the estimate finds the static
/// population, calls itself reliable, and agrees with a calibration on a static target.
#[test]
fn a_field_with_static_tissue_gives_a_reliable_estimate_near_the_calibration() {
    let phantom = FlowPhantom::new(64, 64, 16, 5e-3, 2e-4)
        .with_channel(31.5, 12.0)
        .with_frame_interval(1.0)
        .with_seed(5)
        .simulate()
        .unwrap();
    let stack = to_u16(&phantom.intensity, 1000.0);
    let k = k_rms(&stack);
    let e = estimate_beta(k.view(), stack_lag1_correlation(&stack), Some(7), false).unwrap();
    assert!(e.plateau && e.reliable, "{e:?}");
    // The static target: the same optics, nothing moving.
    let frames: Vec<Array2<f32>> = (0..4)
        .map(|s| {
            StaticSpeckle::new(96, 96)
                .with_seed(100 + s)
                .simulate()
                .unwrap()
        })
        .collect();
    let views: Vec<_> = frames.iter().map(|f| f.view()).collect();
    let target = to_u16(&ndarray::stack(Axis(0), &views).unwrap(), 1000.0);
    let params = CalibrationParams::new(ContrastParams::spatial(Window::new(7).unwrap()));
    let (cal, _) = calibrate(&target, &params, &Device::cpu()).unwrap();
    assert!(
        (e.beta / cal.beta - 1.0).abs() < 0.1,
        "estimate {} vs calibration {}",
        e.beta,
        cal.beta
    );
}

#[test]
fn calibration_files_round_trip_and_bad_ones_are_clear_errors() {
    let frame = StaticSpeckle::new(64, 64).with_seed(3).simulate().unwrap();
    let stack = to_u16(&frame.insert_axis(Axis(0)), 500.0);
    let params = CalibrationParams::new(ContrastParams::spatial(Window::new(5).unwrap()))
        .with_region(Roi::rect(8, 8, 40, 40))
        .with_source("test target");
    let (cal, _) = calibrate(&stack, &params, &Device::cpu()).unwrap();
    assert_eq!((cal.window, cal.pixels, cal.frames), (Some(5), 1600, 1));
    assert!(cal.beta > 0.5 && cal.beta < 1.2, "{cal:?}");
    let dir = std::env::temp_dir().join(format!("speckle_cal_{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("beta.json");
    cal.write(&path).unwrap();
    let back = Calibration::read(&path).unwrap();
    assert!((back.beta / cal.beta - 1.0).abs() < 1e-12);
    assert_eq!(
        (back.window, &back.source, back.pixels),
        (cal.window, &cal.source, cal.pixels)
    );
    std::fs::write(&path, "{\"beta\": 0.5}").unwrap();
    let err = Calibration::read(&path).unwrap_err().to_string();
    assert!(err.contains("calibration file"), "{err}");
    std::fs::write(
        &path,
        serde_json::to_string(&Calibration {
            beta: -1.0,
            ..cal.clone()
        })
        .unwrap(),
    )
    .unwrap();
    assert!(
        Calibration::read(&path)
            .unwrap_err()
            .to_string()
            .contains("beta")
    );
    assert!(Calibration::read(&dir.join("missing.json")).is_err());
    std::fs::write(&path, [0xFFu8, 0xFE, 0x00, 0x89]).unwrap();
    let err = Calibration::read(&path).unwrap_err().to_string();
    assert!(err.contains("not a beta calibration file"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
    // Temporal mode cannot calibrate (a static target has temporal K ~ 0).
    let temporal = CalibrationParams::new(ContrastParams::temporal(5));
    let err = calibrate(&stack, &temporal, &Device::cpu())
        .unwrap_err()
        .to_string();
    assert!(err.contains("spatial"), "{err}");
    // A region outside the frame is an error naming the frame.
    let outside = CalibrationParams::new(ContrastParams::spatial(Window::new(5).unwrap()))
        .with_region(Roi::rect(60, 60, 10, 10));
    assert!(calibrate(&stack, &outside, &Device::cpu()).is_err());
}

const EXPOSURES: [f64; 6] = [1e-5, 6e-5, 3.6e-4, 2.2e-3, 1.3e-2, 8e-2];

/// MESI statuses in both directions: a clean curve converges with a tiny residual; garbage
/// curves (rising with exposure, random) are flagged, never reported as converged with a
/// good residual; masking blanks exactly the unconverged pixels.
#[test]
fn mesi_clean_curves_converge_and_garbage_is_flagged() {
    let truth = MesiParams {
        tau_c: 1e-3,
        rho: 0.8,
        v_noise: 1e-3,
        beta: 0.5,
    };
    // simulate_mesi returns K; the curves below are K^2.
    let clean: Vec<f64> = simulate_mesi(&truth, &EXPOSURES, 0.0, 1)
        .iter()
        .map(|k| k * k)
        .collect();
    let rising: Vec<f64> = EXPOSURES.iter().map(|t| 0.05 + 2.0 * t.powf(0.3)).collect();
    let random = [0.3, 0.02, 0.45, 0.01, 0.2, 0.4];
    let mut k = Array3::<f32>::zeros((6, 1, 3));
    for (x, curve) in [clean.as_slice(), rising.as_slice(), &random]
        .iter()
        .enumerate()
    {
        for e in 0..6 {
            k[[e, 0, x]] = curve[e].sqrt() as f32;
        }
    }
    let opts = MesiOptions::fixed_beta(0.5).with_max_residual_rms(0.05);
    let input = MesiInput {
        k: k.view(),
        exposures_s: &EXPOSURES,
    };
    let (maps, info) = mesi(input, &opts, &Device::cpu()).unwrap();
    let rms = maps.residual_rms(6);
    assert_eq!(maps.status[[0, 0]], FitStatus::Converged as u8);
    assert!(rms[[0, 0]] < 1e-3, "{}", rms[[0, 0]]);
    assert!((f64::from(maps.tau_c[[0, 0]]) / truth.tau_c - 1.0).abs() < 1e-3);
    let fitted = MesiParams {
        tau_c: f64::from(maps.tau_c[[0, 0]]),
        rho: f64::from(maps.rho[[0, 0]]),
        v_noise: f64::from(maps.v_noise[[0, 0]]),
        beta: 0.5,
    };
    assert!((mesi_k2(&fitted, 1e-3) / mesi_k2(&truth, 1e-3) - 1.0).abs() < 1e-3);
    for x in [1, 2] {
        assert_ne!(
            maps.status[[0, x]],
            FitStatus::Converged as u8,
            "garbage curve {x} reported converged (rms {})",
            rms[[0, x]]
        );
    }
    assert_eq!(info.status_counts.iter().sum::<usize>(), 3);
    assert_eq!(info.status_counts[0], 1);
    assert!((maps.converged_fraction() - 1.0 / 3.0).abs() < 1e-12);
    let masked = maps.masked();
    assert!(masked.tau_c[[0, 0]].is_finite());
    assert!(masked.tau_c[[0, 1]].is_nan() && masked.rho[[0, 2]].is_nan());
    assert_eq!(masked.status, maps.status);
    // Without a residual limit the statuses name the failure, not poor fit.
    let (plain, _) = mesi(input, &MesiOptions::fixed_beta(0.5), &Device::cpu()).unwrap();
    assert!(plain.status.iter().all(|&s| s != FitStatus::PoorFit as u8));
    // A bad limit is an error, not a panic.
    let bad = MesiOptions::fixed_beta(0.5).with_max_residual_rms(-1.0);
    assert!(mesi(input, &bad, &Device::cpu()).is_err());
}
