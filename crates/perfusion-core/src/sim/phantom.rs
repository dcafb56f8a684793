//! Simulated DCE data with known parameters: a population arterial input (Parker 2006), a
//! portal-venous input derived from it, tissue curves from any model, Gaussian noise at a
//! chosen contrast-to-noise ratio (peak / baseline SD, as Wang & Cao 2012), and a synthetic
//! liver volume for the demo. Reproducible from a seed.

use crate::api::predict;
use crate::error::{Error, Result};
use crate::model::{Model, Problem};
use ndarray::{Array2, Array3, Array4};
use rayon::prelude::*;

/// Parker et al. (2006) population arterial input function (mM, whole blood) at `t` seconds
/// after injection ([`population::parker`](crate::population::parker), not cut at 0).
pub fn parker_aif(t: f64) -> f64 {
    crate::model::population::parker(t / 60.0)
}

/// Portal-venous input: the arterial input passed through the gut, modelled as a delay of
/// 4 s and an exponential transit of 12 s (`conv(AIF, exp(-t/12)/12)` on a 0.05 s grid).
pub fn portal_venous(times: &[f64]) -> Vec<f64> {
    const DELAY: f64 = 4.0;
    const TRANSIT: f64 = 12.0;
    const DT: f64 = 0.05;
    let end = times.iter().copied().fold(0.0, f64::max);
    let n = (end / DT).ceil() as usize + 2;
    let k = 1.0 / TRANSIT;
    let w = crate::model::weights::weights(k, DT);
    let mut fine = vec![0.0; n];
    let mut prev = parker_aif(-DELAY);
    for i in 1..n {
        let cur = parker_aif(i as f64 * DT - DELAY);
        fine[i] = w.e * fine[i - 1] + (w.wa * prev + w.wb * cur) * k;
        prev = cur;
    }
    times
        .iter()
        .map(|&t| {
            let x = (t / DT).clamp(0.0, (n - 1) as f64);
            let j = (x.floor() as usize).min(n - 2);
            let f = x - j as f64;
            fine[j] + f * (fine[j + 1] - fine[j])
        })
        .collect()
}

/// Seeded normal deviates (splitmix64 and Box-Muller): stream `stream` of `seed`.
#[derive(Debug, Clone)]
pub struct Normal {
    state: u64,
    spare: Option<f64>,
}

impl Normal {
    pub fn new(seed: u64, stream: u64) -> Self {
        Normal {
            state: seed ^ stream.wrapping_mul(0x9E37_79B9_7F4A_7C15).rotate_left(17),
            spare: None,
        }
    }

    fn uniform(&mut self) -> f64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        ((z >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    }

    /// A standard normal deviate.
    pub fn sample(&mut self) -> f64 {
        if let Some(s) = self.spare.take() {
            return s;
        }
        let (u, v) = (self.uniform(), self.uniform());
        let r = (-2.0 * u.ln()).sqrt();
        let a = 2.0 * std::f64::consts::PI * v;
        self.spare = Some(r * a.sin());
        r * a.cos()
    }
}

/// Add noise of SD `peak / cnr` to `curve` (peak = its largest absolute value).
pub fn add_noise(curve: &mut [f64], cnr: f64, rng: &mut Normal) {
    let peak = curve.iter().fold(0.0f64, |m, v| m.max(v.abs()));
    let sd = peak / cnr;
    for c in curve {
        *c += sd * rng.sample();
    }
}

/// A simulation: a model with known parameters on a uniform grid, replicated over voxels.
///
/// ```
/// use perfusion_core::{Model, sim::Simulation};
/// // The paper's: ka 20, kp 100, kl 400 ml/100g/min, tau_a 1 s, tau_p 2 s, 128 points in 2 min.
/// let s = Simulation::paper(128).with_cnr(Some(20.0)).with_voxels(10).run().unwrap();
/// assert_eq!(s.curves.dim(), (10, 128));
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Simulation {
    pub model: Model,
    pub truth: Vec<f64>,
    pub nt: usize,
    pub duration_s: f64,
    /// Tissue contrast-to-noise ratio (`None`: noise-free).
    pub cnr: Option<f64>,
    /// Noise on the input functions (shared by all voxels, as one measured AIF).
    pub cnr_arterial: Option<f64>,
    pub cnr_portal: Option<f64>,
    pub voxels: usize,
    pub seed: u64,
}

/// Simulated data: the problem (times, possibly noisy inputs) and one curve per voxel.
#[derive(Debug, Clone)]
pub struct Simulated {
    pub problem: Problem,
    pub curves: Array2<f32>,
    /// The noise-free tissue curve.
    pub clean: Vec<f64>,
}

impl Simulation {
    /// `model` with parameters `truth` (user units), 64 points over 2 min, noise-free, one voxel.
    pub fn new(model: Model, truth: &[f64]) -> Self {
        Simulation {
            model,
            truth: truth.to_vec(),
            nt: 64,
            duration_s: 120.0,
            cnr: None,
            cnr_arterial: None,
            cnr_portal: None,
            voxels: 1,
            seed: 1,
        }
    }

