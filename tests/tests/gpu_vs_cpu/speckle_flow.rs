//! Flow maps on the GPU (f32) against the f64 CPU references: tau_c inversion and MESI fits.
//!
//! Tolerances, and why:
//! - tau_c: the GPU solves K^2 / beta = f(T / tau_c) in f32 to a step of 1e-6 in ln x, so
//!   the model at the GPU's tau_c reproduces K to [`K_BACKWARD`] (backward error, valid at
//!   any conditioning). Where the inversion is well conditioned (K^2 / beta in 0.05..0.9,
//!   |d ln tau / d ln K^2| <= 10) tau_c itself agrees to [`TAU_FORWARD`]. Flags are equal.
//! - MESI: every fit the GPU calls converged on exact data has the true tau_c
//!   ([`MESI_EXACT_KNOWN`], [`MESI_EXACT_FREE`]). With 1% noise and beta known, GPU and CPU
//!   reach the same minimum: cost within 1%, fitted K^2(T) within [`MESI_CURVE_KNOWN`],
//!   tau_c within [`MESI_TAU_NOISY`]. With beta free the cost has several minima; the few
//!   pixels where f32 and f64 end in different ones are counted (at most 5%), the rest
//!   agree to [`MESI_CURVE_FREE`].

use biogpu_tests::{Tolerance, gpu_test};
use gpu_runtime::Device;
use ndarray::{Array2, Array3, ArrayView2, ArrayView3};
use proptest::prelude::*;
use speckle_core::cpu::{fit_mesi_map, tau_c_map};
use speckle_core::model::flow::k2_model;
use speckle_core::model::mesi::mesi_k2;
use speckle_core::sim::simulate_mesi;
use speckle_core::{
    BetaMode, FitStatus, FlowModel, FlowParams, MesiInput, MesiMaps, MesiOptions, MesiParams,
    TauMap, flow, mesi,
};

/// [`flow`] on `device`, the map only.
fn tau_c_map_on(
    k: ArrayView2<f32>,
    exposure_s: f64,
    beta: f64,
    model: FlowModel,
    device: &Device,
) -> speckle_core::Result<TauMap> {
    let params = FlowParams::new(exposure_s, beta).with_model(model);
    flow(k, &params, device).map(|(m, _)| m)
}

/// [`mesi`] on `device`, the maps only.
fn fit_mesi_map_on(
    k: ArrayView3<f32>,
    exposures_s: &[f64],
    opts: &MesiOptions,
    device: &Device,
) -> speckle_core::Result<MesiMaps> {
    mesi(MesiInput { k, exposures_s }, opts, device).map(|(m, _)| m)
}

const K_BACKWARD: Tolerance = Tolerance::new("K from the model at the GPU's tau_c", 1e-5, 0.0);
const TAU_FORWARD: Tolerance = Tolerance::new("tau_c, well-conditioned K", 2e-4, 0.0);
const MESI_EXACT_KNOWN: Tolerance =
    Tolerance::new("MESI tau_c from exact data, beta known", 2e-3, 0.0);
/// With beta free the problem is ill-conditioned (condition ~1e4 between tau_c and beta
/// at short tau_c), so f32 arithmetic resolves tau_c to about 1%.
const MESI_EXACT_FREE: Tolerance =
    Tolerance::new("MESI tau_c from exact data, beta free", 1e-2, 0.0);
const MESI_CURVE_KNOWN: Tolerance =
    Tolerance::new("fitted K^2(T), GPU vs CPU, beta known, 1% noise", 2e-4, 0.0);
const MESI_CURVE_FREE: Tolerance =
    Tolerance::new("fitted K^2(T), GPU vs CPU, beta free, 1% noise", 1e-2, 0.0);
const MESI_TAU_NOISY: Tolerance = Tolerance::new("MESI tau_c, beta known, 1% noise", 2e-3, 0.0);

/// Six log-spaced exposures 0.01..80 ms, the span the CPU tests show resolves tau_c.
const EXPOSURES: [f64; 6] = [1e-5, 6e-5, 3.6e-4, 2.2e-3, 1.3e-2, 8e-2];

fn model_strategy() -> impl Strategy<Value = FlowModel> {
    prop_oneof![Just(FlowModel::Lorentzian), Just(FlowModel::Gaussian)]
}

