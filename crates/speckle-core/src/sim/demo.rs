//! The speckle demo: a simulated flow phantom (a channel with a parabolic velocity profile
//! in static tissue), imaged by a 12-bit camera: K on the device, checked against the CPU
//! reference, and the decorrelation time recovered on the channel axis against the
//! simulation's truth.

use std::fmt;
use std::path::{Path, PathBuf};

use gpu_runtime::{Backend, Device};
use ndarray::Axis;

use crate::api::{contrast, flow};
use crate::error::{Error, Result};
use crate::io::output::{Colormap, Figure, Range, Scale, render_figure_png};
use crate::model::contrast::ContrastParams;
use crate::model::flow::{FlowModel, FlowParams};
use crate::model::window::Window;
use crate::sim::{Camera, FlowPhantom};

/// What the demo found, printed by the CLI.
#[derive(Debug, Clone, PartialEq)]
pub struct DemoReport {
    /// Phantom size (width, height, frames).
    pub size: (usize, usize, usize),
    /// Where K ran.
    pub backend: Backend,
    /// Largest relative difference of K from the CPU reference.
    pub worst: f64,
    /// Mean tau_c recovered on the channel axis, seconds.
    pub tau_recovered_s: f64,
    /// Simulated tau_c at the channel centre, seconds.
    pub tau_center_s: f64,
    /// Folder holding the maps.
    pub out_dir: PathBuf,
}

impl fmt::Display for DemoReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (w, h, frames) = self.size;
        write!(
            f,
            "speckle: flow phantom {w}x{h}x{frames} (12-bit), 7x7 K + SFI on {}: matches the CPU to {:.1e}; \
             tau_c on the channel axis {:.3} ms (simulated {:.3} ms, spatial-window bias included); maps in {}",
            self.backend,
            self.worst,
            self.tau_recovered_s * 1e3,
            self.tau_center_s * 1e3,
            self.out_dir.display()
        )
    }
}

/// Run the demo on `device`, writing `speckle_k.png` and `speckle_tau_c_ms.png` under
/// `out_dir`; an error if K differs from the CPU reference by more than 1e-6 (relative).
pub fn demo(out_dir: &Path, device: &Device) -> Result<DemoReport> {
    let (w, h, frames, exposure, tau_center) = (192, 128, 16, 5e-3, 2e-4);
    let phantom = FlowPhantom::new(w, h, frames, exposure, tau_center)
        .with_seed(42)
        .with_speckle_size(2.0)
        .simulate()?;
    let raw = Camera::new(1500.0, 12).expose(phantom.intensity.view(), 7)?;
    let params = ContrastParams::spatial(Window::new(7)?)
        .with_saturation(Some(4095.0))
        .with_exposure(exposure)?;
    let (got, info) = contrast(&raw, &params, device)?;
    let (want, _) = contrast(&raw, &params, &Device::cpu())?;
    let worst = got
        .k
        .iter()
        .zip(&want.k)
        .filter(|(g, c)| c.is_finite() && g.is_finite())
        .map(|(g, c)| f64::from((g - c).abs() / c.abs().max(1e-12)))
        .fold(0.0, f64::max);
    if worst > 1e-6 {
        return Err(Error::DemoCheck(format!(
            "speckle: {} K differs from the CPU reference by {worst:.1e} (> 1e-6)",
            info.backend
        )));
    }
    let k2 = got.k.map_axis(Axis(0), |k| {
        (k.iter().map(|v| f64::from(v * v)).sum::<f64>() / k.len() as f64) as f32
    });
    let k_mean = k2.mapv(f32::sqrt);
    let flow_params = FlowParams::new(exposure, 1.0).with_model(FlowModel::Lorentzian);
    let (tau, _) = flow(k_mean.view(), &flow_params, &Device::cpu())?;
    let axis = h / 2;
    let rec: Vec<f64> = (w / 4..3 * w / 4)
        .map(|x| f64::from(tau.tau_c[[axis, x]]))
        .filter(|v| v.is_finite())
        .collect();
    let rec = rec.iter().sum::<f64>() / rec.len().max(1) as f64;
    std::fs::create_dir_all(out_dir).map_err(|source| Error::Io {
        path: out_dir.to_path_buf(),
        source,
    })?;
    render_figure_png(
        k_mean.view(),
        Colormap::Viridis,
        Range::Percentile(1.0, 99.0),
        &Figure::new("K", Scale::Linear),
        out_dir.join("speckle_k.png"),
    )?;
    // Log scale: the channel's tau_c is orders of magnitude below the (flagged, NaN) static
    // background, which a linear scale shows as black.
    render_figure_png(
        tau.masked_tau_c().mapv(|t| t * 1e3).view(),
        Colormap::Inferno,
        Range::Percentile(1.0, 99.0),
        &Figure::new("tau_c (ms)", Scale::Log),
        out_dir.join("speckle_tau_c_ms.png"),
    )?;
    Ok(DemoReport {
        size: (w, h, frames),
        backend: info.backend,
        worst,
        tau_recovered_s: rec,
        tau_center_s: tau_center,
        out_dir: out_dir.to_path_buf(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::test_util::TempDir;

    #[test]
    fn demo_on_the_cpu_writes_its_maps_and_recovers_tau_c() {
        let dir = TempDir::new("speckle_demo");
        let out = dir.path("demo");
        let report = demo(&out, &Device::cpu()).unwrap();
        assert_eq!(report.backend, Backend::Cpu);
        assert_eq!(report.worst, 0.0);
        // The 7x7 window averages the channel's profile: tau_c within 20% of the centre's.
        let rel = (report.tau_recovered_s / report.tau_center_s - 1.0).abs();
        assert!(rel < 0.2, "{report}");
        assert!(out.join("speckle_k.png").exists() && out.join("speckle_tau_c_ms.png").exists());
        assert!(report.to_string().contains("flow phantom 192x128x16"));
    }
}
