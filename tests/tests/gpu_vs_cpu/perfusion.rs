//! DCE perfusion fits on the GPU against the f64 CPU reference.
//!
//! Tolerances, and why:
//! - f64 (CUDA): the kernels repeat the CPU's operations in the same order, so each fit
//!   follows the same path and the parameters agree to [`F64_PARAMS`] (1e-6 relative, the
//!   paper's figure). Fused multiply-adds and the device's `exp` change the last bits; where
//!   a Nelder-Mead comparison is that close, the two paths part and stop at different points
//!   of the final simplex. Those voxels must still be at the same minimum within the fit's
//!   own tolerances (SSE within `tol_fun`, and for converged fits every parameter within
//!   2 `tol_x`); at most 10% may part (H100: 1.6-3% after the near-zero floor) and at most 1%
//!   (LM) or 10% (Nelder-Mead, from the searched start) may end elsewhere. Devices
//!   without f64 (wgpu) skip this test (`biogpu_tests::skip`: ignored, and counted).
//! - f32 (wgpu, and CUDA when asked): a different arithmetic, so a different path to the
//!   same minimum. Where both converge the GPU's SSE is at most [`F32_SSE_LM`] (LM) or
//!   [`F32_SSE_NM`] (Nelder-Mead, which stops where f32 can no longer rank the vertices)
//!   above the CPU's and the fitted curves agree to [`F32_CURVE_LM`] / [`F32_CURVE_NM`] of
//!   their peak; noise-free data give the truth to [`F32_TRUTH`]. The measured losses are
//!   printed (`f32 loss ...`) and recorded in docs/perfusion.md.

use biogpu_tests::Tolerance;
use gpu_runtime::Device;
use ndarray::{Array2, ArrayView2};
use perfusion_core::sim::{Normal, Simulation, add_noise, parker_aif, portal_venous};
use perfusion_core::{
    DelayGrid, FitInfo, FitInput, FitParams, FitStatus, Fits, GpuTuning, Method, Model, Precision,
    Problem, StartSearch, predict,
};

/// The absolute floor is for parameters at a bound of 0 (e.g. a delay of 1e-10 minutes).
const F64_PARAMS: Tolerance = Tolerance::new("f64 GPU vs CPU parameters", 1e-6, 1e-8);
/// f32 LM lands on the f64 minimum; f32 Nelder-Mead stops on a simplex whose vertex costs
/// f32 can no longer tell apart, slightly above it.
const F32_SSE_LM: Tolerance = Tolerance::new("f32 GPU LM SSE above the f64 CPU SSE", 1e-3, 1e-9);
const F32_SSE_NM: Tolerance = Tolerance::new("f32 GPU NM SSE above the f64 CPU SSE", 1e-2, 1e-9);
/// Largest difference of the fitted curves, relative to their peak (LM, NM).
const F32_CURVE_LM: f64 = 1e-2;
const F32_CURVE_NM: f64 = 1e-2;
const F32_TRUTH: Tolerance = Tolerance::new("f32 GPU parameters from noise-free data", 5e-3, 1e-3);

/// The launch shape the `BIOGPU_PERFUSION_*` variables name: CI runs these tests a second
/// time with persistent units, cube 32 and 8 units.
fn tuning() -> GpuTuning {
    GpuTuning::from_lookup(|k| std::env::var(k).ok()).expect("BIOGPU_PERFUSION_* variables")
}

/// The f64 CPU reference fit.
fn fit(
    curves: ArrayView2<f32>,
    problem: &Problem,
    params: &FitParams,
) -> perfusion_core::Result<Fits> {
    perfusion_core::fit(FitInput::new(curves, problem), params, &Device::cpu()).map(|(f, _)| f)
}

/// The fit on `device` with the [`tuning`] of the environment, and where and how it ran.
fn fit_gpu(
    curves: ArrayView2<f32>,
    problem: &Problem,
    params: &FitParams,
    device: &Device,
) -> perfusion_core::Result<(Fits, FitInfo)> {
    let params = params.clone().with_gpu(tuning());
    perfusion_core::fit(FitInput::new(curves, problem), &params, device)
}

/// [`fit_gpu`]'s maps.
fn fit_on(
    curves: ArrayView2<f32>,
    problem: &Problem,
    params: &FitParams,
    device: &Device,
) -> perfusion_core::Result<Fits> {
    fit_gpu(curves, problem, params, device).map(|(f, _)| f)
}

