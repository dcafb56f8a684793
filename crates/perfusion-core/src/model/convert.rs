//! Signal to concentration: DCE-MRI with a spoiled gradient echo (SPGR) sequence, and
//! DCE-CT (enhancement over baseline in HU, linear in concentration).
//!
//! SPGR: `S = M0 sin(a) (1 - E) / (1 - cos(a) E)`, `E = exp(-TR R1)`. The baseline signal
//! (mean of the first frames) and the pre-contrast T1 (a map or one value) give `M0`; each
//! frame then gives `E`, `R1 = -ln(E) / TR`, and `C = (R1 - 1/T10) / r1` with relaxivity
//! `r1` in 1/(mM s). Signals above the model's maximum (`E <= 0`) have no concentration:
//! NaN, which makes the voxel's fit report invalid input. With a B1 map (relative flip-angle
//! scale per voxel, as from a B1 mapping sequence), the actual flip angle is the nominal one
//! times B1 ([`Spgr::concentration_b1`], [`Conversion::apply_b1`]); without one, B1 = 1.

use crate::error::{Error, Result};
use ndarray::{Array2, ArrayView2, Zip};

/// DCE-MRI, spoiled gradient echo.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Spgr {
    /// Flip angle in degrees.
    pub flip_angle_deg: f64,
    /// Repetition time in seconds.
    pub tr_s: f64,
    /// Longitudinal relaxivity of the contrast agent, 1/(mM s) (e.g. 4.5 for Gd-DTPA at 1.5 T).
    pub relaxivity: f64,
    /// Frames before contrast arrival, averaged as the baseline signal.
    pub baseline_frames: usize,
}

/// DCE-CT: `C = (HU - baseline HU) / hu_per_mm`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Ct {
    /// Enhancement per unit concentration (HU per mM; 1 leaves enhancement in HU).
    pub hu_per_mm: f64,
    pub baseline_frames: usize,
}

/// How to turn measured curves into concentration.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Conversion {
    /// The data already are concentrations.
    None,
    Spgr(Spgr),
    Ct(Ct),
}

/// Pre-contrast T1 (s): one value or one per voxel.
#[derive(Debug, Clone, Copy)]
pub enum T10<'a> {
    Fixed(f64),
    Map(&'a [f64]),
}

fn bad(name: &'static str, value: f64, why: &str) -> Error {
    Error::InvalidOption {
        name,
        value: value.to_string(),
        why: why.into(),
    }
}

impl Spgr {
    pub fn validate(&self, frames: usize) -> Result<()> {
        if !(self.flip_angle_deg > 0.0 && self.flip_angle_deg < 180.0) {
            return Err(bad(
                "flip-angle",
                self.flip_angle_deg,
                "degrees, between 0 and 180",
            ));
        }
        if !(self.tr_s.is_finite() && self.tr_s > 0.0) {
            return Err(bad(
                "tr",
                self.tr_s,
                "repetition time in seconds, > 0 (e.g. 0.00448)",
            ));
        }
        if !(self.relaxivity.is_finite() && self.relaxivity > 0.0) {
            return Err(bad(
                "relaxivity",
                self.relaxivity,
                "1/(mM s), > 0 (e.g. 4.5)",
            ));
        }
        check_baseline(self.baseline_frames, frames)
    }

    /// Concentration (mM) of one curve of signals, with pre-contrast T1 `t10_s`.
    ///
    /// ```
    /// use perfusion_core::convert::Spgr;
    /// let p = Spgr { flip_angle_deg: 20.0, tr_s: 0.005, relaxivity: 4.5, baseline_frames: 2 };
    /// // Forward model at C = 0, 0, 1 mM with T10 = 1 s, then back.
    /// let s = |r1: f64| { let e = (-0.005 * r1).exp(); let a = 20f64.to_radians(); a.sin() * (1.0 - e) / (1.0 - a.cos() * e) };
    /// let c = p.concentration(&[s(1.0), s(1.0), s(1.0 + 4.5)], 1.0);
    /// assert!(c[0].abs() < 1e-12 && (c[2] - 1.0).abs() < 1e-9);
    /// ```
    pub fn concentration(&self, signal: &[f64], t10_s: f64) -> Vec<f64> {
        self.concentration_b1(signal, t10_s, 1.0)
    }

