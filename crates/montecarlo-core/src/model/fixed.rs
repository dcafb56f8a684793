//! Exact tallies of the GPU path ([`FixedTally`]): 64-bit integers of 2^-24 weight units,
//! summed exactly whatever the batching, launch size or split between devices, and
//! converted to the f64 [`Tally`] once.

use crate::model::detector::{DetectedPhoton, DetectorTally};
use crate::model::simulation::Simulation;
use crate::model::tally::Tally;
use gpu_kernels::montecarlo::{FIXED_SCALE, TOTALS};
use rayon::prelude::*;

/// Exact tallies of a photon range: 64-bit integers of 2^-24 weight units.
#[derive(Debug, Clone)]
pub struct FixedTally {
    /// Per tetrahedron (index 0 unused).
    pub absorbed: Vec<u64>,
    /// Per boundary triangle.
    pub escaped: Vec<u64>,
    /// Killed by roulette, given to roulette survivors, time-limited, lost, reflected at
    /// launch (specular).
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
    /// Detector totals (exact) and detected-photon records (empty without detectors).
    pub detectors: FixedDetectors,
}

/// What the detectors saw on the GPU: exact totals and the records kept.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FixedDetectors {
    /// Detected photons per detector.
    pub count: Vec<u64>,
    /// Detected weight per detector (2^-24 units).
    pub weight: Vec<u64>,
    /// Detected weight per detector and gate, `det x gates + gate` (2^-24 units; empty
    /// without gates).
    pub tpsf: Vec<u64>,
    /// Records: the lowest photon indices seen, at most `max_photons` (sorted by index
    /// once the run ends).
    pub photons: Vec<DetectedPhoton>,
    /// Records not kept: over a batch's record buffer or over `max_photons`.
    pub dropped: u64,
    /// Records kept at most.
    pub max_photons: u64,
}

impl FixedDetectors {
    /// Add `other`'s totals and records, keeping the `max_photons` of lowest index.
    pub(crate) fn add(&mut self, other: &FixedDetectors) {
        for (a, b) in self.count.iter_mut().zip(&other.count) {
            *a += b;
        }
        for (a, b) in self.weight.iter_mut().zip(&other.weight) {
            *a += b;
        }
        for (a, b) in self.tpsf.iter_mut().zip(&other.tpsf) {
            *a += b;
        }
        self.dropped += other.dropped;
        self.photons.extend_from_slice(&other.photons);
        self.keep();
    }

    /// Keep the `max_photons` records of lowest photon index, counting the rest as dropped.
    pub(crate) fn keep(&mut self) {
        if self.photons.len() as u64 > self.max_photons {
            self.photons.sort_unstable_by_key(|d| d.photon);
            self.dropped += self.photons.len() as u64 - self.max_photons;
            self.photons.truncate(self.max_photons as usize);
        }
    }
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
            detectors: sim
                .outputs
                .detection
                .as_ref()
                .map_or_else(FixedDetectors::default, |d| {
                    let n = d.detectors.len();
                    FixedDetectors {
                        count: vec![0; n],
                        weight: vec![0; n],
                        tpsf: vec![0; n * sim.gates.map_or(0, |g| g.count as usize)],
                        photons: Vec::new(),
                        dropped: 0,
                        max_photons: d.max_photons,
                    }
                }),
        }
    }

    /// Whether the tallies and photon counts are equal bit for bit (timing aside; the
    /// detector totals included, the detected-photon records not).
    pub fn same_tallies(&self, other: &FixedTally) -> bool {
        self.absorbed == other.absorbed
            && self.escaped == other.escaped
            && self.totals == other.totals
            && self.gated == other.gated
            && self.face_fluence == other.face_fluence
            && self.face_current == other.face_current
            && self.photons == other.photons
            && self.detectors.count == other.detectors.count
            && self.detectors.weight == other.detectors.weight
            && self.detectors.tpsf == other.detectors.tpsf
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
        self.gated
            .par_iter_mut()
            .zip(other.gated.par_iter())
            .for_each(|(a, b)| *a += b);
        for (a, b) in self.face_fluence.iter_mut().zip(&other.face_fluence) {
            *a += b;
        }
        for (a, b) in self.face_current.iter_mut().zip(&other.face_current) {
            *a = a.wrapping_add(*b);
        }
        self.photons += other.photons;
        self.transport_seconds = self.transport_seconds.max(other.transport_seconds);
        self.detectors.add(&other.detectors);
    }

    /// The f64 tally (weights in packet units).
    pub fn to_tally(&self, sim: &Simulation) -> Tally {
        let w = |v: u64| v as f64 / FIXED_SCALE;
        let gates = self.gated.len() / (sim.mesh.len() + 1);
        let mut t = Tally::with_outputs(&sim.mesh, self.face_fluence.len(), gates);
        t.gated
            .par_iter_mut()
            .zip(self.gated.par_iter())
            .for_each(|(dst, &v)| *dst = w(v));
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
        t.specular = w(self.totals[4]);
        t.photons = self.photons;
        let d = &self.detectors;
        if !d.count.is_empty() {
            let mut photons = d.photons.clone();
            photons.sort_unstable_by_key(|p| p.photon);
            t.detectors = DetectorTally {
                photons,
                count: d.count.clone(),
                weight: d.weight.iter().map(|&v| w(v)).collect(),
                tpsf: d.tpsf.iter().map(|&v| w(v)).collect(),
                dropped: d.dropped,
                max_photons: d.max_photons,
            };
        }
        t
    }
}
