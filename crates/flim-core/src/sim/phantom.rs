//! Simulated TCSPC data with known lifetimes: the paper's phantoms (Wu et al. 2016), Poisson
//! photon noise from a seed, optional Gaussian IRF and background.

use crate::error::{Result, invalid};
use crate::model::cube::Cube;
use ndarray::Array3;

/// How decays are turned into counts (builder style).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DecaySim {
    bins: usize,
    bin_ns: f64,
    period_ns: f64,
    photons: f64,
    background: f64,
    irf_sigma_ns: Option<f64>,
    irf_delay_ns: f64,
    seed: u64,
}

/// A list of decay components and its expected counts per bin.
type Decay = (Vec<(f64, f64)>, Vec<f64>);

impl DecaySim {
    /// `bins` bins of `bin_ns`, a window of one laser period, `photons` per pixel (expected),
    /// no background, no IRF (the excitation is an instant pulse at t = 0), seed 1.
    pub fn new(bins: usize, bin_ns: f64, photons: f64) -> Result<Self> {
        if bins < 4 || !(bin_ns > 0.0 && bin_ns.is_finite()) {
            return Err(invalid(
                "bins/bin width",
                format!("{bins} x {bin_ns} ns"),
                "need >= 4 bins of > 0 ns",
            ));
        }
        if !(photons.is_finite() && photons >= 0.0) {
            return Err(invalid("photons", photons, "must be >= 0"));
        }
        Ok(Self {
            bins,
            bin_ns,
            period_ns: bins as f64 * bin_ns,
            photons,
            background: 0.0,
            irf_sigma_ns: None,
            irf_delay_ns: 0.0,
            seed: 1,
        })
    }

    /// Uniform background, expected counts per bin.
    pub fn with_background(mut self, per_bin: f64) -> Self {
        self.background = per_bin.max(0.0);
        self
    }

    /// Gaussian IRF of standard deviation `sigma_ns` centred at `delay_ns`.
    pub fn with_irf(mut self, sigma_ns: f64, delay_ns: f64) -> Self {
        self.irf_sigma_ns = Some(sigma_ns.abs());
        self.irf_delay_ns = delay_ns;
        self
    }

    /// The simulated IRF as a histogram over the bins (unit sum; Gaussian integrated over
    /// each bin, periodic), or `None` without one: what a measured IRF would give.
    pub fn irf_histogram(&self) -> Option<Vec<f64>> {
        let sig = self.irf_sigma_ns?;
        let (h, t_rep) = (self.bin_ns, self.period_ns);
        let cdf = |x: f64| 0.5 * erfc(-x / (sig * std::f64::consts::SQRT_2));
        let mut v: Vec<f64> = (0..self.bins)
            .map(|j| {
                // Sum the periodic images of the pulse that fall in this bin.
                (-3..=3)
                    .map(|k| {
                        let c = self.irf_delay_ns + f64::from(k) * t_rep;
                        cdf((j + 1) as f64 * h - c) - cdf(j as f64 * h - c)
                    })
                    .sum::<f64>()
            })
            .collect();
        let total: f64 = v.iter().sum();
        for x in &mut v {
            *x /= total;
        }
        Some(v)
    }

    /// Laser period (ns), when it differs from the window (e.g. a TAC window a little longer
    /// than the period, as B&H setups often have).
    pub fn with_period_ns(mut self, period_ns: f64) -> Result<Self> {
        if !(period_ns.is_finite() && period_ns > 0.0) {
            return Err(invalid("laser period", period_ns, "must be > 0 ns"));
        }
        self.period_ns = period_ns;
        Ok(self)
    }

