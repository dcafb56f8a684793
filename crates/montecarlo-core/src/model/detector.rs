//! Detectors on the mesh surface and the photons they record, as MMC and MCX users know them
//! (MCX's `detp`: detector id, scattering count, partial pathlengths, momentum transfer,
//! exit position and direction, weight, replay seed).
//!
//! A detector is a disk: a packet that escapes through the boundary at a point within
//! `radius` of `pos` (mm, 3-D distance, MMC's rule) is detected by the first such detector.
//! Each detected packet's record keeps, per region, the path length it travelled there (its
//! partial pathlength, mm) and optionally its momentum transfer (the sum of 1 - cos theta
//! over its scatterings there), so absorption can be changed afterwards without a rerun:
//! with the track-length estimator, the exit weight is w0 exp(-sum mua_r L_r) times the
//! roulette factors. The photon's index with the simulation's seed replays its path
//! exactly (every photon's random stream is seeded by its index).
//!
//! ```
//! use montecarlo_core::model::detector::{Detector, Detection};
//! let d: Detection = serde_json::from_str(
//!     r#"{"detectors": [{"pos": [30, 30, 0], "radius": 1.5}], "momentum": true}"#,
//! ).unwrap();
//! assert_eq!((d.max_photons, d.detectors[0].radius), (1_000_000, 1.5));
//! assert_eq!(Detection::hit(&d.detectors, [30.5, 30.0, 0.0]), Some(0));
//! assert_eq!(Detection::hit(&d.detectors, [32.0, 30.0, 0.0]), None);
//! ```

use crate::error::{Error, Result};
use crate::model::mesh::Mesh;
use serde::{Deserialize, Serialize};

/// A disk detector: packets leaving the mesh within `radius` mm of `pos`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Detector {
    /// Centre (mm), on or near the mesh surface.
    pub pos: [f64; 3],
    /// Radius (mm).
    pub radius: f64,
}

fn default_max() -> u64 {
    1_000_000
}

/// The detectors of a simulation (`outputs.detection` in a simulation file).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Detection {
    pub detectors: Vec<Detector>,
    /// Records kept at most (MCX's `maxdetphoton`); further detected photons still count in
    /// each detector's totals and TPSF, and the summary says how many records were dropped.
    #[serde(default = "default_max")]
    pub max_photons: u64,
    /// Record the momentum transfer per region too (for diffuse correlation spectroscopy).
    #[serde(default)]
    pub momentum: bool,
}

impl Detection {
    /// The first detector whose disk holds the exit point `p`.
    #[inline]
    pub fn hit(detectors: &[Detector], p: [f64; 3]) -> Option<usize> {
        detectors.iter().position(|d| {
            let e = [p[0] - d.pos[0], p[1] - d.pos[1], p[2] - d.pos[2]];
            e[0] * e[0] + e[1] * e[1] + e[2] * e[2] <= d.radius * d.radius
        })
    }

    /// Check the detectors against `mesh`: finite centres, radii > 0, and each within its
    /// radius of the mesh surface (else it could never detect anything).
    pub fn validate(&self, mesh: &Mesh) -> Result<()> {
        let bad = |i: usize, why: String| {
            Err(Error::Invalid(format!(
                "outputs.detection.detectors[{i}]: {why}"
            )))
        };
        if self.detectors.is_empty() {
            return Err(Error::Invalid(
                "outputs.detection: no detectors given (list at least one {\"pos\": [x, y, z], \"radius\": r})".into(),
            ));
        }
        if self.max_photons == 0 {
            return Err(Error::Invalid(
                "outputs.detection.max_photons: must be at least 1".into(),
            ));
        }
        for (i, d) in self.detectors.iter().enumerate() {
            if !d.pos.iter().all(|v| v.is_finite()) {
                return bad(i, format!("pos {:?} must be finite (mm)", d.pos));
            }
            if !(d.radius > 0.0 && d.radius.is_finite()) {
                return bad(i, format!("radius {} must be > 0 (mm)", d.radius));
            }
            let gap = distance_to_surface(mesh, d.pos);
            if gap > d.radius {
                return bad(
                    i,
                    format!(
                        "centre {:?} is {gap:.4} mm from the mesh surface, more than its radius {}: it would detect nothing",
                        d.pos, d.radius
                    ),
                );
            }
        }
        Ok(())
    }
}

/// The smallest distance from `p` to a boundary triangle of `mesh`.
fn distance_to_surface(mesh: &Mesh, p: [f64; 3]) -> f64 {
    mesh.boundary
        .iter()
        .map(|&(t, f)| {
            let tri = mesh.face_nodes(t, f as usize);
            point_triangle_distance(p, tri)
        })
        .fold(f64::INFINITY, f64::min)
}

fn sub(a: [f64; 3], b: [f64; 3]) -> [f64; 3] {
    [a[0] - b[0], a[1] - b[1], a[2] - b[2]]
}
fn dot(a: [f64; 3], b: [f64; 3]) -> f64 {
    a[0] * b[0] + a[1] * b[1] + a[2] * b[2]
}

