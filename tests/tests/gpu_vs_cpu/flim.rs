//! FLIM non-iterative methods on the GPU (f32) against the f64 CPU reference.
//!
//! Tolerances are f32 error bounds computed per pixel in f64 from its counts, so they hold
//! for any data and are as tight as the arithmetic allows. With `u = 2^-24`, `M` bins of
//! raw counts `c_j`, offset `o`, a recursive f32 sum of terms `x_j` errs by at most
//! `gamma sum |x_j|`, `gamma = M u` (Higham, Accuracy and Stability, eq. 4.4); each
//! further operation adds `u` relative. Those sum errors are carried through each formula
//! to first order:
//! - intensity `n = sum c - M o`; status equal unless `n` is that close to the threshold.
//! - g, s: numerator and `n` errors, plus `u` per cos/sin table entry and the calibration.
//! - phase and modulation lifetimes: the GPU's value against the formula applied to the
//!   GPU's own (g, s) in f64 (the formula is checked; its conditioning is (g, s)'s).
//! - RLD `K h / ln(D0/D1)`: gate errors over `|ln(D0/D1)|`.
//! - IEM `h S / (N_0 - N_{M-1})`: Simpson-sum error plus end-bin errors over their difference.
//! - CMM: backward error. The mean bin index implied by the GPU's lifetime matches the CPU's
//!   within the error of the mean (`m1 / n`), the solver's stopping tolerance (1e-6 on ln a)
//!   times the slope, and the f32 evaluation of `B(a) - M B(aM)`.
//!
//! Formulas that are ill-defined within those errors (a comparison that could go either
//! way, e.g. `D0 > D1`) are skipped for that pixel only.

use biogpu_tests::gpu_under_test;
use flim_core::gpu::analyse_on;
use flim_core::methods::STATUS_OK;
use flim_core::{Analysis, Count, Cube, LifetimeMaps, Methods, analyse};
use ndarray::Array3;
use proptest::prelude::*;

/// f32 unit roundoff.
const U: f64 = 1.0 / 16_777_216.0;

/// `B(x) = 1/(e^x - 1) - 1/x`.
fn b_fn(x: f64) -> f64 {
    if x < 1e-3 {
        -0.5 + x / 12.0
    } else {
        1.0 / x.exp_m1() - 1.0 / x
    }
}

/// `B'(x)`.
fn b_deriv(x: f64) -> f64 {
    if x < 1e-3 {
        1.0 / 12.0
    } else {
        let sh = (0.5 * x).sinh();
        1.0 / (x * x) - 0.25 / (sh * sh)
    }
}

/// Mean bin index of a bin-integrated exponential with `a = h / tau`, cut at `m` bins.
fn mean_bin(a: f64, m: f64) -> f64 {
    b_fn(a) - m * b_fn(a * m)
}

/// What `compare` needs to know of the analysis settings.
#[derive(Clone, Copy)]
struct Settings {
    offset: f64,
    threshold: f64,
    first: usize,
    m: usize,
    harmonic: u32,
    cal: (f64, f64),
    methods: Methods,
}

/// |got - want| <= tol, NaN only against NaN, infinities equal.
fn within(got: f32, want: f64, tol: f64, what: &str) -> Result<(), TestCaseError> {
    let g = f64::from(got);
    if g.is_nan() || want.is_nan() || g.is_infinite() || want.is_infinite() {
        prop_assert!(
            (g.is_nan() && want.is_nan()) || g == want,
            "{what}: GPU {got}, CPU {want}"
        );
        return Ok(());
    }
    prop_assert!(
        (g - want).abs() <= tol,
        "{what}: GPU {got}, CPU {want}, tolerance {tol:e}"
    );
    Ok(())
}