gpu_test! {
    fn tau_c_matches_the_cpu_inversion(device) {
    proptest!(ProptestConfig { cases: 24, ..ProptestConfig::default() }, |(
        model in model_strategy(),
        beta in 0.2f64..1.0,
        exposure in 1e-4f64..0.1,
        h in 1usize..40,
        w in 1usize..40,
        seed in any::<u64>(),
    )| {
        let mut s = seed | 1;
        let mut next = move || { s ^= s << 13; s ^= s >> 7; s ^= s << 17; s };
        let kmax = beta.sqrt() as f32;
        // Mostly K in (0, sqrt(beta)); some exactly 0, above sqrt(beta), NaN or negative.
        let k = Array2::from_shape_fn((h, w), |_| match next() % 40 {
            0 => 0.0,
            1 => kmax * 1.5,
            2 => f32::NAN,
            3 => -0.1,
            _ => kmax * ((next() % 1_000_000) as f32 / 1e6).max(1e-4),
        });
        let want = tau_c_map(k.view(), exposure, beta, model).unwrap();
        let got = tau_c_map_on(k.view(), exposure, beta, model, device).unwrap();
        prop_assert_eq!(&got.flags, &want.flags);
        for ((&g, &c), &kv) in got.tau_c.iter().zip(&want.tau_c).zip(&k) {
            if !c.is_finite() || c == 0.0 {
                prop_assert!(g == c || (g.is_nan() && c.is_nan()), "special value: got {g}, want {c}");
                continue;
            }
            let back = (beta * k2_model(model, exposure / f64::from(g))).sqrt();
            prop_assert!(K_BACKWARD.accepts(back, f64::from(kv)),
                "K {kv}: model at GPU tau {g} gives K {back} ({})", K_BACKWARD.name);
            let q = f64::from(kv).powi(2) / beta;
            if (0.05..=0.9).contains(&q) {
                prop_assert!(TAU_FORWARD.accepts(f64::from(g), f64::from(c)),
                    "K {kv}: tau GPU {g} vs CPU {c} ({})", TAU_FORWARD.name);
            }
        }
    });
    }
}

/// A 16 x 16 grid of truths: tau_c 0.02..8 ms across, rho 0.55..0.95 down, v_noise 0..0.002.
fn truths(beta: f64) -> Vec<MesiParams> {
    (0..256)
        .map(|i| {
            let (y, x) = (i / 16, i % 16);
            MesiParams {
                tau_c: 2e-5 * 400f64.powf(x as f64 / 15.0),
                rho: 0.55 + 0.4 * y as f64 / 15.0,
                v_noise: 0.002 * ((x + y) % 3) as f64 / 2.0,
                beta,
            }
        })
        .collect()
}

fn stack(truths: &[MesiParams], noise: f64, seed: u64) -> Array3<f32> {
    let mut k = Array3::zeros((EXPOSURES.len(), 16, 16));
    for (i, p) in truths.iter().enumerate() {
        let v = simulate_mesi(p, &EXPOSURES, noise, seed + i as u64);
        for (e, kv) in v.into_iter().enumerate() {
            k[[e, i / 16, i % 16]] = kv as f32;
        }
    }
    k
}

fn params_at(m: &MesiMaps, i: usize) -> MesiParams {
    let at = [i / 16, i % 16];
    MesiParams {
        tau_c: f64::from(m.tau_c[at]),
        rho: f64::from(m.rho[at]),
        v_noise: f64::from(m.v_noise[at]),
        beta: f64::from(m.beta[at]),
    }
}

gpu_test! {
fn mesi_recovers_exact_data_like_the_cpu(device) {
    for (opts, exact) in [
        (MesiOptions::fixed_beta(0.5), MESI_EXACT_KNOWN),
        (MesiOptions::default(), MESI_EXACT_FREE),
    ] {
        let truth = truths(0.5);
        let k = stack(&truth, 0.0, 1);
        let want = fit_mesi_map_on(k.view(), &EXPOSURES, &opts, &Device::cpu()).unwrap();
        let got = fit_mesi_map_on(k.view(), &EXPOSURES, &opts, device).unwrap();
        let (mut cpu_ok, mut gpu_ok) = (0, 0);
        for (i, p) in truth.iter().enumerate() {
            let at = [i / 16, i % 16];
            let converged = |s: u8| s == FitStatus::Converged as u8;
            cpu_ok += usize::from(converged(want.status[at]));
            if converged(got.status[at]) {
                gpu_ok += 1;
                // A fit the GPU calls converged is right: never a failure reported as one.
                let tau = f64::from(got.tau_c[at]);
                assert!(
                    exact.accepts(tau, p.tau_c),
                    "pixel {i} {opts:?}: GPU tau {tau} vs truth {} ({})",
                    p.tau_c,
                    exact.name
                );
            }
        }
        // Data stored as f32 are not exactly on the model, and f32 fits stop earlier in
        // the flat beta-free valley: a few pixels end as Failed on either path.
        assert!(cpu_ok >= 243, "{opts:?}: CPU converged on {cpu_ok}/256");
        assert!(gpu_ok >= 243, "{opts:?}: GPU converged on {gpu_ok}/256");
    }
}
}

