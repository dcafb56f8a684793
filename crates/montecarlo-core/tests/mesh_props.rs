//! Property tests of the mesh builder and generators (random grids), and of the simulation
//! file's error messages.

use montecarlo_core::{Simulation, generate};
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
