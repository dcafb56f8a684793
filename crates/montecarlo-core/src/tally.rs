//! Tallies and the normalised result: absorbed weight per tetrahedron, escaped weight per
//! boundary triangle, and the rest of the energy balance.

use crate::mesh::Mesh;
use crate::optics::Optics;
use serde::Serialize;

/// Raw weight sums of a run (photon weights start at 1).
#[derive(Debug, Clone)]
pub struct Tally {
    /// Absorbed weight per tetrahedron (index 0 unused).
    pub absorbed: Vec<f64>,
    /// Escaped weight per boundary triangle.
    pub escaped: Vec<f64>,
    /// Net weight removed by roulette (lost by killed packets minus gained by survivors).
    pub roulette: f64,
    /// Weight of packets stopped by the time limit.
    pub expired: f64,
    /// Weight of packets abandoned (launch outside the mesh, or the step limit).
    pub lost: f64,
    /// Packets launched.
    pub photons: u64,
}

impl Tally {
    pub fn new(mesh: &Mesh) -> Self {
        Tally {
            absorbed: vec![0.0; mesh.len() + 1],
            escaped: vec![0.0; mesh.boundary.len()],
            roulette: 0.0,
            expired: 0.0,
            lost: 0.0,
            photons: 0,
        }
    }

    /// Add `other` into `self`.
    pub fn merge(mut self, other: Tally) -> Tally {
        for (a, b) in self.absorbed.iter_mut().zip(&other.absorbed) {
            *a += b;
        }
        for (a, b) in self.escaped.iter_mut().zip(&other.escaped) {
            *a += b;
        }
        self.roulette += other.roulette;
        self.expired += other.expired;
        self.lost += other.lost;
        self.photons += other.photons;
        self
    }
}

/// Energy balance and speed of a run, as fractions of the launched weight.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    pub photons: u64,
    pub absorbed: f64,
    pub escaped: f64,
    pub roulette: f64,
    pub expired: f64,
    pub lost: f64,
    /// absorbed + escaped + roulette + expired + lost - 1 (rounding only).
    pub balance_error: f64,
    pub seconds: f64,
    pub photons_per_ms: f64,
    pub device: String,
    /// True when the run was interrupted (Ctrl-C) before all photons ran.
    pub interrupted: bool,
}

/// A finished run: per-photon-normalised outputs.
#[derive(Debug, Clone)]
pub struct McResult {
    pub tally: Tally,
    pub summary: Summary,
}

impl McResult {
    pub fn new(tally: Tally, seconds: f64, device: String, interrupted: bool) -> Self {
        let n = tally.photons.max(1) as f64;
        let absorbed = tally.absorbed.iter().sum::<f64>() / n;
        let escaped = tally.escaped.iter().sum::<f64>() / n;
        let (roulette, expired, lost) = (tally.roulette / n, tally.expired / n, tally.lost / n);
        let summary = Summary {
            photons: tally.photons,
            absorbed,
            escaped,
            roulette,
            expired,
            lost,
            balance_error: if tally.photons == 0 {
                0.0
            } else {
                absorbed + escaped + roulette + expired + lost - 1.0
            },
            seconds,
            photons_per_ms: tally.photons as f64 / (seconds * 1e3).max(1e-12),
            device,
            interrupted,
        };
        McResult { tally, summary }
    }

    /// Absorbed energy per tetrahedron (1..=len at index 0..len) per launched photon.
    pub fn absorbed(&self) -> Vec<f64> {
        let n = self.tally.photons.max(1) as f64;
        self.tally.absorbed[1..].iter().map(|a| a / n).collect()
    }

    /// Fluence per tetrahedron per launched photon: absorbed / (mua x volume), in 1/length^2
    /// (0 where mua = 0: absorption does not measure fluence there).
    pub fn fluence(&self, mesh: &Mesh, optics: &Optics) -> Vec<f64> {
        let n = self.tally.photons.max(1) as f64;
        (1..=mesh.len())
            .map(|t| {
                let mua = optics.get(mesh.regions[t]).mua;
                if mua > 0.0 {
                    self.tally.absorbed[t] / (n * mua * mesh.volumes[t])
                } else {
                    0.0
                }
            })
            .collect()
    }

    /// Exitance per boundary triangle per launched photon (escaped weight / area).
    pub fn exitance(&self, mesh: &Mesh) -> Vec<f64> {
        let n = self.tally.photons.max(1) as f64;
        self.tally
            .escaped
            .iter()
            .zip(&mesh.boundary_area)
            .map(|(e, a)| e / (n * a))
            .collect()
    }
}

/// The paper's normalised L1 distance sum|a - b| / sum|a|.
///
/// ```
/// assert_eq!(montecarlo_core::l1_norm(&[1.0, 1.0], &[1.0, 0.0]), 0.5);
/// ```
pub fn l1_norm(a: &[f64], b: &[f64]) -> f64 {
    let num: f64 = a.iter().zip(b).map(|(x, y)| (x - y).abs()).sum();
    let den: f64 = a.iter().map(|x| x.abs()).sum();
    if den > 0.0 { num / den } else { num }
}
