//! The decay model of the iterative fits and its derivatives, bin by bin, exactly.
//!
//! Counts expected in bin `j` of the fit range: `y_j = Z + sum_k A_k F_k(j)`, `A_k` the
//! amplitude (counts per ns at time zero) of component `k`, lifetime `tau_k`, `Z` a flat
//! background per bin. Parameters are `[A_1..A_K, ln tau_1..ln tau_K, Z?, s?]`.
//!
//! Without an IRF (tail fit), time zero is the start of the fit range and
//! `F(j) = P tau (1 - e^{-a}) e^{-j a}`, `a = h / tau`: the exact bin integral of the
//! exponential, with `P = 1 / (1 - e^{-T/tau})` the pile-up of earlier pulses (period `T`).
//!
//! With an IRF (reconvolution), `I_i` (normalised to unit sum, over the cube's bins) is the
//! probability that the excitation falls in bin `i`, uniform within the bin, and the IRF is
//! delayed by `s = n + f` bins. A source uniform in its bin and delayed by `f h` is seen in
//! its own bin (lag `n`), the next (lag `n + 1`) and then geometrically: with `a = h / tau`,
//! `r = e^{-a}`, `g = 1 - f`, `phi(x) = e^{-x} - 1 + x`, the exact double integrals are
//! `K0 = (tau/a) phi(g a)`, `K1 = tau (1 - e^{-ga}) - (tau/a)(phi(g a) - e^{-ga} phi(a))` and
//! `C r^{d-2}` for `d >= 2`, `C = (tau/a)(1 - r)^2 e^{-ga}`. So, with `I` moved by `n` bins,
//! `F(j) = K0 I_j + K1 I_{j-1} + C S_{j-1}`, `S_{j+1} = r S_j + I_j`: a recursion, O(bins) per
//! evaluation, exact for any shift. Earlier pulses add `W r^j` to `S_j`,
//! `W = S_B r^{T/h - B} / (1 - r^{T/h})` (`S_B` the state after the window's `B` bins from
//! zero; a source in the very last bin reaching the next window's first bin is taken at the
//! geometric rate). Derivatives in `ln tau` and `s` follow the same recursion.

// `!(x > 0.0)` is meant: it is also true for NaN.
#![allow(clippy::neg_cmp_op_on_partial_ord)]

use crate::error::{Result, invalid};

/// Most parameters of one pixel: three components, offset and shift.
pub const MAX_PARAMS: usize = 8;

/// How the offset (background counts per bin) enters.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Offset {
    /// Known, counts per bin (0 for none).
    Fixed(f64),
    /// Fitted per pixel (>= 0).
    Fitted,
}

/// How the IRF is placed in time.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Shift {
    /// Shifted by this many bins (later when positive).
    Fixed(f64),
    /// Fitted per pixel, starting from this shift (bins).
    Fitted(f64),
}

/// Everything the per-bin evaluation needs, shared by every pixel.
#[derive(Debug, Clone)]
pub(crate) struct ModelSetup {
    /// Components.
    pub k: usize,
    /// Fit range within the cube's bins.
    pub first: usize,
    pub m: usize,
    /// Bins in the cube (the IRF's length).
    pub bins: usize,
    /// Bin width (ns) and laser period in bins.
    pub h: f64,
    pub period_bins: f64,
    /// Normalised IRF over the cube's bins, if reconvolving.
    pub irf: Option<Vec<f64>>,
    pub offset: Offset,
    pub shift: Shift,
    /// Lifetime bounds (ns).
    pub tau_min: f64,
    pub tau_max: f64,
}

