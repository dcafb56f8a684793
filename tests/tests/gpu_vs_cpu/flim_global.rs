//! Global analysis on the GPU (f32 kernel, one cube per segment) against flim-core's f64
//! CPU reference, segment by segment.
//!
//! **Tolerances.** The two stop at slightly different points of the same minimum: the CPU
//! when a step lowers the segment's objective by less than 1e-9 relative (or, when no step
//! does, its shared gradient is below 1e-3 standard errors); the GPU when every free
//! parameter's remaining Newton step is below 1e-2 standard errors (the shared ones: of the
//! segment's fit), a step lowers the objective by less than `max(tol, 1e-6 / pixels)`
//! relative, or, when no step lowers the f32 objective any more, all steps are below 0.1.
//! Its f32 model errs by ~1e-5 relative per bin, far below a pixel's Poisson noise, so every
//! parameter must agree within 0.1 of its standard error plus 3e-5 relative, as the
//! per-pixel fits do (tests/flim.rs), with the standard errors of global analysis: from the
//! Poisson Fisher information of the whole segment's joint model at the CPU's fit (shared
//! lifetimes and shift from the Schur complement of the per-pixel amplitude blocks; each
//! pixel's amplitudes and offset with the shared parameters' uncertainty propagated).
//!
//! A segment pools its pixels' photons, so its shared standard errors shrink as
//! 1/sqrt(pixels) and can fall below what the f32 model resolves (at ~2.5 million photons
//! per segment with an IRF, the f32 objective's minimum sits 8e-5 from the f64 one in
//! ln tau). The kernel counts a shared step below `SHARED_RESOLUTION` (2e-4 in ln tau, bins
//! for the shift) as stationary, so the shared parameters may also differ by that much and
//! each local one by what it follows of it (the Schur complement's `Hll^-1 Hls` times that
//! resolution).
//!
//! Objectives: the segment's total (the sum of its pixels' objectives, which the fit
//! minimises) within `4 sqrt(bins x pixels) 2^-24` relative (f32 sums and model rounding)
//! plus 0.02 (a departure of 0.14 joint standard errors raises a chi^2-scaled objective by
//! 0.01; 0.02 leaves room for the f32 evaluation) plus the second-order rise of the shared
//! resolution; each pixel's own objective, which moves to first order with the shared
//! parameters, within 1e-3 relative plus 0.05. Model weights minimise the deviance but
//! report Pearson's chi^2, which is not stationary at the fit (it moves to first order with
//! every parameter): each side's reported value must be Pearson's chi^2 at its own
//! parameters (f64 here) within 1e-4 relative plus 0.01 (the f32 model and sum), and the
//! segment's deviance, evaluated here in f64 at each side's parameters, meets the segment
//! tolerance above. Statuses, photon counts and masks must match
//! exactly; a segment where either side stopped at the iteration cap may differ in status
//! and is not compared (as for the per-pixel fits). A 64-case run on lavapipe used at most
//! 0.85 of a tolerance.
//!
//! lavapipe (CI) stops a unit's loops after 65,535 iterations in all, so these tests keep to
//! <= 128 bins and, with an IRF, to one pixel per unit.

use biogpu_tests::proptest_cases;
use flim_core::{
    Count, Cube, DecayFit, Estimator, FitMaps, FitOptions, FitStatus, GlobalOptions, GpuTuning,
    Model, Offset, Segments, Shift, model_curve,
};
use gpu_runtime::Device;
use ndarray::{Array2, Array3};
use proptest::prelude::*;

/// The GPU path's tuning the environment asks for (`BIOGPU_FLIM_*`).
fn tuning() -> GpuTuning {
    GpuTuning::from_lookup(|k| std::env::var(k).ok()).expect("BIOGPU_FLIM_* settings")
}

/// Global analysis of `cube` on `device`.
fn fit_global_on<T: Count>(
    cube: &Cube<T>,
    opts: &FitOptions,
    segments: &Segments,
    device: &Device,
) -> flim_core::Result<FitMaps> {
    let opts = GlobalOptions::new(opts.clone().with_tuning(tuning()), segments.clone());
    flim_core::fit_global(cube, &opts, device).map(|(maps, _)| maps)
}

