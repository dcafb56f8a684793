//! Detectors and detected-photon records (CPU reference): exact cases, the Beer-Lambert law
//! along the recorded partial pathlengths, the record cap, files and bad input.

use montecarlo_core::io::results;
use montecarlo_core::model::detector::{Detection, Detector};
use montecarlo_core::model::physics::C_MM_PER_NS;
use montecarlo_core::sim::generate;
use montecarlo_core::{Estimator, Gates, Material, Optics, Outputs, Params, Simulation, Source};

fn detection(detectors: Vec<Detector>) -> Outputs {
    Outputs {
        detection: Some(Detection {
            detectors,
            max_photons: 1_000_000,
            momentum: true,
        }),
        ..Outputs::default()
    }
}

/// A pencil beam through a clear absorber slab (mus = 0, mua 0.1/mm, n = 1 matched, 10 mm):
/// every photon leaves through the far face on the axis, detected with partial pathlength
/// 10 mm, weight exp(-1), time 10 mm / c, no scattering, direction +z. A second detector
/// elsewhere on that face sees nothing.
#[test]
fn a_clear_slab_gives_exact_records() {
    let mesh = generate::box_mesh([0.0; 3], [10.0; 3], 1.0, 5).unwrap();
    let src = [Source::Pencil {
        pos: [5.13, 5.27, 0.0],
        dir: [0.0, 0.0, 1.0],
        power: 1.0,
    }];
    let optics = Optics {
        materials: vec![Material {
            mua: 0.1,
            mus: 0.0,
            g: 0.0,
            n: 1.0,
        }],
        n_outside: 1.0,
    };
    let mut sim = Simulation::new(mesh, optics, &src, 200, Params::default()).unwrap();
    sim.set_outputs(detection(vec![
        Detector {
            pos: [5.0, 5.0, 10.0],
            radius: 1.0,
        },
        Detector {
            pos: [1.0, 1.0, 10.0],
            radius: 0.5,
        },
    ]))
    .unwrap();
    let r = sim.run_cpu(0, 200);
    let d = &r.tally.detectors;
    assert_eq!(d.count, vec![200, 0]);
    assert_eq!(d.photons.len(), 200);
    for (i, p) in d.photons.iter().enumerate() {
        assert_eq!((p.detector, p.photon, p.scatters), (1, i as u64, 0));
        assert!((p.ppath[0] - 10.0).abs() < 1e-6, "{p:?}");
        assert!((p.weight - (-1.0f64).exp()).abs() < 1e-7, "{p:?}");
        assert!((p.time_ns - 10.0 / C_MM_PER_NS).abs() < 1e-9, "{p:?}");
        assert!(
            (p.pos[2] - 10.0).abs() < 1e-6 && (p.dir[2] - 1.0).abs() < 1e-12,
            "{p:?}"
        );
        assert_eq!(p.momentum, vec![0.0]);
    }
    let total: f64 = d.weight[0] / 200.0;
    assert!((total - r.summary.escaped).abs() < 1e-12);
}

/// Two scattering layers (2 mm of mua[0], then mua[1]; mus 2/mm, g 0.8, n 1.4), a pencil
/// beam, roulette never reached (wmin 1e-12) and a 2 ns limit that keeps weights above 0.1:
/// a detected photon's path does not depend on mua.
fn two_layers(mua: [f64; 2], estimator: Estimator, photons: u64) -> Simulation {
    let mesh = generate::slab_mesh(20.0, &[2.0, 8.0], 10, 4, 5).unwrap();
    let mat = |mua| Material {
        mua,
        mus: 2.0,
        g: 0.8,
        n: 1.4,
    };
    let optics = Optics {
        materials: vec![mat(mua[0]), mat(mua[1])],
        n_outside: 1.0,
    };
    let src = [Source::Pencil {
        pos: [0.1, 0.2, 0.0],
        dir: [0.0, 0.0, 1.0],
        power: 1.0,
    }];
    let params = Params {
        wmin: 1e-12,
        time_limit_ns: Some(2.0),
        estimator,
        ..Params::default()
    };
    Simulation::new(mesh, optics, &src, photons, params).unwrap()
}

