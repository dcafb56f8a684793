//! xoshiro128** per photon, seeded from (seed, photon index) exactly as montecarlo-core's
//! `rng::photon_state`, so a photon's stream does not depend on the batch, thread or
//! device that runs it. The two seed-only hashes of the seeding are computed on the host
//! (`seed_keys`) and passed in: seeding costs four hashes per photon instead of six.

use cubecl::prelude::*;

/// lowbias32 (Chris Wellons), as `montecarlo_core::model::rng::mix32`.
#[cube]
pub(crate) fn mix32(x: u32) -> u32 {
    let mut v = x;
    v ^= v >> 16u32;
    v *= 0x7feb_352du32;
    v ^= v >> 15u32;
    v *= 0x846c_a68bu32;
    v ^= v >> 16u32;
    v
}

/// Host side of the seeding: the hashes that depend on the seed only.
pub fn seed_keys(seed: u64) -> (u32, u32) {
    let host_mix = |mut x: u32| {
        x ^= x >> 16;
        x = x.wrapping_mul(0x7feb_352d);
        x ^= x >> 15;
        x = x.wrapping_mul(0x846c_a68b);
        x ^= x >> 16;
        x
    };
    (
        host_mix((seed as u32).wrapping_add(0x9e37_79b9)),
        host_mix(((seed >> 32) as u32).wrapping_add(0x85eb_ca6b)),
    )
}

/// xoshiro128** state.
#[derive(CubeType)]
pub(crate) struct Rng {
    pub s0: u32,
    pub s1: u32,
    pub s2: u32,
    pub s3: u32,
}

#[cube]
fn rotl(x: u32, #[comptime] k: u32) -> u32 {
    (x << k) | (x >> comptime!(32 - k))
}

#[cube]
pub(crate) fn rng_zero() -> Rng {
    Rng {
        s0: 0u32,
        s1: 0u32,
        s2: 0u32,
        s3: 1u32,
    }
}

/// Re-seed `r` for global photon index (`p_lo`, `p_hi`) with the keys of [`seed_keys`].
#[cube]
pub(crate) fn rng_seed(r: &mut Rng, key_lo: u32, key_hi: u32, p_lo: u32, p_hi: u32) {
    let a = mix32(p_lo ^ key_lo);
    let b = mix32(a ^ p_hi ^ key_hi);
    let c = mix32((b + 0xc2b2_ae35u32) ^ p_lo);
    let d = mix32(c + 0x27d4_eb2fu32) | 1u32;
    r.s0 = a;
    r.s1 = b;
    r.s2 = c;
    r.s3 = d;
}

/// The next 32 random bits.
#[cube]
pub(crate) fn next_u32(r: &mut Rng) -> u32 {
    let result = rotl(r.s1 * 5u32, 7u32) * 9u32;
    let t = r.s1 << 9u32;
    r.s2 ^= r.s0;
    r.s3 ^= r.s1;
    r.s1 ^= r.s2;
    r.s0 ^= r.s3;
    r.s2 ^= t;
    r.s3 = rotl(r.s3, 11u32);
    result
}

/// Uniform in (0, 1] from the top 24 bits of one output.
#[cube]
pub(crate) fn uniform(r: &mut Rng) -> f32 {
    let result = rotl(r.s1 * 5u32, 7u32) * 9u32;
    let t = r.s1 << 9u32;
    r.s2 ^= r.s0;
    r.s3 ^= r.s1;
    r.s1 ^= r.s2;
    r.s0 ^= r.s3;
    r.s2 ^= t;
    r.s3 = rotl(r.s3, 11u32);
    ((result >> 8u32) + 1u32) as f32 * (1.0f32 / 16_777_216.0f32)
}
