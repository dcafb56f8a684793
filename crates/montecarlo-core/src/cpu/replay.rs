//! Replay of detected photons for the absorption Jacobian of one detector.
//!
//! With the track-length estimator a packet's weight at exit is w = w0 x exp(-sum_t mua_t
//! L_t) x (roulette factors), L_t its path length in tet t, and the path itself does not
//! depend on mua (steps are drawn in 1/mus). So dw/dmua_t = -w L_t exactly, and the
//! detector's weight W = sum_p w_p has dW/dmua_t = -sum_p w_p L_{p,t}. Each recorded photon
//! is run again from its index (its random stream is seeded by it) with every segment kept;
//! the replay must end in the same detector with the recorded weight, which also checks that
//! the simulation is the one that recorded the photons.

use crate::error::{Error, Result};
use crate::model::detector::DetectedPhoton;
use crate::model::params::Estimator;
use crate::model::simulation::Simulation;
use rayon::prelude::*;

use super::transport::Cpu;

/// Relative difference allowed between a replayed and a recorded weight or time: records
/// made on the CPU repeat to rounding (the CPU path is f64 throughout).
const SAME: f64 = 1e-9;
/// Records replayed per task.
const BLOCK: usize = 64;

/// The absorption Jacobian of one detector, from its detected photons.
#[derive(Debug, Clone, PartialEq)]
pub struct Jacobian {
    /// The detector, 1-based.
    pub detector: u32,
    /// Photons replayed (every record of the detector).
    pub photons: usize,
    /// Sum of their exit weights (W, not yet divided by the photons launched).
    pub weight: f64,
    /// Per tet, mesh numbering (index 0 unused, as [`Tally::absorbed`]): sum over the
    /// photons of exit weight x path length in the tet, mm (so -dW/dmua_t, same units as W
    /// times mm).
    pub weighted_path: Vec<f64>,
}

impl Jacobian {
    /// dW/dmua per tet (index t - 1 for tet t), W the detector's weight per launched photon
    /// (`launched` photons): minus the weighted path over the photons launched, mm.
    pub fn dw_dmua(&self, launched: u64) -> Vec<f64> {
        let n = launched.max(1) as f64;
        self.weighted_path[1..].iter().map(|x| -x / n).collect()
    }

    /// The mean path length of the detected light in each tet (index t - 1 for tet t), mm:
    /// -d ln W / d mua_t.
    pub fn mean_path(&self) -> Vec<f64> {
        let w = self.weight;
        self.weighted_path[1..]
            .iter()
            .map(|&x| if w > 0.0 { x / w } else { 0.0 })
            .collect()
    }
}

pub(crate) fn replay(
    sim: &Simulation,
    records: &[DetectedPhoton],
    detector: u32,
) -> Result<Jacobian> {
    let Some(det) = &sim.outputs.detection else {
        return Err(Error::Invalid(
            "replay: the simulation has no detectors (outputs.detection); replay the file that recorded the photons".into(),
        ));
    };
    if detector == 0 || detector as usize > det.detectors.len() {
        return Err(Error::Invalid(format!(
            "replay: detector {detector}: the simulation has detectors 1..={}",
            det.detectors.len()
        )));
    }
    if sim.params.estimator != Estimator::TrackLength {
        return Err(Error::Invalid(
            "replay: the Jacobian needs the track-length estimator (the default); with the interaction estimator the exit weight is not exp(-sum mua L)".into(),
        ));
    }
    let mine: Vec<&DetectedPhoton> = records.iter().filter(|r| r.detector == detector).collect();
    let cpu = Cpu::new(sim);
    let mut weighted_path = vec![0.0; sim.mesh.len() + 1];
    let mut weight = 0.0;
    // Blocks of records replayed in parallel, a few per thread at a time (memory stays
    // bounded whatever the record count); each block's weight x length per segment is then
    // added in record order, so the sums are the same bits whatever the thread count.
    let group = BLOCK * 4 * rayon::current_num_threads();
    for part in mine.chunks(group) {
        let blocks: Vec<(Vec<(u32, f64)>, f64)> = part
            .par_chunks(BLOCK)
            .map_init(
                || cpu.tally(),
                |tally, block| {
                    let (mut adds, mut w) = (Vec::new(), 0.0);
                    for rec in block {
                        let (got, segments) = cpu
                            .replay(rec.photon, tally)
                            .filter(|(got, _)| same_record(got, rec))
                            .ok_or_else(|| not_replayed(rec))?;
                        adds.extend(segments.into_iter().map(|(t, len)| (t, got.weight * len)));
                        w += got.weight;
                    }
                    Ok((adds, w))
                },
            )
            .collect::<Result<_>>()?;
        for (adds, w) in blocks {
            for (t, x) in adds {
                weighted_path[t as usize] += x;
            }
            weight += w;
        }
    }
    Ok(Jacobian {
        detector,
        photons: mine.len(),
        weight,
        weighted_path,
    })
}

/// Whether a replay ended as `rec` says: same detector, weight and time.
fn same_record(got: &DetectedPhoton, rec: &DetectedPhoton) -> bool {
    let same = |a: f64, b: f64| (a - b).abs() <= SAME * a.abs().max(b.abs());
    got.detector == rec.detector && same(got.weight, rec.weight) && same(got.time_ns, rec.time_ns)
}

fn not_replayed(rec: &DetectedPhoton) -> Error {
    Error::Invalid(format!(
        "replay: photon {} (detector {}, weight {:e}, {} ns) does not replay to its record: the simulation (mesh, optics, sources, seed, detectors) differs from the run that recorded it, or the record was made on a GPU, whose f32 transport the CPU cannot repeat (record on the CPU to replay: --device cpu)",
        rec.photon, rec.detector, rec.weight, rec.time_ns
    ))
}