/// The detector of the two-layer tests: 5 mm from the beam on the lit face.
const DETECTOR: Detector = Detector {
    pos: [5.0, 0.0, 0.0],
    radius: 2.0,
};

/// Two scattering layers with different absorption, roulette never reached (wmin 1e-12;
/// a 2 ns limit keeps weights above 0.1), track length:
/// a packet's weight only decays along its path, so every record's exit weight is exactly
/// (1 - Rsp) exp(-sum_r mua_r L_r) over its partial pathlengths; with one index, the total
/// path is c t / n. The record's photon index replays it: rerunning only that photon gives
/// the same record.
#[test]
fn exit_weights_follow_beer_lambert_along_the_partial_pathlengths() {
    let photons = 20_000;
    let mut sim = two_layers([0.02, 0.005], Estimator::TrackLength, photons);
    let mut out = detection(vec![DETECTOR]);
    out.gates = Some(Gates {
        width_ns: 0.1,
        count: 20,
    });
    sim.set_outputs(out).unwrap();
    let r = sim.run_cpu(0, photons);
    let d = &r.tally.detectors;
    assert!(d.photons.len() > 100, "{} detected", d.photons.len());
    let rsp = ((1.4f64 - 1.0) / 2.4).powi(2);
    let mut deep = 0;
    for p in &d.photons {
        let want = (1.0 - rsp) * (-(0.02 * p.ppath[0] + 0.005 * p.ppath[1])).exp();
        assert!((p.weight / want - 1.0).abs() < 1e-9, "{p:?} want {want}");
        let path: f64 = p.ppath.iter().sum();
        assert!(
            (path - p.time_ns * C_MM_PER_NS / 1.4).abs() < 1e-9 * path,
            "{p:?}"
        );
        assert!(p.scatters > 0 && (p.pos[0] - 5.0).hypot(p.pos[1]) <= 2.0);
        assert!(p.pos[2].abs() < 1e-6 && p.dir[2] < 0.0, "{p:?}");
        deep += usize::from(p.ppath[1] > 0.0);
    }
    assert!(deep > 0, "no detected photon reached the second layer");
    // The TPSF sums to the detected weight (every detection is before the 2 ns limit).
    let tpsf: f64 = d.tpsf.iter().sum();
    assert!((tpsf - d.weight[0]).abs() < 1e-9 * d.weight[0]);
    // Replay: the same photon alone gives the same record.
    let p = &d.photons[d.photons.len() / 2];
    let again = sim.run_cpu(p.photon, 1);
    assert_eq!(again.tally.detectors.photons, vec![p.clone()]);
}

/// The record cap keeps the lowest photon indices, counts the rest as dropped, and leaves
/// the detector totals whole.
#[test]
fn the_record_cap_keeps_the_first_photons_and_counts_the_rest() {
    let mesh = generate::box_mesh([0.0; 3], [10.0; 3], 1.0, 5).unwrap();
    let optics = Optics {
        materials: vec![Material {
            mua: 0.01,
            mus: 1.0,
            g: 0.5,
            n: 1.0,
        }],
        n_outside: 1.0,
    };
    let src = [Source::Isotropic {
        pos: [5.0, 5.0, 5.0],
        power: 1.0,
    }];
    let mut sim = Simulation::new(mesh, optics, &src, 20_000, Params::default()).unwrap();
    let mut out = detection(vec![Detector {
        pos: [5.0, 5.0, 0.0],
        radius: 3.0,
    }]);
    sim.set_outputs(out.clone()).unwrap();
    let all = sim.run_cpu(0, 20_000).tally.detectors;
    out.detection.as_mut().unwrap().max_photons = 50;
    sim.set_outputs(out).unwrap();
    let capped = sim.run_cpu(0, 20_000).tally.detectors;
    assert_eq!(capped.photons[..], all.photons[..50]);
    assert_eq!(capped.dropped, all.photons.len() as u64 - 50);
    assert_eq!(capped.count, all.count);
    assert!((capped.weight[0] - all.weight[0]).abs() < 1e-9 * all.weight[0]);
}