    /// Random seed (same seed, same counts).
    pub fn with_seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// Expected counts per bin of a decay `sum a_i exp(-t / tau_i)` (amplitude fractions
    /// `a_i`), periodic with the laser period, normalised to `photons`, plus background.
    pub fn expected(&self, components: &[(f64, f64)]) -> Vec<f64> {
        // Fine sub-bin quadrature of the (IRF-convolved) periodic decay.
        const SUB: usize = 16;
        let (h, t_rep) = (self.bin_ns, self.period_ns);
        let decay = |t: f64| -> f64 {
            components
                .iter()
                .map(|&(a, tau)| {
                    // Periodic: contributions of earlier pulses sum to 1 / (1 - e^{-T/tau}).
                    a * (-t.rem_euclid(t_rep) / tau).exp() / (1.0 - (-t_rep / tau).exp())
                })
                .sum()
        };
        let shape = |t: f64| -> f64 {
            match self.irf_sigma_ns {
                None => decay(t),
                Some(sig) => {
                    // Convolve with the Gaussian by quadrature over +-5 sigma.
                    let n = 41;
                    let mut acc = 0.0;
                    let mut wsum = 0.0;
                    for i in 0..n {
                        let u = -5.0 + 10.0 * i as f64 / (n - 1) as f64;
                        let w = (-0.5 * u * u).exp();
                        acc += w * decay(t - self.irf_delay_ns - u * sig);
                        wsum += w;
                    }
                    acc / wsum
                }
            }
        };
        let mut e: Vec<f64> = if self.irf_sigma_ns.is_none() {
            // Exact bin integrals: tau e^{-t_j/tau} (1 - e^{-h/tau}), periodic.
            (0..self.bins)
                .map(|j| {
                    let t0 = (j as f64 * h).rem_euclid(t_rep);
                    components
                        .iter()
                        .map(|&(a, tau)| {
                            a * tau * (-t0 / tau).exp() * -(-h / tau).exp_m1()
                                / -(-t_rep / tau).exp_m1()
                        })
                        .sum::<f64>()
                })
                .collect()
        } else {
            (0..self.bins)
                .map(|j| {
                    (0..SUB)
                        .map(|k| shape((j as f64 + (k as f64 + 0.5) / SUB as f64) * h))
                        .sum::<f64>()
                })
                .collect()
        };
        let total: f64 = e.iter().sum();
        for v in &mut e {
            *v = *v / total * self.photons + self.background;
        }
        e
    }

    /// A cube of `h x w` pixels whose decay at (y, x) has the components `at(y, x)`.
    pub fn cube(
        &self,
        h: usize,
        w: usize,
        at: impl Fn(usize, usize) -> Vec<(f64, f64)>,
    ) -> Result<Cube<u16>> {
        let mut counts = Array3::<u16>::zeros((h, w, self.bins));
        let mut rng = SplitMix64(self.seed);
        // Expected decays by component list: phantoms repeat a few decays many times.
        let mut cache: Vec<Decay> = Vec::new();
        for y in 0..h {
            for x in 0..w {
                let comps = at(y, x);
                let idx = cache
                    .iter()
                    .position(|(c, _)| *c == comps)
                    .unwrap_or_else(|| {
                        cache.push((comps.clone(), self.expected(&comps)));
                        cache.len() - 1
                    });
                for (j, &mean) in cache[idx].1.iter().enumerate() {
                    counts[[y, x, j]] = poisson(mean, &mut rng).min(u64::from(u16::MAX)) as u16;
                }
            }
        }
        Cube::new(counts, self.bin_ns)?.with_period_ns(self.period_ns)
    }
}

/// The paper's single-exponential phantom: vertical bars of the given lifetimes (ns) across
/// `w` columns (e.g. 2, 2.5, 3, 4 ns), `photons` per pixel.
pub fn mono_exponential(
    taus_ns: &[f64],
    h: usize,
    w: usize,
    bins: usize,
    bin_ns: f64,
    period_ns: f64,
    photons: f64,
    seed: u64,
) -> Result<Cube<u16>> {
    if taus_ns.is_empty() || taus_ns.iter().any(|&t| !(t > 0.0 && t.is_finite())) {
        return Err(invalid(
            "lifetimes",
            format!("{taus_ns:?}"),
            "need at least one, each > 0 ns",
        ));
    }
    let mut sim = DecaySim::new(bins, bin_ns, photons)?.with_seed(seed);
    sim.period_ns = period_ns;
    sim.cube(h, w, |_, x| vec![(1.0, taus_ns[x * taus_ns.len() / w])])
}

/// The paper's bi-exponential phantom: FRET fraction `f_D` falling from 0.8 (left) to 0.2
/// (right) with lifetimes `tau_f` (quenched) and `tau_d` (donor).
pub fn bi_exponential(
    tau_f_ns: f64,
    tau_d_ns: f64,
    h: usize,
    w: usize,
    sim: &DecaySim,
) -> Result<Cube<u16>> {
    sim.cube(h, w, |_, x| {
        let f = 0.8 - 0.6 * x as f64 / (w.max(2) - 1) as f64;
        vec![(f, tau_f_ns), (1.0 - f, tau_d_ns)]
    })
}

