//! Flow maps on the CPU: tau_c of every pixel (f64 inversion), SFI and 1/K^2 maps.

// ndarray views are cheap handles, taken by value as ndarray's own APIs do.
#![allow(clippy::needless_pass_by_value)]

use ndarray::{Array2, ArrayView2, Zip};

use crate::error::Result;
use crate::model::flow::{FlowModel, TauMap, check_beta, check_exposure, inverse_k2, sfi, tau_c};
use crate::model::flow_table::FlowTable;
use crate::model::types::Map;

/// [`sfi`] of every pixel of a K map (in parallel).
pub fn sfi_map(k: ArrayView2<f32>, exposure_s: f64) -> Result<Map> {
    let t = check_exposure(exposure_s)?;
    let mut out = Array2::zeros(k.raw_dim());
    Zip::from(&mut out)
        .and(&k)
        .par_for_each(|o, &k| *o = sfi(f64::from(k), t) as f32);
    Ok(out)
}

/// [`inverse_k2`] of every pixel of a K map (in parallel).
pub fn inverse_k2_map(k: ArrayView2<f32>) -> Map {
    let mut out = Array2::zeros(k.raw_dim());
    Zip::from(&mut out)
        .and(&k)
        .par_for_each(|o, &k| *o = inverse_k2(f64::from(k)) as f32);
    out
}

/// [`tau_c`] of every pixel of a K map (in parallel), after checking T and beta.
///
/// ```
/// use ndarray::array;
/// use speckle_core::{FlowModel, cpu::tau_c_map};
/// let k = array![[0.2f32, 0.9], [f32::NAN, 0.0]];
/// let m = tau_c_map(k.view(), 5e-3, 0.5, FlowModel::Lorentzian)?;
/// assert!(m.tau_c[[0, 0]] > 0.0 && m.tau_c[[0, 0]].is_finite());
/// assert_eq!(m.tau_c[[0, 1]], f32::INFINITY); // K^2 = 0.81 >= beta
/// assert!(m.tau_c[[1, 0]].is_nan());
/// assert_eq!(m.tau_c[[1, 1]], 0.0);
/// # Ok::<(), speckle_core::Error>(())
/// ```
pub fn tau_c_map(
    k: ArrayView2<f32>,
    exposure_s: f64,
    beta: f64,
    model: FlowModel,
) -> Result<TauMap> {
    let t = check_exposure(exposure_s)?;
    let beta = check_beta(beta)?;
    let mut tau = Array2::zeros(k.raw_dim());
    let mut fl = Array2::zeros(k.raw_dim());
    Zip::from(&mut tau)
        .and(&mut fl)
        .and(&k)
        .par_for_each(|o, f, &k| {
            let (v, flag) = tau_c(f64::from(k), t, beta, model);
            *o = v as f32;
            *f = flag;
        });
    Ok(TauMap {
        tau_c: tau,
        flags: fl,
    })
}