/// The f64 CPU reference of global analysis.
fn fit_global<T: Count>(
    cube: &Cube<T>,
    opts: &FitOptions,
    segments: &Segments,
) -> flim_core::Result<FitMaps> {
    fit_global_on(cube, opts, segments, &Device::cpu())
}

/// f32 unit roundoff.
const U: f64 = 1.0 / 16_777_216.0;
/// The kernel's resolution of a shared parameter (ln tau; shift in bins).
const RES: f64 = gpu_kernels::flim::global::SHARED_RESOLUTION as f64;

/// A pixel's fit as a [`DecayFit`] (for the model and its derivatives).
fn decay_fit(m: &FitMaps, y: usize, x: usize) -> DecayFit {
    let k = m.tau.len();
    let at = |a: &Array2<f32>| f64::from(a[[y, x]]);
    DecayFit {
        intensity: at(&m.intensity),
        tau: (0..k).map(|i| at(&m.tau[i])).collect(),
        amplitude: (0..k).map(|i| at(&m.amplitude[i])).collect(),
        fraction: (0..k).map(|i| at(&m.fraction[i])).collect(),
        offset: at(&m.offset),
        shift: at(&m.shift),
        tau_amp_mean: at(&m.tau_amp_mean),
        tau_int_mean: at(&m.tau_int_mean),
        chi2_red: at(&m.chi2_red),
        iterations: m.iterations[[y, x]],
        status: m.status[[y, x]],
    }
}

/// Pearson's chi^2 `sum (N - y)^2 / y` of `fit` against `decay` over the fit range (f64;
/// the range runs to the last bin, as in these tests): what model weights report.
fn pearson(opts: &FitOptions, decay: &[f64], bin_ns: f64, period: f64, fit: &DecayFit) -> f64 {
    let curve = model_curve(opts, decay.len(), bin_ns, period, fit).unwrap();
    decay[decay.len() - curve.len()..]
        .iter()
        .zip(&curve)
        .map(|(&n, &y)| (n - y).powi(2) / y.max(1e-10))
        .sum()
}

/// Inverse of a small symmetric positive definite matrix (Gauss-Jordan).
pub(crate) fn invert(mut a: Vec<Vec<f64>>) -> Vec<Vec<f64>> {
    let n = a.len();
    let mut inv: Vec<Vec<f64>> = (0..n)
        .map(|i| (0..n).map(|j| f64::from(u8::from(i == j))).collect())
        .collect();
    for c in 0..n {
        let p = a[c][c];
        for j in 0..n {
            a[c][j] /= p;
            inv[c][j] /= p;
        }
        for r in 0..n {
            if r != c {
                let q = a[r][c];
                for j in 0..n {
                    a[r][j] -= q * a[c][j];
                    inv[r][j] -= q * inv[c][j];
                }
            }
        }
    }
    inv
}

/// What the comparison needs to know of the cube and the options.
struct Setup<'a> {
    opts: &'a FitOptions,
    bins: usize,
    bin_ns: f64,
    period: f64,
    offset_fitted: bool,
    shift_fitted: bool,
}

/// A segment's statistics at a fit: standard errors of the shared parameters (lifetimes in
/// ns, then the shift in bins when fitted), and per pixel those of the local ones
/// (amplitudes, then the offset when fitted) and how they follow the shared ones (`follow[a]
/// [u]`: the change of local `a` per unit change of shared `u` with the others re-fitted).
struct SegmentStats {
    shared_se: Vec<f64>,
    local_se: Vec<Vec<f64>>,
    follow: Vec<Vec<Vec<f64>>>,
}