/// Typical parameters of each model and a spread to draw voxels from.
fn truths(model: Model) -> (&'static [f64], &'static [f64]) {
    match model {
        Model::DualInput => (&[20.0, 100.0, 400.0, 1.0, 2.0], &[0.5, 0.3, 0.3, 0.8, 0.8]),
        Model::Tofts => (&[0.25, 0.3, 2.0], &[0.5, 0.4, 0.8]),
        Model::ExtendedTofts => (&[0.25, 0.3, 0.05, 2.0], &[0.5, 0.4, 0.5, 0.8]),
        Model::Patlak => (&[0.05, 0.05, 2.0], &[0.5, 0.5, 0.8]),
        Model::TwoCompartmentExchange => {
            (&[0.8, 0.15, 0.25, 0.06, 2.0], &[0.4, 0.4, 0.3, 0.4, 0.8])
        }
    }
}

/// `voxels` curves of `model` on an `nt`-point grid over 2 min, parameters spread around
/// the typical values, Gaussian noise at `cnr`.
fn dataset(
    model: Model,
    nt: usize,
    voxels: usize,
    cnr: Option<f64>,
    seed: u64,
) -> (Problem, Array2<f32>, Vec<Vec<f64>>) {
    let t = Simulation::new(model, truths(model).0).with_nt(nt).times();
    let a: Vec<f64> = t.iter().map(|&s| parker_aif(s)).collect();
    let pv = portal_venous(&t);
    let problem = Problem::new(&t, &a, model.dual_input().then_some(&pv[..])).unwrap();
    let (mid, spread) = truths(model);
    let mut rng = Normal::new(seed, 1 << 40);
    let mut all = Vec::new();
    let mut curves = Array2::zeros((voxels, nt));
    for v in 0..voxels {
        let theta: Vec<f64> = mid
            .iter()
            .zip(spread)
            .enumerate()
            .map(|(i, (&m, &s))| {
                let u = (rng.sample() * 0.5).clamp(-1.0, 1.0);
                if model.params()[i].delay {
                    m + 2.0 * s * u
                } else {
                    m * (1.0 + s * u)
                }
            })
            .collect();
        let mut c = predict(&problem, model, &theta).unwrap();
        if let Some(cnr) = cnr {
            add_noise(&mut c, cnr, &mut Normal::new(seed, v as u64));
        }
        for (i, x) in c.iter().enumerate() {
            curves[[v, i]] = *x as f32;
        }
        all.push(theta);
    }
    (problem, curves, all)
}

fn converged(f: &Fits, v: usize) -> bool {
    f.status(v) == FitStatus::Converged
}