/// Index of the offset and shift parameters, if free.
impl ModelSetup {
    pub(crate) fn new(
        k: usize,
        first: usize,
        m: usize,
        bins: usize,
        h: f64,
        period: f64,
        irf: Option<&[f64]>,
        offset: Offset,
        shift: Shift,
    ) -> Result<Self> {
        let irf = match irf {
            None => None,
            Some(v) => {
                if v.len() != bins {
                    return Err(invalid(
                        "IRF",
                        format!("{} bins", v.len()),
                        format!("must have the cube's {bins} bins"),
                    ));
                }
                let total: f64 = v.iter().sum();
                if !(total.is_finite() && total > 0.0) || v.iter().any(|&x| !(x >= 0.0)) {
                    return Err(invalid(
                        "IRF",
                        format!("sum {total}"),
                        "needs finite, non-negative counts with a positive sum",
                    ));
                }
                // A window a little longer than the period (common with B&H TAC settings) is
                // exact as long as no IRF counts lie where one period overlaps the next: the
                // last `over` bins (earlier pulses' state is then carried back, not forward)
                // and the first `over` (their next-period copies would land in the window).
                let over = (bins as f64 - period / h - 1e-6).max(0.0).ceil() as usize;
                // "No counts": at most 1e-4 of the IRF, a model error far below shot noise.
                let overlap_empty = over <= bins / 2
                    && v[..over].iter().chain(&v[bins - over..]).sum::<f64>() <= 1e-4 * total;
                if over > 0 && !overlap_empty {
                    return Err(invalid(
                        "laser period",
                        period,
                        format!(
                            "reconvolution needs a window ({bins} x {h} ns) no longer than the period, or an IRF with (almost, 1e-4) no counts in the {over} bin(s) at either end where the periods overlap"
                        ),
                    ));
                }
                Some(v.iter().map(|x| x / total).collect())
            }
        };
        if let Offset::Fixed(z) = offset
            && !(z.is_finite() && z >= 0.0)
        {
            return Err(invalid(
                "offset",
                z,
                "must be finite and >= 0 counts per bin",
            ));
        }
        match shift {
            Shift::Fixed(s) | Shift::Fitted(s) if !(s.is_finite() && s.abs() < bins as f64) => {
                return Err(invalid(
                    "IRF shift",
                    s,
                    format!("must be finite, within +-{bins} bins"),
                ));
            }
            _ => {}
        }
        Ok(Self {
            k,
            first,
            m,
            bins,
            h,
            period_bins: period / h,
            irf,
            offset,
            shift,
            tau_min: 0.05 * h,
            tau_max: 100.0 * period,
        })
    }

    /// Parameters: amplitudes, log-lifetimes, then offset and shift where fitted.
    pub(crate) fn np(&self) -> usize {
        2 * self.k + usize::from(self.offset == Offset::Fitted) + usize::from(self.fits_shift())
    }

    pub(crate) fn fits_shift(&self) -> bool {
        self.irf.is_some() && matches!(self.shift, Shift::Fitted(_))
    }

    pub(crate) fn offset_index(&self) -> Option<usize> {
        (self.offset == Offset::Fitted).then_some(2 * self.k)
    }

    pub(crate) fn shift_index(&self) -> Option<usize> {
        self.fits_shift()
            .then(|| 2 * self.k + usize::from(self.offset == Offset::Fitted))
    }

    /// The offset of `theta`.
    pub(crate) fn offset_of(&self, theta: &[f64]) -> f64 {
        match (self.offset, self.offset_index()) {
            (Offset::Fixed(z), _) => z,
            (Offset::Fitted, Some(i)) => theta[i],
            (Offset::Fitted, None) => unreachable!(),
        }
    }

    /// The IRF shift of `theta` (bins).
    pub(crate) fn shift_of(&self, theta: &[f64]) -> f64 {
        match (self.shift, self.shift_index()) {
            (_, Some(i)) => theta[i],
            (Shift::Fixed(s) | Shift::Fitted(s), None) => s,
        }
    }

    /// Keep `theta` inside the bounds: amplitudes and offset >= 0, lifetimes in
    /// [tau_min, tau_max], shift within the window.
    pub(crate) fn project(&self, theta: &mut [f64]) {
        let (lo, hi) = (self.tau_min.ln(), self.tau_max.ln());
        for i in 0..self.k {
            theta[i] = theta[i].max(0.0);
            theta[self.k + i] = theta[self.k + i].clamp(lo, hi);
        }
        if let Some(i) = self.offset_index() {
            theta[i] = theta[i].max(0.0);
        }
        if let Some(i) = self.shift_index() {
            let b = self.bins as f64 * 0.5;
            theta[i] = theta[i].clamp(-b, b);
        }
    }

