//! Every model's forward curve (the O(Nt) recursion) against an independent solution: the
//! model's differential equations integrated by Runge-Kutta 4 with 200 steps per sampling
//! interval, driven by the same piecewise-linear delayed inputs. Uniform and non-uniform
//! grids, fractional and negative delays.

use perfusion_core::sim::{parker_aif, portal_venous};
use perfusion_core::{Model, Problem, predict};

/// Largest difference from the ODE solution, relative to the curve's peak.
const FORWARD_TOL: f64 = 1e-7;

/// Linear interpolation of samples `u` at times `t`, holding the end values.
fn interp(t: &[f64], u: &[f64], x: f64) -> f64 {
    if x <= t[0] {
        return u[0];
    }
    if x >= t[t.len() - 1] {
        return u[u.len() - 1];
    }
    let j = t.partition_point(|&s| s <= x) - 1;
    u[j] + (x - t[j]) * (u[j + 1] - u[j]) / (t[j + 1] - t[j])
}

/// Rates per second from the user's units.
fn per_s(model: Model, k: f64) -> f64 {
    k * model.rate_scale()
}

/// The state derivative of `model` at inputs (a, p) (delayed, interpolated).
fn rhs(model: Model, th: &[f64], y: [f64; 2], a: f64, p: f64) -> [f64; 2] {
    match model {
        Model::DualInput => {
            let (ka, kp, kl) = (
                per_s(model, th[0]),
                per_s(model, th[1]),
                per_s(model, th[2]),
            );
            [ka * a + kp * p - kl * y[0], 0.0]
        }
        Model::Tofts | Model::ExtendedTofts => {
            let (kt, ve) = (per_s(model, th[0]), th[1]);
            [kt * a - kt / ve * y[0], 0.0]
        }
        Model::Patlak => [per_s(model, th[0]) * a, 0.0],
        Model::TwoCompartmentExchange => {
            let (fp, ps, ve, vp) = (per_s(model, th[0]), per_s(model, th[1]), th[2], th[3]);
            // y[0]: plasma concentration in tissue, y[1]: interstitial concentration.
            [
                (fp * (a - y[0]) + ps * (y[1] - y[0])) / vp,
                ps * (y[0] - y[1]) / ve,
            ]
        }
    }
}

fn observe(model: Model, th: &[f64], y: [f64; 2], a: f64) -> f64 {
    match model {
        Model::DualInput | Model::Tofts => y[0],
        Model::ExtendedTofts => y[0] + th[2] * a,
        Model::Patlak => y[0] + th[1] * a,
        Model::TwoCompartmentExchange => th[3] * y[0] + th[2] * y[1],
    }
}

fn ode_solution(model: Model, th: &[f64], t: &[f64], aif: &[f64], pv: &[f64]) -> Vec<f64> {
    let np = model.n_params();
    let (tau1, tau2) = if model.dual_input() {
        (th[3], th[4])
    } else {
        (th[np - 1], 0.0)
    };
    // The model's inputs: the delayed inputs sampled on the grid, linear in between.
    let a: Vec<f64> = t.iter().map(|&s| interp(t, aif, s - tau1)).collect();
    let p: Vec<f64> = t.iter().map(|&s| interp(t, pv, s - tau2)).collect();
    let input = |s: f64| (interp(t, &a, s), interp(t, &p, s));
    let mut y = [0.0; 2];
    let mut out = vec![observe(model, th, y, a[0])];
    for i in 1..t.len() {
        let steps = 200;
        let h = (t[i] - t[i - 1]) / f64::from(steps);
        for k in 0..steps {
            let s = t[i - 1] + f64::from(k) * h;
            let f = |s: f64, y: [f64; 2]| {
                let (a, p) = input(s);
                rhs(model, th, y, a, p)
            };
            let add = |y: [f64; 2], d: [f64; 2], c: f64| [y[0] + c * d[0], y[1] + c * d[1]];
            let k1 = f(s, y);
            let k2 = f(s + h / 2.0, add(y, k1, h / 2.0));
            let k3 = f(s + h / 2.0, add(y, k2, h / 2.0));
            let k4 = f(s + h, add(y, k3, h));
            for c in 0..2 {
                y[c] += h / 6.0 * (k1[c] + 2.0 * k2[c] + 2.0 * k3[c] + k4[c]);
            }
        }
        out.push(observe(model, th, y, a[i]));
    }
    out
}

#[test]
fn every_model_matches_its_differential_equations_on_any_grid() {
    let cases: [(Model, &[f64]); 7] = [
        (Model::DualInput, &[20.0, 100.0, 400.0, 1.3, 2.7]),
        (Model::DualInput, &[35.0, 60.0, 900.0, -1.6, 0.4]),
        (Model::Tofts, &[0.3, 0.25, 2.4]),
        (Model::ExtendedTofts, &[0.3, 0.25, 0.07, 0.6]),
        (Model::Patlak, &[0.05, 0.1, 3.2]),
        (Model::TwoCompartmentExchange, &[0.8, 0.15, 0.25, 0.06, 1.1]),
        (Model::TwoCompartmentExchange, &[0.2, 0.0, 0.3, 0.1, 0.0]),
    ];
    let uniform: Vec<f64> = (0..64).map(|i| f64::from(i) * 1.9).collect();
    // Dense early sampling, sparse later, as many DCE protocols.
    let ragged: Vec<f64> = (0..64)
        .map(|i| {
            let i = f64::from(i);
            if i < 32.0 {
                0.8 * i
            } else {
                25.6 + 3.1 * (i - 32.0)
            }
        })
        .collect();
    for t in [uniform, ragged] {
        let aif: Vec<f64> = t.iter().map(|&s| parker_aif(s - 5.0)).collect();
        let pv = portal_venous(&t.iter().map(|s| (s - 5.0).max(0.0)).collect::<Vec<_>>());
        for (model, th) in cases {
            let problem = Problem::new(&t, &aif, model.dual_input().then_some(&pv[..])).unwrap();
            let got = predict(&problem, model, th).unwrap();
            let want = ode_solution(model, th, &t, &aif, &pv);
            let peak = want.iter().fold(0.0f64, |m, v| m.max(v.abs()));
            for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                assert!(
                    (g - w).abs() <= FORWARD_TOL * peak,
                    "{model} {th:?} uniform {}: t[{i}] = {}: recursion {g}, ODE {w} (peak {peak})",
                    problem.is_uniform(),
                    t[i]
                );
            }
        }
    }
}
