//! FLIM non-iterative methods on the GPU (f32) against the f64 CPU reference.
//!
//! Tolerances scale with each pixel's conditioning, computed here in f64 from the counts
//! (`v_j` = counts minus offset, `n = sum v_j`, `kappa = sum |v_j| / n`; f32 unit roundoff
//! `u = 6e-8`, sums of up to 4,096 terms):
//! - intensity: |dn| <= 1e-6 sum |v_j|; status equal unless n is that close to the threshold.
//! - g, s: |d| <= 2e-6 kappa + 1e-6 (cos/sin tables rounded to f32).
//! - phase and modulation lifetimes: the GPU's value equals the formula applied to the GPU's
//!   own (g, s) to 1e-5 relative (the formula is checked; its conditioning is (g, s)'s).
//! - RLD `K h / ln(D0/D1)`: relative 1e-5 + 4e-6 kappa / |ln(D0/D1)|.
//! - IEM `h S / (N_0 - N_{M-1})`: relative 1e-5 + 1e-6 (sum |v_j| + |N_0| + |N_{M-1}|) / |N_0 - N_{M-1}|.
//! - CMM (bisection for the window-cut mean bin index): backward error; the mean bin index
//!   implied by the GPU's lifetime matches the CPU's to 2e-6 kappa M.

use biogpu_tests::gpu_under_test;
use flim_core::gpu::analyse_on;
use flim_core::methods::STATUS_OK;
use flim_core::{Analysis, Count, Cube, LifetimeMaps, analyse};
use ndarray::Array3;
use proptest::prelude::*;

/// Mean bin index of a bin-integrated exponential with `a = h / tau`, cut at `m` bins.
fn mean_bin(a: f64, m: f64) -> f64 {
    if a == 0.0 {
        return 0.5 * (m - 1.0);
    }
    1.0 / a.exp_m1() - m / (a * m).exp_m1()
}

struct PixelStats {
    n: f64,
    abs_sum: f64,
    d0: f64,
    d1: f64,
    first: f64,
    last: f64,
}

fn pixel_stats(v: &[f64], offset: f64) -> PixelStats {
    let k = v.len() / 2;
    let w: Vec<f64> = v.iter().map(|c| c - offset).collect();
    PixelStats {
        n: w.iter().sum(),
        abs_sum: w.iter().map(|x| x.abs()).sum(),
        d0: w[..k].iter().sum(),
        d1: w[k..2 * k].iter().sum(),
        first: w[0],
        last: w[w.len() - 1],
    }
}

/// What `compare` needs to know of the analysis settings.
#[derive(Clone, Copy)]
struct Settings {
    offset: f64,
    threshold: f64,
    first: usize,
    m: usize,
    harmonic: u32,
}

fn close(got: f32, want: f32, rel: f64, what: &str) -> Result<(), TestCaseError> {
    let (g, w) = (f64::from(got), f64::from(want));
    if g.is_nan() || w.is_nan() || g.is_infinite() || w.is_infinite() {
        prop_assert!(
            g.is_nan() == w.is_nan() && (g.is_nan() || g == w),
            "{what}: GPU {got}, CPU {want}"
        );
        return Ok(());
    }
    prop_assert!(
        (g - w).abs() <= rel * w.abs(),
        "{what}: GPU {got}, CPU {want}, rel tol {rel:e}"
    );
    Ok(())
}