biogpu_tests::gpu_test! {
    fn f32_fits_reach_the_f64_cpu_minimum_for_every_model_and_method(device) {
        for model in Model::ALL {
            for method in [Method::NelderMead, Method::LevenbergMarquardt] {
                let (problem, curves, _) = dataset(model, 48, 24, Some(50.0), 7);
                let opts = FitParams::new(model)
                    .with_method(method)
                    .with_precision(Precision::F32);
                let cpu = fit(curves.view(), &problem, &opts).unwrap();
                let (gpu, info) = fit_gpu(curves.view(), &problem, &opts, device).unwrap();
                assert_eq!(info.precision, "f32");
                let (sse_tol, curve_tol) = if method == Method::NelderMead {
                    (F32_SSE_NM, F32_CURVE_NM)
                } else {
                    (F32_SSE_LM, F32_CURVE_LM)
                };
                let (mut both, mut cpu_ok, mut gpu_ok) = (0, 0, 0);
                let (mut worst_sse, mut worst_curve, mut worst_param) = (0.0f64, 0.0f64, 0.0f64);
                let mut elsewhere = 0;
                for v in 0..curves.nrows() {
                    cpu_ok += usize::from(converged(&cpu, v));
                    gpu_ok += usize::from(converged(&gpu, v));
                    if !(converged(&cpu, v) && converged(&gpu, v)) {
                        continue;
                    }
                    both += 1;
                    let (gs, cs) = (gpu.sse[v], cpu.sse[v]);
                    if gs > cs + sse_tol.abs + sse_tol.rel * cs {
                        // The f32 fit left the f64 path and ended elsewhere: Nelder-Mead in
                        // another local minimum, LM (from the f32 start search, whose
                        // residuals round at 1e-7 of the data's) at a kink of a delay's cost.
                        elsewhere += 1;
                        continue;
                    }
                    let gc = predict(&problem, model, &gpu.params.column(v).to_vec()).unwrap();
                    let cc = predict(&problem, model, &cpu.params.column(v).to_vec()).unwrap();
                    let peak = cc.iter().fold(0.0f64, |m, x| m.max(x.abs()));
                    let worst = gc
                        .iter()
                        .zip(&cc)
                        .fold(0.0f64, |m, (g, c)| m.max((g - c).abs()));
                    if worst > curve_tol * peak {
                        // Another minimum as deep (within the SSE tolerance): noisy dual-input
                        // curves have several, and LM's restarts rank them by f32 costs.
                        eprintln!(
                            "{model} {} voxel {v}: as deep elsewhere (SSE GPU {gs:.6e}, CPU {cs:.6e}; curves differ by {worst:.2e} of peak {peak:.2e}); GPU {:?} CPU {:?}",
                            method.name(),
                            gpu.params.column(v).to_vec(),
                            cpu.params.column(v).to_vec(),
                        );
                        elsewhere += 1;
                        continue;
                    }
                    worst_curve = worst_curve.max(worst / peak);
                    worst_sse = worst_sse.max(gs / cs - 1.0);
                    for p in 0..model.n_params() {
                        let c = cpu.params[[p, v]];
                        if !model.params()[p].delay && c != 0.0 {
                            worst_param = worst_param.max((gpu.params[[p, v]] / c - 1.0).abs());
                        }
                    }
                }
                eprintln!(
                    "f32 loss {model} {}: converged CPU {cpu_ok}/24, GPU {gpu_ok}/24; in another minimum {elsewhere}; worst SSE excess {worst_sse:.1e}, curve {worst_curve:.1e} of peak, rate parameter {worst_param:.1e}",
                    method.name()
                );
                // f32 Nelder-Mead ranks vertices by f32 costs, so on the 5-parameter liver model
                // it sometimes takes another valley: 1/24 on lavapipe, 5/22 on an H100 (CUDA's
                // fused multiply-adds and exp); f32 LM stopped elsewhere on 1/24 (extended
                // Tofts on lavapipe); with LM's restarts, as deep elsewhere on 1/24 (dual-input
                // on lavapipe). Use f64 for results where the device has it.
                assert!(
                    elsewhere * 4 <= both,
                    "{model} {}: f32 fit ended elsewhere on {elsewhere}/{both}",
                    method.name()
                );
                assert!(
                    gpu_ok + 2 >= cpu_ok,
                    "{model} {}: GPU converged on {gpu_ok}, CPU on {cpu_ok}",
                    method.name()
                );
                assert!(
                    both >= 18,
                    "{model} {}: only {both}/24 converged on both",
                    method.name()
                );
            }
        }
    }
}

biogpu_tests::gpu_test! {
    fn f32_fits_of_noise_free_data_recover_the_truth(device) {
        // The paper's liver, and Tofts.
        for (model, nt) in [(Model::DualInput, 64), (Model::Tofts, 48)] {
            let (problem, curves, truth) = dataset(model, nt, 16, None, 3);
            for method in [Method::NelderMead, Method::LevenbergMarquardt] {
                let opts = FitParams::new(model)
                    .with_method(method)
                    .with_precision(Precision::F32);
                let gpu = fit_on(curves.view(), &problem, &opts, device).unwrap();
                let mut good = 0;
                for (v, t) in truth.iter().enumerate() {
                    let ok = (0..model.n_params()).all(|p| F32_TRUTH.accepts(gpu.params[[p, v]], t[p]));
                    good += usize::from(ok && converged(&gpu, v));
                }
                // f32 Nelder-Mead on the dual-input model: 11/16 on an H200 (2026-11-28; the
                // others stop in its flat ka-kp valley), 16/16 on lavapipe.
                let needed = if method == Method::NelderMead && model == Model::DualInput {
                    10
                } else {
                    14
                };
                assert!(
                    good >= needed,
                    "{model} {}: truth recovered on {good}/16",
                    method.name()
                );
            }
        }
    }
}