/// [`SegmentStats`] from the Poisson Fisher information of the segment's joint model at
/// `fits`.
fn segment_standard_errors(s: &Setup<'_>, fits: &[DecayFit]) -> SegmentStats {
    let k = fits[0].tau.len();
    let curve = |f: &DecayFit| model_curve(s.opts, s.bins, s.bin_ns, s.period, f).unwrap();
    let column = |f: &DecayFit, g: &dyn Fn(&mut DecayFit, f64), step: f64| -> Vec<f64> {
        let (mut up, mut dn) = (f.clone(), f.clone());
        g(&mut up, step);
        g(&mut dn, -step);
        curve(&up)
            .iter()
            .zip(curve(&dn))
            .map(|(a, b)| (a - b) / (2.0 * step))
            .collect()
    };
    let gram = |a: &[Vec<f64>], b: &[Vec<f64>], w: &[f64]| -> Vec<Vec<f64>> {
        a.iter()
            .map(|u| {
                b.iter()
                    .map(|v| (0..w.len()).map(|j| w[j] * u[j] * v[j]).sum())
                    .collect()
            })
            .collect()
    };
    let mut blocks = Vec::new();
    let ns = k + usize::from(s.shift_fitted);
    let mut reduced = vec![vec![0.0; ns]; ns];
    for f in fits {
        let w: Vec<f64> = curve(f).iter().map(|y| 1.0 / y.max(1e-6)).collect();
        let mut local: Vec<Vec<f64>> = (0..k)
            .map(|i| {
                column(
                    f,
                    &move |d, e| d.amplitude[i] += e,
                    1e-4 * f.amplitude[i].abs().max(1e-3),
                )
            })
            .collect();
        if s.offset_fitted {
            local.push(column(f, &|d, e| d.offset += e, 1e-3));
        }
        let mut shared: Vec<Vec<f64>> = (0..k)
            .map(|i| column(f, &move |d, e| d.tau[i] += e, 1e-5 * f.tau[i]))
            .collect();
        if s.shift_fitted {
            shared.push(column(f, &|d, e| d.shift += e, 1e-4));
        }
        let hll_inv = invert(gram(&local, &local, &w));
        let hls = gram(&local, &shared, &w);
        let hss = gram(&shared, &shared, &w);
        // X = Hll^-1 Hls (nl x ns); reduced += Hss - Hls^T X.
        let nl = local.len();
        let x: Vec<Vec<f64>> = (0..nl)
            .map(|a| {
                (0..ns)
                    .map(|v| (0..nl).map(|c| hll_inv[a][c] * hls[c][v]).sum())
                    .collect()
            })
            .collect();
        for u in 0..ns {
            for v in 0..ns {
                reduced[u][v] += hss[u][v] - (0..nl).map(|a| hls[a][u] * x[a][v]).sum::<f64>();
            }
        }
        blocks.push((hll_inv, x));
    }
    let cov = invert(reduced);
    let shared_se = (0..ns).map(|u| cov[u][u].abs().sqrt()).collect();
    let follow = blocks.iter().map(|(_, x)| x.clone()).collect();
    let local_se = blocks
        .iter()
        .map(|(hll_inv, x)| {
            (0..hll_inv.len())
                .map(|a| {
                    let prop: f64 = (0..ns)
                        .map(|u| (0..ns).map(|v| x[a][u] * cov[u][v] * x[a][v]).sum::<f64>())
                        .sum();
                    (hll_inv[a][a] + prop).abs().sqrt()
                })
                .collect()
        })
        .collect();
    SegmentStats {
        shared_se,
        local_se,
        follow,
    }
}

/// The pixels of each segment as flim-core builds them: fitted (not masked by the CPU)
/// pixels in raster order, by runs, label or all together.
fn segment_groups(cpu: &FitMaps, segments: &Segments) -> Vec<Vec<(usize, usize)>> {
    let (h, w) = cpu.status.dim();
    let fitted: Vec<(usize, usize)> = (0..h * w)
        .map(|p| (p / w, p % w))
        .filter(|&(y, x)| cpu.status[[y, x]] != FitStatus::Masked)
        .collect();
    match segments {
        Segments::Runs(n) => fitted.chunks(*n).map(<[_]>::to_vec).collect(),
        Segments::Whole => vec![fitted],
        Segments::Labels(labels) => {
            let mut ids: Vec<u32> = fitted.iter().map(|&p| labels[p]).collect();
            ids.sort_unstable();
            ids.dedup();
            ids.iter()
                .map(|&l| fitted.iter().copied().filter(|&p| labels[p] == l).collect())
                .collect()
        }
    }
}

