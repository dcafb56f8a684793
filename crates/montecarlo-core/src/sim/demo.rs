//! The demo of `biogpu demo`: a 12 mm cube of two layers (index step inside, Fresnel at the
//! surface) with a pencil beam, run on a device; on a GPU also twice on the CPU, and the
//! GPU-CPU L1 norm of fluence must be within 30% of the CPU-CPU one (the paper's
//! criterion, with slack for 50k photons).

use crate::api;
use crate::error::{Error, Result};
use crate::io::results;
use crate::model::optics::{Material, Optics};
use crate::model::params::{GpuTuning, Params, RunParams};
use crate::model::simulation::Simulation;
use crate::model::source::Source;
use crate::model::tally::{McResult, l1_norm};
use crate::sim::generate;
use gpu_runtime::Device;
use std::fmt;
use std::path::{Path, PathBuf};

/// What the demo ran and found (its `Display` is the line `biogpu demo` prints).
#[derive(Debug, Clone)]
pub struct DemoReport {
    pub photons: u64,
    /// The device it ran on.
    pub device: String,
    pub absorbed: f64,
    pub escaped: f64,
    pub photons_per_ms: f64,
    /// On a GPU: the CPU's absorbed fraction, and the L1 norms of fluence GPU-CPU and
    /// CPU-CPU.
    pub against_cpu: Option<(f64, f64, f64)>,
    /// The folder with the result files.
    pub out: PathBuf,
}

impl fmt::Display for DemoReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let photons = self.photons;
        match self.against_cpu {
            Some((cpu_absorbed, gpu, cpu)) => write!(
                f,
                "mc: {photons} photons on {}: absorbed {:.4} (CPU {:.4}), L1 GPU-CPU {gpu:.4} vs CPU-CPU {cpu:.4}",
                self.device, self.absorbed, cpu_absorbed
            ),
            None => write!(
                f,
                "mc: {photons} photons on the CPU: absorbed {:.4}, escaped {:.4}, {:.0} photons/ms",
                self.absorbed, self.escaped, self.photons_per_ms
            ),
        }
    }
}

/// The two-layer slab and its pencil beam, with `photons` photons.
pub fn demo_simulation(photons: u64) -> Result<Simulation> {
    let mesh = generate::slab_mesh(12.0, &[3.0, 9.0], 6, 2, 5)?;
    let optics = Optics {
        materials: vec![
            Material {
                mua: 0.02,
                mus: 10.0,
                g: 0.9,
                n: 1.4,
            },
            Material {
                mua: 0.05,
                mus: 5.0,
                g: 0.8,
                n: 1.37,
            },
        ],
        n_outside: 1.0,
    };
    let src = [Source::Pencil {
        pos: [0.1, 0.2, 0.0],
        dir: [0.0, 0.0, 1.0],
        power: 1.0,
    }];
    Simulation::new(mesh, optics, &src, photons, Params::default())
}

/// Run the demo on `device` (with `tuning` on a GPU), write its result files into
/// `out/mc` and check the energy balance and, on a GPU, the fluence against the CPU's.
pub fn demo(out: &Path, tuning: &GpuTuning, device: &Device) -> Result<DemoReport> {
    let photons = 50_000;
    let mut sim = demo_simulation(photons)?;
    let params = RunParams::new().with_tuning(*tuning);
    let (got, _) = api::run(&sim, &params, device)?;
    if !(got.summary.balance_error.abs() < 1e-4) {
        return Err(Error::Check(format!(
            "energy balance off: {:?}",
            got.summary
        )));
    }
    let dir = out.join("mc");
    std::fs::create_dir_all(&dir).map_err(|e| Error::io(&dir, e))?;
    results::write(&dir, &sim, &got)?;
    let mut report = DemoReport {
        photons,
        device: device.to_string(),
        absorbed: got.summary.absorbed,
        escaped: got.summary.escaped,
        photons_per_ms: got.summary.photons_per_ms,
        against_cpu: None,
        out: dir,
    };
    if device.is_gpu() {
        sim.params.seed = 2;
        let a = sim.run_cpu(0, photons);
        sim.params.seed = 3;
        let b = sim.run_cpu(0, photons);
        let fl = |r: &McResult| r.fluence(&sim.mesh, &sim.optics);
        let (cpu, gpu) = (l1_norm(&fl(&a), &fl(&b)), l1_norm(&fl(&a), &fl(&got)));
        report.against_cpu = Some((a.summary.absorbed, gpu, cpu));
        if !(gpu <= 1.3 * cpu) {
            return Err(Error::Check(format!(
                "GPU fluence differs from the CPU's: L1 {gpu} vs {cpu}"
            )));
        }
    }
    Ok(report)
}
