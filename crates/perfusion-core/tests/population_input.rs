//! Population input functions named in place of a CSV file (`--aif parker:5`): sampled at
//! the tissue times with the given bolus arrival, converted from blood to plasma by the
//! hematocrit where they are whole-blood curves, and bad arrival times refused.

use perfusion_core::Model;
use perfusion_core::convert::Conversion;
use perfusion_core::io::input::{InputSpec, load};
use perfusion_core::population::PopulationInput;
use std::fmt::Write as _;
use std::path::PathBuf;

fn curves_csv(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("population-input-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("curves.csv");
    let mut text = String::from("time,c\n");
    for i in 0..40 {
        let (t, c) = (i as f64 * 2.0, (i as f64 * 0.1).sin().abs());
        writeln!(text, "{t},{c}").unwrap();
    }
    std::fs::write(&path, text).unwrap();
    path
}

fn spec(curves: PathBuf, aif: &str, hematocrit: Option<f64>) -> InputSpec {
    InputSpec {
        model: Model::Tofts,
        dce: None,
        series: None,
        mask: None,
        curves: Some(curves),
        aif: Some(aif.into()),
        aif_mask: None,
        pv: None,
        pv_mask: None,
        times: None,
        dt: None,
        hematocrit,
        conversion: Conversion::None,
        t10: None,
        t1_map: None,
        b1_map: None,
    }
}

#[test]
fn population_inputs_are_sampled_at_the_tissue_times() {
    let path = curves_csv("ok");
    let job = load(&spec(path.clone(), "parker:5", Some(0.45))).unwrap();
    let t = job.problem.times().to_vec();
    let want = PopulationInput::Parker.sample(&t, 5.0);
    for (got, w) in job.problem.arterial().iter().zip(&want) {
        assert!(
            (got - w / 0.55).abs() <= 1e-12 * w.abs().max(1.0),
            "{got} vs {w}"
        );
    }
    // Weinmann's is plasma already: no hematocrit conversion; arrival defaults to t0.
    let job = load(&spec(path, "weinmann", Some(0.45))).unwrap();
    let want = PopulationInput::Weinmann.sample(&t, 0.0);
    for (got, w) in job.problem.arterial().iter().zip(&want) {
        assert!((got - w).abs() <= 1e-12 * w.abs().max(1.0), "{got} vs {w}");
    }
}

#[test]
fn a_bad_arrival_time_is_an_error_naming_the_form() {
    let path = curves_csv("bad");
    let e = load(&spec(path, "parker:soon", None))
        .unwrap_err()
        .to_string();
    assert!(e.contains("parker:ARRIVAL") && e.contains("seconds"), "{e}");
}