/// |got - want| <= tol, with a message.
fn close(at: &str, what: &str, got: f32, want: f32, tol: f64) -> Result<(), TestCaseError> {
    let (g, c) = (f64::from(got), f64::from(want));
    prop_assert!(
        (g - c).abs() <= tol,
        "{}: {} GPU {} CPU {} (tolerance {:e})",
        at,
        what,
        got,
        want,
        tol
    );
    Ok(())
}

/// Compare the GPU's global analysis with the CPU's, segment by segment (tolerances in the
/// module's doc), fitting where `mask` is true, on `device`. Returns the number of segments
/// compared.
fn compare_global<T: Count>(
    device: &Device,
    cube: &Cube<T>,
    opts: &FitOptions,
    mask: Option<&Array2<bool>>,
    segments: &Segments,
    offset_fitted: bool,
    shift_fitted: bool,
) -> Result<usize, TestCaseError> {
    // `opts` without the mask gives the model of one decay (standard errors).
    let fit_opts = mask.map_or_else(|| opts.clone(), |m| opts.clone().with_mask(m.view()));
    let cpu = fit_global(cube, &fit_opts, segments).unwrap();
    let gpu = fit_global_on(cube, &fit_opts, segments, device).unwrap();
    let s = Setup {
        opts,
        bins: cube.bins(),
        bin_ns: cube.bin_ns(),
        period: cube.period_ns(),
        offset_fitted,
        shift_fitted,
    };
    let k = cpu.tau.len();
    let cap = opts.max_iterations();
    let model_weights = opts.estimator() == Estimator::LeastSquaresModel;
    // Masks and photons everywhere.
    for ((y, x), &st) in cpu.status.indexed_iter() {
        let at = format!("pixel ({y}, {x})");
        prop_assert_eq!(
            gpu.intensity[[y, x]],
            cpu.intensity[[y, x]],
            "{}: photons",
            at
        );
        prop_assert_eq!(
            gpu.status[[y, x]] == FitStatus::Masked,
            st == FitStatus::Masked,
            "{}: masked",
            at
        );
        if st == FitStatus::Masked {
            prop_assert!(
                gpu.tau[0][[y, x]].is_nan() && gpu.chi2_red[[y, x]].is_nan(),
                "{}: a masked pixel has values",
                at
            );
        }
    }
    let mut compared = 0;
    for seg in segment_groups(&cpu, segments) {
        let (y0, x0) = seg[0];
        let at = format!("segment of {} pixels at ({y0}, {x0})", seg.len());
        let (gs, cs) = (gpu.status[[y0, x0]], cpu.status[[y0, x0]]);
        let capped = gpu.iterations[[y0, x0]] >= cap || cpu.iterations[[y0, x0]] >= cap;
        for &(y, x) in &seg {
            prop_assert_eq!(gpu.status[[y, x]], gs, "{}: one status per segment", at);
            prop_assert_eq!(
                gpu.iterations[[y, x]],
                gpu.iterations[[y0, x0]],
                "{}: one iteration count per segment",
                at
            );
            for i in 0..k {
                prop_assert!(
                    gpu.tau[i][[y, x]].to_bits() == gpu.tau[i][[y0, x0]].to_bits(),
                    "{}: lifetimes shared by its pixels",
                    at
                );
            }
        }
        if gs != cs && capped {
            continue;
        }
        prop_assert_eq!(
            gs,
            cs,
            "{}: status (GPU {} iterations, CPU {})",
            at,
            gpu.iterations[[y0, x0]],
            cpu.iterations[[y0, x0]]
        );
        compared += 1;
        if cs != FitStatus::Converged {
            continue;
        }
        let fits: Vec<DecayFit> = seg.iter().map(|&(y, x)| decay_fit(&cpu, y, x)).collect();
        let st = segment_standard_errors(&s, &fits);
        prop_assert!(
            st.shared_se
                .iter()
                .chain(st.local_se.iter().flatten())
                .all(|v| v.is_finite()),
            "{}: standard errors undefined",
            at
        );
        // Resolution of the f32 model in each shared parameter (ns, bins), and what the
        // shared parameters' standard errors allow on top of it.
        let res: Vec<f64> = (0..k)
            .map(|i| RES * f64::from(cpu.tau[i][[y0, x0]]))
            .chain(shift_fitted.then_some(RES))
            .collect();
        let tol = |se: f64, c: f32| 0.1 * se + 3e-5 * f64::from(c).abs() + 1e-6;
        for i in 0..k {
            let (g, c) = (gpu.tau[i][[y0, x0]], cpu.tau[i][[y0, x0]]);
            close(&at, "tau", g, c, tol(st.shared_se[i], c) + res[i])?;
        }
        if shift_fitted {
            let (g, c) = (gpu.shift[[y0, x0]], cpu.shift[[y0, x0]]);
            close(&at, "shift", g, c, tol(st.shared_se[k], c) + res[k])?;
        }
        // Objectives: reduced chi^2 times the degrees of freedom both sides divide by.
        let np = 2 * k + usize::from(offset_fitted) + usize::from(shift_fitted);
        let nl = k + usize::from(offset_fitted);
        let dof = (s.bins - np) as f64 + (np - nl) as f64 * (1.0 - 1.0 / seg.len() as f64);
        let (mut obj_g, mut obj_c) = (0.0, 0.0);
        for (p, &(y, x)) in seg.iter().enumerate() {
            let px = format!("{at}, pixel ({y}, {x})");
            // A local parameter follows the shared ones within their resolution.
            let follow = |a: usize| -> f64 {
                (0..res.len())
                    .map(|u| st.follow[p][a][u].abs() * res[u])
                    .sum()
            };
            for i in 0..k {
                let (g, c) = (gpu.amplitude[i][[y, x]], cpu.amplitude[i][[y, x]]);
                close(
                    &px,
                    "amplitude",
                    g,
                    c,
                    tol(st.local_se[p][i], c) + follow(i),
                )?;
            }
            if offset_fitted {
                let (g, c) = (gpu.offset[[y, x]], cpu.offset[[y, x]]);
                close(&px, "offset", g, c, tol(st.local_se[p][k], c) + follow(k))?;
            }
            let g = f64::from(gpu.chi2_red[[y, x]]) * dof;
            let c = f64::from(cpu.chi2_red[[y, x]]) * dof;
            if model_weights {
                // Pearson's chi^2 at each side's own parameters (f64 here; the GPU's f32
                // model and sum), and the deviance they minimise summed for the segment.
                let decay: Vec<f64> = cube
                    .counts()
                    .slice(ndarray::s![y, x, ..])
                    .iter()
                    .map(|&v| v.into())
                    .collect();
                let (gf, cf) = (decay_fit(&gpu, y, x), decay_fit(&cpu, y, x));
                for (side, got, f) in [("GPU", g, &gf), ("CPU", c, &cf)] {
                    let want = pearson(opts, &decay, s.bin_ns, s.period, f);
                    prop_assert!(
                        (got - want).abs() <= 1e-4 * want + 0.01,
                        "{}: {} chi^2 {} is not Pearson's at its parameters, {}",
                        px,
                        side,
                        got,
                        want
                    );
                }
                obj_g += flim_core::objective(opts, &decay, s.bin_ns, s.period, &gf).unwrap();
                obj_c += flim_core::objective(opts, &decay, s.bin_ns, s.period, &cf).unwrap();
                continue;
            }
            obj_g += g;
            obj_c += c;
            prop_assert!(
                (g - c).abs() <= 1e-3 * c.abs() + 0.05,
                "{}: objective GPU {} CPU {}",
                px,
                g,
                c
            );
        }
        // f32 sums and model: ~sqrt(terms) roundings; the shared resolution's second-order
        // rise.
        let terms = (s.bins * seg.len()) as f64;
        let rise: f64 = (0..res.len())
            .map(|u| 0.5 * (res[u] / st.shared_se[u]).powi(2))
            .sum();
        let obj_tol = 4.0 * terms.sqrt() * U * obj_c.abs() + 0.02 + rise;
        prop_assert!(
            (obj_g - obj_c).abs() <= obj_tol,
            "{}: segment objective GPU {} CPU {} (tolerance {})",
            at,
            obj_g,
            obj_c,
            obj_tol
        );
    }
    Ok(compared)
}

