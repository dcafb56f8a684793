//! Tissue curves simulated independently of the fitting code: each delayed input taken as
//! the piecewise-linear function of its samples at the sampling times (the models'
//! assumption, docs/perfusion.md), and the
//! kinetics integrated on a grid 400 times finer than the sampling (exponential
//! convolution by the trapezoid rule, the 2CXM by RK4 on its two compartments), then
//! sampled. Differs from the models' exact recursion by O(h^2), h = dt / 400.

#![allow(dead_code)]

/// Sub-steps per sampling interval.
const FINE: usize = 400;

/// `u` (samples at `t`) at `x`: linear between samples, the first value before, the last after.
pub fn lin(t: &[f64], u: &[f64], x: f64) -> f64 {
    let n = t.len();
    if x <= t[0] {
        return u[0];
    }
    if x >= t[n - 1] {
        return u[n - 1];
    }
    let j = t.partition_point(|&s| s <= x) - 1;
    u[j] + (x - t[j]) / (t[j + 1] - t[j]) * (u[j + 1] - u[j])
}

/// Integrate `y' = f(s, y)` (scalar state `y`, extra state in `z`) on the fine grid and
/// sample at `t`.
fn integrate(
    t: &[f64],
    mut step: impl FnMut(f64, f64) -> f64,
    mut sample: impl FnMut() -> f64,
) -> Vec<f64> {
    let mut out = vec![sample()];
    for i in 1..t.len() {
        let h = (t[i] - t[i - 1]) / FINE as f64;
        for k in 0..FINE {
            step(t[i - 1] + k as f64 * h, h);
        }
        out.push(sample());
    }
    out
}

/// `conv(k; f)` sampled at `t` for the input `f(s)` (per s), trapezoid on the fine grid.
pub fn exp_conv(t: &[f64], k: f64, f: impl Fn(f64) -> f64) -> Vec<f64> {
    let y = std::cell::Cell::new(0.0);
    integrate(
        t,
        |s, h| {
            let e = (-k * h).exp();
            y.set(y.get() * e + 0.5 * h * (f(s) * e + f(s + h)));
            0.0
        },
        || y.get(),
    )
}

/// Input `u` delayed by `tau`, sampled at `t`: the samples the delayed input is linear
/// between.
pub fn delayed(t: &[f64], u: &[f64], tau: f64) -> Vec<f64> {
    t.iter().map(|&s| lin(t, u, s - tau)).collect()
}

/// The models' curves (user units, as `perfusion_core::Model::params`).
pub fn dual_input(t: &[f64], a: &[f64], p: &[f64], x: &[f64]) -> Vec<f64> {
    let s = 1.0 / 6000.0;
    let (ka, kp, kl) = (x[0] * s, x[1] * s, x[2] * s);
    let (a, p) = (delayed(t, a, x[3]), delayed(t, p, x[4]));
    exp_conv(t, kl, |u| ka * lin(t, &a, u) + kp * lin(t, &p, u))
}

pub fn tofts(t: &[f64], a: &[f64], x: &[f64]) -> Vec<f64> {
    let k = x[0] / 60.0;
    let a = delayed(t, a, x[2]);
    exp_conv(t, k / x[1], |u| k * lin(t, &a, u))
}

pub fn extended_tofts(t: &[f64], a: &[f64], x: &[f64]) -> Vec<f64> {
    let k = x[0] / 60.0;
    let a = delayed(t, a, x[3]);
    let c = exp_conv(t, k / x[1], |u| k * lin(t, &a, u));
    c.iter().zip(&a).map(|(c, a)| c + x[2] * a).collect()
}

pub fn patlak(t: &[f64], a: &[f64], x: &[f64]) -> Vec<f64> {
    let k = x[0] / 60.0;
    let a = delayed(t, a, x[2]);
    let c = exp_conv(t, 0.0, |u| k * lin(t, &a, u));
    c.iter().zip(&a).map(|(c, a)| c + x[1] * a).collect()
}

/// 2CXM: `vp Cp' = Fp (Ca - Cp) + PS (Ce - Cp)`, `ve Ce' = PS (Cp - Ce)`, `C = vp Cp + ve Ce`,
/// RK4 on the fine grid.
pub fn two_compartment(t: &[f64], a: &[f64], x: &[f64]) -> Vec<f64> {
    let (fp, ps, ve, vp) = (x[0] / 60.0, x[1] / 60.0, x[2], x[3]);
    let a = delayed(t, a, x[4]);
    let ca = |s: f64| lin(t, &a, s);
    let rhs = |s: f64, cp: f64, ce: f64| {
        (
            (fp * (ca(s) - cp) + ps * (ce - cp)) / vp,
            ps * (cp - ce) / ve,
        )
    };
    let state = std::cell::Cell::new((0.0f64, 0.0f64));
    integrate(
        t,
        |s, h| {
            let (cp, ce) = state.get();
            let k1 = rhs(s, cp, ce);
            let k2 = rhs(s + h / 2.0, cp + h / 2.0 * k1.0, ce + h / 2.0 * k1.1);
            let k3 = rhs(s + h / 2.0, cp + h / 2.0 * k2.0, ce + h / 2.0 * k2.1);
            let k4 = rhs(s + h, cp + h * k3.0, ce + h * k3.1);
            state.set((
                cp + h / 6.0 * (k1.0 + 2.0 * k2.0 + 2.0 * k3.0 + k4.0),
                ce + h / 6.0 * (k1.1 + 2.0 * k2.1 + 2.0 * k3.1 + k4.1),
            ));
            0.0
        },
        || {
            let (cp, ce) = state.get();
            vp * cp + ve * ce
        },
    )
}

/// Splitmix64 uniform deviates in [0, 1).
pub struct Uniform(pub u64);

impl Uniform {
    pub fn next(&mut self) -> f64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        (z >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in [lo, hi).
    pub fn range(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * self.next()
    }
}