    /// Wang & Cao's simulation at `nt` points: the dual-input model with ka 20, kp 100,
    /// kl 400 ml/100g/min, tau_a 1 s, tau_p 2 s over 2 min.
    pub fn paper(nt: usize) -> Self {
        Simulation::new(Model::DualInput, &[20.0, 100.0, 400.0, 1.0, 2.0]).with_nt(nt)
    }

    pub fn with_nt(mut self, nt: usize) -> Self {
        self.nt = nt;
        self
    }
    pub fn with_cnr(mut self, cnr: Option<f64>) -> Self {
        self.cnr = cnr;
        self
    }
    pub fn with_input_cnr(mut self, arterial: Option<f64>, portal: Option<f64>) -> Self {
        self.cnr_arterial = arterial;
        self.cnr_portal = portal;
        self
    }
    pub fn with_voxels(mut self, voxels: usize) -> Self {
        self.voxels = voxels;
        self
    }
    pub fn with_seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// The sampling times: `nt` uniform points from 0 to `duration_s`.
    pub fn times(&self) -> Vec<f64> {
        (0..self.nt)
            .map(|i| i as f64 * self.duration_s / (self.nt.max(2) - 1) as f64)
            .collect()
    }

    pub fn run(&self) -> Result<Simulated> {
        for (name, cnr) in [
            ("cnr", self.cnr),
            ("cnr-arterial", self.cnr_arterial),
            ("cnr-portal", self.cnr_portal),
        ] {
            if let Some(c) = cnr
                && !(c.is_finite() && c > 0.0)
            {
                return Err(Error::InvalidOption {
                    name,
                    value: c.to_string(),
                    why: "a contrast-to-noise ratio must be finite and > 0".into(),
                });
            }
        }
        if !(self.duration_s.is_finite() && self.duration_s > 0.0) {
            return Err(Error::InvalidOption {
                name: "duration",
                value: self.duration_s.to_string(),
                why: "must be finite and > 0 s".into(),
            });
        }
        let t = self.times();
        let clean_a: Vec<f64> = t.iter().map(|&s| parker_aif(s)).collect();
        let clean_p = portal_venous(&t);
        // The tissue curve comes from the noise-free inputs; the inputs the fit sees may be noisy.
        let portal = self.model.dual_input().then_some(&clean_p[..]);
        let clean_problem = Problem::new(&t, &clean_a, portal)?;
        let clean = predict(&clean_problem, self.model, &self.truth)?;
        let mut a = clean_a.clone();
        let mut p = clean_p.clone();
        if let Some(c) = self.cnr_arterial {
            add_noise(&mut a, c, &mut Normal::new(self.seed, u64::MAX));
        }
        if let Some(c) = self.cnr_portal {
            add_noise(&mut p, c, &mut Normal::new(self.seed, u64::MAX - 1));
        }
        let problem = Problem::new(&t, &a, self.model.dual_input().then_some(&p[..]))?;
        let nt = self.nt;
        let mut curves = Array2::<f32>::zeros((self.voxels, nt));
        curves
            .as_slice_mut()
            .expect("standard layout")
            .par_chunks_mut(nt)
            .enumerate()
            .for_each(|(v, row)| {
                let mut c = clean.clone();
                if let Some(cnr) = self.cnr {
                    add_noise(&mut c, cnr, &mut Normal::new(self.seed, v as u64));
                }
                for (r, x) in row.iter_mut().zip(&c) {
                    *r = *x as f32;
                }
            });
        Ok(Simulated {
            problem,
            curves,
            clean,
        })
    }
}

/// A synthetic liver for demos and tests: a 4-D volume `(x, y, z, t)` of dual-input
/// curves with a tumour of high arterial and low portal flow inside normal parenchyma.
#[derive(Debug, Clone)]
pub struct SyntheticLiver {
    /// Concentration (mM), `(x, y, z, t)`.
    pub volume: Array4<f32>,
    /// Liver voxels.
    pub mask: Array3<bool>,
    /// True parameters, `(x, y, z, parameter)`.
    pub truth: Array4<f64>,
    pub times: Vec<f64>,
    pub arterial: Vec<f64>,
    pub portal: Vec<f64>,
}

/// Build a `nx x ny x nz` synthetic liver with `nt` frames over 2 min, tissue CNR `cnr`.
pub fn synthetic_liver(
    nx: usize,
    ny: usize,
    nz: usize,
    nt: usize,
    cnr: Option<f64>,
    seed: u64,
) -> Result<SyntheticLiver> {
    let base = Simulation::paper(nt);
    let times = base.times();
    let arterial: Vec<f64> = times.iter().map(|&s| parker_aif(s)).collect();
    let portal = portal_venous(&times);
    let problem = Problem::new(&times, &arterial, Some(&portal))?;
    let mut volume = Array4::<f32>::zeros((nx, ny, nz, nt));
    let mut mask = Array3::from_elem((nx, ny, nz), false);
    let mut truth = Array4::<f64>::from_elem((nx, ny, nz, 5), f64::NAN);
    let (cx, cy) = (nx as f64 / 2.0, ny as f64 / 2.0);
    for z in 0..nz {
        for y in 0..ny {
            for x in 0..nx {
                let (dx, dy) = (
                    (x as f64 + 0.5 - cx) / (0.45 * nx as f64),
                    (y as f64 + 0.5 - cy) / (0.4 * ny as f64),
                );
                if dx * dx + dy * dy > 1.0 {
                    continue;
                }
                mask[[x, y, z]] = true;
                // Smooth gradient across the liver; a tumour at upper right.
                let gx = x as f64 / nx.max(2) as f64;
                let (tx, ty) = (
                    (x as f64 - 0.68 * nx as f64) / (0.12 * nx as f64),
                    (y as f64 - 0.4 * ny as f64) / (0.12 * ny as f64),
                );
                let tumour = tx * tx + ty * ty <= 1.0;
                let theta = if tumour {
                    [90.0, 15.0, 300.0, 0.5, 2.0]
                } else {
                    [
                        15.0 + 15.0 * gx,
                        80.0 + 50.0 * gx,
                        350.0 + 100.0 * gx,
                        1.0,
                        2.0,
                    ]
                };
                let mut c = predict(&problem, Model::DualInput, &theta)?;
                if let Some(cnr) = cnr {
                    let stream = ((z * ny + y) * nx + x) as u64;
                    add_noise(&mut c, cnr, &mut Normal::new(seed, stream));
                }
                for t in 0..nt {
                    volume[[x, y, z, t]] = c[t] as f32;
                }
                for p in 0..5 {
                    truth[[x, y, z, p]] = theta[p];
                }
            }
        }
    }
    Ok(SyntheticLiver {
        volume,
        mask,
        truth,
        times,
        arterial,
        portal,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parker_aif_has_its_published_shape() {
        let t: Vec<f64> = (0..1200).map(|i| i as f64 * 0.1).collect();
        let a: Vec<f64> = t.iter().map(|&s| parker_aif(s)).collect();
        let (imax, peak) = a
            .iter()
            .enumerate()
            .fold((0, 0.0), |m, (i, &v)| if v > m.1 { (i, v) } else { m });
        assert!((t[imax] - 10.3).abs() < 0.5, "peak at {} s", t[imax]);
        assert!((5.0..7.5).contains(&peak), "peak {peak} mM");
        assert!(a[1199] > 0.5 && a[1199] < 1.5, "plateau {}", a[1199]);
    }

    #[test]
    fn portal_input_is_later_lower_and_keeps_the_dose() {
        let t: Vec<f64> = (0..241).map(|i| i as f64 * 0.5).collect();
        let a: Vec<f64> = t.iter().map(|&s| parker_aif(s)).collect();
        let p = portal_venous(&t);
        let arg = |v: &[f64]| {
            v.iter()
                .enumerate()
                .fold(0, |m, (i, &x)| if x > v[m] { i } else { m })
        };
        assert!(t[arg(&p)] > t[arg(&a)] + 5.0);
        assert!(p[arg(&p)] < 0.6 * a[arg(&a)]);
        let area = |v: &[f64]| v.iter().sum::<f64>() * 0.5;
        assert!(
            (area(&p) / area(&a) - 1.0).abs() < 0.25,
            "{} vs {}",
            area(&p),
            area(&a)
        );
    }

    #[test]
    fn noise_has_the_requested_cnr_and_is_reproducible() {
        let s = Simulation::paper(128)
            .with_cnr(Some(10.0))
            .with_voxels(400)
            .with_seed(5);
        let a = s.run().unwrap();
        let b = s.run().unwrap();
        assert_eq!(a.curves, b.curves);
        let peak = a.clean.iter().fold(0.0f64, |m, v| m.max(*v));
        let mut sum2 = 0.0;
        for row in a.curves.rows() {
            for (x, c) in row.iter().zip(&a.clean) {
                sum2 += (f64::from(*x) - c).powi(2);
            }
        }
        let sd = (sum2 / (400.0 * 128.0)).sqrt();
        assert!(
            (sd / (peak / 10.0) - 1.0).abs() < 0.03,
            "sd {sd}, peak {peak}"
        );
    }
}