biogpu_tests::gpu_test! {
    fn f64_fits_match_the_cpu_to_1e_minus_6(device) {
        if !device.info().supports_f64 {
            biogpu_tests::skip(format!(
                "no f64: {} has no f64 arithmetic; run on CUDA",
                device.info().id
            ));
        }
        let cases = [
            (Model::DualInput, 128, 512, Some(30.0)),
            (Model::DualInput, 64, 256, None),
            (Model::Tofts, 64, 128, Some(30.0)),
            (Model::ExtendedTofts, 64, 128, Some(30.0)),
            (Model::Patlak, 64, 128, Some(30.0)),
            (Model::TwoCompartmentExchange, 64, 128, Some(30.0)),
        ];
        for (model, nt, voxels, cnr) in cases {
            let (problem, curves, _) = dataset(model, nt, voxels, cnr, 11);
            for method in [Method::NelderMead, Method::LevenbergMarquardt] {
                let opts = FitParams::new(model)
                    .with_method(method)
                    .with_precision(Precision::F64);
                let cpu = fit(curves.view(), &problem, &opts).unwrap();
                let (gpu, info) = fit_gpu(curves.view(), &problem, &opts, device).unwrap();
                assert_eq!(info.precision, "f64");
                let (mut parted, mut elsewhere, mut worst) = (Vec::new(), Vec::new(), 0.0f64);
                for v in 0..voxels {
                    let mut same = gpu.status[v] == cpu.status[v];
                    for p in 0..model.n_params() {
                        let (g, c) = (gpu.params[[p, v]], cpu.params[[p, v]]);
                        if F64_PARAMS.accepts(g, c) {
                            let floor = F64_PARAMS.abs / F64_PARAMS.rel;
                            worst = worst.max((g - c).abs() / c.abs().max(floor));
                        } else {
                            same = false;
                        }
                    }
                    if !same {
                        parted.push(v);
                        // Fits stopped by the iteration cap are not pinned down to tol_x: for
                        // them the same cost is the check.
                        let converged = converged(&cpu, v);
                        let same_minimum = gpu.status[v] == cpu.status[v]
                            && (gpu.sse[v] - cpu.sse[v]).abs() <= opts.tol_fun
                            && (!converged
                                || (0..model.n_params()).all(|p| {
                                    (gpu.params[[p, v]] - cpu.params[[p, v]]).abs() <= 2.0 * opts.tol_x
                                }));
                        if !same_minimum {
                            elsewhere.push(v);
                        }
                    }
                }
                eprintln!(
                    "{model} {} Nt {nt}: {}/{voxels} voxels agree to 1e-6 (worst agreeing {worst:.1e}); parted: {:?}; not at the same minimum: {:?}",
                    method.name(),
                    voxels - parted.len(),
                    &parted[..parted.len().min(8)],
                    &elsewhere[..elsewhere.len().min(8)]
                );
                for &v in parted.iter().take(3) {
                    eprintln!(
                        "  voxel {v}: GPU {:?} {:?} SSE {:e}; CPU {:?} {:?} SSE {:e}",
                        gpu.status(v),
                        gpu.params.column(v).to_vec(),
                        gpu.sse[v],
                        cpu.status(v),
                        cpu.params.column(v).to_vec(),
                        cpu.sse[v]
                    );
                }
                assert!(
                    parted.len() * 10 <= voxels,
                    "{model} {}: {} of {voxels} voxels differ beyond {} ({})",
                    method.name(),
                    parted.len(),
                    F64_PARAMS.rel,
                    F64_PARAMS.name
                );
                // Nelder-Mead's simplex path from the searched start, whose last bits differ
                // between the GPU's fused multiply-adds and the CPU, ends in another point of
                // the dual-input model's flat valley on 37/512 voxels on an H200 (2026-11-28);
                // LM, the default, on none.
                let allowed = if method == Method::NelderMead { 10 } else { 100 };
                assert!(
                    elsewhere.len() * allowed <= voxels,
                    "{model} {}: {} of {voxels} voxels not at the CPU's minimum (SSE within tol_fun, parameters within 2 tol_x)",
                    method.name(),
                    elsewhere.len()
                );
            }
        }
    }
}