gpu_test! {
fn mesi_noisy_fits_agree_with_the_cpu_and_recover_tau_c(device) {
    for (opts, curve_tol) in [
        (MesiOptions::fixed_beta(0.5), MESI_CURVE_KNOWN),
        (MesiOptions::default(), MESI_CURVE_FREE),
    ] {
        let known = matches!(opts.beta, BetaMode::Fixed(_));
        let truth = truths(0.5);
        let k = stack(&truth, 0.01, 7);
        let want = fit_mesi_map(k.view(), &EXPOSURES, &opts).unwrap();
        let got = fit_mesi_map_on(k.view(), &EXPOSURES, &opts, device).unwrap();
        let (mut both, mut within_10, mut other_minimum) = (0, 0, 0);
        for (i, p) in truth.iter().enumerate() {
            let at = [i / 16, i % 16];
            let converged = |s: u8| s == FitStatus::Converged as u8;
            if !(converged(want.status[at]) && converged(got.status[at])) {
                continue;
            }
            both += 1;
            let (g, c) = (params_at(&got, i), params_at(&want, i));
            // With beta free the cost has several minima (beta, rho and v_noise trade off);
            // from the same start, f32 and f64 paths may end in different ones. Those
            // pixels are counted, and must be few; the rest must be the same minimum.
            if !known && (g.tau_c / c.tau_c - 1.0).abs() > 0.1 {
                other_minimum += 1;
                continue;
            }
            // Same minimum: the GPU's cost is no more than 1% above the CPU's.
            let (rg, rc) = (f64::from(got.rss[at]), f64::from(want.rss[at]));
            assert!(
                rg <= rc * 1.01 + 1e-12,
                "pixel {i} {opts:?}: GPU cost {rg} vs CPU {rc}: GPU {g:?} CPU {c:?}"
            );
            for &t in &EXPOSURES {
                let (kg, kc) = (mesi_k2(&g, t), mesi_k2(&c, t));
                assert!(
                    curve_tol.accepts(kg, kc),
                    "pixel {i} {opts:?} T {t}: K^2 GPU {kg} vs CPU {kc} ({})",
                    curve_tol.name
                );
            }
            if known {
                assert!(
                    MESI_TAU_NOISY.accepts(g.tau_c, c.tau_c),
                    "pixel {i}: tau GPU {} vs CPU {} ({})",
                    g.tau_c,
                    c.tau_c,
                    MESI_TAU_NOISY.name
                );
                within_10 += usize::from((g.tau_c / p.tau_c - 1.0).abs() <= 0.10);
            }
        }
        // Statuses may differ only on a few borderline pixels (f32 vs f64 stopping).
        assert!(
            both >= 230,
            "{opts:?}: only {both}/256 pixels converged on both paths"
        );
        assert!(
            other_minimum * 20 <= both,
            "{opts:?}: {other_minimum}/{both} pixels ended in another minimum than the CPU's"
        );
        if known {
            // The physics claim of the issue: tau_c within 10% from MESI data (beta known).
            assert!(
                within_10 * 100 >= both * 90,
                "tau_c within 10% of the truth on {within_10}/{both} pixels"
            );
        }
    }
}
}

gpu_test! {
fn mesi_bad_input_is_an_error_or_a_pixel_status_on_the_gpu(device) {
    let mut k = stack(&truths(0.5), 0.0, 3);
    let opts = MesiOptions::fixed_beta(0.5);
    let err = fit_mesi_map_on(k.view(), &EXPOSURES[..5], &opts, device).unwrap_err();
    assert!(err.to_string().contains("exposure"), "{err}");
    let mut bad_t = EXPOSURES;
    bad_t[2] = 0.0;
    let err = fit_mesi_map_on(k.view(), &bad_t, &opts, device).unwrap_err();
    assert!(err.to_string().contains("exposure"), "{err}");
    let err = fit_mesi_map_on(
        k.view(),
        &EXPOSURES,
        &MesiOptions::fixed_beta(-1.0),
        device,
    )
    .unwrap_err();
    assert!(err.to_string().contains("beta"), "{err}");
    k[[3, 0, 0]] = f32::NAN;
    k[[1, 0, 1]] = 0.0;
    let got = fit_mesi_map_on(k.view(), &EXPOSURES, &opts, device).unwrap();
    for at in [[0, 0], [0, 1]] {
        assert_eq!(got.status[at], FitStatus::InvalidInput as u8);
        assert!(got.tau_c[at].is_nan());
    }
    assert_eq!(got.status[[0, 2]], FitStatus::Converged as u8);
    let err = tau_c_map_on(
        k.index_axis(ndarray::Axis(0), 0),
        0.0,
        0.5,
        FlowModel::Lorentzian,
        device,
    )
    .unwrap_err();
    assert!(err.to_string().contains("exposure"), "{err}");
}
}

