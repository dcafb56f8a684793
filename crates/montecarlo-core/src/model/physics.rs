//! Formulas both paths use: the speed of light, the event guard, Henyey-Greenstein sampling,
//! the azimuth without a library call, the direction update (spin) and Fresnel reflectance.
//! The CPU reference evaluates them in f64; the GPU kernel mirrors them in f32.

/// Speed of light in vacuum in mm/ns (time limits assume lengths in mm).
pub const C_MM_PER_NS: f64 = 299.792_458;
/// Events after which a packet is abandoned (counted in `lost`): a guard against packets
/// trapped by rounding, never reached in the tests.
pub const MAX_EVENTS: u32 = 10_000_000;

/// Cosine of the Henyey-Greenstein deflection for uniform `u`.
pub fn hg_cos(g: f64, u: f64) -> f64 {
    Hg::new(g).cos(u)
}

/// Henyey-Greenstein sampling with its constants precomputed (one division per sample):
/// cos = (1 + g^2 - ((1 - g^2) / (1 - g + 2 g u))^2) / (2 g), or 2u - 1 for |g| < 1e-6.
#[derive(Debug, Clone, Copy)]
pub struct Hg {
    g: f64,
    one_plus_g2: f64,
    one_minus_g2: f64,
    inv_2g: f64,
}

impl Hg {
    pub fn new(g: f64) -> Self {
        Hg {
            g,
            one_plus_g2: 1.0 + g * g,
            one_minus_g2: 1.0 - g * g,
            inv_2g: if g.abs() < 1e-6 { 0.0 } else { 0.5 / g },
        }
    }

    #[inline(always)]
    pub fn cos(&self, u: f64) -> f64 {
        if self.inv_2g == 0.0 {
            2.0 * u - 1.0
        } else {
            let t = self.one_minus_g2 / (1.0 - self.g + 2.0 * self.g * u);
            ((self.one_plus_g2 - t * t) * self.inv_2g).clamp(-1.0, 1.0)
        }
    }
}

/// 1/(2k+1)! and 1/(2k)! with the signs of the sine and cosine series, highest first.
const AZ_SIN: [f64; 10] = [
    8.22063524662433e-18,
    -2.8114572543455206e-15,
    7.647163731819816e-13,
    -1.6059043836821613e-10,
    2.505210838544172e-8,
    -2.7557319223985893e-6,
    1.984126984126984e-4,
    -8.333333333333333e-3,
    1.6666666666666666e-1,
    -1.0,
];
const AZ_COS: [f64; 11] = [
    4.110317623312165e-19,
    -1.5619206968586225e-16,
    4.779477332387385e-14,
    -1.1470745597729725e-11,
    2.08767569878681e-9,
    -2.755731922398589e-7,
    2.48015873015873e-5,
    -1.388888888888889e-3,
    4.1666666666666664e-2,
    -0.5,
    1.0,
];

/// (cos phi, sin phi) of phi = 2 pi (u - 1/2), uniform on [-pi, pi) for uniform u, without
/// a library call: the half angle psi = pi (u - 1/2) lies in [-pi/2, pi/2), where the
/// Taylor series of sin (through psi^19) and cos (through psi^20) are within 3e-16; then
/// cos phi = 1 - 2 sin^2 psi and sin phi = 2 sin psi cos psi: both within 2e-15 of the
/// library's cos and sin of phi (checked at 2e5 points).
///
/// ```
/// let (c, s) = montecarlo_core::model::physics::azimuth(0.8);
/// let phi = 2.0 * std::f64::consts::PI * (0.8 - 0.5);
/// assert!((c - phi.cos()).abs() < 3e-15 && (s - phi.sin()).abs() < 3e-15);
/// ```
#[inline(always)]
pub fn azimuth(u: f64) -> (f64, f64) {
    let x = std::f64::consts::PI * (u - 0.5);
    let x2 = x * x;
    let mut ps = AZ_SIN[0];
    for &k in &AZ_SIN[1..] {
        ps = ps * x2 + k;
    }
    // S alternates from -1/19! up to 1/1!; the series is x (1 - x^2/6 + ...).
    let sin = -x * ps;
    let mut pc = AZ_COS[0];
    for &k in &AZ_COS[1..] {
        pc = pc * x2 + k;
    }
    (1.0 - 2.0 * sin * sin, 2.0 * sin * pc)
}

/// Rotate unit `d` by polar angle `acos(ct)` and azimuth phi given by its cosine `cp` and
/// sine `sp` (MCML's formula). The result is brought back to unit length by one Newton
/// step of 1/sqrt (no square root or division: the length error stays ~1e-16).
#[inline(always)]
pub fn spin(d: [f64; 3], ct: f64, cp: f64, sp: f64) -> [f64; 3] {
    let st = (1.0 - ct * ct).max(0.0).sqrt();
    if d[2].abs() > 0.99999 {
        return [st * cp, st * sp, ct * d[2].signum()];
    }
    let tmp = (1.0 - d[2] * d[2]).sqrt();
    let a = st / tmp;
    let out = [
        a * (d[0] * d[2] * cp - d[1] * sp) + d[0] * ct,
        a * (d[1] * d[2] * cp + d[0] * sp) + d[1] * ct,
        -st * cp * tmp + d[2] * ct,
    ];
    let k = 1.5 - 0.5 * (out[0] * out[0] + out[1] * out[1] + out[2] * out[2]);
    [out[0] * k, out[1] * k, out[2] * k]
}

/// Exact unpolarised Fresnel reflectance from index `n1` into `n2` at incidence cosine
/// `cos_i` (> 0), and the transmitted cosine; 1 (total internal reflection) past the
/// critical angle.
///
/// ```
/// let (r, _) = montecarlo_core::model::physics::fresnel(1.0, 1.5, 1.0);
/// assert!((r - 0.04).abs() < 1e-12); // ((n1-n2)/(n1+n2))^2 at normal incidence
/// ```
pub fn fresnel(n1: f64, n2: f64, cos_i: f64) -> (f64, f64) {
    let sin_t = n1 / n2 * (1.0 - cos_i * cos_i).max(0.0).sqrt();
    if sin_t >= 1.0 {
        return (1.0, 0.0);
    }
    let cos_t = (1.0 - sin_t * sin_t).sqrt();
    let rs = (n1 * cos_i - n2 * cos_t) / (n1 * cos_i + n2 * cos_t);
    let rp = (n1 * cos_t - n2 * cos_i) / (n1 * cos_t + n2 * cos_i);
    (0.5 * (rs * rs + rp * rp), cos_t)
}