biogpu_tests::gpu_test! {
    fn delay_grid_and_fixed_parameters_work_on_the_gpu_as_on_the_cpu(device) {
        // The paper's liver (kl = 400), kl fixed at its true value, the start searched over
        // a delay grid (refined to a quarter step: 0.5 s, so the true delays are on it).
        let sim = Simulation::paper(64).with_voxels(4).run().unwrap();
        let truth = [20.0, 100.0, 400.0, 1.0, 2.0];
        let grid = DelayGrid::new(0.0, 6.0, 2.0).unwrap();
        let mut precisions = vec![Precision::F32];
        if device.info().supports_f64 {
            precisions.push(Precision::F64);
        }
        for precision in precisions {
            for method in [Method::NelderMead, Method::LevenbergMarquardt] {
                let opts = FitParams::new(Model::DualInput)
                    .with_method(method)
                    .with_start_search(StartSearch::Grid(grid))
                    .with_precision(precision)
                    .with_fixed("kl", 400.0)
                    .unwrap();
                if method == Method::NelderMead {
                    // After one simplex update both paths are still at the searched start:
                    // the true delays (on the grid's quarter steps) within a 5% perturbation.
                    let first = opts.clone().with_max_iterations(1);
                    let c1 = fit(sim.curves.view(), &sim.problem, &first).unwrap();
                    let g1 = fit_on(sim.curves.view(), &sim.problem, &first, device).unwrap();
                    for (what, f) in [("CPU", &c1), ("GPU", &g1)] {
                        let (ta, tp) = (f.params[[3, 0]], f.params[[4, 0]]);
                        assert!(
                            (ta - 1.0).abs() <= 0.06 && (tp - 2.0).abs() <= 0.11,
                            "{what} searched start: delays {ta}, {tp}"
                        );
                    }
                }
                let cpu = fit(sim.curves.view(), &sim.problem, &opts).unwrap();
                let gpu = fit_on(sim.curves.view(), &sim.problem, &opts, device).unwrap();
                for v in 0..4 {
                    assert_eq!(gpu.params[[2, v]], 400.0, "fixed kl moved");
                    assert_eq!(cpu.params[[2, v]], 400.0);
                    assert!(
                        converged(&cpu, v) && converged(&gpu, v),
                        "{} voxel {v}",
                        method.name()
                    );
                    for p in [0, 1, 3, 4] {
                        let (g, c) = (gpu.params[[p, v]], cpu.params[[p, v]]);
                        assert!(
                            F32_TRUTH.accepts(c, truth[p]),
                            "CPU {} p{p}: {c}",
                            method.name()
                        );
                        // f32 Nelder-Mead may leave the f64 path and end in another minimum of
                        // this multimodal (delay) problem; f64 and LM must not.
                        if precision == Precision::F64 {
                            assert!(
                                F64_PARAMS.accepts(g, c),
                                "GPU f64 {} p{p}: {g} vs {c}",
                                method.name()
                            );
                        } else if method == Method::LevenbergMarquardt {
                            assert!(
                                F32_TRUTH.accepts(g, truth[p]),
                                "GPU f32 {} p{p}: {g}",
                                method.name()
                            );
                        }
                    }
                }
            }
        }
    }
}

biogpu_tests::gpu_test! {
    fn bad_input_is_an_error_or_a_voxel_status_on_the_gpu(device) {
        let (problem, mut curves, _) = dataset(Model::Tofts, 32, 6, Some(40.0), 9);
        curves[[0, 5]] = f32::NAN;
        curves.row_mut(1).fill(0.0);
        curves.row_mut(2).fill(3.0);
        curves[[3, 7]] = f32::INFINITY;
        for method in [Method::NelderMead, Method::LevenbergMarquardt] {
            let opts = FitParams::new(Model::Tofts).with_method(method);
            let gpu = fit_on(curves.view(), &problem, &opts, device).unwrap();
            for v in 0..4 {
                assert_eq!(gpu.status(v), FitStatus::InvalidInput, "voxel {v}");
                assert!(gpu.params[[0, v]].is_nan() && gpu.sse[v].is_nan() && gpu.r2[v].is_nan());
                assert_eq!(gpu.iterations[v], 0);
            }
            assert!(matches!(
                gpu.status(4),
                FitStatus::Converged | FitStatus::AtBound
            ));
        }
        let opts = FitParams::new(Model::DualInput);
        let e = fit_on(curves.view(), &problem, &opts, device)
            .unwrap_err()
            .to_string();
        assert!(e.contains("portal-venous"), "{e}");
        let short = curves.slice(ndarray::s![.., ..30]);
        let e = fit_on(short, &problem, &FitParams::new(Model::Tofts), device)
            .unwrap_err()
            .to_string();
        assert!(e.contains("30 values") && e.contains("32"), "{e}");
    }
}

