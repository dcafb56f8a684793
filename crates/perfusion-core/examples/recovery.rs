//! Recovery of known parameters from noise-free curves simulated independently of the
//! fitting code (tests/common/independent.rs), per model and method, on the CPU:
//! `cargo run --release -p perfusion-core --example recovery -- [curves] [spread] [delays]`
//! (spread: relative half-width of the parameter spread, default 0.3; delays: `bounds` for
//! anywhere inside the default bounds, else `near` for 0..15 s).

#[path = "../tests/common/independent.rs"]
mod independent;

use gpu_runtime::Device;
use independent::Uniform;
use ndarray::Array2;
use perfusion_core::sim::{parker_aif, portal_venous};
use perfusion_core::{FitInput, FitParams, Method, Model, Problem, fit};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let n: usize = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(200);
    let spread: f64 = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(0.3);
    let anywhere = args.get(3).is_some_and(|s| s == "bounds");
    let t: Vec<f64> = (0..128).map(|i| i as f64 * 120.0 / 127.0).collect();
    let aif: Vec<f64> = t.iter().map(|&s| parker_aif(s - 10.0)).collect();
    let pv = portal_venous(&t.iter().map(|s| s - 10.0).collect::<Vec<_>>());
    for model in [
        Model::DualInput,
        Model::Tofts,
        Model::ExtendedTofts,
        Model::Patlak,
        Model::TwoCompartmentExchange,
    ] {
        let typical: &[f64] = match model {
            Model::DualInput => &[20.0, 100.0, 400.0],
            Model::Tofts => &[0.25, 0.3],
            Model::ExtendedTofts => &[0.25, 0.3, 0.05],
            Model::Patlak => &[0.05, 0.05],
            Model::TwoCompartmentExchange => &[0.6, 0.15, 0.25, 0.08],
        };
        let mut rng = Uniform(7 + model.id() as u64);
        let delays = model.params().iter().filter(|p| p.delay).count();
        let truths: Vec<Vec<f64>> = (0..n)
            .map(|_| {
                let mut x: Vec<f64> = typical
                    .iter()
                    .map(|v| v * rng.range(1.0 - spread, 1.0 + spread))
                    .collect();
                for _ in 0..delays {
                    x.push(if anywhere {
                        rng.range(-30.0, 30.0)
                    } else {
                        rng.range(0.0, 15.0)
                    });
                }
                x
            })
            .collect();
        let mut curves = Array2::<f32>::zeros((n, t.len()));
        for (v, x) in truths.iter().enumerate() {
            let c = match model {
                Model::DualInput => independent::dual_input(&t, &aif, &pv, x),
                Model::Tofts => independent::tofts(&t, &aif, x),
                Model::ExtendedTofts => independent::extended_tofts(&t, &aif, x),
                Model::Patlak => independent::patlak(&t, &aif, x),
                Model::TwoCompartmentExchange => independent::two_compartment(&t, &aif, x),
            };
            for (i, c) in c.iter().enumerate() {
                curves[[v, i]] = *c as f32;
            }
        }
        let problem = Problem::new(&t, &aif, model.dual_input().then_some(&pv[..])).unwrap();
        for method in [Method::LevenbergMarquardt, Method::NelderMead] {
            let params = FitParams::new(model).with_method(method);
            let (fits, _) = fit(
                FitInput::new(curves.view(), &problem),
                &params,
                &Device::cpu(),
            )
            .unwrap();
            let mut within = [0usize; 3];
            let mut worst = 0.0f64;
            for (v, x) in truths.iter().enumerate() {
                let err = x
                    .iter()
                    .enumerate()
                    .map(|(p, &tv)| {
                        let got = fits.params[[p, v]];
                        if model.params()[p].delay {
                            (got - tv).abs() / 60.0
                        } else {
                            (got - tv).abs() / tv.abs()
                        }
                    })
                    .fold(0.0, f64::max);
                if err > 1e-3
                    && std::env::var("SHOW").is_ok()
                    && method == Method::LevenbergMarquardt
                {
                    let got: Vec<f64> = (0..x.len()).map(|p| fits.params[[p, v]]).collect();
                    let c = perfusion_core::predict(&problem, model, x).unwrap();
                    let sse_truth: f64 = c
                        .iter()
                        .zip(curves.row(v))
                        .map(|(a, b)| (a - f64::from(*b)).powi(2))
                        .sum();
                    println!(
                        "  truth {x:.3?} fit {got:.3?} sse fit {:.3e} truth {sse_truth:.3e}",
                        fits.sse[v]
                    );
                }
                for (k, tol) in [1e-3, 1e-2, 1e-1].iter().enumerate() {
                    if err <= *tol {
                        within[k] += 1;
                    }
                }
                worst = worst.max(err);
            }
            let counts = fits.status_counts();
            println!(
                "{:15} {:3}: within 1e-3 {:4}/{n}  1e-2 {:4}  1e-1 {:4}  worst {:.2e}  status {:?}",
                model.name(),
                method.name(),
                within[0],
                within[1],
                within[2],
                worst,
                counts
            );
        }
    }
}