    /// Whether parameter `p` sits on a bound that the descent direction `-g` leaves.
    pub(crate) fn blocked(&self, theta: &[f64], g: &[f64], p: usize) -> bool {
        let (lo, hi) = (self.tau_min.ln(), self.tau_max.ln());
        if p < self.k || Some(p) == self.offset_index() {
            theta[p] <= 0.0 && g[p] > 0.0
        } else if p < 2 * self.k {
            (theta[p] <= lo && g[p] > 0.0) || (theta[p] >= hi && g[p] < 0.0)
        } else {
            let b = self.bins as f64 * 0.5;
            (theta[p] <= -b && g[p] > 0.0) || (theta[p] >= b && g[p] < 0.0)
        }
    }

    /// Whether a lifetime sits on its bounds (a fit there has not found a minimum).
    pub(crate) fn at_lifetime_bound(&self, theta: &[f64]) -> bool {
        let (lo, hi) = (self.tau_min.ln(), self.tau_max.ln());
        (0..self.k).any(|i| {
            theta[i] > 0.0 && (theta[self.k + i] <= lo + 1e-9 || theta[self.k + i] >= hi - 1e-9)
        })
    }
}

/// One component's per-bin value `F`, `dF/d ln tau` and `dF/ds` for the fit range, in order.
#[derive(Default)]
pub(crate) struct Component {
    pub f: Vec<f64>,
    pub dtau: Vec<f64>,
    pub dshift: Vec<f64>,
}

impl ModelSetup {
    /// `F`, `dF/d ln tau`, `dF/ds` of one component of lifetime `tau` over the fit range.
    pub(crate) fn component(&self, tau: f64, shift: f64, out: &mut Component) {
        let m = self.m;
        out.f.resize(m, 0.0);
        out.dtau.resize(m, 0.0);
        out.dshift.resize(m, 0.0);
        let a = self.h / tau;
        let r = (-a).exp();
        let Some(irf) = &self.irf else {
            // Tail: F = P tau (1 - e^-a) e^{-j a}.
            let period = self.period_bins * a; // T / tau
            let q = (-period).exp();
            let c = tau * -(-a).exp_m1() / -(-period).exp_m1();
            let d0 = 1.0 - a * r / -(-a).exp_m1() + period * q / -(-period).exp_m1();
            let mut p = c;
            for j in 0..m {
                out.f[j] = p;
                out.dtau[j] = p * (d0 + j as f64 * a);
                out.dshift[j] = 0.0;
                p *= r;
            }
            return;
        };
        // Integer part of the shift moves the source histogram; the fraction f enters the
        // kernel of a source uniform in its bin, delayed by f h, seen g = 1 - f bins on:
        // lag 0: K0 = (tau/a) phi(g a), lag 1: K1 = tau (1 - e^{-ga}) - (tau/a)(phi(g a)
        // - e^{-ga} phi(a)), lag d >= 2: C r^{d-2}, C = (tau/a)(1 - r)^2 e^{-ga};
        // phi(x) = e^{-x} - 1 + x. So F_j = K0 I_j + K1 I_{j-1} + C S_{j-1}.
        let n = shift.floor();
        let f = shift - n;
        let g = 1.0 - f;
        let n = n as i64;
        let src = |k: i64| -> f64 {
            let q = k - n;
            if q >= 0 && (q as usize) < irf.len() {
                irf[q as usize]
            } else {
                0.0
            }
        };
        let ta = tau / a;
        let eg = (-g * a).exp();
        let em = -(-a).exp_m1(); // 1 - r
        let (pg, p1) = (phi(g * a), phi(a));
        let k0 = ta * pg;
        let k1 = tau * -(-g * a).exp_m1() - ta * (pg - eg * p1);
        let c = ta * em * em * eg;
        // d / d ln tau (a -> -a):
        let dk0 = ta * (2.0 * pg - g * a * -(-g * a).exp_m1());
        let dk1 = tau * (-(-g * a).exp_m1() - g * a * eg)
            - ta * (2.0 * pg - g * a * -(-g * a).exp_m1())
            + ta * eg * ((2.0 + g * a) * p1 - a * em);
        let dc = c * (2.0 - 2.0 * a * r / em + g * a);
        // d / d shift (= d / d f):
        let sk0 = -tau * -(-g * a).exp_m1();
        let sk1 = tau * (-(-g * a).exp_m1() - eg * em);
        let sc = a * c;
        let dr = r * a; // d r / d ln tau
        // Pass 1: source state after the window from zero, for the earlier pulses.
        let (mut s0, mut ds0) = (0.0, 0.0);
        for k in 0..self.bins as i64 {
            ds0 = r * ds0 + dr * s0;
            s0 = r * s0 + src(k);
        }
        let b = self.bins as f64;
        let big_r = (-a * self.period_bins).exp();
        let rho = (-a * (self.period_bins - b)).exp() / -(-a * self.period_bins).exp_m1();
        let w = s0 * rho;
        let dw = if s0 > 0.0 {
            w * (ds0 / s0
                + (self.period_bins - b) * a
                + big_r * self.period_bins * a / (1.0 - big_r))
        } else {
            rho * ds0
        };
        // Pass 2: S_{j-1} = S0_{j-1} + W r^{j-1}, from S0_{-1} = 0.
        let (mut s0, mut ds0) = (0.0, 0.0);
        let mut rj = 1.0 / r; // r^{j-1}
        let mut prev = 0.0; // I_{j-1}
        for j in 0..(self.first + self.m) as i64 {
            let cur = src(j);
            if j >= self.first as i64 {
                let jm = (j - 1) as f64;
                let sp = s0 + w * rj;
                let dsp = ds0 + rj * (dw + w * jm * a);
                let i = j as usize - self.first;
                out.f[i] = k0 * cur + k1 * prev + c * sp;
                out.dtau[i] = dk0 * cur + dk1 * prev + dc * sp + c * dsp;
                out.dshift[i] = sk0 * cur + sk1 * prev + sc * sp;
            }
            ds0 = r * ds0 + dr * s0;
            s0 = r * s0 + prev;
            prev = cur;
            rj *= r;
        }
    }
}

