//! Flow maps on the CPU: tau_c of every pixel (f64 inversion), SFI and 1/K^2 maps.

// ndarray views are cheap handles, taken by value as ndarray's own APIs do.
#![allow(clippy::needless_pass_by_value)]

use ndarray::{Array2, ArrayView2, Zip};

use crate::error::Result;
use crate::model::flow::{FlowModel, TauMap, check_beta, check_exposure, inverse_k2, sfi, tau_c};
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;
    use crate::model::flags;
    use ndarray::array;

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
