//! Property tests of the mesh builder and generators (random grids), and of the simulation
//! file's error messages.

use montecarlo_core::Simulation;
use montecarlo_core::sim::generate;
use proptest::prelude::*;

fn planes(start: f64, steps: &[f64]) -> Vec<f64> {
    let mut v = vec![start];
    for s in steps {
        v.push(v.last().unwrap() + s);
    }
    v
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// Random rectilinear grids: the mesh is closed and conforming (boundary area = box
    /// surface, volumes sum to the box), neighbours are mutual, every face plane holds its
    /// three nodes and has the fourth inside (1e-9 relative).
    #[test]
    fn random_grids_are_closed_conforming_and_outward(
        dx in prop::collection::vec(0.1f64..3.0, 1..4),
        dy in prop::collection::vec(0.1f64..3.0, 1..4),
        dz in prop::collection::vec(0.1f64..3.0, 1..4),
        six in any::<bool>(),
        origin in -10.0f64..10.0,
    ) {
        let (xs, ys, zs) = (planes(origin, &dx), planes(0.0, &dy), planes(-origin, &dz));
        let m = generate::grid_mesh(&xs, &ys, &zs, if six { 6 } else { 5 }, |_| 1).unwrap();
        let (a, b, c) = (xs[xs.len() - 1] - xs[0], ys[ys.len() - 1] - ys[0], zs[zs.len() - 1] - zs[0]);
        let vol: f64 = m.volumes.iter().sum();
        let area: f64 = m.boundary_area.iter().sum();
        prop_assert!((vol - a * b * c).abs() < 1e-9 * a * b * c);
        prop_assert!((area - 2.0 * (a * b + b * c + a * c)).abs() < 1e-9 * area);
        for t in 1..=m.len() {
            for f in 0..4 {
                let nb = m.neighbours[t][f] as usize;
                if nb > 0 {
                    prop_assert!(m.neighbours[nb].contains(&(t as u32)));
                }
                let p = m.faces[t][f];
                for (k, &v) in m.tets[t].iter().enumerate() {
                    let x = m.nodes[v as usize];
                    let d = p[0] * x[0] + p[1] * x[1] + p[2] * x[2] - p[3];
                    if k == f {
                        prop_assert!(d < 0.0);
                    } else {
                        prop_assert!(d.abs() < 1e-9 * (1.0 + origin.abs() + a + b + c));
                    }
                }
            }
        }
    }

    /// A point inside the box is located in a tetrahedron that holds it, and a straight walk
    /// from the centre reaches a tetrahedron that holds it too.
    #[test]
    fn locate_and_walk_find_the_containing_tet(
        fx in 0.01f64..0.99, fy in 0.01f64..0.99, fz in 0.01f64..0.99,
    ) {
        let m = generate::box_mesh([0.0; 3], [6.0, 4.0, 5.0], 1.0, 5).unwrap();
        let p = [6.0 * fx, 4.0 * fy, 5.0 * fz];
        let t = m.locate(p, None).unwrap();
        prop_assert!(m.outside_by(t, p) <= 1e-9);
        let centre = [3.0 + 1e-3, 2.0 + 2e-3, 2.5 + 3e-3];
        let start = m.locate(centre, None).unwrap();
        let w = m.walk(start, centre, p).unwrap();
        prop_assert!(m.outside_by(w, p) <= 1e-9);
    }
}

