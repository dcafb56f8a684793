//! Tallies and the normalised result: absorbed weight per tetrahedron, escaped weight per
//! boundary triangle, and the rest of the energy balance.

use crate::model::detector::DetectorTally;
use crate::model::mesh::Mesh;
use crate::model::optics::Optics;
use rayon::prelude::*;
use serde::{Deserialize, Serialize};

/// Time-of-flight gates `[k w, (k + 1) w)` ns for k = 0..count (lengths in mm, c in mm/ns):
/// absorbed weight per tetrahedron per gate. Weight absorbed at or after `count x w` is in
/// the CW result only.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Gates {
    pub width_ns: f64,
    pub count: u32,
}

/// What a packet of weight `w` crossing a tallied face at direction cosine `cos` (with the
/// face's reference normal) adds to its fluence and net current: w / |cos|, with |cos| < 0.1
/// counted as 0.05 (MCNP's rule: the estimator's variance is infinite at grazing angles),
/// and w sign(cos).
///
/// ```
/// use montecarlo_core::model::tally::face_crossing;
/// assert_eq!(face_crossing(0.5, -0.5), (1.0, -0.5));
/// assert_eq!(face_crossing(1.0, 0.01), (20.0, 1.0));
/// ```
#[inline]
pub fn face_crossing(w: f64, cos: f64) -> (f64, f64) {
    let a = cos.abs();
    (w / if a < 0.1 { 0.05 } else { a }, w * cos.signum())
}

/// The time gate of time of flight `time_ns`: floor(time / width) when below `count`.
///
/// ```
/// use montecarlo_core::model::tally::gate_of;
/// assert_eq!(gate_of(0.25, 1.0 / 0.1, 3), Some(2));
/// assert_eq!(gate_of(0.3, 1.0 / 0.1, 3), None);
/// ```
#[inline]
pub fn gate_of(time_ns: f64, inv_width: f64, count: usize) -> Option<usize> {
    let g = (time_ns * inv_width) as usize;
    (g < count).then_some(g)
}

/// Faces where packets crossing them are tallied (face fluence and net current).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FaceSet {
    /// One side of each face: (tet, face 0..=3); packets crossing from either side count.
    pub faces: Vec<(u32, u8)>,
    /// Unit reference normal per face: crossings along it add to the current, against it
    /// subtract.
    pub normals: Vec<[f64; 3]>,
    pub areas: Vec<f64>,
    /// The plane (index into the simulation file's `planes`) that selected each face, or
    /// None for faces listed one by one.
    pub plane: Vec<Option<u32>>,
}

impl FaceSet {
    pub fn len(&self) -> usize {
        self.faces.len()
    }

    pub fn is_empty(&self) -> bool {
        self.faces.is_empty()
    }
}

/// Raw weight sums of a run, in units of the weight a source emits per photon (1: a
/// packet entering through the surface starts with 1 - Rsp, the rest is in `specular`).
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
    /// Weight reflected at the surface at launch (specular reflection of beam sources on
    /// the surface, see `model::source`).
    pub specular: f64,
    /// Packets launched.
    pub photons: u64,
    /// Per tallied face (see [`FaceSet`]): sum of w / |cos| over crossings (|cos| < 0.1
    /// counts as 0.05, MCNP's rule, which keeps the variance finite).
    pub face_fluence: Vec<f64>,
    /// Per tallied face: sum of w x sign(d . normal) over crossings (net current).
    pub face_current: Vec<f64>,
    /// Absorbed weight per gate and tetrahedron: `gated[g * (len + 1) + t]` (index 0 of each
    /// gate unused, as in `absorbed`); empty without gates.
    pub gated: Vec<f64>,
    /// Detected photons and detector totals (empty without detectors).
    pub detectors: DetectorTally,
}

impl Tally {
    pub fn new(mesh: &Mesh) -> Self {
        Tally {
            absorbed: vec![0.0; mesh.len() + 1],
            escaped: vec![0.0; mesh.boundary.len()],
            roulette: 0.0,
            expired: 0.0,
            lost: 0.0,
            specular: 0.0,
            photons: 0,
            face_fluence: Vec::new(),
            face_current: Vec::new(),
            gated: Vec::new(),
            detectors: DetectorTally::default(),
        }
    }

