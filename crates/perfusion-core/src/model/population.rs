//! Population input functions: published arterial input functions (AIFs) and a portal-venous
//! input derived from one, for fits without a measured input.
//!
//! | name | what | compartment | reference |
//! |---|---|---|---|
//! | `parker` | two Gaussians plus a sigmoid-modulated exponential | whole blood | Parker et al. 2006 |
//! | `weinmann` | bi-exponential, dose 0.1 mmol/kg | plasma | Weinmann et al. 1984; Tofts & Kermode 1991 |
//! | `georgiou` | gamma-variate recirculations times three exponentials | whole blood | Georgiou et al. 2019 |
//! | `portal` | `parker` through a gut compartment of mean transit 10 s | whole blood | dcmri's one-inlet liver model |
//!
//! Units: times in seconds, concentrations in mM. The formulas keep their papers' minutes
//! inside. [`PopulationInput::sample`] places the bolus arrival at `arrival_s` and is zero
//! before it.
//!
//! Blood and plasma: Parker's, Georgiou's and the portal input are whole-blood
//! concentrations; the kinetic models take plasma, so divide them by `1 - Hct` (the
//! `hematocrit` of [`InputSpec`](crate::io::input::InputSpec), `--hematocrit` of
//! `biogpu perfusion fit`). Weinmann's is already plasma: no hematocrit for it
//! ([`PopulationInput::compartment`]).
//!
//! Checked against dcmri 0.6.20 and osipy 0.1.4 (`tests/data/make_population.py`,
//! `tests/population.rs`).

use crate::error::{Error, Result};
use crate::model::weights::weights;
use std::f64::consts::PI;
use std::fmt;
use std::str::FromStr;

/// Mean transit time (s) of the gut compartment of [`PopulationInput::Portal`]: dcmri's
/// default (`fake_liver`, the initial value of `Liver`'s one-inlet model).
pub const GUT_TRANSIT_S: f64 = 10.0;

/// Step (s) of the grid on which [`portal`] convolves.
pub const PORTAL_STEP_S: f64 = 0.01;

/// A published population input function.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PopulationInput {
    /// Parker et al. 2006 AIF, whole blood.
    Parker,
    /// Weinmann et al. 1984 bi-exponential (Tofts & Kermode 1991), plasma, 0.1 mmol/kg.
    Weinmann,
    /// Georgiou et al. 2019 AIF, whole blood.
    Georgiou,
    /// Portal-venous input: Parker's AIF through a gut compartment ([`GUT_TRANSIT_S`]).
    Portal,
}

/// Which part of the blood a population input's concentration refers to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Compartment {
    /// Whole blood: divide by `1 - Hct` for the plasma input of the models.
    Blood,
    /// Plasma: use as is.
    Plasma,
}

impl PopulationInput {
    /// Every input, in the order of [`PopulationInput::name`]'s list.
    pub const ALL: [PopulationInput; 4] = [
        PopulationInput::Parker,
        PopulationInput::Weinmann,
        PopulationInput::Georgiou,
        PopulationInput::Portal,
    ];