/// A simulated cube with a few pixels emptied (zero photons) and the given segmentation's
/// options.
fn cube_with_empty_pixels(cube: &Cube<u16>, empty: &[(usize, usize)]) -> Cube<u16> {
    let mut counts: Array3<u16> = cube.counts().to_owned();
    for &(y, x) in empty {
        counts.slice_mut(ndarray::s![y, x, ..]).fill(0);
    }
    Cube::new(counts, cube.bin_ns())
        .unwrap()
        .with_period_ns(cube.period_ns())
        .unwrap()
}

biogpu_tests::gpu_test! {
    /// Mono and bi, every estimator, tail / IRF fixed / IRF fitted shift, offset fixed or
    /// fitted, runs of 32 (an uneven last run), labels of three sizes and the whole image,
    /// masked and empty pixels.
    fn flim_global_matches_the_cpu(device) {
        proptest!(proptest_cases(8), |(bi in any::<bool>(), est in 0usize..4, irf in 0usize..3, offset_fitted in any::<bool>(), tau1 in 0.4f64..1.2, ratio in 2.0f64..4.0, photons in 1e3f64..2e4, bins in 64usize..=128, seg in 0usize..3, seed in any::<u64>())| {
            let (h, w) = (12, 12);
            let bin_ns = 12.8 / bins as f64;
            let mut sim = flim_core::sim::DecaySim::new(bins, bin_ns, photons).unwrap().with_seed(seed);
            if offset_fitted {
                sim = sim.with_background(1.0);
            }
            let model = if bi { Model::Bi } else { Model::Mono };
            let estimator = [Estimator::LeastSquaresNeyman, Estimator::LeastSquaresPearson, Estimator::MaximumLikelihood, Estimator::LeastSquaresModel][est];
            let mask = Array2::from_shape_fn((h, w), |(y, x)| (y * 7 + x * 3) % 11 != 0);
            let mut opts = FitOptions::new(model)
                .with_estimator(estimator)
                .with_offset(if offset_fitted { Offset::Fitted } else { Offset::Fixed(0.0) });
            if irf > 0 {
                sim = sim.with_irf(0.15, 1.2);
                opts = opts.with_irf(&sim.irf_histogram().unwrap());
                opts = opts.with_irf_shift(if irf == 2 { Shift::Fitted(0.0) } else { Shift::Fixed(0.0) });
            }
            // f_D falls across the image, as in the paper's phantom.
            let cube = sim.cube(h, w, |_, x| {
                let f = 0.7 - 0.4 * x as f64 / (w - 1) as f64;
                if bi { vec![(f, tau1), (1.0 - f, tau1 * ratio)] } else { vec![(1.0, tau1 * ratio)] }
            }).unwrap();
            let cube = cube_with_empty_pixels(&cube, &[(0, 1), (5, 5), (11, 10)]);
            let segments = match seg {
                0 => Segments::Runs(32),
                1 => Segments::Labels(Array2::from_shape_fn((h, w), |(y, x)| {
                    // 4 pixels (32-unit cubes), 44 (64 units) and the rest (128 units), and 0.
                    if y == 0 && x < 4 { 7 } else if y < 4 { 3 } else if x == 0 { 0 } else { 5 }
                })),
                _ => Segments::Whole,
            };
            compare_global(device, &cube, &opts, Some(&mask), &segments, offset_fitted, irf == 2)?;
        });
    }
}

