//! Simulated MESI data: the model of [`crate::model::mesi`] with seeded noise.

use crate::model::mesi::{MesiParams, mesi_k2};

/// SplitMix64 with Box-Muller normals: a small, self-contained, seedable generator.
#[derive(Debug, Clone)]
struct SplitMix64(u64);

impl SplitMix64 {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in (0, 1].
    fn uniform(&mut self) -> f64 {
        ((self.next_u64() >> 11) + 1) as f64 / (1u64 << 53) as f64
    }

    fn normal(&mut self) -> f64 {
        let (u1, u2) = (self.uniform(), self.uniform());
        (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
    }
}

/// Simulated MESI contrasts: `K_i = sqrt(K^2(T_i) (1 + noise_sd xi_i))` with independent
/// standard normal `xi_i`, i.e. Gaussian noise on K^2 with relative standard deviation
/// `noise_sd` (0.01 = 1%, typical of K^2 averaged over a few hundred speckles). Same seed,
/// same values. Negative noisy K^2 (only for huge `noise_sd`) give K = 0.
///
/// ```
/// use speckle_core::{MesiParams, sim::simulate_mesi};
/// let p = MesiParams { tau_c: 1e-3, rho: 0.9, v_noise: 0.0, beta: 0.5 };
/// let a = simulate_mesi(&p, &[1e-4, 1e-3, 1e-2], 0.02, 7);
/// assert_eq!(a, simulate_mesi(&p, &[1e-4, 1e-3, 1e-2], 0.02, 7));
/// assert!(a[0] > a[2]);
/// ```
pub fn simulate_mesi(
    params: &MesiParams,
    exposures_s: &[f64],
    noise_sd: f64,
    seed: u64,
) -> Vec<f64> {
    let mut rng = SplitMix64(seed);
    exposures_s
        .iter()
        .map(|&t| {
            let k2 = mesi_k2(params, t) * (1.0 + noise_sd * rng.normal());
            k2.max(0.0).sqrt()
        })
        .collect()
}
