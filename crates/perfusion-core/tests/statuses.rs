//! Statuses and quality flags mean what they say, in both directions: a perfect fit is
//! converged and unflagged, a capped fit is not converged, a model that cannot describe
//! the curve is flagged poor, a parameter held at its bound and an undetermined one are
//! flagged.

use gpu_runtime::Device;
use ndarray::Array2;
use perfusion_core::sim::parker_aif;
use perfusion_core::{
    FitInput, FitParams, FitStatus, Fits, Flags, Method, Model, Problem, fit, predict,
};

fn problem() -> Problem {
    let t: Vec<f64> = (0..96).map(|i| i as f64 * 1.25).collect();
    let aif: Vec<f64> = t.iter().map(|&s| parker_aif(s - 8.0)).collect();
    Problem::new(&t, &aif, None).unwrap()
}

fn run(p: &Problem, curves: &[Vec<f64>], params: &FitParams) -> Fits {
    let c = Array2::from_shape_fn((curves.len(), p.len()), |(v, i)| curves[v][i] as f32);
    fit(FitInput::new(c.view(), p), params, &Device::cpu())
        .unwrap()
        .0
}

#[test]
fn perfect_fits_are_converged_and_unflagged_with_either_method() {
    let p = problem();
    let curve = predict(&p, Model::ExtendedTofts, &[0.3, 0.25, 0.06, 3.0]).unwrap();
    for method in [Method::LevenbergMarquardt, Method::NelderMead] {
        let f = run(
            &p,
            std::slice::from_ref(&curve),
            &FitParams::new(Model::ExtendedTofts).with_method(method),
        );
        assert_eq!(f.status(0), FitStatus::Converged, "{}", method.name());
        assert_eq!(f.flags[0], 0, "{}", method.name());
        assert!(f.r2[0] > 1.0 - 1e-9);
    }
}

#[test]
fn a_fit_stopped_by_the_cap_is_not_converged() {
    let p = problem();
    let curve = predict(&p, Model::Tofts, &[0.4, 0.35, 2.0]).unwrap();
    let params = FitParams::new(Model::Tofts)
        .with_start_search(perfusion_core::StartSearch::Off)
        .with_max_iterations(1);
    let f = run(&p, &[curve], &params);
    assert_eq!(f.status(0), FitStatus::MaxIterations);
}

#[test]
fn a_curve_the_model_cannot_describe_is_flagged_poor() {
    let p = problem();
    // A wash-in then a drop to a negative undershoot: no Tofts curve does that.
    let t = p.times();
    let curve: Vec<f64> = t
        .iter()
        .map(|&s| {
            if s < 40.0 {
                0.0
            } else if s < 70.0 {
                0.5
            } else {
                -0.3
            }
        })
        .collect();
    let f = run(&p, &[curve], &FitParams::new(Model::Tofts));
    assert_ne!(f.flags[0] & Flags::POOR_FIT, 0, "flags {}", f.flags[0]);
}

#[test]
fn noisy_curves_of_the_right_model_are_not_flagged_poor() {
    let p = problem();
    let clean = predict(&p, Model::Tofts, &[0.3, 0.3, 2.0]).unwrap();
    let mut rng = perfusion_core::sim::Normal::new(5, 0);
    let curves: Vec<Vec<f64>> = (0..50)
        .map(|_| clean.iter().map(|c| c + 0.01 * rng.sample()).collect())
        .collect();
    let f = run(&p, &curves, &FitParams::new(Model::Tofts));
    let poor = f
        .flags
        .iter()
        .filter(|&&x| x & Flags::POOR_FIT != 0)
        .count();
    assert_eq!(poor, 0);
}

#[test]
fn parameters_at_a_bound_and_undetermined_ones_are_flagged() {
    let p = problem();
    // Ktrans 0.4 fitted with Ktrans bounded to [0, 0.1]: at the bound.
    let curve = predict(&p, Model::Tofts, &[0.4, 0.35, 2.0]).unwrap();
    let params = FitParams::new(Model::Tofts)
        .with_bounds("ktrans", 0.0, 0.1)
        .unwrap()
        .with_start_of("ktrans", 0.05)
        .unwrap();
    let f = run(&p, &[curve], &params);
    assert_ne!(f.flags[0] & Flags::AT_BOUND, 0, "flags {}", f.flags[0]);
    // No uptake at all (a tiny constant offset): Ktrans ~ 0 leaves ve undetermined.
    let flat: Vec<f64> = (0..p.len()).map(|i| 1e-4 * (i % 2) as f64).collect();
    let f = run(&p, &[flat], &FitParams::new(Model::Tofts));
    assert_ne!(
        f.flags[0] & Flags::NON_IDENTIFIABLE,
        0,
        "flags {} params {:?}",
        f.flags[0],
        f.params
    );
}