    /// [`Spgr::concentration`] where the actual flip angle is the nominal one times `b1`
    /// (relative, 1 = nominal). An actual angle outside (0, 180) degrees, or a non-finite
    /// `b1`, gives NaN.
    ///
    /// ```
    /// use perfusion_core::convert::Spgr;
    /// let p = Spgr { flip_angle_deg: 20.0, tr_s: 0.005, relaxivity: 4.5, baseline_frames: 2 };
    /// // Acquired at 90% of the nominal angle (B1 = 0.9): C = 0, 0, 1 mM with T10 = 1 s.
    /// let s = |r1: f64| { let e = (-0.005 * r1).exp(); let a = 18f64.to_radians(); a.sin() * (1.0 - e) / (1.0 - a.cos() * e) };
    /// let signal = [s(1.0), s(1.0), s(1.0 + 4.5)];
    /// assert!((p.concentration_b1(&signal, 1.0, 0.9)[2] - 1.0).abs() < 1e-9);
    /// assert!((p.concentration(&signal, 1.0)[2] - 1.0).abs() > 0.05); // B1 ignored
    /// ```
    pub fn concentration_b1(&self, signal: &[f64], t10_s: f64, b1: f64) -> Vec<f64> {
        if signal.is_empty() {
            return Vec::new();
        }
        let nb = self.baseline_frames.min(signal.len()).max(1);
        let s0 = signal[..nb].iter().sum::<f64>() / nb as f64;
        let a = (self.flip_angle_deg * b1).to_radians();
        if !(a > 0.0 && a < std::f64::consts::PI) {
            return vec![f64::NAN; signal.len()];
        }
        let (sin, cos) = (a.sin(), a.cos());
        let r10 = 1.0 / t10_s;
        let e0 = (-self.tr_s * r10).exp();
        let m0 = s0 * (1.0 - cos * e0) / (sin * (1.0 - e0));
        signal
            .iter()
            .map(|&s| {
                let q = s / (m0 * sin);
                let e = (1.0 - q) / (1.0 - q * cos);
                if e > 0.0 && e < 1.0 && t10_s > 0.0 {
                    (-e.ln() / self.tr_s - r10) / self.relaxivity
                } else {
                    f64::NAN
                }
            })
            .collect()
    }
}

impl Ct {
    pub fn validate(&self, frames: usize) -> Result<()> {
        if !(self.hu_per_mm.is_finite() && self.hu_per_mm != 0.0) {
            return Err(bad(
                "hu-per-mm",
                self.hu_per_mm,
                "enhancement per mM, finite and non-zero (1 keeps HU)",
            ));
        }
        check_baseline(self.baseline_frames, frames)
    }

    /// Concentration of one curve of HU values.
    pub fn concentration(&self, hu: &[f64]) -> Vec<f64> {
        let nb = self.baseline_frames.min(hu.len()).max(1);
        let b = hu[..nb].iter().sum::<f64>() / nb as f64;
        hu.iter().map(|&h| (h - b) / self.hu_per_mm).collect()
    }
}

fn check_baseline(n: usize, frames: usize) -> Result<()> {
    if n == 0 || n >= frames {
        return Err(Error::InvalidOption {
            name: "baseline",
            value: n.to_string(),
            why: format!(
                "number of pre-contrast frames: at least 1 and fewer than the {frames} frames"
            ),
        });
    }
    Ok(())
}

impl Conversion {
    /// Convert every curve (`(voxels, time)`), in parallel. `t10` is used by SPGR only; a
    /// map has one value per voxel.
    pub fn apply(&self, curves: ArrayView2<f32>, t10: T10) -> Result<Array2<f32>> {
        self.apply_b1(curves, t10, None)
    }