/// The decorrelation rate 1/tau_c (1/s) of every pixel of a K map (in parallel) by a
/// [`FlowTable`]: [`tau_c_map`]'s values within [`FlowTable::TOLERANCE`] relative, some 20
/// times sooner (a live view's rate on a laptop), and NaN wherever [`tau_c_map`] sets a flag
/// (no motion, no contrast, undefined), as [`TauMap::masked_tau_c`].
///
/// ```
/// use ndarray::array;
/// use speckle_core::{FlowModel, cpu::{decorrelation_rate_map, tau_c_map}};
/// use speckle_core::model::flow_table::FlowTable;
/// let k = array![[0.2f32, 0.9], [f32::NAN, 0.0]];
/// let table = FlowTable::new(FlowModel::Lorentzian);
/// let rate = decorrelation_rate_map(k.view(), 5e-3, 0.5, &table)?;
/// let exact = tau_c_map(k.view(), 5e-3, 0.5, FlowModel::Lorentzian)?;
/// assert!((rate[[0, 0]] * exact.tau_c[[0, 0]] - 1.0).abs() < 1e-6);
/// assert!(rate[[0, 1]].is_nan() && rate[[1, 0]].is_nan() && rate[[1, 1]].is_nan());
/// # Ok::<(), speckle_core::Error>(())
/// ```
pub fn decorrelation_rate_map(
    k: ArrayView2<f32>,
    exposure_s: f64,
    beta: f64,
    table: &FlowTable,
) -> Result<Map> {
    let t = check_exposure(exposure_s)?;
    let beta = check_beta(beta)?;
    let mut out = Array2::zeros(k.raw_dim());
    Zip::from(&mut out).and(&k).par_for_each(|o, &k| {
        let k2 = f64::from(k) * f64::from(k);
        // NaN K fails the test too; negative K is a valid square but undefined (flagged).
        *o = if k > 0.0 && k2 < beta {
            (table.x(k2 / beta, (beta - k2) / beta) / t) as f32
        } else {
            f32::NAN
        };
    });
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;
    use crate::model::flags;
    use ndarray::array;

    /// The table's rate against 1 / the exact tau_c over K from 1e-4 to sqrt(beta), both
    /// models, and NaN exactly where the exact map flags.
    #[test]
    fn decorrelation_rate_equals_the_inverse_of_the_exact_tau_c() {
        let (t, beta) = (5e-3, 0.6);
        // K = 10^-4 .. 10^0.2, log-spaced: past sqrt(beta) = 0.77 the pixels are flagged.
        let mut k = Array2::from_shape_fn((40, 50), |(i, j)| {
            10f64.powf(-4.0 + 4.2 * (i * 50 + j) as f64 / 1999.0) as f32
        });
        k[[0, 0]] = 0.0;
        k[[0, 1]] = f32::NAN;
        k[[0, 2]] = -0.1;
        for model in [FlowModel::Lorentzian, FlowModel::Gaussian] {
            let table = FlowTable::new(model);
            let rate = decorrelation_rate_map(k.view(), t, beta, &table).unwrap();
            let exact = tau_c_map(k.view(), t, beta, model).unwrap();
            Zip::from(&rate)
                .and(&exact.tau_c)
                .and(&exact.flags)
                .for_each(|&r, &tau, &f| {
                    if f == 0 {
                        let rel = (f64::from(r) * f64::from(tau) - 1.0).abs();
                        // Two f32 roundings beside the table's 1e-8.
                        assert!(rel < 3e-7, "{model:?}: {r} against 1/{tau}");
                    } else {
                        assert!(r.is_nan());
                    }
                });
        }
        let table = FlowTable::new(FlowModel::Gaussian);
        assert!(decorrelation_rate_map(k.view(), 0.0, beta, &table).is_err());
        assert!(decorrelation_rate_map(k.view(), t, f64::NAN, &table).is_err());
    }

    #[test]
    fn maps_check_parameters_and_match_scalars() {
        let k = array![[0.1f32, 0.3], [0.0, f32::NAN]];
        for bad in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            assert!(matches!(
                sfi_map(k.view(), bad),
                Err(Error::InvalidExposure { .. })
            ));
            assert!(matches!(
                tau_c_map(k.view(), bad, 0.5, FlowModel::Gaussian),
                Err(Error::InvalidExposure { .. })
            ));
            if !bad.is_infinite() {
                assert!(matches!(
                    tau_c_map(k.view(), 1e-3, bad, FlowModel::Gaussian),
                    Err(Error::InvalidParameter { name: "beta", .. })
                ));
            }
        }
        let s = sfi_map(k.view(), 2e-3).unwrap();
        assert!((f64::from(s[[0, 0]]) - 1.0 / (2.0 * 2e-3 * 0.01)).abs() < 1e-2);
        assert_eq!(s[[1, 0]], f32::INFINITY);
        assert!(s[[1, 1]].is_nan());
        let ik = inverse_k2_map(k.view());
        assert!((ik[[0, 1]] - 1.0 / (0.3f32 * 0.3)).abs() < 1e-4);
        let tm = tau_c_map(k.view(), 1e-3, 0.5, FlowModel::Gaussian).unwrap();
        let (want, _) = tau_c(f64::from(0.3f32), 1e-3, 0.5, FlowModel::Gaussian);
        assert_eq!(tm.tau_c[[0, 1]], want as f32);
        assert_eq!(
            tm.flags,
            array![[0, 0], [flags::NO_CONTRAST, flags::UNDEFINED]]
        );
    }
}