/// Files: `detected.npy` holds the records as f64 rows of `detected_columns`; summary and
/// CSVs say the same.
#[test]
fn detected_photons_are_written_as_npy_and_csv() {
    let mesh = generate::box_mesh([0.0; 3], [10.0; 3], 2.0, 5).unwrap();
    let optics = Optics {
        materials: vec![Material {
            mua: 0.01,
            mus: 1.0,
            g: 0.5,
            n: 1.0,
        }],
        n_outside: 1.0,
    };
    let src = [Source::Pencil {
        pos: [5.1, 5.2, 0.0],
        dir: [0.0, 0.0, 1.0],
        power: 1.0,
    }];
    let mut sim = Simulation::new(mesh, optics, &src, 5_000, Params::default()).unwrap();
    sim.set_outputs(detection(vec![Detector {
        pos: [7.0, 5.0, 0.0],
        radius: 1.5,
    }]))
    .unwrap();
    let r = sim.run_cpu(0, 5_000);
    let dir = std::env::temp_dir().join(format!("biogpu-det-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    results::write(&dir, &sim, &r).unwrap();
    for name in results::file_names(&sim) {
        assert!(dir.join(name).is_file(), "{name} missing");
    }
    let table: ndarray::Array2<f64> = ndarray_npy::read_npy(dir.join("detected.npy")).unwrap();
    let cols = results::detected_columns(&sim);
    assert_eq!(cols.len(), 11 + 2);
    assert_eq!(table.dim(), (r.tally.detectors.photons.len(), cols.len()));
    assert_eq!(table[[0, 1]], r.tally.detectors.photons[0].photon as f64);
    let csv = std::fs::read_to_string(dir.join("detected.csv")).unwrap();
    assert_eq!(csv.lines().count(), table.nrows() + 1);
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("summary.json")).unwrap()).unwrap();
    assert_eq!(summary["detected_records"], table.nrows());
    assert_eq!(summary["detectors"][0]["photons"], table.nrows());
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Detectors that cannot work are refused, naming the field.
#[test]
fn bad_detectors_are_clear_errors() {
    let mesh = generate::box_mesh([0.0; 3], [10.0; 3], 2.0, 5).unwrap();
    let optics = Optics {
        materials: vec![Material {
            mua: 0.01,
            mus: 1.0,
            g: 0.5,
            n: 1.0,
        }],
        n_outside: 1.0,
    };
    let src = [Source::Isotropic {
        pos: [5.0, 5.0, 5.0],
        power: 1.0,
    }];
    let mut sim = Simulation::new(mesh, optics, &src, 10, Params::default()).unwrap();
    let cases = [
        (vec![], "no detectors"),
        (
            vec![Detector {
                pos: [5.0, 5.0, 0.0],
                radius: 0.0,
            }],
            "radius 0 must be > 0",
        ),
        (
            vec![Detector {
                pos: [5.0, 5.0, 5.0],
                radius: 1.0,
            }],
            "from the mesh surface",
        ),
        (
            vec![Detector {
                pos: [f64::NAN, 5.0, 0.0],
                radius: 1.0,
            }],
            "must be finite",
        ),
    ];
    for (dets, want) in cases {
        let e = sim.set_outputs(detection(dets)).unwrap_err().to_string();
        assert!(e.contains(want) && e.contains("outputs.detection"), "{e}");
    }
    let e = serde_json::from_str::<Detection>(r#"{"detectors": [{"pos": [0,0,0], "r": 1}]}"#)
        .unwrap_err()
        .to_string();
    assert!(e.contains("unknown field"), "{e}");
}

/// The replayed Jacobian is the derivative of the detected weight. Two scattering layers,
/// roulette off (wmin 1e-12) and a 2 ns limit, so that a photon's path does not depend on
/// mua: the detector's weight at mua_r + d and mua_r - d (same seed, same paths) gives the
/// derivative by a central difference, computed by the transport's own weight decay, which
/// the replay's sum of exit weight x path length per tet must match region by region (to
/// 1e-8; measured 2e-10 and 5e-11, the central difference's own error being ~1e-9). The
/// per-tet sums also add up to each record's weight x partial pathlength, and are the same
/// bits on one thread as on all.
#[test]
fn the_replayed_jacobian_is_the_derivative_of_the_detected_weight() {
    let photons = 20_000;
    let sim_with = |mua: [f64; 2], estimator: Estimator| {
        let mut sim = two_layers(mua, estimator, photons);
        sim.set_outputs(detection(vec![DETECTOR])).unwrap();
        sim
    };
    let mua = [0.02, 0.005];
    let sim = sim_with(mua, Estimator::TrackLength);
    let r = sim.run_cpu(0, photons);
    let records = &r.tally.detectors.photons;
    let jac = sim.replay_cpu(records, 1).unwrap();
    assert_eq!(jac.photons, records.len());
    // The same bits on one thread.
    let one = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .unwrap();
    assert_eq!(one.install(|| sim.replay_cpu(records, 1)).unwrap(), jac);
    assert!((jac.weight - r.tally.detectors.weight[0]).abs() < 1e-12 * jac.weight);
    // Per launched photon, one entry per tet.
    let per_photon = jac.dw_dmua(photons);
    assert_eq!(per_photon.len(), sim.mesh.len());
    let total: f64 = jac.weighted_path.iter().sum();
    let summed: f64 = per_photon.iter().sum();
    assert!((summed + total / photons as f64).abs() <= 1e-12 * total / photons as f64);
    for region in 0..2 {
        // -dW/dmua_r from the replay: its tets' weighted path lengths.
        let replayed: f64 = (1..=sim.mesh.len())
            .filter(|&t| sim.mesh.regions[t] as usize == region + 1)
            .map(|t| jac.weighted_path[t])
            .sum();
        let from_records: f64 = records.iter().map(|p| p.weight * p.ppath[region]).sum();
        assert!(
            (replayed - from_records).abs() <= 1e-9 * from_records,
            "region {region}: {replayed} against the records' {from_records}"
        );
        let d = 1e-4 * mua[region];
        let weight_at = |m: f64| {
            let mut mu = mua;
            mu[region] = m;
            sim_with(mu, Estimator::TrackLength)
                .run_cpu(0, photons)
                .tally
                .detectors
                .weight[0]
        };
        let derivative = (weight_at(mua[region] + d) - weight_at(mua[region] - d)) / (2.0 * d);
        assert!(
            (derivative + replayed).abs() <= 1e-8 * replayed,
            "region {region}: dW/dmua {derivative} by differences, {} replayed",
            -replayed
        );
    }
    // Bad input: records of another seed, a detector that does not exist, the interaction
    // estimator, a simulation without detectors.
    let mut other = sim_with(mua, Estimator::TrackLength);
    other.params.seed = 2;
    let e = other.replay_cpu(records, 1).unwrap_err().to_string();
    assert!(
        e.contains("does not replay to its record") && e.contains("--device cpu"),
        "{e}"
    );
    let e = sim.replay_cpu(records, 2).unwrap_err().to_string();
    assert!(e.contains("detector 2") && e.contains("1..=1"), "{e}");
    let e = sim_with(mua, Estimator::Interaction)
        .replay_cpu(records, 1)
        .unwrap_err()
        .to_string();
    assert!(e.contains("track-length"), "{e}");
    let mut none = sim_with(mua, Estimator::TrackLength);
    none.set_outputs(Outputs::default()).unwrap();
    let e = none.replay_cpu(records, 1).unwrap_err().to_string();
    assert!(e.contains("no detectors"), "{e}");
}