#[allow(clippy::too_many_lines)]
fn compare<T: Count>(cube: &Cube<T>, opts: &Analysis, s: &Settings) -> Result<(), TestCaseError> {
    let Some(device) = gpu_under_test("flim_lifetimes_match_the_cpu") else {
        return Ok(());
    };
    let cpu = analyse(cube, opts).unwrap();
    let gpu: LifetimeMaps = analyse_on(cube, opts, &device).unwrap();
    let counts = cube.counts();
    let Settings {
        offset: o,
        threshold,
        first,
        m,
        harmonic,
        cal: (cc, cs),
        methods,
    } = *s;
    let h = cube.bin_ns();
    let mf = m as f64;
    let k = m / 2;
    let gamma = mf * U;
    let omega = 2.0 * std::f64::consts::PI / cube.period_ns() * f64::from(harmonic);
    for ((y, x), &st) in cpu.status.indexed_iter() {
        let c: Vec<f64> = counts
            .slice(ndarray::s![y, x, first..first + m])
            .iter()
            .map(|&v| v.into())
            .collect();
        let abs_sum: f64 = c.iter().map(|v| v.abs()).sum::<f64>();
        let n = c.iter().sum::<f64>() - mf * o;
        let at = format!("pixel ({y}, {x}), n {n}");
        let dn = gamma * abs_sum + U * (mf * o + n.abs()) + 1e-30;
        within(gpu.intensity[[y, x]], n, dn, &format!("{at}: intensity"))?;
        if (n - threshold).abs() <= dn || n.abs() <= dn {
            continue; // status may differ at the threshold
        }
        prop_assert_eq!(gpu.status[[y, x]], st, "{}: status", at);
        if st != STATUS_OK {
            for p in &gpu.planes()[1..] {
                prop_assert!(p[[y, x]].is_nan(), "{}: masked pixel has a value", at);
            }
            continue;
        }
        let nan_unless = |wanted: Methods, map: &ndarray::Array2<f32>| {
            methods.contains(wanted) || map[[y, x]].is_nan()
        };
        prop_assert!(
            nan_unless(Methods::RLD, &gpu.tau_rld)
                && nan_unless(Methods::IEM, &gpu.tau_iem)
                && nan_unless(Methods::CMM, &gpu.tau_cmm)
                && nan_unless(Methods::PHASOR, &gpu.g),
            "{}: a method not asked for has a value",
            at
        );
        // Phasor.
        if methods.contains(Methods::PHASOR) {
            let (mut gc, mut gs) = (0.0, 0.0);
            for (j, v) in c.iter().enumerate() {
                let t = (j as f64 + 0.5) * h;
                gc += (omega * t).cos() * (v - o);
                gs += (omega * t).sin() * (v - o);
            }
            let (g0, s0) = (gc / n, gs / n);
            let dnum = (gamma + 2.0 * U) * (abs_sum + mf * o);
            let dg0 = dnum / n.abs() + g0.abs().max(s0.abs()) * dn / n.abs() + U;
            let dg = (cc.abs() + cs.abs()) * dg0 + 4.0 * U * (cc.abs() + cs.abs());
            let g = cc * g0 - cs * s0;
            let sv = cs * g0 + cc * s0;
            within(gpu.g[[y, x]], g, dg, &format!("{at}: g"))?;
            within(gpu.s[[y, x]], sv, dg, &format!("{at}: s"))?;
            let (gg, sg) = (f64::from(gpu.g[[y, x]]), f64::from(gpu.s[[y, x]]));
            let phase = sg / (omega * gg);
            within(
                gpu.tau_phase[[y, x]],
                phase,
                1e-6 * phase.abs(),
                &format!("{at}: phase lifetime from the GPU's (g, s)"),
            )?;
            let m2 = gg * gg + sg * sg;
            let q = 1.0 / m2 - 1.0;
            if q.abs() > 16.0 * U / m2 {
                let modl = q.sqrt() / omega;
                let rel = 4.0 * U / m2 / q.abs() + 8.0 * U;
                within(
                    gpu.tau_mod[[y, x]],
                    modl,
                    rel * modl.abs(),
                    &format!("{at}: modulation lifetime from the GPU's (g, s)"),
                )?;
            }
        }
        // RLD.
        if methods.contains(Methods::RLD) {
            let d0 = c[..k].iter().sum::<f64>() - k as f64 * o;
            let d1 = c[k..2 * k].iter().sum::<f64>() - k as f64 * o;
            let e0 =
                gamma * c[..k].iter().map(|v| v.abs()).sum::<f64>() + U * (k as f64 * o + d0.abs());
            let e1 = 2.0 * dn + e0;
            if d1 > e1 && d0 - d1 > e0 + e1 {
                let lr = (d0 / d1).ln();
                let tau = cpu.tau_rld[[y, x]];
                let rel = (e0 / d0 + e1 / d1) / lr + 8.0 * U;
                within(
                    gpu.tau_rld[[y, x]],
                    f64::from(tau),
                    rel * f64::from(tau).abs() + 1e-7 * f64::from(tau).abs(),
                    &format!("{at}: RLD"),
                )?;
            }
        }
        // IEM.
        if methods.contains(Methods::IEM) {
            let (f, l) = (c[0] - o, c[m - 1] - o);
            let (ef, el) = (U * (c[0] + o), U * (c[m - 1] + o));
            let simp_abs = 4.0 / 3.0 * (abs_sum + mf * o);
            let tau = f64::from(cpu.tau_iem[[y, x]]);
            let sum_s = tau * (f - l) / h;
            if (f - l).abs() > 4.0 * (ef + el) && sum_s.abs() > 0.0 {
                let rel = (gamma + 2.0 * U) * simp_abs / sum_s.abs()
                    + (ef + el) / (f - l).abs()
                    + 8.0 * U;
                within(
                    gpu.tau_iem[[y, x]],
                    tau,
                    rel * tau.abs() + 1e-7 * tau.abs(),
                    &format!("{at}: IEM"),
                )?;
            }
        }
        // CMM (backward error).
        if methods.contains(Methods::CMM) {
            let m1: f64 = c
                .iter()
                .enumerate()
                .map(|(j, v)| j as f64 * (v - o))
                .sum::<f64>();
            let m1_abs: f64 = c
                .iter()
                .enumerate()
                .map(|(j, v)| j as f64 * (v.abs() + o))
                .sum::<f64>();
            let mu = m1 / n;
            let dmu = (gamma * m1_abs + U * m1.abs()) / n.abs() + mu.abs() * dn / n.abs();
            let flat = 0.5 * (mf - 1.0);
            let (tg, tc) = (
                f64::from(gpu.tau_cmm[[y, x]]),
                f64::from(cpu.tau_cmm[[y, x]]),
            );
            if mu.abs() <= dmu || (flat - mu).abs() <= dmu {
                continue; // NaN / infinite / finite could go either way
            }
            if !tc.is_finite() {
                prop_assert!(
                    tc.is_nan() == tg.is_nan() && (tc.is_nan() || tg == tc),
                    "{}: CMM GPU {} CPU {}",
                    at,
                    tg,
                    tc
                );
                continue;
            }
            prop_assert!(tg.is_finite(), "{}: CMM GPU {} CPU {}", at, tg, tc);
            let a = h / tg;
            let ya = a.ln();
            let slope = a * (b_deriv(a) - mf * mf * b_deriv(a * mf));
            let eval = 8.0 * U * (b_fn(a).abs() + mf * b_fn(a * mf).abs());
            let solver = slope.abs() * (2e-6 * ya.abs().max(1.0) + 4.0 * U);
            let (mg, mc) = (mean_bin(a, mf), mean_bin(h / tc, mf));
            prop_assert!(
                (mg - mc).abs() <= dmu + eval + solver,
                "{}: CMM GPU {} CPU {}: mean bin {} vs {} (tolerance {:e})",
                at,
                tg,
                tc,
                mg,
                mc,
                dmu + eval + solver
            );
        }
    }
    Ok(())
}

