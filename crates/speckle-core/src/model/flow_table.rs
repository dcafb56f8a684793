//! The flow model's inversion as a table, for 1/tau_c maps at camera rate on a CPU.
//!
//! [`x_from_k2`] solves `K^2 / beta = f(x)` exactly (f64, ~1e-13) by Newton iterations,
//! a few hundred nanoseconds a pixel: 3.6 maps/s of 1392x1040 on 2 cores, far below a
//! camera. [`FlowTable`] holds `y = ln x` on a uniform grid of `s = logit(K^2 / beta) =
//! ln(q / (1 - q))`, where `y(s)` is smooth and tends to straight lines at both ends
//! (`y ~ -s` for q -> 0, `y ~ ln(3/2) - s` for q -> 1, Lorentzian), with its exact slope
//! at every node; a cubic Hermite interpolation then costs one `ln` and one `exp`.
//!
//! Accuracy: within [`FlowTable::TOLERANCE`] (relative, in x and so in tau_c) of
//! [`x_from_k2`] wherever the table reaches, `|s| <= S_MAX` (`q` from 2.3e-16 to
//! `1 - 2.3e-16`), checked on a fine grid between nodes by the tests; below an f32's
//! resolution, so a map stored in f32 is the same to a unit or two in the last place.
//! Outside that range (K below 1.5e-8 sqrt(beta), or within 2.3e-16 of sqrt(beta), where
//! an f32 K cannot even be) it calls [`x_from_k2`].

use crate::model::flow::{FlowModel, model_terms, x_from_k2};

/// Half-width of the tabulated range of `s = logit(q)`.
const S_MAX: f64 = 36.0;
/// Nodes per unit of `s`: the interpolation error falls as the fourth power of the spacing.
const NODES_PER_UNIT: f64 = 16.0;

/// `ln x` and its slope on a grid of `logit(K^2 / beta)`, for one [`FlowModel`].
#[derive(Debug, Clone)]
pub struct FlowTable {
    model: FlowModel,
    /// Per node: `ln x` and `h dy/ds` (the slope scaled by the node spacing `h`).
    nodes: Vec<[f64; 2]>,
}

impl FlowTable {
    /// Largest relative difference of [`FlowTable::x`] from [`x_from_k2`], tested (6.5e-9 is
    /// the worst seen, Gaussian).
    pub const TOLERANCE: f64 = 1e-8;

    /// Tabulate the model (2,305 exact inversions; well under a millisecond).
    ///
    /// ```
    /// use speckle_core::model::flow::{FlowModel, k2_model};
    /// use speckle_core::model::flow_table::FlowTable;
    /// let table = FlowTable::new(FlowModel::Lorentzian);
    /// let q = k2_model(FlowModel::Lorentzian, 2.5);
    /// let x = table.x(q, 1.0 - q);
    /// assert!((x / 2.5 - 1.0).abs() < FlowTable::TOLERANCE);
    /// ```
    pub fn new(model: FlowModel) -> Self {
        let n = (2.0 * S_MAX * NODES_PER_UNIT) as usize + 1;
        let h = 1.0 / NODES_PER_UNIT;
        let nodes = (0..n)
            .map(|i| {
                let s = -S_MAX + i as f64 * h;
                // q = 1 / (1 + e^-s) and 1 - q = 1 / (1 + e^s), each without cancellation.
                let (q, d) = (1.0 / (1.0 + (-s).exp()), 1.0 / (1.0 + s.exp()));
                let x = x_from_k2(model, q, d);
                // dy/ds = (dq/ds) / (dq/dy) = q (1 - q) / (x df/dx).
                let t = model_terms(model, x);
                [x.ln(), h * t.f * t.g / t.s]
            })
            .collect();
        Self { model, nodes }
    }

    /// The model of this table.
    pub fn model(&self) -> FlowModel {
        self.model
    }

    /// `x = T / tau_c` at which `K^2 / beta = q`, given `q` and `d = 1 - q` (as for
    /// [`x_from_k2`], with the same special values: `d <= 0` gives 0, `q <= 0` gives +inf,
    /// NaN gives NaN).
    #[inline]
    pub fn x(&self, q: f64, d: f64) -> f64 {
        if !(q > 0.0 && d > 0.0) {
            return x_from_k2(self.model, q, d);
        }
        let u = ((q / d).ln() + S_MAX) * NODES_PER_UNIT;
        let i = u as usize; // saturates: negative and NaN give 0, checked below
        if !(u >= 0.0 && i + 1 < self.nodes.len()) {
            return x_from_k2(self.model, q, d);
        }
        let t = u - i as f64;
        let ([y0, m0], [y1, m1]) = (self.nodes[i], self.nodes[i + 1]);
        // Cubic Hermite basis on [0, 1].
        let (t2, r) = (t * t, 1.0 - t);
        let r2 = r * r;
        let y = (1.0 + 2.0 * t) * r2 * y0 + t * r2 * m0 + t2 * (3.0 - 2.0 * t) * y1 - t2 * r * m1;
        y.exp()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Both models, between and on the nodes over the whole table and its edges: the
    /// interpolation against the exact inversion at the same (q, d).
    #[test]
    fn table_matches_the_exact_inversion_across_the_range() {
        for model in [FlowModel::Lorentzian, FlowModel::Gaussian] {
            let table = FlowTable::new(model);
            let mut worst: f64 = 0.0;
            let steps = 2 * 36 * 16 * 7;
            for j in 0..=steps {
                let s = -S_MAX - 0.5 + (2.0 * S_MAX + 1.0) * f64::from(j) / f64::from(steps);
                let (q, d) = (1.0 / (1.0 + (-s).exp()), 1.0 / (1.0 + s.exp()));
                let (got, want) = (table.x(q, d), x_from_k2(model, q, d));
                worst = worst.max((got / want - 1.0).abs());
            }
            assert!(worst <= FlowTable::TOLERANCE, "{model:?}: {worst:e}");
        }
    }

    #[test]
    fn round_trip_through_the_model_and_special_values() {
        let table = FlowTable::new(FlowModel::Gaussian);
        for x in [1e-6, 1e-3, 0.1, 1.0, 7.0, 300.0, 1e6] {
            let t = model_terms(FlowModel::Gaussian, x);
            let got = table.x(t.f, t.g);
            assert!((got / x - 1.0).abs() < 1e-8, "{x}: {got}");
        }
        assert!(table.x(f64::NAN, 0.5).is_nan());
        assert_eq!(table.x(1.0, 0.0), 0.0);
        assert_eq!(table.x(0.0, 1.0), f64::INFINITY);
        // Beyond the table: the exact inversion.
        let q = 1e-20;
        assert_eq!(
            table.x(q, 1.0 - q),
            x_from_k2(FlowModel::Gaussian, q, 1.0 - q)
        );
    }
}
