//! The pharmacokinetic models: their parameters (names, units, bounds, starting values) and
//! how each maps onto one canonical form that a single evaluator computes.
//!
//! Every model here predicts the tissue concentration as
//!
//! ```text
//! C(t) = conv(k1; g1 u1(t - tau1) + h1 u2(t - tau2)) + conv(k2; g2 u1(t - tau1)) + v u1(t - tau1)
//! conv(k; f)(t) = integral from t0 to t of f(s) exp(-k (t - s)) ds
//! ```
//!
//! with `u1` the arterial (plasma) input and `u2` the portal-venous input (dual-input model
//! only). Rates `k`, `g`, `h` are per second inside; the user-facing units are converted by
//! the model's `rate_scale`. Delays are in seconds. See docs/perfusion.md for the formulas.

use crate::error::{Error, Result};
use serde::Serialize;

/// Largest number of parameters of any model.
pub const MAX_PARAMS: usize = 5;

/// Number of canonical coefficients (`k1, g1, h1, k2, g2, v, tau1, tau2`).
pub(crate) const CANON: usize = 8;

/// A pharmacokinetic model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Model {
    /// Dual-input single-compartment liver model (Materne 2002; Wang & Cao 2012, eq. 1-2):
    /// `C_l = (ka C_a(t - tau_a) + kp C_p(t - tau_p)) conv exp(-kl t)`.
    /// Parameters ka, kp, kl in ml/100g/min (tissue density 1 g/ml), tau_a, tau_p in s.
    DualInput,
    /// Tofts: `C_t = Ktrans C_p(t - tau) conv exp(-Ktrans/ve t)`. Ktrans in 1/min.
    Tofts,
    /// Extended Tofts: Tofts plus `vp C_p(t - tau)`.
    ExtendedTofts,
    /// Patlak: `C_t = Ktrans integral C_p(t - tau) + vp C_p(t - tau)`.
    Patlak,
    /// Two-compartment exchange (Sourbron & Buckley): plasma flow Fp and permeability-surface
    /// product PS in 1/min (ml/min per ml tissue), ve and vp fractions, delay tau.
    TwoCompartmentExchange,
}

/// One model parameter: what it is, its unit and its default bounds and start.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct ParamInfo {
    /// Short name used in file names and options (`ka`, `ktrans`, `tau_a`).
    pub name: &'static str,
    /// Unit of the value as reported and given.
    pub unit: &'static str,
    /// Default lower and upper bounds.
    pub lower: f64,
    pub upper: f64,
    /// Default starting value.
    pub start: f64,
    /// Whether it is a bolus-arrival delay (searched by a delay grid).
    pub delay: bool,
    pub description: &'static str,
}

const fn param(
    name: &'static str,
    unit: &'static str,
    lower: f64,
    upper: f64,
    start: f64,
    delay: bool,
    description: &'static str,
) -> ParamInfo {
    ParamInfo {
        name,
        unit,
        lower,
        upper,
        start,
        delay,
        description,
    }
}

/// Delays may be negative: a bound at 0 traps Nelder-Mead (its simplex collapses against the
/// barrier when noise pulls a delay towards 0; see docs/perfusion.md).
const DELAY_MAX: f64 = 30.0;

const DUAL_INPUT: [ParamInfo; 5] = [
    param(
        "ka",
        "ml/100g/min",
        0.0,
        2000.0,
        10.0,
        false,
        "arterial inflow rate",
    ),
    param(
        "kp",
        "ml/100g/min",
        0.0,
        2000.0,
        80.0,
        false,
        "portal-venous inflow rate",
    ),
    param(
        "kl",
        "ml/100g/min",
        0.0,
        10000.0,
        200.0,
        false,
        "outflow rate",
    ),
    param(
        "tau_a",
        "s",
        -DELAY_MAX,
        DELAY_MAX,
        2.0,
        true,
        "arterial delay",
    ),
    param(
        "tau_p",
        "s",
        -DELAY_MAX,
        DELAY_MAX,
        3.0,
        true,
        "portal-venous delay",
    ),
];
const TOFTS: [ParamInfo; 3] = [
    param(
        "ktrans",
        "1/min",
        0.0,
        5.0,
        0.2,
        false,
        "volume transfer constant",
    ),
    param(
        "ve",
        "",
        1e-3,
        1.0,
        0.3,
        false,
        "extravascular extracellular volume fraction",
    ),
    param(
        "tau",
        "s",
        -DELAY_MAX,
        DELAY_MAX,
        1.0,
        true,
        "bolus-arrival delay",
    ),
];
const EXTENDED_TOFTS: [ParamInfo; 4] = [
    TOFTS[0],
    TOFTS[1],
    param("vp", "", 0.0, 1.0, 0.05, false, "plasma volume fraction"),
    TOFTS[2],
];
const PATLAK: [ParamInfo; 3] = [
    param(
        "ktrans",
        "1/min",
        0.0,
        5.0,
        0.05,
        false,
        "volume transfer constant (irreversible uptake)",
    ),
    param("vp", "", 0.0, 1.0, 0.05, false, "plasma volume fraction"),
    TOFTS[2],
];
const TWO_CXM: [ParamInfo; 5] = [
    param(
        "fp",
        "1/min",
        1e-3,
        20.0,
        0.5,
        false,
        "plasma flow (ml/min per ml tissue)",
    ),
    param(
        "ps",
        "1/min",
        0.0,
        10.0,
        0.1,
        false,
        "permeability-surface area product",
    ),
    param(
        "ve",
        "",
        1e-3,
        1.0,
        0.2,
        false,
        "extravascular extracellular volume fraction",
    ),
    param("vp", "", 1e-3, 1.0, 0.05, false, "plasma volume fraction"),
    TOFTS[2],
];