    /// The name [`FromStr`] takes.
    ///
    /// ```
    /// use perfusion_core::population::PopulationInput;
    /// assert_eq!(PopulationInput::Georgiou.name(), "georgiou");
    /// ```
    pub fn name(self) -> &'static str {
        match self {
            PopulationInput::Parker => "parker",
            PopulationInput::Weinmann => "weinmann",
            PopulationInput::Georgiou => "georgiou",
            PopulationInput::Portal => "portal",
        }
    }

    /// The publication the formula and its parameter values come from.
    ///
    /// ```
    /// use perfusion_core::population::PopulationInput;
    /// assert!(PopulationInput::Parker.citation().contains("56:993"));
    /// ```
    pub fn citation(self) -> &'static str {
        match self {
            PopulationInput::Parker => {
                "Parker GJM, Roberts C, Macdonald A, et al. Experimentally-derived functional \
                 form for a population-averaged high-temporal-resolution arterial input function \
                 for dynamic contrast-enhanced MRI. Magn Reson Med 2006;56:993-1000 \
                 (doi:10.1002/mrm.21066), Table 1"
            }
            PopulationInput::Weinmann => {
                "Weinmann HJ, Laniado M, Mutzel W. Pharmacokinetics of GdDTPA/dimeglumine after \
                 intravenous injection into healthy volunteers. Physiol Chem Phys Med NMR \
                 1984;16:167-172; as used by Tofts PS, Kermode AG. Measurement of the \
                 blood-brain barrier permeability and leakage space using dynamic MR imaging. \
                 Magn Reson Med 1991;17:357-367 (doi:10.1002/mrm.1910170208)"
            }
            PopulationInput::Georgiou => {
                "Georgiou L, Wilson DJ, Sharma N, Perren TJ, Buckley DL. A functional form for a \
                 representative individual arterial input function measured from a population \
                 using high temporal resolution DCE MRI. Magn Reson Med 2019;81:1955-1963 \
                 (doi:10.1002/mrm.27524), eq. 1 and Table 3"
            }
            PopulationInput::Portal => {
                "Parker et al. 2006's AIF through a gut compartment (normalised exponential \
                 transit, mean 10 s), the portal-venous input of the one-inlet liver model of \
                 dcmri (Sourbron S et al., dcmri, flux_comp and fake_liver); exact convolution \
                 of a piecewise-linear input as Flouri D, Lesnic D, Sourbron SP. Magn Reson \
                 Med 2016;76:998-1006 (doi:10.1002/mrm.25991)"
            }
        }
    }

    /// Whether the concentration is of whole blood or of plasma.
    ///
    /// ```
    /// use perfusion_core::population::{Compartment, PopulationInput};
    /// assert_eq!(PopulationInput::Parker.compartment(), Compartment::Blood);
    /// assert_eq!(PopulationInput::Weinmann.compartment(), Compartment::Plasma);
    /// ```
    pub fn compartment(self) -> Compartment {
        match self {
            PopulationInput::Weinmann => Compartment::Plasma,
            _ => Compartment::Blood,
        }
    }

    /// Concentration (mM, of [`PopulationInput::compartment`]) at `times_s` (s) for a bolus
    /// arriving at `arrival_s` (s): 0 before arrival, the formula of the time since arrival
    /// after. A NaN time gives NaN; a non-finite `arrival_s` gives NaN everywhere.
    ///
    /// Parker's formula is cut at arrival, where it is already 0.080 mM (1.3% of its peak);
    /// Weinmann's starts at its maximum, 0.877 mM (an instantaneous bolus).
    ///
    /// ```
    /// use perfusion_core::population::PopulationInput;
    /// let t: Vec<f64> = (0..=120).map(|i| i as f64).collect();
    /// let aif = PopulationInput::Parker.sample(&t, 10.0);
    /// assert_eq!(aif[9], 0.0);
    /// let peak = aif.iter().cloned().fold(0.0, f64::max);
    /// assert!((peak - 6.07).abs() < 0.05); // mM, 10.4 s after arrival
    /// ```
    pub fn sample(&self, times_s: &[f64], arrival_s: f64) -> Vec<f64> {
        if !arrival_s.is_finite() {
            return vec![f64::NAN; times_s.len()];
        }
        let formula: fn(f64) -> f64 = match self {
            PopulationInput::Portal => return portal(times_s, arrival_s, GUT_TRANSIT_S),
            PopulationInput::Parker => parker,
            PopulationInput::Weinmann => weinmann,
            PopulationInput::Georgiou => georgiou,
        };
        times_s
            .iter()
            .map(|&t| after_arrival(t - arrival_s, formula))
            .collect()
    }
}

