//! Exact tallies of the GPU path ([`FixedTally`]): 64-bit integers of 2^-24 weight units,
//! summed exactly whatever the batching, launch size or split between devices, and
//! converted to the f64 [`Tally`] once.

use crate::model::simulation::Simulation;
use crate::model::tally::Tally;
use gpu_kernels::montecarlo::{FIXED_SCALE, TOTALS};

/// Exact tallies of a photon range: 64-bit integers of 2^-24 weight units.
#[derive(Debug, Clone)]
pub struct FixedTally {
    /// Per tetrahedron (index 0 unused).
    pub absorbed: Vec<u64>,
    /// Per boundary triangle.
    pub escaped: Vec<u64>,
    /// Killed by roulette, given to roulette survivors, time-limited, lost.
    pub totals: [u64; TOTALS],
    /// Absorbed per gate and tetrahedron, `gate x (len + 1) + tet` (empty without gates).
    pub gated: Vec<u64>,
    /// Per tallied face: sum of w / |cos| (see `tally::face_crossing`).
    pub face_fluence: Vec<u64>,
    /// Per tallied face: net current, sum of w sign(cos).
    pub face_current: Vec<i64>,
    /// Photons run.
    pub photons: u64,
    /// Wall time of the transport itself (launches and their synchronisation, after the
    /// scene is on the device, before the tallies are read back); the slowest device's.
    pub transport_seconds: f64,
}

impl FixedTally {
    pub(crate) fn zero(sim: &Simulation) -> Self {
        FixedTally {
            absorbed: vec![0; sim.mesh.len() + 1],
            escaped: vec![0; sim.mesh.boundary.len()],
            totals: [0; TOTALS],
            gated: vec![0; sim.gates.map_or(0, |g| g.count as usize) * (sim.mesh.len() + 1)],
            face_fluence: vec![0; sim.faces.len()],
            face_current: vec![0; sim.faces.len()],
            photons: 0,
            transport_seconds: 0.0,
        }
    }

    /// Whether the tallies and photon counts are equal bit for bit (timing aside).
    pub fn same_tallies(&self, other: &FixedTally) -> bool {
        self.absorbed == other.absorbed
            && self.escaped == other.escaped
            && self.totals == other.totals
            && self.gated == other.gated
            && self.face_fluence == other.face_fluence
            && self.face_current == other.face_current
            && self.photons == other.photons
    }

    /// Add `other` (exact integer sums).
    pub(crate) fn add(&mut self, other: &FixedTally) {
        for (a, b) in self.absorbed.iter_mut().zip(&other.absorbed) {
            *a += b;
        }
        for (a, b) in self.escaped.iter_mut().zip(&other.escaped) {
            *a += b;
        }
        for (a, b) in self.totals.iter_mut().zip(&other.totals) {
            *a += b;
        }
        for (a, b) in self.gated.iter_mut().zip(&other.gated) {
            *a += b;
        }
        for (a, b) in self.face_fluence.iter_mut().zip(&other.face_fluence) {
            *a += b;
        }
        for (a, b) in self.face_current.iter_mut().zip(&other.face_current) {
            *a = a.wrapping_add(*b);
        }
        self.photons += other.photons;
        self.transport_seconds = self.transport_seconds.max(other.transport_seconds);
    }

    /// The f64 tally (weights in packet units).
    pub fn to_tally(&self, sim: &Simulation) -> Tally {
        let w = |v: u64| v as f64 / FIXED_SCALE;
        let gates = self.gated.len() / (sim.mesh.len() + 1);
        let mut t = Tally::with_outputs(&sim.mesh, self.face_fluence.len(), gates);
        for (dst, &v) in t.gated.iter_mut().zip(&self.gated) {
            *dst = w(v);
        }
        for (dst, &v) in t.face_fluence.iter_mut().zip(&self.face_fluence) {
            *dst = w(v);
        }
        for (dst, &v) in t.face_current.iter_mut().zip(&self.face_current) {
            *dst = v as f64 / FIXED_SCALE;
        }
        for (dst, &v) in t.absorbed.iter_mut().zip(&self.absorbed) {
            *dst = w(v);
        }
        for (dst, &v) in t.escaped.iter_mut().zip(&self.escaped) {
            *dst = w(v);
        }
        t.roulette = w(self.totals[0]) - w(self.totals[1]);
        t.expired = w(self.totals[2]);
        t.lost = w(self.totals[3]);
        t.photons = self.photons;
        t
    }
}