impl Model {
    /// Every model, in the order of their GPU ids.
    pub const ALL: [Model; 5] = [
        Model::DualInput,
        Model::Tofts,
        Model::ExtendedTofts,
        Model::Patlak,
        Model::TwoCompartmentExchange,
    ];

    /// Command-line name (`dual-input`, `tofts`, `extended-tofts`, `patlak`, `2cxm`).
    pub fn name(self) -> &'static str {
        match self {
            Model::DualInput => "dual-input",
            Model::Tofts => "tofts",
            Model::ExtendedTofts => "extended-tofts",
            Model::Patlak => "patlak",
            Model::TwoCompartmentExchange => "2cxm",
        }
    }

    /// The parameters, in the order of every parameter vector.
    ///
    /// ```
    /// use perfusion_core::Model;
    /// let names: Vec<_> = Model::DualInput.params().iter().map(|p| p.name).collect();
    /// assert_eq!(names, ["ka", "kp", "kl", "tau_a", "tau_p"]);
    /// ```
    pub fn params(self) -> &'static [ParamInfo] {
        match self {
            Model::DualInput => &DUAL_INPUT,
            Model::Tofts => &TOFTS,
            Model::ExtendedTofts => &EXTENDED_TOFTS,
            Model::Patlak => &PATLAK,
            Model::TwoCompartmentExchange => &TWO_CXM,
        }
    }

    pub fn n_params(self) -> usize {
        self.params().len()
    }

    /// Whether the model needs a portal-venous input function.
    pub fn dual_input(self) -> bool {
        self == Model::DualInput
    }

    /// Index of the model in `gpu_kernels::perfusion` (`MODEL_*`).
    pub fn id(self) -> u32 {
        match self {
            Model::DualInput => 0,
            Model::Tofts => 1,
            Model::ExtendedTofts => 2,
            Model::Patlak => 3,
            Model::TwoCompartmentExchange => 4,
        }
    }

    /// Factor from the user's rate unit to 1/s: 1/6000 for ml/100g/min, 1/60 for 1/min.
    pub fn rate_scale(self) -> f64 {
        match self {
            Model::DualInput => 1.0 / 6000.0,
            _ => 1.0 / 60.0,
        }
    }

    /// Which canonical terms the model uses: (second input, second exponential, vascular).
    pub(crate) fn flags(self) -> (bool, bool, bool) {
        match self {
            Model::DualInput => (true, false, false),
            Model::Tofts => (false, false, false),
            Model::ExtendedTofts | Model::Patlak => (false, false, true),
            Model::TwoCompartmentExchange => (false, true, false),
        }
    }
}

impl std::fmt::Display for Model {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Model {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        let t = s.trim().to_ascii_lowercase().replace('_', "-");
        Ok(match t.as_str() {
            "dual-input" | "dualinput" | "liver" => Model::DualInput,
            "tofts" => Model::Tofts,
            "extended-tofts" | "etofts" => Model::ExtendedTofts,
            "patlak" => Model::Patlak,
            "2cxm" | "two-compartment-exchange" => Model::TwoCompartmentExchange,
            _ => {
                return Err(crate::Error::InvalidOption {
                    name: "model",
                    value: s.to_string(),
                    why: "expected dual-input, tofts, extended-tofts, patlak or 2cxm".into(),
                });
            }
        })
    }
}

/// The canonical coefficients of a parameter vector (rates per second, delays in s).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct Canonical {
    pub k1: f64,
    pub g1: f64,
    pub h1: f64,
    pub k2: f64,
    pub g2: f64,
    pub v: f64,
    pub tau1: f64,
    pub tau2: f64,
}