biogpu_tests::gpu_test! {
    fn chunked_and_time_major_fits_equal_one_pass(device) {
        let (problem, curves, _) = dataset(Model::Tofts, 32, 300, Some(30.0), 13);
        // A start search over 9 delays: 320 table values beside the grid.
        let opts = FitParams::new(Model::Tofts)
            .with_method(Method::LevenbergMarquardt)
            .with_precision(Precision::F32)
            .with_start_search(StartSearch::Grid(DelayGrid::new(0.0, 4.0, 2.0).unwrap()));
        let one = fit_on(curves.view(), &problem, &opts, device).unwrap();
        // The grid and the tables plus about 100 voxels per chunk: three chunks.
        let small: Device = (*device)
            .clone()
            .with_memory_limit(8192 + 320 * 4 + 100 * (32 * 4 + 5 * 4 + 4));
        let many = fit_on(curves.view(), &problem, &opts, &small).unwrap();
        assert_eq!(one.status, many.status);
        assert!(
            one.params
                .iter()
                .zip(&many.params)
                .all(|(a, b)| a.to_bits() == b.to_bits())
        );
    }
}

biogpu_tests::gpu_test! {
    /// Standard errors and the poorly-determined flag come from one f64 CPU pass at the
    /// fitted values on either path, so where both paths stop at the same parameters the
    /// well-determined SEs agree: to 1e-4 relative from an f64 GPU fit (parameters within
    /// 1e-6; the exact check, on CUDA), to 0.2 from an f32 one (parameters within 1e-3; SEs
    /// move with them through J, most through the delays: lavapipe, dual-input kp 5.47
    /// against 5.85 at parameters 1e-3 apart). A poorly determined parameter's SE is not compared: J^T J is near-singular there
    /// and its SE swings with the last digits of the fit (lavapipe, dual-input ka at the
    /// same SSE: 16.2 against 5.8). The flag is compared where no SE ratio is near its
    /// threshold. The provenance names the device and arithmetic.
    fn standard_errors_and_flags_match_the_cpu(device) {
        use perfusion_core::{Flags, POORLY_DETERMINED_SE};
        let (mut compared, mut se_compared) = (0, 0);
        for model in Model::ALL {
            let (problem, curves, _) = dataset(model, 48, 24, Some(30.0), 11);
            let opts = FitParams::new(model).with_method(Method::LevenbergMarquardt);
            let cpu = fit(curves.view(), &problem, &opts).unwrap();
            let (gpu, info) = fit_gpu(curves.view(), &problem, &opts, device).unwrap();
            assert_eq!(info.provenance.device_id, info.device);
            assert_eq!(info.provenance.precision, info.precision);
            let (ptol, tol) = if info.precision == "f64" { (1e-6, 1e-4) } else { (1e-3, 0.2) };
            let n = model.params().len();
            for v in 0..cpu.len() {
                let same_point = converged(&cpu, v)
                    && converged(&gpu, v)
                    && (0..n).all(|i| {
                        let (g, c) = (gpu.params[[i, v]], cpu.params[[i, v]]);
                        (g - c).abs() <= ptol * c.abs() + 1e-9
                    });
                if !same_point {
                    continue;
                }
                compared += 1;
                let ratio = |i: usize| cpu.se[[i, v]] / cpu.params[[i, v]].abs();
                for (i, p) in model.params().iter().enumerate() {
                    let (g, c) = (gpu.se[[i, v]], cpu.se[[i, v]]);
                    if !c.is_finite() || (!p.delay && ratio(i) >= POORLY_DETERMINED_SE) {
                        assert_eq!(g.is_nan(), c.is_nan(), "{model} voxel {v} {}: SE GPU {g} CPU {c}", p.name);
                        continue;
                    }
                    se_compared += 1;
                    assert!(
                        (g - c).abs() <= tol * c.abs() + 1e-12,
                        "{model} voxel {v} {}: SE GPU {g} CPU {c} ({})",
                        p.name,
                        info.precision
                    );
                }
                let near_threshold = model.params().iter().enumerate().any(|(i, p)| {
                    !p.delay && (ratio(i) / POORLY_DETERMINED_SE - 1.0).abs() <= 2.0 * tol
                });
                if !near_threshold {
                    assert_eq!(
                        gpu.flags[v] & Flags::POORLY_DETERMINED,
                        cpu.flags[v] & Flags::POORLY_DETERMINED,
                        "{model} voxel {v}: poorly-determined flag"
                    );
                }
            }
        }
        eprintln!("{compared} voxels at the same point on both paths, {se_compared} standard errors compared");
        assert!(compared >= 20 && se_compared >= 40, "too few voxels at the same point: {compared}");
    }
}