/// `formula` of the minutes since arrival for `since_s` >= 0 s, 0 before, NaN for NaN.
fn after_arrival(since_s: f64, formula: fn(f64) -> f64) -> f64 {
    if since_s.is_nan() {
        f64::NAN
    } else if since_s < 0.0 {
        0.0
    } else {
        formula(since_s / 60.0)
    }
}

impl fmt::Display for PopulationInput {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for PopulationInput {
    type Err = Error;

    /// A name of [`PopulationInput::name`], any case; else an error listing them.
    ///
    /// ```
    /// use perfusion_core::population::PopulationInput;
    /// assert_eq!("Parker".parse::<PopulationInput>().unwrap(), PopulationInput::Parker);
    /// let e = "fritz".parse::<PopulationInput>().unwrap_err().to_string();
    /// assert!(e.contains("parker, weinmann, georgiou, portal"), "{e}");
    /// ```
    fn from_str(s: &str) -> Result<Self> {
        let wanted = s.trim();
        PopulationInput::ALL
            .into_iter()
            .find(|p| p.name().eq_ignore_ascii_case(wanted))
            .ok_or_else(|| Error::InvalidOption {
                name: "population-input",
                value: s.to_string(),
                why: format!(
                    "no such population input; the inputs are {}",
                    PopulationInput::ALL.map(PopulationInput::name).join(", ")
                ),
            })
    }
}

/// Parker et al. 2006 AIF (mM, whole blood) at `t_min` minutes after arrival, Table 1:
/// `A1/(s1 sqrt(2 pi)) exp(-(t-T1)^2/(2 s1^2)) + A2/(...)(T2, s2) + alpha exp(-beta t) /
/// (1 + exp(-s (t - tau)))` with A1 0.809 mM min, A2 0.330 mM min, T1 0.17046 min, T2 0.365
/// min, s1 0.0563 min, s2 0.132 min, alpha 1.050 mM, beta 0.1685 /min, s 38.078 /min, tau
/// 0.483 min. Not cut at 0 (see [`PopulationInput::sample`] for that).
///
/// ```
/// use perfusion_core::population::parker;
/// assert!((parker(0.0) - 0.0804).abs() < 1e-4);
/// assert!((parker(17.5 / 60.0 - 7.25 / 60.0) - 6.0705).abs() < 1e-3);
/// ```
pub fn parker(t_min: f64) -> f64 {
    let m = t_min;
    let gauss = |a: f64, mu: f64, sigma: f64| {
        a / (sigma * (2.0 * PI).sqrt()) * (-(m - mu) * (m - mu) / (2.0 * sigma * sigma)).exp()
    };
    gauss(0.809, 0.17046, 0.0563)
        + gauss(0.330, 0.365, 0.132)
        + 1.050 * (-0.1685 * m).exp() / (1.0 + (-38.078 * (m - 0.483)).exp())
}

/// Weinmann et al. 1984 plasma concentration (mM) `t_min` minutes after a bolus of 0.1
/// mmol/kg, as Tofts & Kermode 1991: `D (a1 exp(-m1 t) + a2 exp(-m2 t))`, D 0.1 mmol/kg,
/// a1 3.99 kg/l, a2 4.78 kg/l, m1 0.144 /min, m2 0.0111 /min.
///
/// ```
/// use perfusion_core::population::weinmann;
/// assert!((weinmann(0.0) - 0.877).abs() < 1e-12);
/// ```
pub fn weinmann(t_min: f64) -> f64 {
    const DOSE: f64 = 0.1;
    DOSE * (3.99 * (-0.144 * t_min).exp() + 4.78 * (-0.0111 * t_min).exp())
}

/// Georgiou et al. 2019 AIF (mM, whole blood) `t_min` minutes after its start, eq. 1 with
/// Table 3: `sum_i A_i exp(-m_i t) * sum_{j=0}^{floor(t/tau)} gamma(t - j tau; a_j + 1,
/// beta)`, a gamma density of shape `a_j + 1`, `a_j = (j + 1) alpha + j`, scale beta (the
/// j-th recirculation); A 0.37, 0.33, 10.06 mM, m 0.11, 1.17, 16.02 /min, alpha 5.26, beta
/// 0.032 min, tau 0.129 min. 0 for `t_min <= 0` and where the exponentials underflow.
///
/// ```
/// use perfusion_core::population::georgiou;
/// assert_eq!(georgiou(0.0), 0.0);
/// assert!((georgiou(7.25 / 60.0) - 8.6821).abs() < 1e-3); // its peak
/// ```
pub fn georgiou(t_min: f64) -> f64 {
    const A: [f64; 3] = [0.37, 0.33, 10.06];
    const M: [f64; 3] = [0.11, 1.17, 16.02];
    const TAU: f64 = 0.129;
    if t_min.is_nan() {
        return f64::NAN;
    }
    let envelope: f64 = A.iter().zip(M).map(|(a, m)| a * (-m * t_min).exp()).sum();
    if !(t_min > 0.0 && envelope > 0.0) {
        return 0.0;
    }
    let passes = (t_min / TAU).floor() as usize;
    let recirculation: f64 = (0..=passes)
        .map(|j| georgiou_pass(j, t_min - j as f64 * TAU))
        .sum();
    envelope * recirculation
}

/// Gamma density (1/min) of Georgiou's pass `j` at `x` >= 0 min after its start, in logs.
fn georgiou_pass(j: usize, x: f64) -> f64 {
    const ALPHA: f64 = 5.26;
    const BETA: f64 = 0.032;
    let a = (j as f64 + 1.0) * ALPHA + j as f64;
    if x <= 0.0 {
        return 0.0;
    }
    (a * x.ln() - x / BETA - (a + 1.0) * BETA.ln() - ln_gamma(a + 1.0)).exp()
}

/// `ln Gamma(x)` for `x > 0`: the argument raised to 15 or more by the recurrence, then
/// Stirling's series to `x^-9` (error below 1e-15 there).
fn ln_gamma(x: f64) -> f64 {
    let (mut x, mut shift) = (x, 0.0);
    while x < 15.0 {
        shift += x.ln();
        x += 1.0;
    }
    let inv = 1.0 / x;
    let inv2 = inv * inv;
    let series = inv
        * (1.0 / 12.0
            - inv2 * (1.0 / 360.0 - inv2 * (1.0 / 1260.0 - inv2 * (1.0 / 1680.0 - inv2 / 1188.0))));
    (x - 0.5) * x.ln() - x + 0.5 * (2.0 * PI).ln() + series - shift
}

/// Portal-venous input (mM, whole blood) at `times_s` (s): Parker's AIF arriving at
/// `arrival_s` (s) convolved with a gut compartment's transit-time density
/// `exp(-t/transit_s)/transit_s`. The convolution is exact for the AIF linear between the
/// points of a [`PORTAL_STEP_S`] grid from arrival (as dcmri's `flux_comp`), interpolated
/// linearly between them; past [`PORTAL_TAIL_S`], where Parker's AIF is a single
/// exponential to the last bit, it is continued in closed form. It is 0 at and before
/// arrival and keeps the AIF's area. `transit_s` 0 gives the AIF; a negative or non-finite
/// transit, or a non-finite arrival, gives NaN.
///
/// ```
/// use perfusion_core::population::{GUT_TRANSIT_S, PopulationInput, portal};
/// let t: Vec<f64> = (0..=120).map(|i| i as f64).collect();
/// let pv = portal(&t, 5.0, GUT_TRANSIT_S);
/// assert_eq!(pv, PopulationInput::Portal.sample(&t, 5.0));
/// let peak = (0..t.len()).max_by(|&a, &b| pv[a].total_cmp(&pv[b])).unwrap();
/// assert!((t[peak] - 19.5).abs() <= 1.0); // later and lower than the AIF's 15.25 s
/// ```
pub fn portal(times_s: &[f64], arrival_s: f64, transit_s: f64) -> Vec<f64> {
    if !(arrival_s.is_finite() && transit_s.is_finite() && transit_s >= 0.0) {
        return vec![f64::NAN; times_s.len()];
    }
    if transit_s == 0.0 {
        return PopulationInput::Parker.sample(times_s, arrival_s);
    }
    let since: Vec<f64> = times_s.iter().map(|&t| t - arrival_s).collect();
    let mut out: Vec<f64> = since
        .iter()
        .map(|&s| if s.is_nan() { f64::NAN } else { 0.0 })
        .collect();
    let mut order: Vec<usize> = (0..since.len())
        .filter(|&i| since[i] > 0.0 && since[i].is_finite())
        .collect();
    order.sort_by(|&a, &b| since[a].total_cmp(&since[b]));
    let mut walk = GutWalk::new(1.0 / transit_s);
    for i in order {
        out[i] = walk.at(since[i]);
    }
    out
}

/// Time (s after arrival) from which [`portal`] continues in closed form: there Parker's
/// Gaussians are below 1e-300 and its sigmoid is 1 in f64, so the AIF is
/// `1.050 exp(-0.1685 t / 60)` exactly.
pub const PORTAL_TAIL_S: f64 = 1200.0;

/// Parker's late exponential: amplitude (mM) and rate (1/s).
const PARKER_TAIL: (f64, f64) = (1.050, 0.1685 / 60.0);

/// The exact exponential-convolution recursion over Parker's AIF on the [`PORTAL_STEP_S`]
/// grid, walked forwards to increasing times, then the closed form past
/// [`PORTAL_TAIL_S`].
struct GutWalk {
    k: f64,
    w: crate::model::weights::Weights,
    /// Grid index of `hi`; `lo` is at index - 1.
    index: usize,
    aif: f64,
    lo: f64,
    hi: f64,
}

impl GutWalk {
    fn new(k: f64) -> Self {
        GutWalk {
            k,
            w: weights(k, PORTAL_STEP_S),
            index: 0,
            aif: parker(0.0),
            lo: 0.0,
            hi: 0.0,
        }
    }