/// Two-compartment exchange: the two decay rates and amplitudes of the impulse response
/// `A exp(-alpha t) + B exp(-beta t)` from F = Fp, P = PS (per s), ve and vp.
/// The kernel (`gpu_kernels::perfusion`) computes the same expressions in the same order.
#[derive(Debug, Clone, Copy)]
struct Exchange {
    f: f64,
    p: f64,
    prod: f64,
    d1: f64,
    r: f64,
    alpha: f64,
    beta: f64,
    a: f64,
    b: f64,
}

fn exchange(fp: f64, ps: f64, ve: f64, vp: f64, scale: f64) -> Exchange {
    let f = fp * scale;
    let p = ps * scale;
    let sum = (f + p) / vp + p / ve;
    let prod = f * p / (vp * ve);
    let d1 = (f + p) / vp - p / ve;
    let r = (d1 * d1 + 4.0 * p * p / (vp * ve)).sqrt();
    let alpha = 0.5 * (sum + r);
    let beta = if alpha > 0.0 { prod / alpha } else { 0.0 };
    let (a, b) = if r > 0.0 {
        (f * (f / vp - beta) / r, f * (alpha - f / vp) / r)
    } else {
        (f, 0.0)
    };
    Exchange {
        f,
        p,
        prod,
        d1,
        r,
        alpha,
        beta,
        a,
        b,
    }
}

/// Canonical coefficients of `theta` (user units) for `model`.
pub(crate) fn canonical(model: Model, theta: &[f64; MAX_PARAMS]) -> Canonical {
    let s = model.rate_scale();
    let mut c = Canonical::default();
    match model {
        Model::DualInput => {
            c.k1 = theta[2] * s;
            c.g1 = theta[0] * s;
            c.h1 = theta[1] * s;
            c.tau1 = theta[3];
            c.tau2 = theta[4];
        }
        Model::Tofts | Model::ExtendedTofts => {
            let k = theta[0] * s;
            c.k1 = k / theta[1];
            c.g1 = k;
            if model == Model::ExtendedTofts {
                c.v = theta[2];
                c.tau1 = theta[3];
            } else {
                c.tau1 = theta[2];
            }
        }
        Model::Patlak => {
            c.g1 = theta[0] * s;
            c.v = theta[1];
            c.tau1 = theta[2];
        }
        Model::TwoCompartmentExchange => {
            let x = exchange(theta[0], theta[1], theta[2], theta[3], s);
            c.k1 = x.alpha;
            c.g1 = x.a;
            c.k2 = x.beta;
            c.g2 = x.b;
            c.tau1 = theta[4];
        }
    }
    c
}

/// d(canonical)/d(theta): `chain[c][p]` for canonical index `c` (k1, g1, h1, k2, g2, v,
/// tau1, tau2) and parameter `p`.
pub(crate) fn chain(model: Model, theta: &[f64; MAX_PARAMS]) -> [[f64; MAX_PARAMS]; CANON] {
    let s = model.rate_scale();
    let mut d = [[0.0; MAX_PARAMS]; CANON];
    match model {
        Model::DualInput => {
            d[0][2] = s;
            d[1][0] = s;
            d[2][1] = s;
            d[6][3] = 1.0;
            d[7][4] = 1.0;
        }
        Model::Tofts | Model::ExtendedTofts => {
            let k = theta[0] * s;
            let ve = theta[1];
            d[0][0] = s / ve;
            d[0][1] = -(k / ve) / ve;
            d[1][0] = s;
            if model == Model::ExtendedTofts {
                d[5][2] = 1.0;
                d[6][3] = 1.0;
            } else {
                d[6][2] = 1.0;
            }
        }
        Model::Patlak => {
            d[1][0] = s;
            d[5][1] = 1.0;
            d[6][2] = 1.0;
        }
        Model::TwoCompartmentExchange => {
            let (ve, vp) = (theta[2], theta[3]);
            let x = exchange(theta[0], theta[1], ve, vp, s);
            if x.r > 0.0 && x.alpha > 0.0 {
                for q in 0..4 {
                    let df = if q == 0 { s } else { 0.0 };
                    let dp = if q == 1 { s } else { 0.0 };
                    let dve = if q == 2 { 1.0 } else { 0.0 };
                    let dvp = if q == 3 { 1.0 } else { 0.0 };
                    let (dk1, dg1, dk2, dg2) = exchange_derivative(&x, ve, vp, df, dp, dve, dvp);
                    d[0][q] = dk1;
                    d[1][q] = dg1;
                    d[3][q] = dk2;
                    d[4][q] = dg2;
                }
            }
            d[6][4] = 1.0;
        }
    }
    d
}