biogpu_tests::gpu_test! {
    /// Model weights (least squares' default) report Pearson's chi^2 on both sides (the
    /// property test above draws them in a quarter of its cases): mono-exponential with a
    /// fixed IRF over 32-pixel runs, and bi-exponential tail fits with a fitted offset over
    /// the whole image; every segment converges on both sides and agrees.
    fn flim_global_model_weights_report_pearson_like_the_cpu(device) {
        let bins = 96;
        let sim = flim_core::sim::DecaySim::new(bins, 12.8 / bins as f64, 3_000.0)
            .unwrap()
            .with_seed(31)
            .with_irf(0.15, 1.2);
        let cube = sim.cube(8, 8, |_, x| vec![(1.0, 1.5 + 0.2 * x as f64)]).unwrap();
        let opts = FitOptions::new(Model::Mono)
            .with_estimator(Estimator::LeastSquaresModel)
            .with_irf(&sim.irf_histogram().unwrap());
        let runs = Segments::Runs(32);
        let cpu = fit_global(&cube, &opts, &runs).unwrap();
        assert!(cpu.status.iter().all(|&s| s == FitStatus::Converged));
        let n = compare_global(device, &cube, &opts, None, &runs, false, false).unwrap();
        assert_eq!(n, 2, "2 segments of 32 pixels");
        let sim = flim_core::sim::DecaySim::new(64, 0.2, 5_000.0)
            .unwrap()
            .with_seed(32)
            .with_background(1.0);
        let cube = sim
            .cube(10, 10, |y, _| {
                let f = 0.3 + 0.03 * y as f64;
                vec![(f, 0.8), (1.0 - f, 3.0)]
            })
            .unwrap();
        let opts = FitOptions::new(Model::Bi)
            .with_estimator(Estimator::LeastSquaresModel)
            .with_offset(Offset::Fitted);
        let cpu = fit_global(&cube, &opts, &Segments::Whole).unwrap();
        assert!(cpu.status.iter().all(|&s| s == FitStatus::Converged));
        let n = compare_global(device, &cube, &opts, None, &Segments::Whole, true, false).unwrap();
        assert_eq!(n, 1);
    }
}