/// `phi(x) = e^{-x} - 1 + x`, without cancellation for small `x` (series below 0.05).
fn phi(x: f64) -> f64 {
    if x < 0.05 {
        let mut term = 0.5 * x * x;
        let mut sum = 0.0;
        for k in 3..12 {
            sum += term;
            term *= -x / k as f64;
        }
        sum
    } else {
        x + (-x).exp_m1()
    }
}

/// Workspace for evaluating a model (no allocation per pixel after the first).
#[derive(Default)]
pub(crate) struct Work {
    comps: Vec<Component>,
}

impl Work {
    /// Fill the components for `theta`.
    pub(crate) fn evaluate(&mut self, su: &ModelSetup, theta: &[f64]) {
        self.comps.resize_with(su.k, Component::default);
        let shift = su.shift_of(theta);
        for (i, c) in self.comps.iter_mut().enumerate() {
            su.component(theta[su.k + i].exp(), shift, c);
        }
    }

    /// Model value of bin `j` and, with `jac`, its gradient in the parameters.
    #[inline]
    pub(crate) fn bin(
        &self,
        su: &ModelSetup,
        theta: &[f64],
        j: usize,
        jac: Option<&mut [f64]>,
    ) -> f64 {
        let z = su.offset_of(theta);
        let mut y = z;
        for (i, c) in self.comps.iter().enumerate() {
            y += theta[i] * c.f[j];
        }
        if let Some(g) = jac {
            let mut dshift = 0.0;
            for (i, c) in self.comps.iter().enumerate() {
                g[i] = c.f[j];
                g[su.k + i] = theta[i] * c.dtau[j];
                dshift += theta[i] * c.dshift[j];
            }
            if let Some(o) = su.offset_index() {
                g[o] = 1.0;
            }
            if let Some(s) = su.shift_index() {
                g[s] = dshift;
            }
        }
        y
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn setup(irf: Option<&[f64]>, shift: Shift, first: usize, m: usize) -> ModelSetup {
        ModelSetup::new(1, first, m, 64, 0.1, 6.4, irf, Offset::Fitted, shift).unwrap()
    }

    /// Tail model: the exact bin integrals of a periodic exponential.
    #[test]
    fn tail_component_is_the_bin_integral() {
        let su = setup(None, Shift::Fixed(0.0), 0, 64);
        let mut c = Component::default();
        let tau = 1.7;
        su.component(tau, 0.0, &mut c);
        for j in [0usize, 5, 63] {
            let (t0, t1) = (j as f64 * 0.1, (j + 1) as f64 * 0.1);
            let one = tau * ((-t0 / tau).exp() - (-t1 / tau).exp());
            let want = one / (1.0 - (-6.4 / tau).exp());
            assert!((c.f[j] - want).abs() < 1e-12 * want, "{j}");
        }
    }

    /// Reconvolution against brute force: sub-bin quadrature of the IRF (uniform within
    /// its bins, shifted) convolved with the periodic exponential.
    #[test]
    fn irf_component_matches_quadrature() {
        let irf: Vec<f64> = (0..64)
            .map(|i| (-0.5 * ((i as f64 - 10.0) / 1.5).powi(2)).exp())
            .collect();
        let total: f64 = irf.iter().sum();
        for shift in [0.0, 2.3, -1.7] {
            let su = setup(Some(&irf), Shift::Fixed(shift), 4, 50);
            let mut c = Component::default();
            let tau = 1.3;
            su.component(tau, shift, &mut c);
            // Brute force: excitation density from the shifted piecewise-constant IRF.
            let sub = 400;
            let dt = 0.1 / sub as f64;
            let src = |t: f64| -> f64 {
                let u = t / 0.1 - shift;
                let i = u.floor();
                if (0.0..64.0).contains(&i) {
                    irf[i as usize] / total / 0.1
                } else {
                    0.0
                }
            };
            // Counts in bin j = int over the bin of sum_pulses int src(t') e^{-(t - t')/tau}.
            let decay = |t: f64| -> f64 {
                // Response at time t (ns) within the period, pulses wrapped.
                let mut acc = 0.0;
                for q in 0..(64 * sub) {
                    let tp = (q as f64 + 0.5) * dt;
                    let mut d = t - tp;
                    if d < 0.0 {
                        d += 6.4;
                    }
                    acc += src(tp) * dt * (-d / tau).exp() / (1.0 - (-6.4 / tau).exp());
                }
                acc
            };
            for j in [0usize, 10, 49] {
                let bin = 4 + j;
                let n = 32;
                let want: f64 = (0..n)
                    .map(|q| {
                        decay((bin as f64 + (q as f64 + 0.5) / n as f64) * 0.1) * 0.1 / n as f64
                    })
                    .sum();
                assert!(
                    (c.f[j] - want).abs() < 3e-4 * want.max(1e-3),
                    "shift {shift} bin {j}: {} vs {want}",
                    c.f[j]
                );
            }
        }
    }

    /// Analytic derivatives against central differences.
    #[test]
    fn derivatives_match_differences() {
        let irf: Vec<f64> = (0..64)
            .map(|i| (-0.5 * ((i as f64 - 12.0) / 2.0).powi(2)).exp())
            .collect();
        for irf in [None, Some(irf.as_slice())] {
            let su = setup(irf, Shift::Fitted(0.4), 3, 55);
            let (mut c, mut up, mut dn) = (
                Component::default(),
                Component::default(),
                Component::default(),
            );
            let (tau, s) = (0.9, 0.4);
            su.component(tau, s, &mut c);
            let e = 1e-6f64;
            su.component(tau * e.exp(), s, &mut up);
            su.component(tau * (-e).exp(), s, &mut dn);
            for j in 0..55 {
                let num = (up.f[j] - dn.f[j]) / (2.0 * e);
                assert!(
                    (num - c.dtau[j]).abs() < 1e-6 * (1.0 + num.abs()),
                    "tau bin {j}: {num} vs {}",
                    c.dtau[j]
                );
            }
            if irf.is_some() {
                su.component(tau, s + e, &mut up);
                su.component(tau, s - e, &mut dn);
                for j in 0..55 {
                    let num = (up.f[j] - dn.f[j]) / (2.0 * e);
                    assert!(
                        (num - c.dshift[j]).abs() < 1e-6 * (1.0 + num.abs()),
                        "shift bin {j}"
                    );
                }
            }
        }
    }
}