gpu_test! {
fn tau_c_flag_counts_match_the_cpu(device) {
    // Above beta (no motion), exactly 0 (no contrast), NaN (undefined) and ordinary K.
    let k = Array2::from_shape_fn((8, 16), |(y, x)| match (y * 16 + x) % 8 {
        0 => 0.9f32,
        1 => 0.0,
        2 => f32::NAN,
        i => 0.05 * i as f32,
    });
    let params = FlowParams::new(5e-3, 0.5);
    let (want, wi) = flow(k.view(), &params, &Device::cpu()).unwrap();
    let (got, gi) = flow(k.view(), &params, device).unwrap();
    assert_eq!(got.flags, want.flags);
    assert_eq!(
        (gi.no_motion, gi.no_contrast, gi.undefined, gi.pixels),
        (wi.no_motion, wi.no_contrast, wi.undefined, wi.pixels)
    );
    assert_eq!((wi.no_motion, wi.no_contrast, wi.undefined), (16, 16, 16));
    // Masked maps blank exactly the flagged pixels on both paths.
    let (mg, mc) = (got.masked_tau_c(), want.masked_tau_c());
    for (g, c) in mg.iter().zip(mc.iter()) {
        assert_eq!(g.is_nan(), c.is_nan());
        assert!(!g.is_infinite());
    }
}
}

gpu_test! {
fn mesi_statuses_and_residuals_match_the_cpu(device) {
    // Clean curves must converge with a tiny residual on both paths; garbage curves (K^2
    // rising with exposure, random) must not be called converged on either.
    let mut k = Array3::<f32>::zeros((EXPOSURES.len(), 1, 10));
    for x in 0..8 {
        let p = MesiParams {
            tau_c: [3e-4, 1e-3, 3e-3, 6e-4][x % 4],
            rho: [0.7, 0.85][x / 4],
            v_noise: 1e-3,
            beta: 0.5,
        };
        for (e, kv) in simulate_mesi(&p, &EXPOSURES, 0.0, 1).into_iter().enumerate() {
            k[[e, 0, x]] = kv as f32;
        }
    }
    let random = [0.3f32, 0.02, 0.45, 0.01, 0.2, 0.4];
    for (e, &t) in EXPOSURES.iter().enumerate() {
        k[[e, 0, 8]] = (0.05 + 2.0 * t.powf(0.3)).sqrt() as f32;
        k[[e, 0, 9]] = random[e].sqrt();
    }
    let opts = MesiOptions::fixed_beta(0.5).with_max_residual_rms(0.05);
    let want = fit_mesi_map_on(k.view(), &EXPOSURES, &opts, &Device::cpu()).unwrap();
    let got = fit_mesi_map_on(k.view(), &EXPOSURES, &opts, device).unwrap();
    let (rw, rg) = (want.residual_rms(6), got.residual_rms(6));
    let converged = FitStatus::Converged as u8;
    for x in 0..8 {
        assert_eq!(want.status[[0, x]], converged, "CPU pixel {x}");
        assert_eq!(got.status[[0, x]], converged, "GPU pixel {x}");
        assert!(rw[[0, x]] < 1e-3 && rg[[0, x]] < 1e-3, "pixel {x}: {} {}", rw[[0, x]], rg[[0, x]]);
    }
    for x in [8, 9] {
        assert_ne!(want.status[[0, x]], converged, "CPU garbage pixel {x}");
        assert_ne!(got.status[[0, x]], converged, "GPU garbage pixel {x}");
    }
    let (mw, mg) = (want.masked(), got.masked());
    for x in 0..10 {
        assert_eq!(mw.tau_c[[0, x]].is_nan(), mg.tau_c[[0, x]].is_nan(), "pixel {x}");
    }
}
}
