//! The two absorption estimators of the CPU reference: track length (the default) and
//! interaction. Both are unbiased; track length scores every path segment, so its per-tet
//! fluence is less noisy per photon.

use montecarlo_core::model::physics::C_MM_PER_NS;
use montecarlo_core::sim::generate;
use montecarlo_core::{Estimator, Gates, Material, Optics, Outputs, Params, Simulation, Source};

fn one(mua: f64, mus: f64, g: f64) -> Optics {
    Optics {
        materials: vec![Material {
            mua,
            mus,
            g,
            n: 1.0,
        }],
        n_outside: 1.0,
    }
}

/// A pencil beam through a clear absorber (mus = 0, mua = 0.1/mm, 10 mm thick, matched
/// index): with the track-length estimator every photon deposits exactly Beer-Lambert's
/// exp(-mua z0) - exp(-mua z1) in each 1 mm layer, whatever the number of photons (the
/// only error is the f32 face planes, ~1e-7 mm); the rest escapes at the far face. Time
/// gates of 0.01 ns (2.998 mm of depth at n = 1, so segments straddle gate boundaries) get
/// the exact share of their depth range too.
#[test]
fn track_length_scores_beer_lambert_exactly_in_a_clear_absorber() {
    let mesh = generate::box_mesh([0.0; 3], [10.0; 3], 1.0, 5).unwrap();
    let src = [Source::Pencil {
        pos: [5.13, 5.27, 0.0],
        dir: [0.0, 0.0, 1.0],
        power: 1.0,
    }];
    let mua = 0.1;
    let mut sim = Simulation::new(mesh, one(mua, 0.0, 0.0), &src, 50, Params::default()).unwrap();
    let width_ns = 0.01;
    sim.set_outputs(Outputs {
        gates: Some(Gates { width_ns, count: 3 }),
        ..Outputs::default()
    })
    .unwrap();
    let r = sim.run_cpu(0, 50);
    let depth = C_MM_PER_NS * width_ns;
    for k in 0..3 {
        let got: f64 = r.gated_absorbed(k).iter().sum();
        let want = (-mua * depth * k as f64).exp() - (-mua * depth * (k + 1) as f64).exp();
        assert!((got - want).abs() < 1e-7, "gate {k}: {got} vs {want}");
    }
    let absorbed = r.absorbed();
    let mut layer = [0.0f64; 10];
    for (t, a) in absorbed.iter().enumerate() {
        let z = sim.mesh.centroid(t as u32 + 1)[2];
        layer[z.floor() as usize] += a;
    }
    for (k, got) in layer.iter().enumerate() {
        let want = (-mua * k as f64).exp() - (-mua * (k + 1) as f64).exp();
        assert!((got - want).abs() < 1e-7, "layer {k}: {got} vs {want}");
    }
    let s = &r.summary;
    assert!((s.escaped - (-mua * 10.0f64).exp()).abs() < 1e-7, "{s:?}");
    assert!(s.balance_error.abs() < 1e-12, "{s:?}");
}

/// Per-tet fluence of a diffusive box (mua 0.05/mm, mus 1/mm, g 0.5; pencil beam) over 8
/// seeds of 20,000 photons with each estimator. The two means agree (every tet within 5
/// standard errors of the difference, and the total absorbed within 3), and the summed
/// per-tet variance is lower with track length (measured 0.56x of interaction's here).
#[test]
fn track_length_agrees_with_interaction_and_is_less_noisy() {
    let mesh = generate::box_mesh([0.0; 3], [12.0; 3], 2.0, 5).unwrap();
    let src = [Source::Pencil {
        pos: [6.1, 6.2, 0.0],
        dir: [0.0, 0.0, 1.0],
        power: 1.0,
    }];
    let photons = 20_000;
    let seeds = 8u64;
    let mut sim =
        Simulation::new(mesh, one(0.05, 1.0, 0.5), &src, photons, Params::default()).unwrap();
    let tets = sim.mesh.len();
    // Per estimator: per-tet sum and sum of squares of fluence, and the absorbed totals.
    let mut stats = Vec::new();
    for est in [Estimator::TrackLength, Estimator::Interaction] {
        let (mut sum, mut sq) = (vec![0.0; tets], vec![0.0; tets]);
        let mut absorbed = Vec::new();
        for seed in 0..seeds {
            sim.params = Params::default().with_estimator(est).with_seed(100 + seed);
            let r = sim.run_cpu(0, photons);
            for (t, f) in r.fluence(&sim.mesh, &sim.optics).iter().enumerate() {
                sum[t] += f;
                sq[t] += f * f;
            }
            absorbed.push(r.summary.absorbed);
            assert!(r.summary.balance_error.abs() < 1e-12, "{:?}", r.summary);
        }
        let k = seeds as f64;
        let mean: Vec<f64> = sum.iter().map(|s| s / k).collect();
        let var: Vec<f64> = (0..tets)
            .map(|t| ((sq[t] / k - mean[t] * mean[t]) * k / (k - 1.0)).max(0.0))
            .collect();
        stats.push((mean, var, absorbed));
    }
    let (tl, int) = (&stats[0], &stats[1]);
    for t in 0..tets {
        let se = ((tl.1[t] + int.1[t]) / seeds as f64).sqrt();
        assert!(
            (tl.0[t] - int.0[t]).abs() <= 5.0 * se + 1e-12,
            "tet {}: {} vs {} (se {se})",
            t + 1,
            tl.0[t],
            int.0[t]
        );
    }
    let mean_sd = |a: &[f64]| {
        let m = a.iter().sum::<f64>() / a.len() as f64;
        let v = a.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / (a.len() - 1) as f64;
        (m, v / a.len() as f64)
    };
    let ((ma, va), (mb, vb)) = (mean_sd(&tl.2), mean_sd(&int.2));
    assert!(
        (ma - mb).abs() < 3.0 * (va + vb).sqrt(),
        "absorbed {ma} vs {mb}"
    );
    let (v_tl, v_int): (f64, f64) = (tl.1.iter().sum(), int.1.iter().sum());
    eprintln!(
        "summed per-tet variance: track length / interaction = {}",
        v_tl / v_int
    );
    assert!(
        v_tl < 0.8 * v_int,
        "track length {v_tl} vs interaction {v_int}"
    );
}