biogpu_tests::gpu_test! {
    /// The paper's GA-32 case: bi-exponential, f_D from 0.8 to 0.2, MLE tail fit, 32-pixel
    /// runs; every segment must converge on both sides and agree.
    fn flim_global_ga32_bi_exponential_matches_the_cpu(device) {
        let sim = flim_core::sim::DecaySim::new(128, 0.1, 5_000.0)
            .unwrap()
            .with_seed(11);
        let cube = flim_core::sim::bi_exponential(0.8, 2.5, 16, 16, &sim).unwrap();
        let opts = FitOptions::new(Model::Bi);
        let n = compare_global(device, &cube, &opts, None, &Segments::Runs(32), false, false).unwrap();
        assert_eq!(n, 8, "8 segments of 32 pixels");
    }
}

biogpu_tests::gpu_test! {
    /// A segment larger than a cube (256 units): each unit strides over two pixels.
    fn flim_global_whole_image_larger_than_a_cube_matches_the_cpu(device) {
        let sim = flim_core::sim::DecaySim::new(64, 0.2, 2_000.0)
            .unwrap()
            .with_seed(5);
        let cube = sim
            .cube(20, 20, |y, _| {
                vec![(0.3 + 0.02 * y as f64, 0.9), (0.7, 3.0)]
            })
            .unwrap();
        let opts = FitOptions::new(Model::Bi).with_estimator(Estimator::LeastSquaresPearson);
        let n = compare_global(device, &cube, &opts, None, &Segments::Whole, false, false).unwrap();
        assert_eq!(n, 1);
    }
}

biogpu_tests::gpu_test! {
    /// Bad segmentations are errors on the GPU path too, named as on the CPU; a cube with no
    /// fitted pixel gives masked maps without touching the device.
    fn flim_global_bad_segments_are_clear_errors(device) {
        let sim = flim_core::sim::DecaySim::new(64, 0.2, 500.0).unwrap();
        let cube = sim.cube(4, 5, |_, _| vec![(1.0, 2.0)]).unwrap();
        let opts = FitOptions::new(Model::Mono);
        let e = fit_global_on(&cube, &opts, &Segments::Runs(0), device).unwrap_err();
        assert!(e.to_string().contains("segment size"), "{e}");
        let labels = Array2::<u32>::ones((5, 4));
        let e = fit_global_on(&cube, &opts, &Segments::Labels(labels), device).unwrap_err();
        assert!(
            e.to_string().contains("segment labels") && e.to_string().contains("(4, 5)"),
            "{e}"
        );
        let empty = fit_global_on(
            &cube,
            &opts.clone().with_threshold(1e9),
            &Segments::Whole,
            device,
        )
        .unwrap();
        assert!(empty.status.iter().all(|&s| s == FitStatus::Masked));
        assert!(empty.tau[0].iter().all(|t| t.is_nan()));
    }
}

