//! The perfusion demo: the built-in synthetic liver fitted on a device by dual-input LM,
//! checked against the CPU and against the true parameters.

use super::phantom::synthetic_liver;
use crate::api::{FitInput, fit};
use crate::error::{Error, Result};
use crate::io::{nifti as pnii, png as ppng};
use crate::model::{FitParams, FitStatus, Method, Model, Problem, finite_median};
use gpu_runtime::Device;
use ndarray::Axis;
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// What the demo found, printed by the CLI.
#[derive(Debug, Clone, PartialEq)]
pub struct DemoReport {
    /// Voxels fitted.
    pub voxels: usize,
    /// Where and in which arithmetic the fit ran.
    pub device: String,
    pub precision: &'static str,
    /// Seconds of the device fit.
    pub seconds: f64,
    /// Voxels converged on both paths, and of those the ones that agree.
    pub both: usize,
    pub agree: usize,
    /// Median relative errors against the truth of ka, kp, kl.
    pub median_errors: [f64; 3],
    /// Folder holding the maps.
    pub out_dir: PathBuf,
}

impl fmt::Display for DemoReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let med = &self.median_errors;
        write!(
            f,
            "perfusion: synthetic liver ({} voxels, 64 frames, CNR 100), dual-input LM on {} ({}) in {:.3} s: agrees with the CPU on {}/{}; median error vs truth ka {:.1}%, kp {:.1}%, kl {:.1}%; maps in {}",
            self.voxels,
            self.device,
            self.precision,
            self.seconds,
            self.agree,
            self.both,
            100.0 * med[0],
            100.0 * med[1],
            100.0 * med[2],
            self.out_dir.display()
        )
    }
}

fn failed(why: String) -> Error {
    Error::DemoFailed(why)
}

/// Run the demo on `device`, writing the ka, kp and kl maps as PNGs under
/// `out_dir/perfusion`; an error if fewer than 90% of the voxels converge on both paths,
/// more than 2% of those disagree with the CPU, or a median error against the truth
/// reaches 10%.
pub fn demo(out_dir: &Path, device: &Device) -> Result<DemoReport> {
    let liver = synthetic_liver(32, 28, 2, 64, Some(100.0), 7)?;
    let problem = Problem::new(&liver.times, &liver.arterial, Some(&liver.portal))?;
    let (curves, index) = pnii::masked_curves(&liver.volume, &liver.mask)?;
    let opts = FitParams::new(Model::DualInput).with_method(Method::LevenbergMarquardt);
    let input = FitInput::new(curves.view(), &problem);
    let t0 = Instant::now();
    let (got, info) = fit(input, &opts, device)?;
    let secs = t0.elapsed().as_secs_f64();
    let (want, _) = fit(input, &opts, &Device::cpu())?;
    // Device vs CPU: where both converged, the same minimum.
    let (mut both, mut agree) = (0, 0);
    for v in 0..got.len() {
        if got.status(v) == FitStatus::Converged && want.status(v) == FitStatus::Converged {
            both += 1;
            let same = (0..3).all(|p| {
                let (g, c) = (got.params[[p, v]], want.params[[p, v]]);
                (g - c).abs() <= if info.precision == "f64" { 1e-6 } else { 1e-2 } * c.abs()
            });
            agree += usize::from(same);
        }
    }
    if both * 10 < got.len() * 9 {
        return Err(failed(format!(
            "perfusion: only {both}/{} voxels converged on both paths",
            got.len()
        )));
    }
    if agree * 100 < both * 98 {
        return Err(failed(format!(
            "perfusion: {} disagrees with the CPU on {} of {both} voxels",
            info.device,
            both - agree
        )));
    }
    // Against the truth: median relative error of the flows.
    let mut errs = [Vec::new(), Vec::new(), Vec::new()];
    for (v, &[x, y, z]) in index.iter().enumerate() {
        for (p, e) in errs.iter_mut().enumerate() {
            e.push((got.params[[p, v]] / liver.truth[[x, y, z, p]] - 1.0).abs());
        }
    }
    let med: Vec<f64> = errs
        .iter()
        .map(|e| finite_median(e.iter().copied()).unwrap_or(f64::NAN))
        .collect();
    if !med.iter().all(|&m| m < 0.1) {
        return Err(failed(format!(
            "perfusion: median errors against the truth {med:?}"
        )));
    }
    let dir = out_dir.join("perfusion");
    std::fs::create_dir_all(&dir).map_err(|e| Error::File {
        path: dir.clone(),
        why: format!("creating output folder: {e}"),
    })?;
    let shape = liver.mask.dim();
    let mean = liver.volume.mean_axis(Axis(3)).expect("frames");
    for (i, p) in Model::DualInput.params().iter().enumerate().take(3) {
        let map = pnii::scatter(got.params.row(i), &index, shape);
        ppng::write_overlay(
            &dir.join(format!("{}.png", p.name)),
            mean.index_axis(Axis(2), 0),
            map.index_axis(Axis(2), 0),
            None,
        )?;
    }
    Ok(DemoReport {
        voxels: got.len(),
        device: info.device,
        precision: info.precision,
        seconds: secs,
        both,
        agree,
        median_errors: [med[0], med[1], med[2]],
        out_dir: dir,
    })
}