/// Complementary error function (Numerical Recipes' erfcc; relative error < 1.2e-7).
fn erfc(x: f64) -> f64 {
    let z = x.abs();
    let t = 1.0 / (1.0 + 0.5 * z);
    let r = t
        * (-z * z - 1.265_512_23
            + t * (1.000_023_68
                + t * (0.374_091_96
                    + t * (0.096_784_18
                        + t * (-0.186_288_06
                            + t * (0.278_868_07
                                + t * (-1.135_203_98
                                    + t * (1.488_515_87
                                        + t * (-0.822_152_23 + t * 0.170_872_77)))))))))
            .exp();
    if x >= 0.0 { r } else { 2.0 - r }
}

/// SplitMix64: small, seedable, statistically sound for simulation.
#[derive(Debug, Clone)]
pub(crate) struct SplitMix64(pub u64);

impl SplitMix64 {
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in (0, 1).
    pub fn uniform(&mut self) -> f64 {
        ((self.next_u64() >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    }
}

/// ln Gamma(x) for x > 0 (Lanczos, g = 7, 9 terms; relative error ~1e-15).
fn ln_gamma(x: f64) -> f64 {
    const C: [f64; 9] = [
        0.999_999_999_999_809_9,
        676.520_368_121_885_1,
        -1_259.139_216_722_402_8,
        771.323_428_777_653_1,
        -176.615_029_162_140_6,
        12.507_343_278_686_905,
        -0.138_571_095_265_720_12,
        9.984_369_578_019_572e-6,
        1.505_632_735_149_311_6e-7,
    ];
    let x = x - 1.0;
    let mut a = C[0];
    let t = x + 7.5;
    for (i, &c) in C.iter().enumerate().skip(1) {
        a += c / (x + i as f64);
    }
    0.5 * (2.0 * std::f64::consts::PI).ln() + (x + 0.5) * t.ln() - t + a.ln()
}

/// A Poisson variate of mean `lam`: multiplication for small means, Hoermann's PTRS
/// (transformed rejection, exact) above 10.
pub(crate) fn poisson(lam: f64, rng: &mut SplitMix64) -> u64 {
    if lam.is_nan() || lam <= 0.0 {
        return 0;
    }
    if lam < 10.0 {
        let limit = (-lam).exp();
        let (mut k, mut p) = (0u64, rng.uniform());
        while p > limit {
            k += 1;
            p *= rng.uniform();
        }
        return k;
    }
    let slam = lam.sqrt();
    let loglam = lam.ln();
    let b = 0.931 + 2.53 * slam;
    let a = -0.059 + 0.024_83 * b;
    let inv_alpha = 1.1239 + 1.1328 / (b - 3.4);
    let vr = 0.9277 - 3.6224 / (b - 2.0);
    loop {
        let u = rng.uniform() - 0.5;
        let v = rng.uniform();
        let us = 0.5 - u.abs();
        let k = ((2.0 * a / us + b) * u + lam + 0.43).floor();
        if us >= 0.07 && v <= vr {
            return k as u64;
        }
        if k < 0.0 || (us < 0.013 && v > us) {
            continue;
        }
        if v.ln() + inv_alpha.ln() - (a / (us * us) + b).ln()
            <= -lam + k * loglam - ln_gamma(k + 1.0)
        {
            return k as u64;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn poisson_mean_and_variance_match() {
        for lam in [0.5, 3.0, 12.0, 250.0] {
            let mut rng = SplitMix64(9);
            let n = 200_000;
            let xs: Vec<f64> = (0..n).map(|_| poisson(lam, &mut rng) as f64).collect();
            let mean = xs.iter().sum::<f64>() / n as f64;
            let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n as f64;
            let se = (lam / n as f64).sqrt();
            assert!((mean - lam).abs() < 5.0 * se, "lam {lam}: mean {mean}");
            assert!((var / lam - 1.0).abs() < 0.02, "lam {lam}: var {var}");
        }
    }

    #[test]
    fn expected_counts_sum_to_photons_and_follow_the_decay() {
        let sim = DecaySim::new(64, 0.2, 1000.0).unwrap();
        let e = sim.expected(&[(1.0, 2.0)]);
        assert!((e.iter().sum::<f64>() - 1000.0).abs() < 1e-9);
        // Bin-integrated exponential: ratio of neighbours e^{-h/tau}.
        assert!((e[10] / e[9] - (-0.1f64).exp()).abs() < 1e-9);
    }

    #[test]
    fn bad_settings_are_errors() {
        assert!(DecaySim::new(2, 0.1, 10.0).is_err());
        assert!(DecaySim::new(64, 0.0, 10.0).is_err());
        assert!(DecaySim::new(64, 0.1, -1.0).is_err());
        assert!(mono_exponential(&[], 2, 2, 64, 0.1, 6.4, 100.0, 1).is_err());
    }
}