    /// A tally with room for `faces` tallied faces and `gates` time gates.
    pub fn with_outputs(mesh: &Mesh, faces: usize, gates: usize) -> Self {
        Tally {
            face_fluence: vec![0.0; faces],
            face_current: vec![0.0; faces],
            gated: vec![0.0; gates * (mesh.len() + 1)],
            ..Tally::new(mesh)
        }
    }

    /// Number of time gates.
    pub fn gates(&self) -> usize {
        self.gated.len() / self.absorbed.len().max(1)
    }

    /// Add `other` into `self`.
    pub fn merge(mut self, other: Tally) -> Tally {
        fn add(a: &mut Vec<f64>, b: &[f64]) {
            if a.is_empty() {
                a.extend_from_slice(b);
            } else {
                for (x, y) in a.iter_mut().zip(b) {
                    *x += y;
                }
            }
        }
        add(&mut self.absorbed, &other.absorbed);
        add(&mut self.escaped, &other.escaped);
        add(&mut self.face_fluence, &other.face_fluence);
        add(&mut self.face_current, &other.face_current);
        add(&mut self.gated, &other.gated);
        self.roulette += other.roulette;
        self.expired += other.expired;
        self.lost += other.lost;
        self.specular += other.specular;
        self.photons += other.photons;
        self.detectors = self.detectors.merge(other.detectors);
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
    /// Reflected at the surface at launch (specular reflection, never entered the mesh).
    pub specular: f64,
    /// absorbed + escaped + roulette + expired + lost + specular - 1 (rounding only).
    pub balance_error: f64,
    pub seconds: f64,
    pub photons_per_ms: f64,
    pub device: String,
    /// True when the run was interrupted (Ctrl-C) before all photons ran.
    pub interrupted: bool,
    /// With time gates: absorbed fraction per gate (their sum is at most `absorbed`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub absorbed_per_gate: Option<Vec<f64>>,
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
        let specular = tally.specular / n;
        let summary = Summary {
            photons: tally.photons,
            absorbed,
            escaped,
            roulette,
            expired,
            lost,
            specular,
            balance_error: if tally.photons == 0 {
                0.0
            } else {
                absorbed + escaped + roulette + expired + lost + specular - 1.0
            },
            seconds,
            photons_per_ms: tally.photons as f64 / (seconds * 1e3).max(1e-12),
            device,
            interrupted,
            absorbed_per_gate: None,
        };
        let mut r = McResult { tally, summary };
        let gates = r.tally.gates();
        if gates > 0 {
            let len = r.tally.absorbed.len();
            r.summary.absorbed_per_gate = Some(
                r.tally
                    .gated
                    .par_chunks(len)
                    .map(|gate| gate[1..].iter().sum::<f64>() / n)
                    .collect(),
            );
        }
        r
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

    /// Absorbed energy per tetrahedron in time gate `g` per launched photon.
    pub fn gated_absorbed(&self, g: usize) -> Vec<f64> {
        let n = self.tally.photons.max(1) as f64;
        let len = self.tally.absorbed.len();
        self.tally.gated[g * len + 1..(g + 1) * len]
            .iter()
            .map(|a| a / n)
            .collect()
    }

    /// Fluence per tetrahedron in time gate `g` per launched photon: the fluence integrated
    /// over the gate (1/length^2; divide by the gate width for a fluence rate).
    pub fn gated_fluence(&self, g: usize, mesh: &Mesh, optics: &Optics) -> Vec<f64> {
        let a = self.gated_absorbed(g);
        (1..=mesh.len())
            .map(|t| {
                let mua = optics.get(mesh.regions[t]).mua;
                if mua > 0.0 {
                    a[t - 1] / (mua * mesh.volumes[t])
                } else {
                    0.0
                }
            })
            .collect()
    }

    /// Fluence per tallied face per launched photon: sum of w / |cos| / area (1/length^2).
    pub fn face_fluence(&self, faces: &FaceSet) -> Vec<f64> {
        let n = self.tally.photons.max(1) as f64;
        self.tally
            .face_fluence
            .iter()
            .zip(&faces.areas)
            .map(|(f, a)| f / (n * a))
            .collect()
    }

    /// Net current per tallied face per launched photon along its reference normal:
    /// sum of w x sign / area (1/length^2).
    pub fn face_current(&self, faces: &FaceSet) -> Vec<f64> {
        let n = self.tally.photons.max(1) as f64;
        self.tally
            .face_current
            .iter()
            .zip(&faces.areas)
            .map(|(f, a)| f / (n * a))
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
