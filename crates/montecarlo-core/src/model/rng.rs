//! Per-photon random streams: xoshiro128** seeded from (seed, photon index) by a 32-bit
//! integer hash. Photon `i` always draws the same numbers whatever thread, batch or device
//! runs it, so results are reproducible from the seed and independent of how the photons
//! are split into launches. The GPU kernel (`gpu_kernels::montecarlo`) uses the same
//! seeding and generator in u32 arithmetic.

/// lowbias32 (Chris Wellons): a fast, well-mixed 32-bit hash.
pub fn mix32(mut x: u32) -> u32 {
    x ^= x >> 16;
    x = x.wrapping_mul(0x7feb_352d);
    x ^= x >> 15;
    x = x.wrapping_mul(0x846c_a68b);
    x ^= x >> 16;
    x
}

/// xoshiro128** state for photon `photon` of a run seeded with `seed`.
pub fn photon_state(seed: u64, photon: u64) -> [u32; 4] {
    let (s_lo, s_hi) = (seed as u32, (seed >> 32) as u32);
    let (p_lo, p_hi) = (photon as u32, (photon >> 32) as u32);
    let a = mix32(p_lo ^ mix32(s_lo.wrapping_add(0x9e37_79b9)));
    let b = mix32(a ^ p_hi ^ mix32(s_hi.wrapping_add(0x85eb_ca6b)));
    let c = mix32(b.wrapping_add(0xc2b2_ae35) ^ p_lo);
    let d = mix32(c.wrapping_add(0x27d4_eb2f)) | 1;
    [a, b, c, d]
}

/// xoshiro128** (Blackman and Vigna), one stream per photon.
#[derive(Debug, Clone)]
pub struct Xoshiro128 {
    s: [u32; 4],
}

impl Xoshiro128 {
    /// The stream of photon `photon` in a run seeded with `seed`.
    ///
    /// ```
    /// use montecarlo_core::model::rng::Xoshiro128;
    /// let mut a = Xoshiro128::for_photon(7, 123);
    /// let mut b = Xoshiro128::for_photon(7, 123);
    /// assert_eq!(a.next_u32(), b.next_u32());
    /// let u = a.uniform();
    /// assert!(u > 0.0 && u <= 1.0);
    /// ```
    pub fn for_photon(seed: u64, photon: u64) -> Self {
        Xoshiro128 {
            s: photon_state(seed, photon),
        }
    }

    pub fn next_u32(&mut self) -> u32 {
        let s = &mut self.s;
        let result = s[1].wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        let t = s[1] << 9;
        s[2] ^= s[0];
        s[3] ^= s[1];
        s[1] ^= s[2];
        s[0] ^= s[3];
        s[2] ^= t;
        s[3] = s[3].rotate_left(11);
        result
    }

    /// Uniform in (0, 1) from one 32-bit draw: (x + 1/2) / 2^32. For angles and roulette,
    /// where 32 bits are plenty (the step length uses [`Self::uniform`]).
    #[inline(always)]
    pub fn uniform32(&mut self) -> f64 {
        (f64::from(self.next_u32()) + 0.5) * (1.0 / 4_294_967_296.0)
    }

    /// Uniform in (0, 1] with 53 random bits (never 0, so `-ln(u)` is finite).
    pub fn uniform(&mut self) -> f64 {
        let hi = u64::from(self.next_u32() >> 5);
        let lo = u64::from(self.next_u32() >> 6);
        ((hi << 26 | lo) + 1) as f64 * (1.0 / 9_007_199_254_740_992.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streams_differ_between_photons_and_seeds_and_are_uniform() {
        let mut a = Xoshiro128::for_photon(1, 0);
        let mut b = Xoshiro128::for_photon(1, 1);
        let mut c = Xoshiro128::for_photon(2, 0);
        let (x, y, z) = (a.next_u32(), b.next_u32(), c.next_u32());
        assert!(x != y && x != z && y != z);
        let n = 100_000;
        let mut r = Xoshiro128::for_photon(9, 9);
        let mean = (0..n).map(|_| r.uniform()).sum::<f64>() / f64::from(n);
        // Standard error of the mean of U(0,1) is 0.289/sqrt(n) = 9e-4; 5 sigma.
        assert!((mean - 0.5).abs() < 4.6e-3, "{mean}");
    }
}