fn compare<T: Count>(cube: &Cube<T>, opts: &Analysis, s: &Settings) -> Result<(), TestCaseError> {
    let Some(device) = gpu_under_test("flim_lifetimes_match_the_cpu") else {
        return Ok(());
    };
    let cpu = analyse(cube, opts).unwrap();
    let gpu: LifetimeMaps = analyse_on(cube, opts, &device).unwrap();
    let counts = cube.counts();
    let Settings {
        offset,
        threshold,
        first,
        m,
        harmonic,
    } = *s;
    let omega = 2.0 * std::f64::consts::PI / cube.period_ns() * f64::from(harmonic);
    for ((y, x), &st) in cpu.status.indexed_iter() {
        let v: Vec<f64> = counts
            .slice(ndarray::s![y, x, first..first + m])
            .iter()
            .map(|&c| c.into())
            .collect();
        let ps = pixel_stats(&v, offset);
        let at = format!("pixel ({y}, {x}), n {}", ps.n);
        let dn = 1e-6 * ps.abs_sum + 1e-6;
        prop_assert!(
            (f64::from(gpu.intensity[[y, x]]) - ps.n).abs() <= dn,
            "{at}: intensity {}",
            gpu.intensity[[y, x]]
        );
        if (ps.n - threshold).abs() <= dn || ps.n.abs() <= dn {
            continue; // status may differ at the threshold
        }
        prop_assert_eq!(gpu.status[[y, x]], st, "{}: status", at);
        if st != STATUS_OK {
            for p in &gpu.planes()[1..] {
                prop_assert!(p[[y, x]].is_nan(), "{}: masked pixel has a value", at);
            }
            continue;
        }
        let kappa = ps.abs_sum / ps.n;
        for (name, a, b) in [("g", &gpu.g, &cpu.g), ("s", &gpu.s, &cpu.s)] {
            let (ga, cb) = (f64::from(a[[y, x]]), f64::from(b[[y, x]]));
            prop_assert!(
                (ga - cb).abs() <= 2e-6 * kappa + 1e-6,
                "{at}: {name} GPU {ga} CPU {cb}"
            );
        }
        let (g, s) = (f64::from(gpu.g[[y, x]]), f64::from(gpu.s[[y, x]]));
        let phase = s / (omega * g);
        let modl = (1.0 / (g * g + s * s) - 1.0).sqrt() / omega;
        close(
            gpu.tau_phase[[y, x]],
            phase as f32,
            1e-5,
            &format!("{at}: phase lifetime from the GPU's (g, s)"),
        )?;
        close(
            gpu.tau_mod[[y, x]],
            modl as f32,
            1e-5,
            &format!("{at}: modulation lifetime from the GPU's (g, s)"),
        )?;
        let lr = (ps.d0 / ps.d1).ln().abs();
        if ps.d1 > 0.0 && lr > 1e-4 {
            close(
                gpu.tau_rld[[y, x]],
                cpu.tau_rld[[y, x]],
                1e-5 + 4e-6 * kappa / lr,
                &format!("{at}: RLD"),
            )?;
        }
        let dl = (ps.first - ps.last).abs();
        if dl > 1e-3 * ps.abs_sum / m as f64 {
            let rel = 1e-5 + 1e-6 * (ps.abs_sum + ps.first.abs() + ps.last.abs()) / dl;
            close(
                gpu.tau_iem[[y, x]],
                cpu.tau_iem[[y, x]],
                rel,
                &format!("{at}: IEM"),
            )?;
        }
        let (tg, tc) = (
            f64::from(gpu.tau_cmm[[y, x]]),
            f64::from(cpu.tau_cmm[[y, x]]),
        );
        if tc.is_finite() && tg.is_finite() {
            let h = cube.bin_ns();
            let (mg, mc) = (mean_bin(h / tg, m as f64), mean_bin(h / tc, m as f64));
            prop_assert!(
                (mg - mc).abs() <= 2e-6 * kappa * m as f64 + 1e-5,
                "{at}: CMM GPU {tg} CPU {tc}: mean bin {mg} vs {mc}"
            );
        } else {
            prop_assert!(tc.is_nan() == tg.is_nan(), "{at}: CMM GPU {tg} CPU {tc}");
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
        seed in any::<u64>(),
    ) {
        let raw = random_cube(h, w, bins, bin_ns, peak, seed);
        let first = ((bins as f64 * first_frac) as usize).min(bins - 4);
        let m = bins - first;
        let period = bins as f64 * bin_ns * period_scale;
        let opts = Analysis::default()
            .with_range(first, Some(m))
            .with_offset(offset)
            .with_threshold(threshold)
            .with_harmonic(harmonic);
        let set = Settings { offset, threshold, first, m, harmonic };
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