#[test]
fn simulation_file_errors_name_the_file_and_field() {
    let dir = std::env::temp_dir().join(format!("mc-json-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("sim.json");
    let mut spec = serde_json::to_value(montecarlo_core::SimSpec::example()).unwrap();
    spec["mesh"] = serde_json::json!({"box": {"origin": [0, 0, 0], "size": [4, 4, 4], "cell": 2}});
    spec["photons"] = 10.into();
    spec["sources"][0]["pos"] = serde_json::json!([2.1, 2.2, 0.0]);
    std::fs::write(&path, spec.to_string()).unwrap();
    // The example itself with a small box is valid.
    let sim = Simulation::from_json(&path).unwrap();
    assert_eq!(sim.mesh.len(), 40);
    let mut bad = spec.clone();
    bad["photonz"] = 5.into();
    std::fs::write(&path, bad.to_string()).unwrap();
    let e = Simulation::from_json(&path).unwrap_err().to_string();
    assert!(e.contains("sim.json") && e.contains("photonz"), "{e}");
    let mut bad = spec.clone();
    bad["sources"][0]["pos"] = serde_json::json!([30.0, 30.0, 0.0]);
    std::fs::write(&path, bad.to_string()).unwrap();
    let e = Simulation::from_json(&path).unwrap_err().to_string();
    assert!(
        e.contains("source 0") && e.contains("outside the mesh"),
        "{e}"
    );
    let mut bad = spec;
    bad["mesh"] = serde_json::json!({"timos": "missing.mesh"});
    std::fs::write(&path, bad.to_string()).unwrap();
    let e = Simulation::from_json(&path).unwrap_err().to_string();
    assert!(e.contains("missing.mesh"), "{e}");
    std::fs::remove_dir_all(&dir).ok();
}

/// MMC input: a generated cube written as MMC node/elem files and an MMC JSON file (cube60's
/// optics, 5 ns) runs and absorbs like our own description of the same problem.
#[test]
fn mmc_json_input_runs_like_our_own() {
    use std::fmt::Write as _;
    let dir = std::env::temp_dir().join(format!("mc-mmcjson-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let m = generate::box_mesh([0.0; 3], [20.0; 3], 2.0, 5).unwrap();
    let mut node = format!("1\t{}\n", m.nodes.len());
    for (i, p) in m.nodes.iter().enumerate() {
        writeln!(node, "{}\t{}\t{}\t{}", i + 1, p[0], p[1], p[2]).unwrap();
    }
    let mut elem = format!("1\t{}\n", m.len());
    for t in 1..=m.len() {
        let n = m.tets[t];
        writeln!(
            elem,
            "{t}\t{}\t{}\t{}\t{}\t1",
            n[0] + 1,
            n[1] + 1,
            n[2] + 1,
            n[3] + 1
        )
        .unwrap();
    }
    std::fs::write(dir.join("node_cube.dat"), node).unwrap();
    std::fs::write(dir.join("elem_cube.dat"), elem).unwrap();
    let json = r#"{
        "Domain": {"MeshID": "cube", "InitElem": 1,
                   "Media": [{"mua": 0, "mus": 0, "g": 1, "n": 1},
                             {"mua": 0.005, "mus": 1.0, "g": 0.01, "n": 1.37}]},
        "Session": {"Photons": 4000, "RNGSeed": 7, "ID": "cube"},
        "Forward": {"T0": 0, "T1": 5e-9, "Dt": 5e-9},
        "Optode": {"Source": {"Pos": [10.1, 10.2, 0], "Dir": [0, 0, 1]}}
    }"#;
    let path = dir.join("cube.json");
    std::fs::write(&path, json).unwrap();
    let sim = Simulation::from_json(&path).unwrap();
    assert_eq!(sim.photons, 4000);
    assert_eq!(sim.params.seed, 7);
    assert_eq!(sim.optics.n_outside, 1.0);
    assert!((sim.params.time_limit_ns.unwrap() - 5.0).abs() < 1e-12);
    // MMC's default (DoSpecular 0): no specular loss at launch.
    assert!(!sim.params.specular);
    let r = sim.run_cpu(0, 4000);
    assert!(r.summary.balance_error.abs() < 1e-12);
    assert!(r.summary.absorbed > 0.0);
    assert_eq!(r.summary.specular, 0.0);
    // MMC's `-V` as `Session.DoSpecular` (MMC reads an integer, writes a boolean): the
    // pencil on the surface (n 1.37 in air) then books ((1.37 - 1) / 2.37)^2 per photon.
    for on in ["1", "true"] {
        let text = json.replace("\"ID\"", &format!("\"DoSpecular\": {on}, \"ID\""));
        std::fs::write(&path, text).unwrap();
        let sim = Simulation::from_json(&path).unwrap();
        assert!(sim.params.specular, "{on}");
        let s = sim.run_cpu(0, 100).summary;
        assert!(
            (s.specular - (0.37f64 / 2.37).powi(2)).abs() < 1e-14,
            "{s:?}"
        );
    }
    std::fs::write(&path, json.replace("\"ID\"", "\"DoSpecular\": 2, \"ID\"")).unwrap();
    let e = Simulation::from_json(&path).unwrap_err().to_string();
    assert!(e.contains("Session.DoSpecular"), "{e}");
    // `Optode.Detector` becomes our disk detectors; one off the surface is an error there.
    let with_det = json.replace(
        "\"Dir\": [0, 0, 1]}}",
        "\"Dir\": [0, 0, 1]}, \"Detector\": [{\"Pos\": [13, 10, 0], \"R\": 2}]}",
    );
    std::fs::write(&path, &with_det).unwrap();
    let sim = Simulation::from_json(&path).unwrap();
    let det = sim.outputs.detection.as_ref().unwrap();
    assert_eq!(
        (det.detectors[0].pos, det.detectors[0].radius),
        ([13.0, 10.0, 0.0], 2.0)
    );
    assert!(!sim.run_cpu(0, 2000).tally.detectors.photons.is_empty());
    std::fs::write(&path, with_det.replace("[13, 10, 0]", "[13, 10, 10]")).unwrap();
    let e = Simulation::from_json(&path).unwrap_err().to_string();
    assert!(
        e.contains("Optode.Detector") && e.contains("surface"),
        "{e}"
    );
    let bad = json.replace("\"Dir\"", "\"Type\": \"fourier\", \"Dir\"");
    std::fs::write(&path, bad).unwrap();
    let e = Simulation::from_json(&path).unwrap_err().to_string();
    assert!(e.contains("fourier"), "{e}");
    std::fs::remove_dir_all(&dir).ok();
}