/// A random decay cube: mono-exponential expected counts plus a flat background with
/// Poisson-like integer jitter from a seed, some empty pixels.
fn random_cube(h: usize, w: usize, bins: usize, bin_ns: f64, peak: f64, seed: u64) -> Array3<f64> {
    let mut s = seed | 1;
    let mut next = move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        (s >> 11) as f64 / (1u64 << 53) as f64
    };
    let mut a = Array3::<f64>::zeros((h, w, bins));
    for y in 0..h {
        for x in 0..w {
            if next() < 0.05 {
                continue; // an empty pixel
            }
            let tau = 0.2 + 8.0 * next();
            let amp = peak * next();
            let bg = 3.0 * next();
            for j in 0..bins {
                let e = amp * (-(j as f64 * bin_ns) / tau).exp() + bg;
                a[[y, x, j]] = (e + (next() - 0.5) * 2.0 * e.sqrt()).round().max(0.0);
            }
        }
    }
    a
}

const METHOD_SETS: [Methods; 6] = [
    Methods::ALL,
    Methods::ALL,
    Methods::RLD,
    Methods::IEM,
    Methods::CMM,
    Methods::PHASOR,
];

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn flim_lifetimes_match_the_cpu(
        h in 1usize..20,
        w in 1usize..33,
        bins in 8usize..300,
        bin_ns in 0.01f64..0.4,
        peak in 1.0f64..3000.0,
        kind in 0u32..3,
        first_frac in 0.0f64..0.3,
        offset in prop_oneof![Just(0.0f64), 0.0f64..2.0],
        threshold in prop_oneof![Just(1.0f64), 0.0f64..500.0],
        harmonic in 1u32..3,
        period_scale in 1.0f64..2.0,
        cal_phase in prop_oneof![Just(0.0f64), -1.0f64..1.0],
        cal_mod in prop_oneof![Just(1.0f64), 0.5f64..2.0],
        set in 0usize..6,
        seed in any::<u64>(),
    ) {
        let raw = random_cube(h, w, bins, bin_ns, peak, seed);
        let first = ((bins as f64 * first_frac) as usize).min(bins - 4);
        let m = bins - first;
        let period = bins as f64 * bin_ns * period_scale;
        let methods = METHOD_SETS[set];
        let opts = Analysis::default()
            .with_range(first, Some(m))
            .with_offset(offset)
            .with_threshold(threshold)
            .with_harmonic(harmonic)
            .with_calibration(flim_core::Calibration { phase: cal_phase, modulation: cal_mod })
            .with_methods(methods);
        let cal = (cal_mod * cal_phase.cos(), cal_mod * cal_phase.sin());
        let set = Settings { offset, threshold, first, m, harmonic, cal, methods };
        match kind {
            0 => compare(&Cube::new(raw.mapv(|v| v.min(65535.0) as u16), bin_ns).unwrap().with_period_ns(period).unwrap(), &opts, &set)?,
            1 => compare(&Cube::new(raw.mapv(|v| v as u32 * 37), bin_ns).unwrap().with_period_ns(period).unwrap(), &opts, &set)?,
            _ => compare(&Cube::new(raw.mapv(|v| (v * 0.73) as f32), bin_ns).unwrap().with_period_ns(period).unwrap(), &opts, &set)?,
        }
    }
}

/// Many pixels, several chunks' worth on small devices: the chunked upload keeps pixel order.
#[test]
fn large_u16_cube_matches_the_cpu_pixel_for_pixel() {
    let Some(device) = gpu_under_test("large_u16_cube_matches_the_cpu_pixel_for_pixel") else {
        return;
    };
    let cube = flim_core::sim::mono_exponential(
        &[1.0, 2.0, 3.0, 4.0],
        64,
        129,
        256,
        0.05,
        12.8,
        800.0,
        11,
    )
    .unwrap();
    let cpu = analyse(&cube, &Analysis::default()).unwrap();
    let gpu = analyse_on(&cube, &Analysis::default(), &device).unwrap();
    assert_eq!(gpu.status, cpu.status);
    for (a, b) in gpu.intensity.iter().zip(cpu.intensity.iter()) {
        assert_eq!(a, b, "integer photon sums are exact in f32 below 2^24");
    }
    for (a, b) in gpu.g.iter().zip(cpu.g.iter()) {
        assert!((a - b).abs() < 2e-5, "g {a} vs {b}");
    }
}