    /// Advance the grid to index `target`.
    fn advance(&mut self, target: usize) {
        while self.index < target {
            self.index += 1;
            let next = parker(self.index as f64 * PORTAL_STEP_S / 60.0);
            let value = self.w.e * self.hi + (self.w.wa * self.aif + self.w.wb * next) * self.k;
            (self.lo, self.hi, self.aif) = (self.hi, value, next);
        }
    }

    /// The output at `since` s after arrival, finite and > 0 (not before the previous
    /// call's).
    fn at(&mut self, since: f64) -> f64 {
        if since > PORTAL_TAIL_S {
            return self.tail(since);
        }
        let x = since / PORTAL_STEP_S;
        self.advance((x.ceil() as usize).max(1));
        let f = x - (self.index - 1) as f64;
        self.lo + f * (self.hi - self.lo)
    }

    /// `F(T) exp(-k x) + int_T^t k exp(-k (t - u)) a exp(-b u) du`, `x = t - T`, from the
    /// grid's value at `T` = [`PORTAL_TAIL_S`].
    fn tail(&mut self, t: f64) -> f64 {
        let end = (PORTAL_TAIL_S / PORTAL_STEP_S).round() as usize;
        self.advance(end);
        let start = end as f64 * PORTAL_STEP_S;
        let (a, b) = PARKER_TAIL;
        let (k, x) = (self.k, t - start);
        let d = k - b;
        let inflow = if (d * x).abs() < 0.5 {
            // (1 - exp(-d x)) / d without cancellation.
            let z = d * x;
            let phi = if z == 0.0 { 1.0 } else { -(-z).exp_m1() / z };
            a * k * (-b * t).exp() * x * phi
        } else {
            a * k * ((-b * t).exp() - (-b * start - k * x).exp()) / d
        };
        self.hi * (-k * x).exp() + inflow
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grid(dt: f64, end: f64) -> Vec<f64> {
        (0..=((end / dt).round() as usize))
            .map(|i| i as f64 * dt)
            .collect()
    }

    fn area(t: &[f64], v: &[f64]) -> f64 {
        t.windows(2)
            .zip(v.windows(2))
            .map(|(t, v)| 0.5 * (t[1] - t[0]) * (v[0] + v[1]))
            .sum()
    }

    #[test]
    fn ln_gamma_matches_factorials_and_half_integers() {
        for n in 1..40u32 {
            let fact: f64 = (1..n).map(f64::from).map(f64::ln).sum();
            assert!(
                (ln_gamma(f64::from(n)) - fact).abs() < 1e-13 * fact.max(1.0),
                "{n}"
            );
        }
        assert!((ln_gamma(0.5) - PI.sqrt().ln()).abs() < 1e-14);
        // Gamma(171.5) from Gamma(0.5) by the recurrence.
        let up: f64 = (0..171).map(|i| (0.5 + f64::from(i)).ln()).sum();
        assert!((ln_gamma(171.5) - (PI.sqrt().ln() + up)).abs() < 1e-12 * up);
    }

    #[test]
    fn inputs_are_zero_before_arrival_and_peak_as_published() {
        let t = grid(0.1, 700.0);
        // (input, peak mM, seconds from arrival to peak, value at 10 min)
        let expected = [
            (PopulationInput::Parker, 6.07, 10.2, 0.197),
            (PopulationInput::Georgiou, 8.70, 7.0, 0.376),
            (PopulationInput::Weinmann, 0.877, 0.0, 0.523),
            (PopulationInput::Portal, 3.00, 14.7, 0.204),
        ];
        for (input, peak, at, late) in expected {
            let v = input.sample(&t, 20.0);
            assert!(v[..200].iter().all(|&c| c == 0.0), "{input}");
            let i = (0..v.len()).max_by(|&a, &b| v[a].total_cmp(&v[b])).unwrap();
            let late_value = v[6200];
            println!(
                "{input}: peak {} mM at {} s, {late_value} mM at 10 min",
                v[i],
                t[i] - 20.0
            );
            assert!((v[i] - peak).abs() < 0.01 * peak, "{input}: peak {}", v[i]);
            assert!((t[i] - 20.0 - at).abs() < 0.6, "{input}: peak at {}", t[i]);
            assert!((late_value - late).abs() < 0.01, "{input}: {late_value}");
            assert!(v.iter().all(|c| c.is_finite() && *c >= 0.0), "{input}");
        }
    }

    #[test]
    fn portal_keeps_the_dose_and_a_sample_depends_on_its_time_only() {
        let t = grid(0.05, 3600.0);
        let a = PopulationInput::Parker.sample(&t, 0.0);
        let p = PopulationInput::Portal.sample(&t, 0.0);
        // The compartment delays the area by its transit: what is still inside at 1 h is
        // the late AIF times 10 s.
        let missing = a[a.len() - 1] * GUT_TRANSIT_S / 60.0;
        assert!((area(&t, &p) - area(&t, &a) + missing * 60.0).abs() < 1e-3 * area(&t, &a));
        // A sample depends on its own time only, not on the other times asked for.
        let coarse: Vec<f64> = (0..200).map(|i| 0.37 + 1.73 * f64::from(i)).collect();
        let alone = PopulationInput::Portal.sample(&coarse, 0.0);
        let mut mixed: Vec<f64> = t.iter().rev().copied().collect();
        mixed.extend(&coarse);
        let among = PopulationInput::Portal.sample(&mixed, 0.0);
        assert_eq!(alone[..], among[t.len()..]);
    }

    #[test]
    fn weinmann_and_parker_integrals_are_the_closed_forms() {
        // Weinmann: D (a1/m1 (1 - exp(-m1 T)) + a2/m2 (...)) mM min over T = 10 h.
        let t = grid(0.5, 36000.0);
        let w = PopulationInput::Weinmann.sample(&t, 0.0);
        let m: f64 = 600.0;
        let exact = 0.1
            * (3.99 / 0.144 * (1.0 - (-0.144 * m).exp())
                + 4.78 / 0.0111 * (1.0 - (-0.0111 * m).exp()));
        assert!((area(&t, &w) / 60.0 - exact).abs() < 1e-6 * exact);
        // Parker: the Gaussians' mass after 0, A1 Phi(T1/s1) + A2 Phi(T2/s2) = 1.13706 mM min
        // (scipy), plus the sigmoid term, within 3e-5 of alpha exp(-beta tau) / beta.
        let t = grid(0.05, 3600.0);
        let p = PopulationInput::Parker.sample(&t, 0.0);
        let tail = 1.050 * (-0.1685 * 60.0f64).exp() / 0.1685;
        let expect = 1.13706 + 1.050 * (-0.1685 * 0.483f64).exp() / 0.1685;
        let got = area(&t, &p) / 60.0 + tail;
        assert!((got - expect).abs() < 1e-4 * expect, "{got} vs {expect}");
    }

    #[test]
    fn portal_tail_continues_the_grid_in_closed_form() {
        for m in [20.0, 21.7, 90.0] {
            assert_eq!(parker(m), 1.050 * (-0.1685 * m).exp());
        }
        for transit in [GUT_TRANSIT_S, 1.0 / PARKER_TAIL.1, 500.0] {
            let k = 1.0 / transit;
            let mut walked = GutWalk::new(k);
            walked.advance((1500.0 / PORTAL_STEP_S).round() as usize);
            let closed = GutWalk::new(k).tail(1500.0);
            assert!(
                (walked.hi - closed).abs() < 1e-9 * closed,
                "{transit}: {} vs {closed}",
                walked.hi
            );
        }
        let at = [1199.99, 1200.0, 1200.0 + 1e-9, 1200.01];
        let v = portal(&at, 0.0, GUT_TRANSIT_S);
        assert!(
            (v[2] - v[1]).abs() < 1e-12 && (v[3] - v[0]).abs() < 1e-5,
            "{v:?}"
        );
    }

    #[test]
    fn bad_times_and_arrivals_give_nan_not_panics() {
        let t = [f64::NAN, -1.0, f64::INFINITY, 1e9, 30.0];
        for input in PopulationInput::ALL {
            let v = input.sample(&t, 0.0);
            assert!(v[0].is_nan() && v[1] == 0.0, "{input}: {v:?}");
            assert!(v[3].is_finite() && v[4] > 0.0, "{input}: {v:?}");
            assert!(input.sample(&t, f64::NAN).iter().all(|c| c.is_nan()));
            assert!(input.sample(&[], 3.0).is_empty());
        }
        assert!(portal(&[1.0], 0.0, -1.0)[0].is_nan());
        assert_eq!(
            portal(&[0.0, 12.0], 0.0, 0.0),
            PopulationInput::Parker.sample(&[0.0, 12.0], 0.0)
        );
    }

    #[test]
    fn names_round_trip_and_bad_names_list_the_valid_ones() {
        for input in PopulationInput::ALL {
            assert_eq!(input.name().parse::<PopulationInput>().unwrap(), input);
            assert_eq!(
                format!(" {} ", input.name().to_uppercase())
                    .parse::<PopulationInput>()
                    .unwrap(),
                input
            );
            assert!(!input.citation().is_empty());
        }
        let e = "orton".parse::<PopulationInput>().unwrap_err().to_string();
        assert!(e.contains("`population-input` = orton"), "{e}");
        assert!(e.contains("parker, weinmann, georgiou, portal"), "{e}");
    }
}