    /// [`Conversion::apply`] with an optional B1 map for SPGR (one relative flip-angle scale
    /// per voxel, each finite and > 0; ignored by the other conversions).
    ///
    /// ```
    /// use ndarray::array;
    /// use perfusion_core::convert::{Conversion, Spgr, T10};
    /// let p = Spgr { flip_angle_deg: 20.0, tr_s: 0.005, relaxivity: 4.5, baseline_frames: 1 };
    /// let curves = array![[100.0f32, 150.0], [100.0, 150.0]];
    /// let c = Conversion::Spgr(p).apply_b1(curves.view(), T10::Fixed(1.0), Some(&[1.0, 0.8])).unwrap();
    /// assert!(c[[1, 1]] != c[[0, 1]]); // same signal, other actual angle
    /// let e = Conversion::Spgr(p).apply_b1(curves.view(), T10::Fixed(1.0), Some(&[1.0, 0.0]));
    /// assert!(e.unwrap_err().to_string().contains("`b1` = 0"));
    /// ```
    pub fn apply_b1(
        &self,
        curves: ArrayView2<f32>,
        t10: T10,
        b1: Option<&[f64]>,
    ) -> Result<Array2<f32>> {
        let (nv, nt) = curves.dim();
        match self {
            Conversion::None => return Ok(curves.to_owned()),
            Conversion::Spgr(p) => {
                p.validate(nt)?;
                if let Some(map) = b1 {
                    super::t1::check_b1(map, nv)?;
                }
                match t10 {
                    T10::Fixed(t) if !(t.is_finite() && t > 0.0) => {
                        return Err(bad("t10", t, "pre-contrast T1 in seconds, > 0 (e.g. 1.4)"));
                    }
                    T10::Map(m) if m.len() != nv => {
                        return Err(Error::ShapeMismatch {
                            what: "T1 map and the fitted voxels".into(),
                            expected: vec![nv],
                            got: vec![m.len()],
                        });
                    }
                    _ => {}
                }
            }
            Conversion::Ct(c) => c.validate(nt)?,
        }
        let mut out = Array2::<f32>::zeros((nv, nt));
        Zip::indexed(out.rows_mut())
            .and(curves.rows())
            .par_for_each(|v, mut o, c| {
                let s: Vec<f64> = c.iter().map(|&x| f64::from(x)).collect();
                let conc = match self {
                    Conversion::Spgr(p) => {
                        let t = match t10 {
                            T10::Fixed(t) => t,
                            T10::Map(m) => m[v],
                        };
                        p.concentration_b1(&s, t, b1.map_or(1.0, |m| m[v]))
                    }
                    Conversion::Ct(ct) => ct.concentration(&s),
                    Conversion::None => s,
                };
                for (o, c) in o.iter_mut().zip(conc) {
                    *o = c as f32;
                }
            });
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spgr_signal(p: &Spgr, m0: f64, r1: f64) -> f64 {
        let a = p.flip_angle_deg.to_radians();
        let e = (-p.tr_s * r1).exp();
        m0 * a.sin() * (1.0 - e) / (1.0 - a.cos() * e)
    }

    #[test]
    fn spgr_round_trips_concentrations_for_any_t10() {
        let p = Spgr {
            flip_angle_deg: 20.0,
            tr_s: 4.48e-3,
            relaxivity: 4.5,
            baseline_frames: 3,
        };
        for t10 in [0.6, 1.2, 2.5] {
            let conc = [0.0, 0.0, 0.0, 0.2, 1.5, 4.0, 0.8];
            let s: Vec<f64> = conc
                .iter()
                .map(|c| spgr_signal(&p, 1234.0, 1.0 / t10 + p.relaxivity * c))
                .collect();
            let back = p.concentration(&s, t10);
            for (b, c) in back.iter().zip(&conc) {
                assert!((b - c).abs() < 1e-9, "t10 {t10}: {b} vs {c}");
            }
        }
        // A signal above the model's maximum has no concentration.
        let c = p.concentration(&[100.0, 100.0, 100.0, 1e9], 1.0);
        assert!(c[3].is_nan());
    }

    #[test]
    fn spgr_with_a_b1_map_uses_the_actual_flip_angle_per_voxel() {
        let p = Spgr {
            flip_angle_deg: 15.0,
            tr_s: 4.0e-3,
            relaxivity: 4.5,
            baseline_frames: 2,
        };
        let conc = [0.0, 0.0, 0.5, 2.0, 1.0];
        let b1 = [1.0, 0.7, 1.25];
        // Voxel v acquired with the actual angle 15 x b1[v], T10 1.1 s.
        let curves = Array2::from_shape_fn((3, conc.len()), |(v, t)| {
            let actual = Spgr {
                flip_angle_deg: 15.0 * b1[v],
                ..p
            };
            spgr_signal(&actual, 800.0, 1.0 / 1.1 + 4.5 * conc[t]) as f32
        });
        let conv = Conversion::Spgr(p);
        let c = conv
            .apply_b1(curves.view(), T10::Fixed(1.1), Some(&b1))
            .unwrap();
        for v in 0..3 {
            for (t, want) in conc.iter().enumerate() {
                assert!(
                    (f64::from(c[[v, t]]) - want).abs() < 1e-3,
                    "{v} {t}: {}",
                    c[[v, t]]
                );
            }
        }
        // No map, or a map of ones, is the plain conversion.
        let plain = conv.apply(curves.view(), T10::Fixed(1.1)).unwrap();
        let ones = conv
            .apply_b1(curves.view(), T10::Fixed(1.1), Some(&[1.0; 3]))
            .unwrap();
        assert_eq!(plain, ones);
        assert_eq!(plain.row(0), c.row(0));
        assert!((f64::from(plain[[1, 3]]) - 2.0).abs() > 0.1);
        // An actual angle past 180 degrees has no concentration; an empty curve none at all.
        assert!(p.concentration_b1(&[1.0, 1.0, 2.0], 1.0, 12.5)[2].is_nan());
        assert!(p.concentration(&[], 1.0).is_empty());
        let e = conv
            .apply_b1(curves.view(), T10::Fixed(1.1), Some(&[1.0]))
            .unwrap_err();
        assert!(e.to_string().contains("B1 map"), "{e}");
    }

    #[test]
    fn ct_subtracts_the_baseline_and_scales() {
        let ct = Ct {
            hu_per_mm: 25.0,
            baseline_frames: 2,
        };
        assert_eq!(
            ct.concentration(&[40.0, 42.0, 91.0]),
            vec![-0.04, 0.04, 2.0]
        );
    }

    #[test]
    fn bad_settings_are_errors_naming_the_option() {
        let curves = Array2::<f32>::ones((2, 5));
        let p = Spgr {
            flip_angle_deg: 20.0,
            tr_s: 0.0,
            relaxivity: 4.5,
            baseline_frames: 2,
        };
        let e = Conversion::Spgr(p)
            .apply(curves.view(), T10::Fixed(1.0))
            .unwrap_err();
        assert!(e.to_string().contains("tr"), "{e}");
        let p = Spgr { tr_s: 0.005, ..p };
        let e = Conversion::Spgr(p)
            .apply(curves.view(), T10::Map(&[1.0]))
            .unwrap_err();
        assert!(e.to_string().contains("T1 map"), "{e}");
        let ct = Ct {
            hu_per_mm: 1.0,
            baseline_frames: 5,
        };
        let e = Conversion::Ct(ct)
            .apply(curves.view(), T10::Fixed(1.0))
            .unwrap_err();
        assert!(e.to_string().contains("baseline"), "{e}");
    }
}