/// Distance from `p` to the triangle `t` (Ericson, Real-Time Collision Detection, 5.1.5:
/// the closest point by Voronoi regions of the vertices, edges and face).
pub(crate) fn point_triangle_distance(p: [f64; 3], t: [[f64; 3]; 3]) -> f64 {
    let [a, b, c] = t;
    let (ab, ac, ap) = (sub(b, a), sub(c, a), sub(p, a));
    let (d1, d2) = (dot(ab, ap), dot(ac, ap));
    let at = |s: f64, u: f64| [0, 1, 2].map(|k| a[k] + s * ab[k] + u * ac[k]);
    let closest = if d1 <= 0.0 && d2 <= 0.0 {
        a
    } else {
        let bp = sub(p, b);
        let (d3, d4) = (dot(ab, bp), dot(ac, bp));
        let cp = sub(p, c);
        let (d5, d6) = (dot(ab, cp), dot(ac, cp));
        let vc = d1 * d4 - d3 * d2;
        let vb = d5 * d2 - d1 * d6;
        let va = d3 * d6 - d5 * d4;
        if d3 >= 0.0 && d4 <= d3 {
            b
        } else if d6 >= 0.0 && d5 <= d6 {
            c
        } else if vc <= 0.0 && d1 >= 0.0 && d3 <= 0.0 {
            at(d1 / (d1 - d3), 0.0)
        } else if vb <= 0.0 && d2 >= 0.0 && d6 <= 0.0 {
            at(0.0, d2 / (d2 - d6))
        } else if va <= 0.0 && (d4 - d3) >= 0.0 && (d5 - d6) >= 0.0 {
            let w = (d4 - d3) / ((d4 - d3) + (d5 - d6));
            [0, 1, 2].map(|k| b[k] + w * (c[k] - b[k]))
        } else {
            let denom = 1.0 / (va + vb + vc);
            at(vb * denom, vc * denom)
        }
    };
    let e = sub(p, closest);
    dot(e, e).sqrt()
}

/// One detected photon.
#[derive(Debug, Clone, PartialEq)]
pub struct DetectedPhoton {
    /// Detector index, 1-based (as MCX's `detid`).
    pub detector: u32,
    /// The photon's index: with the simulation's seed it replays this path exactly.
    pub photon: u64,
    /// Weight at exit (launch weight times the absorption and roulette factors).
    pub weight: f64,
    /// Time of flight at exit, ns.
    pub time_ns: f64,
    /// Scattering events.
    pub scatters: u32,
    /// Exit point, mm.
    pub pos: [f64; 3],
    /// Exit direction (unit, after refraction out of the mesh).
    pub dir: [f64; 3],
    /// Path length per region 1..=R (index r - 1), mm.
    pub ppath: Vec<f64>,
    /// Momentum transfer per region (sum of 1 - cos theta), when asked for; else empty.
    pub momentum: Vec<f64>,
}

/// Per-packet bookkeeping for detection, carried only when a simulation has detectors.
#[derive(Debug, Clone, Default)]
pub(crate) struct PathLog {
    pub(crate) ppath: Vec<f64>,
    pub(crate) momentum: Vec<f64>,
    pub(crate) scatters: u32,
}

impl PathLog {
    pub(crate) fn new(regions: usize, momentum: bool) -> Self {
        PathLog {
            ppath: vec![0.0; regions],
            momentum: if momentum {
                vec![0.0; regions]
            } else {
                Vec::new()
            },
            scatters: 0,
        }
    }
}

/// What the detectors saw in a run (unnormalised weights).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DetectorTally {
    /// Records, at most `max_photons` (sorted by photon index once the run ends).
    pub photons: Vec<DetectedPhoton>,
    /// Detected photons per detector (records dropped or not).
    pub count: Vec<u64>,
    /// Detected weight per detector.
    pub weight: Vec<f64>,
    /// Detected weight per detector and time gate (`det x gates + gate`; empty without
    /// gates): the time-resolved TPSF.
    pub tpsf: Vec<f64>,
    /// Records not kept (over `max_photons`).
    pub dropped: u64,
    /// Records kept at most.
    pub max_photons: u64,
}

impl DetectorTally {
    pub(crate) fn new(detection: &Detection, gates: usize) -> Self {
        let n = detection.detectors.len();
        DetectorTally {
            photons: Vec::new(),
            count: vec![0; n],
            weight: vec![0.0; n],
            tpsf: vec![0.0; n * gates],
            dropped: 0,
            max_photons: detection.max_photons,
        }
    }

    /// Whether there are no detectors.
    pub fn is_empty(&self) -> bool {
        self.count.is_empty()
    }

    /// Add `other` (an empty tally, without detectors, adds nothing), keeping at most
    /// `max_photons` records.
    pub(crate) fn merge(mut self, mut other: DetectorTally) -> DetectorTally {
        if self.is_empty() {
            return other;
        }
        if other.is_empty() {
            return self;
        }
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
        self.photons.append(&mut other.photons);
        self.keep();
        self
    }

    /// Keep the `max_photons` records of lowest photon index (the same ones whatever the
    /// order in which workers finished), counting the rest as dropped.
    pub(crate) fn keep(&mut self) {
        let max = self.max_photons;
        if self.photons.len() as u64 > max {
            self.photons.sort_unstable_by_key(|d| d.photon);
            let extra = self.photons.len() as u64 - max;
            self.photons.truncate(max as usize);
            self.dropped += extra;
        }
    }

    /// Sort the records by photon index (the order of a single-threaded run).
    pub(crate) fn sort(&mut self) {
        self.photons.sort_unstable_by_key(|d| d.photon);
    }
}