biogpu_tests::gpu_test! {
    /// Segments go to the device in chunks that fit its memory budget: a small budget (many
    /// chunks) gives the same bits as one pass, and a segment too large for the budget is an
    /// error that says so.
    fn flim_global_chunked_equals_one_pass(device) {
        let sim = flim_core::sim::DecaySim::new(64, 0.2, 2_000.0)
            .unwrap()
            .with_seed(9);
        let cube = sim
            .cube(16, 16, |_, x| vec![(1.0, 1.5 + 0.1 * x as f64)])
            .unwrap();
        let opts = FitOptions::new(Model::Mono);
        // About 7 KB per 32-pixel segment on the device: one segment per chunk.
        let small = device.clone().with_memory_limit(24 << 10);
        let one = fit_global_on(&cube, &opts, &Segments::Runs(32), device).unwrap();
        let many = fit_global_on(&cube, &opts, &Segments::Runs(32), &small).unwrap();
        assert!(one.status.iter().all(|&s| s == FitStatus::Converged));
        assert_eq!(one.status, many.status);
        assert_eq!(one.iterations, many.iterations);
        for (a, b) in [
            (&one.tau[0], &many.tau[0]),
            (&one.amplitude[0], &many.amplitude[0]),
        ]
        .into_iter()
        .chain([(&one.chi2_red, &many.chi2_red)])
        {
            for (x, y) in a.iter().zip(b.iter()) {
                assert!(x.to_bits() == y.to_bits(), "{x} vs {y}");
            }
        }
        let e = fit_global_on(&cube, &opts, &Segments::Whole, &small).unwrap_err();
        assert!(e.to_string().contains("a segment of 256 pixels"), "{e}");
    }
}

biogpu_tests::gpu_test! {
    /// The same counts as u16, u32 and f32 give the same bits (the kernel reads every type as
    /// f32 counts; the host sums and thresholds them in f64).
    fn flim_global_count_types_give_the_same_bits(device) {
        let sim = flim_core::sim::DecaySim::new(64, 0.2, 1_500.0)
            .unwrap()
            .with_seed(13);
        let cube = sim
            .cube(6, 7, |y, _| vec![(1.0, 1.2 + 0.2 * y as f64)])
            .unwrap();
        let counts = cube.counts().mapv(f64::from);
        let c32 = Cube::new(counts.mapv(|v| v as u32), cube.bin_ns())
            .unwrap()
            .with_period_ns(cube.period_ns())
            .unwrap();
        let cf = Cube::new(counts.mapv(|v| v as f32), cube.bin_ns())
            .unwrap()
            .with_period_ns(cube.period_ns())
            .unwrap();
        let opts = FitOptions::new(Model::Mono).with_estimator(Estimator::LeastSquaresPearson);
        let seg = Segments::Runs(9);
        let a = fit_global_on(&cube, &opts, &seg, device).unwrap();
        let b = fit_global_on(&c32, &opts, &seg, device).unwrap();
        let c = fit_global_on(&cf, &opts, &seg, device).unwrap();
        assert!(a.status.iter().all(|&s| s == FitStatus::Converged));
        for other in [&b, &c] {
            assert_eq!(a.status, other.status);
            for (x, y) in a.tau[0].iter().zip(other.tau[0].iter()) {
                assert!(x.to_bits() == y.to_bits(), "{x} vs {y}");
            }
            for (x, y) in a.chi2_red.iter().zip(other.chi2_red.iter()) {
                assert!(x.to_bits() == y.to_bits(), "{x} vs {y}");
            }
        }
    }
}