/// Derivatives of (alpha, A, beta, B) along (dF, dP, dve, dvp).
fn exchange_derivative(
    x: &Exchange,
    ve: f64,
    vp: f64,
    df: f64,
    dp: f64,
    dve: f64,
    dvp: f64,
) -> (f64, f64, f64, f64) {
    let fp_sum = x.f + x.p;
    let dsum = (df + dp) / vp - fp_sum * dvp / (vp * vp) + dp / ve - x.p * dve / (ve * ve);
    let dprod = (df * x.p + x.f * dp) / (vp * ve) - x.prod * (dvp / vp + dve / ve);
    let dd1 = (df + dp) / vp - fp_sum * dvp / (vp * vp) - dp / ve + x.p * dve / (ve * ve);
    let q4 = 4.0 * x.p * x.p / (vp * ve);
    let ddisc = 2.0 * x.d1 * dd1 + 8.0 * x.p * dp / (vp * ve) - q4 * (dvp / vp + dve / ve);
    let dr = ddisc / (2.0 * x.r);
    let dalpha = 0.5 * (dsum + dr);
    let dbeta = (dprod - x.beta * dalpha) / x.alpha;
    let q = x.f / vp - x.beta;
    let dq = df / vp - x.f * dvp / (vp * vp) - dbeta;
    let da = (df * q + x.f * dq) / x.r - x.a * dr / x.r;
    let w = x.alpha - x.f / vp;
    let dw = dalpha - df / vp + x.f * dvp / (vp * vp);
    let db = (df * w + x.f * dw) / x.r - x.b * dr / x.r;
    (dalpha, da, dbeta, db)
}

/// The model's parameter names, comma-separated (for messages).
pub(crate) fn names(model: Model) -> String {
    model
        .params()
        .iter()
        .map(|p| p.name)
        .collect::<Vec<_>>()
        .join(", ")
}

/// A parameter vector padded to [`MAX_PARAMS`], checked against the model's length.
pub(crate) fn full_vector(model: Model, v: &[f64], what: &str) -> Result<[f64; MAX_PARAMS]> {
    if v.len() != model.n_params() {
        return Err(Error::InvalidParameter {
            model: model.name(),
            name: what.into(),
            why: format!(
                "{} values given, the model has {} parameters ({})",
                v.len(),
                model.n_params(),
                names(model)
            ),
        });
    }
    let mut out = [0.0; MAX_PARAMS];
    out[..v.len()].copy_from_slice(v);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn theta(v: &[f64]) -> [f64; MAX_PARAMS] {
        let mut t = [0.0; MAX_PARAMS];
        t[..v.len()].copy_from_slice(v);
        t
    }

    fn flat(c: &Canonical) -> [f64; CANON] {
        [c.k1, c.g1, c.h1, c.k2, c.g2, c.v, c.tau1, c.tau2]
    }

    #[test]
    fn chain_matches_finite_differences_for_every_model() {
        let points: [(Model, &[f64]); 5] = [
            (Model::DualInput, &[20.0, 100.0, 400.0, 1.0, 2.0]),
            (Model::Tofts, &[0.25, 0.35, 3.0]),
            (Model::ExtendedTofts, &[0.25, 0.35, 0.06, 3.0]),
            (Model::Patlak, &[0.02, 0.08, 1.5]),
            (Model::TwoCompartmentExchange, &[0.6, 0.12, 0.3, 0.07, 2.0]),
        ];
        for (model, v) in points {
            let th = theta(v);
            let d = chain(model, &th);
            for p in 0..model.n_params() {
                let h = 1e-6 * th[p].abs().max(1e-3);
                let (mut up, mut dn) = (th, th);
                up[p] += h;
                dn[p] -= h;
                let (cu, cd) = (flat(&canonical(model, &up)), flat(&canonical(model, &dn)));
                for c in 0..CANON {
                    let fd = (cu[c] - cd[c]) / (2.0 * h);
                    let tol = 1e-6 * fd.abs().max(d[c][p].abs()) + 1e-12;
                    assert!(
                        (fd - d[c][p]).abs() <= tol,
                        "{model} d c{c}/d {}: analytic {} vs numeric {fd}",
                        model.params()[p].name,
                        d[c][p]
                    );
                }
            }
        }
    }

    #[test]
    fn exchange_impulse_response_starts_at_fp_with_slope_minus_fp2_over_vp() {
        let (fp, ps, ve, vp) = (0.6, 0.12, 0.3, 0.07);
        let x = exchange(fp, ps, ve, vp, 1.0);
        assert!((x.a + x.b - fp).abs() < 1e-12);
        assert!((x.alpha * x.a + x.beta * x.b - fp * fp / vp).abs() < 1e-9);
        assert!(x.alpha > x.beta && x.beta > 0.0);
    }

    #[test]
    fn model_names_parse_back() {
        for m in Model::ALL {
            assert_eq!(m.name().parse::<Model>().unwrap(), m);
            assert_eq!(Model::ALL[m.id() as usize], m);
        }
        assert!("toft".parse::<Model>().is_err());
    }
}
