//! `mc replay`: the Jacobian of a detector from a CPU run's detected photons, and the runs
//! it refuses (made on a GPU, records dropped, no records file).

use crate::common::{biogpu, scratch, stderr};

#[test]
fn mc_replay_writes_the_jacobian_of_a_cpu_run_and_refuses_what_it_cannot_replay() {
    let dir = scratch("mc-replay");
    let example = biogpu(&["mc", "example"]);
    assert!(example.status.success(), "{}", stderr(&example));
    let mut sim: serde_json::Value = serde_json::from_slice(&example.stdout).unwrap();
    sim["outputs"]["detection"] =
        serde_json::json!({"detectors": [{"pos": [40.0, 30.0, 0.0], "radius": 3.0}]});
    sim["outputs"]["vtk"] = false.into();
    let sim_path = dir.join("sim.json");
    std::fs::write(&sim_path, sim.to_string()).unwrap();
    let (s, run, jac) = (sim_path.to_str().unwrap(), dir.join("run"), dir.join("jac"));
    let o = biogpu(&[
        "mc",
        "run",
        s,
        "--photons",
        "40000",
        "--out",
        run.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let replay = |run: &std::path::Path, out: &std::path::Path| {
        biogpu(&[
            "mc",
            "replay",
            s,
            run.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ])
    };
    let o = replay(&run, &jac);
    assert!(o.status.success(), "{}", stderr(&o));
    // The Jacobian summed over the tets is minus the records' weight x pathlength per
    // launched photon (one region: the path length column).
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(jac.join("summary.json")).unwrap()).unwrap();
    let replayed = summary["photons_replayed"].as_u64().unwrap();
    assert!(replayed > 50, "{summary}");
    let csv = std::fs::read_to_string(jac.join("jacobian.csv")).unwrap();
    let total: f64 = csv
        .lines()
        .skip(1)
        .map(|l| l.split(',').nth(3).unwrap().parse::<f64>().unwrap())
        .sum();
    let records = std::fs::read_to_string(run.join("detected.csv")).unwrap();
    let header: Vec<&str> = records.lines().next().unwrap().split(',').collect();
    let (w, path) = (
        header.iter().position(|c| *c == "weight").unwrap(),
        header.iter().position(|c| c.starts_with("ppath")).unwrap(),
    );
    let expected: f64 = records
        .lines()
        .skip(1)
        .map(|l| {
            let v: Vec<f64> = l.split(',').map(|x| x.parse().unwrap()).collect();
            v[w] * v[path]
        })
        .sum::<f64>()
        / 40_000.0;
    assert!(
        (total + expected).abs() <= 1e-6 * expected,
        "sum of dW_dmua {total}, records {expected}"
    );

    // A run made on a GPU (its summary says so), records dropped, no records.
    let edited = |name: &str, edit: &dyn Fn(&mut serde_json::Value)| {
        let copy = dir.join(name);
        std::fs::create_dir_all(&copy).unwrap();
        for f in ["summary.json", "detected.npy"] {
            std::fs::copy(run.join(f), copy.join(f)).unwrap();
        }
        let mut v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(copy.join("summary.json")).unwrap())
                .unwrap();
        edit(&mut v);
        std::fs::write(copy.join("summary.json"), v.to_string()).unwrap();
        copy
    };
    let gpu = edited("gpu", &|v| v["device"] = "cuda:0".into());
    let o = replay(&gpu, &dir.join("j1"));
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("cuda:0") && stderr(&o).contains("--device cpu"),
        "{}",
        stderr(&o)
    );
    let dropped = edited("dropped", &|v| v["detected_dropped"] = 7.into());
    let o = replay(&dropped, &dir.join("j2"));
    assert!(!o.status.success());
    assert!(stderr(&o).contains("7 records dropped"), "{}", stderr(&o));
    let seed = edited("seed", &|v| v["seed"] = 5.into());
    let o = replay(&seed, &dir.join("j3"));
    assert!(!o.status.success());
    assert!(stderr(&o).contains("does not replay"), "{}", stderr(&o));
    std::fs::remove_file(seed.join("detected.npy")).unwrap();
    let o = replay(&seed, &dir.join("j4"));
    assert!(!o.status.success());
    assert!(stderr(&o).contains("detected.npy"), "{}", stderr(&o));
    for j in ["j1", "j2", "j3", "j4"] {
        assert!(!dir.join(j).exists(), "{j}: a refused replay left a folder");
    }
}
