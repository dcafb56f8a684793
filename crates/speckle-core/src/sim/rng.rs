//! A small, fast, reproducible random number generator: xoshiro256** (Blackman and Vigna)
//! seeded through splitmix64, with Box-Muller (polar) normals and exact Poisson samples.
//!
//! Every pixel (or frame) draws from its own stream, [`SimRng::stream`], so simulated data
//! do not depend on the number of threads or the order in which work is scheduled.

/// xoshiro256** generator; 256 bits of state, period 2^256 - 1.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimRng {
    s: [u64; 4],
}

const GOLDEN: u64 = 0x9E37_79B9_7F4A_7C15;

/// One splitmix64 step: advance `x` and return a well-mixed output.
fn splitmix64(x: &mut u64) -> u64 {
    *x = x.wrapping_add(GOLDEN);
    let mut z = *x;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

impl SimRng {
    /// A generator for `seed`.
    pub fn new(seed: u64) -> Self {
        let mut x = seed;
        let s = [
            splitmix64(&mut x),
            splitmix64(&mut x),
            splitmix64(&mut x),
            splitmix64(&mut x),
        ];
        // splitmix64 outputs are a bijection of distinct inputs, so the state is never all zero.
        Self { s }
    }

    /// Stream `stream` of `seed`: a generator whose sequence is unrelated to other streams
    /// of the same seed (the pair is hashed into the splitmix64 seed).
    pub fn stream(seed: u64, stream: u64) -> Self {
        let mut x = stream.wrapping_mul(GOLDEN) ^ seed.rotate_left(17);
        let mixed = splitmix64(&mut x) ^ seed;
        Self::new(mixed)
    }

    /// Next 64 random bits.
    #[inline]
    pub fn next_u64(&mut self) -> u64 {
        let result = self.s[1].wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        let t = self.s[1] << 17;
        self.s[2] ^= self.s[0];
        self.s[3] ^= self.s[1];
        self.s[1] ^= self.s[2];
        self.s[0] ^= self.s[3];
        self.s[2] ^= t;
        self.s[3] = self.s[3].rotate_left(45);
        result
    }

    /// Uniform in [0, 1), 53 random bits.
    #[inline]
    pub fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Two independent standard normals: Box-Muller in Marsaglia's polar form, which
    /// avoids the sine and cosine and is about twice as fast as the trigonometric form.
    #[inline]
    pub fn normal_pair(&mut self) -> (f64, f64) {
        loop {
            let u = 2.0 * self.uniform() - 1.0;
            let v = 2.0 * self.uniform() - 1.0;
            let s = u * u + v * v;
            // Accepts 78.5% of pairs (the unit disc); s = 0 would divide by zero.
            if s < 1.0 && s > 0.0 {
                let f = (-2.0 * s.ln() / s).sqrt();
                return (u * f, v * f);
            }
        }
    }

    /// One standard normal (the second of the Box-Muller pair is discarded, which keeps
    /// the generator stateless apart from `s`).
    #[inline]
    pub fn normal(&mut self) -> f64 {
        self.normal_pair().0
    }

    /// A Poisson sample with mean `lambda >= 0`: multiplication method below 10,
    /// Hörmann's transformed rejection (PTRS, as in NumPy) above. Exact in distribution.
    pub fn poisson(&mut self, lambda: f64) -> u64 {
        if lambda.is_nan() || lambda <= 0.0 {
            return 0;
        }
        if lambda < 10.0 {
            let limit = (-lambda).exp();
            let mut k = 0;
            let mut p = self.uniform();
            while p > limit {
                p *= self.uniform();
                k += 1;
            }
            return k;
        }
        let slam = lambda.sqrt();
        let loglam = lambda.ln();
        let b = 0.931 + 2.53 * slam;
        let a = -0.059 + 0.02483 * b;
        let invalpha = 1.1239 + 1.1328 / (b - 3.4);
        let vr = 0.9277 - 3.6224 / (b - 2.0);
        loop {
            let u = self.uniform() - 0.5;
            let v = self.uniform();
            let us = 0.5 - u.abs();
            let k = ((2.0 * a / us + b) * u + lambda + 0.43).floor();
            if us >= 0.07 && v <= vr {
                return k as u64;
            }
            if k < 0.0 || (us < 0.013 && v > us) {
                continue;
            }
            if v.ln() + invalpha.ln() - (a / (us * us) + b).ln()
                <= -lambda + k * loglam - ln_factorial(k)
            {
                return k as u64;
            }
        }
    }
}

/// ln(k!) for whole `k >= 0`: a table below 10, Stirling's series (error < 1e-12) above.
fn ln_factorial(k: f64) -> f64 {
    const TABLE: [f64; 10] = [
        0.0,
        0.0,
        std::f64::consts::LN_2,
        1.791_759_469_228_055,
        3.178_053_830_347_146,
        4.787_491_742_782_046,
        6.579_251_212_010_101,
        8.525_161_361_065_415,
        10.604_602_902_745_25,
        12.801_827_480_081_469,
    ];
    if k < 10.0 {
        return TABLE[k as usize];
    }
    let inv = 1.0 / k;
    let inv2 = inv * inv;
    k * k.ln() - k
        + 0.5 * (std::f64::consts::TAU * k).ln()
        + inv * (1.0 / 12.0 - inv2 * (1.0 / 360.0 - inv2 / 1260.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mean_var(v: &[f64]) -> (f64, f64) {
        let n = v.len() as f64;
        let m = v.iter().sum::<f64>() / n;
        (
            m,
            v.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (n - 1.0),
        )
    }

    #[test]
    fn streams_are_reproducible_and_distinct() {
        let a: Vec<u64> = (0..4)
            .map({
                let mut r = SimRng::stream(7, 3);
                move |_| r.next_u64()
            })
            .collect();
        let b: Vec<u64> = (0..4)
            .map({
                let mut r = SimRng::stream(7, 3);
                move |_| r.next_u64()
            })
            .collect();
        let c: Vec<u64> = (0..4)
            .map({
                let mut r = SimRng::stream(7, 4);
                move |_| r.next_u64()
            })
            .collect();
        assert_eq!(a, b);
        assert_ne!(a, c);
    }

    #[test]
    fn normals_have_unit_variance() {
        // 2e5 samples: the mean's standard error is 0.0022 and the variance's 0.0032;
        // bounds of 0.015 are about 5 standard errors.
        let mut r = SimRng::new(1);
        let v: Vec<f64> = (0..100_000)
            .flat_map(|_| {
                let (a, b) = r.normal_pair();
                [a, b]
            })
            .collect();
        let (m, var) = mean_var(&v);
        assert!(m.abs() < 0.015, "mean {m}");
        assert!((var - 1.0).abs() < 0.015, "variance {var}");
    }

    #[test]
    fn poisson_mean_and_variance_match_lambda() {
        // Relative standard error of the mean ~ 1/sqrt(n lambda), of the variance ~ sqrt(2/n);
        // bounds are about 5 of those.
        let mut r = SimRng::new(2);
        for (lambda, n) in [
            (0.5, 100_000),
            (3.0, 100_000),
            (25.0, 100_000),
            (1.0e4, 100_000),
        ] {
            let v: Vec<f64> = (0..n).map(|_| r.poisson(lambda) as f64).collect();
            let (m, var) = mean_var(&v);
            assert!(
                (m - lambda).abs() < 5.0 * (lambda / n as f64).sqrt(),
                "lambda {lambda}: mean {m}"
            );
            assert!(
                (var / lambda - 1.0).abs() < 5.0 * (2.0 / n as f64).sqrt(),
                "lambda {lambda}: var {var}"
            );
        }
        assert_eq!(r.poisson(0.0), 0);
    }

    #[test]
    fn ln_factorial_is_accurate() {
        let mut exact = 0.0f64;
        for k in 1..200u32 {
            exact += f64::from(k).ln();
            assert!(
                (ln_factorial(f64::from(k)) - exact).abs() < 1e-9 * exact.max(1.0),
                "k = {k}"
            );
        }
    }
}
