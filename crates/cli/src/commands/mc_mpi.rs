//! `mpirun -n N biogpu mc run` (the `mpi` feature): the ranks split the photon index range
//! into equal contiguous shares, each runs its share on its own device
//! (`api::run_range`), and the tallies are reduced to rank 0, which alone writes the
//! outputs. GPU tallies are 64-bit integers summed exactly (MPI `u64` sum; the signed face
//! current wraps as two's complement, the same bits), so the result is bit-identical to one
//! process; CPU tallies are f64 sums, equal to one process's to rounding. Detected-photon
//! records are gathered to rank 0, which keeps the `max_photons` of lowest photon index as
//! one process does. An error on any rank aborts the whole job with a message naming it.

use gpu_runtime::Device;
use montecarlo_core::api::RangeTally;
use montecarlo_core::model::detector::DetectedPhoton;
use montecarlo_core::{Simulation, Tally};
use mpi::collective::SystemOperation;
use mpi::datatype::{Equivalence, PartitionMut};
use mpi::environment::Universe;
use mpi::topology::SimpleCommunicator;
use mpi::traits::{Communicator, CommunicatorCollectives, Root};
use mpi::{Count, Threading};

/// Elements per MPI call (MPI counts are 32-bit).
const CHUNK: usize = 1 << 26;

/// The MPI job this process is one rank of (more than one rank).
pub struct World {
    comm: SimpleCommunicator,
    /// This rank.
    pub rank: i32,
    /// Ranks in the job.
    pub size: i32,
    /// This rank's index among the ranks on its host.
    pub local: usize,
    _universe: Universe,
}

impl World {
    /// Start MPI; `None` when the job has one rank (a plain run, also outside `mpirun`),
    /// after finalising MPI again. Only the main thread makes MPI calls (`Funneled`).
    pub fn init() -> Option<World> {
        let (universe, _) = mpi::initialize_with_threading(Threading::Funneled)?;
        let world = universe.world();
        let (rank, size) = (world.rank(), world.size());
        if size <= 1 {
            return None;
        }
        let local = world.split_shared(rank).rank() as usize;
        Some(World {
            comm: world,
            rank,
            size,
            local,
            _universe: universe,
        })
    }

    pub fn is_root(&self) -> bool {
        self.rank == 0
    }

    /// Print `e` naming this rank and end every rank of the job (`MPI_Abort`), so that no
    /// rank waits forever on one that failed.
    pub fn fail(&self, e: &anyhow::Error) -> ! {
        eprintln!("error: MPI rank {} of {}: {e:#}", self.rank, self.size);
        self.comm.abort(1)
    }

    /// This rank's device: the one given, or with several (`cuda:all`, a list), the one at
    /// the rank's index on its host modulo their number.
    pub fn pick<'a>(&self, devices: &'a [Device]) -> &'a Device {
        &devices[self.local % devices.len()]
    }

    /// This rank's photons: an equal contiguous share of `0..total`.
    pub fn share(&self, total: u64) -> (u64, u64) {
        let (r, n) = (self.rank as u128, self.size as u128);
        let at = |i: u128| (u128::from(total) * i / n) as u64;
        (at(r), at(r + 1))
    }

    /// Check that every rank runs the same simulation on the same kind of device (GPU: exact
    /// tallies, CPU: f64), before the run; rank 0 ends the job when they differ.
    pub fn check_same(&self, sim: &Simulation, gpu: bool) {
        let facts = [
            u64::from(gpu),
            sim.photons,
            sim.params.seed,
            sim.mesh.len() as u64,
            sim.mesh.boundary.len() as u64,
            sim.faces.len() as u64,
            sim.gates.map_or(0, |g| u64::from(g.count)),
            sim.outputs
                .detection
                .as_ref()
                .map_or(0, |d| d.detectors.len() as u64),
        ];
        let mut lo = [0u64; 8];
        let mut hi = [0u64; 8];
        self.comm
            .all_reduce_into(&facts[..], &mut lo[..], SystemOperation::min());
        self.comm
            .all_reduce_into(&facts[..], &mut hi[..], SystemOperation::max());
        if lo == hi {
            return;
        }
        if self.is_root() {
            let why = if lo[0] == hi[0] {
                format!(
                    "the ranks read different simulations (photons, seed, tetrahedra, boundary \
                     triangles, faces, gates, detectors: {lo:?} to {hi:?}): give every rank \
                     the same file and options"
                )
            } else {
                "some ranks run on a GPU and others on the CPU: give every rank a GPU \
                 (bit-identical integer tallies) or every rank the CPU"
                    .to_string()
            };
            self.fail(&anyhow::anyhow!(why));
        }
        // Rank 0 aborts the job; this barrier is never passed.
        self.comm.barrier();
        unreachable!("rank 0 ends the job");
    }

    /// Sum `v` element-wise over the ranks into rank 0's `v` (other ranks' are unchanged).
    fn sum<T: Equivalence + Copy + Default>(&self, v: &mut [T]) {
        self.reduce(v, SystemOperation::sum());
    }

    fn reduce<T: Equivalence + Copy + Default>(&self, v: &mut [T], op: SystemOperation) {
        let root = self.comm.process_at_rank(0);
        for c in v.chunks_mut(CHUNK) {
            if self.is_root() {
                let mut r = vec![T::default(); c.len()];
                root.reduce_into_root(&c[..], &mut r[..], op);
                c.copy_from_slice(&r);
            } else {
                root.reduce_into(&c[..], op);
            }
        }
    }

    /// Every rank's records, on rank 0 (empty elsewhere).
    fn gather_records(&self, records: &[DetectedPhoton]) -> Vec<DetectedPhoton> {
        let words = encode(records);
        let n = Count::try_from(words.len()).unwrap_or_else(|_| {
            self.fail(&anyhow::anyhow!(
                "{} detected-photon records are too many to send in one MPI message: lower \
                 outputs.detection.max_photons",
                records.len()
            ))
        });
        let root = self.comm.process_at_rank(0);
        if !self.is_root() {
            root.gather_into(&n);
            root.gather_varcount_into(&words[..]);
            return Vec::new();
        }
        let mut counts = vec![0 as Count; self.size as usize];
        root.gather_into_root(&n, &mut counts[..]);
        let mut displs = Vec::with_capacity(counts.len());
        let mut total: Count = 0;
        for &c in &counts {
            displs.push(total);
            total = total.checked_add(c).unwrap_or_else(|| {
                self.fail(&anyhow::anyhow!(
                    "the ranks' detected-photon records are too many for one MPI gather: \
                     lower outputs.detection.max_photons"
                ))
            });
        }
        let mut all = vec![0u64; total as usize];
        let mut part = PartitionMut::new(&mut all[..], &counts[..], &displs[..]);
        root.gather_varcount_into_root(&words[..], &mut part);
        decode(&all)
    }

    /// The ranks' tallies summed on rank 0 (`None` on the other ranks): integer sums of the
    /// GPU's exact tallies, f64 sums of the CPU's; detected-photon records gathered and cut
    /// to the `max_photons` of lowest photon index, as in one process.
    pub fn reduce_tally(&self, sim: &Simulation, part: RangeTally) -> Option<Tally> {
        match part {
            RangeTally::Exact(mut f) => {
                self.sum(&mut f.absorbed);
                self.sum(&mut f.escaped);
                self.sum(&mut f.totals[..]);
                self.sum(&mut f.gated);
                self.sum(&mut f.face_fluence);
                // Two's complement: the u64 wrapping sum has the bits of the i64 sum.
                let mut current: Vec<u64> = f.face_current.iter().map(|&v| v as u64).collect();
                self.sum(&mut current);
                let mut counts = [f.photons, f.detectors.dropped];
                self.sum(&mut counts[..]);
                let mut seconds = [f.transport_seconds];
                self.reduce(&mut seconds[..], SystemOperation::max());
                let d = &mut f.detectors;
                self.sum(&mut d.count);
                self.sum(&mut d.weight);
                self.sum(&mut d.tpsf);
                let records = self.gather_records(&d.photons);
                if !self.is_root() {
                    return None;
                }
                f.face_current = current.into_iter().map(|v| v as i64).collect();
                [f.photons, f.detectors.dropped] = counts;
                f.transport_seconds = seconds[0];
                let d = &mut f.detectors;
                (d.photons, d.dropped) = keep(records, d.dropped, d.max_photons);
                Some(f.to_tally(sim))
            }
            RangeTally::Float(mut t) => {
                self.sum(&mut t.absorbed);
                self.sum(&mut t.escaped);
                self.sum(&mut t.face_fluence);
                self.sum(&mut t.face_current);
                self.sum(&mut t.gated);
                let mut scalars = [t.roulette, t.expired, t.lost, t.specular];
                self.sum(&mut scalars[..]);
                let mut counts = [t.photons, t.detectors.dropped];
                self.sum(&mut counts[..]);
                let d = &mut t.detectors;
                self.sum(&mut d.count);
                self.sum(&mut d.weight);
                self.sum(&mut d.tpsf);
                let records = self.gather_records(&d.photons);
                if !self.is_root() {
                    return None;
                }
                [t.roulette, t.expired, t.lost, t.specular] = scalars;
                [t.photons, t.detectors.dropped] = counts;
                let d = &mut t.detectors;
                (d.photons, d.dropped) = keep(records, d.dropped, d.max_photons);
                Some(t)
            }
        }
    }
}

/// The `max` records of lowest photon index, sorted, and the dropped count with the rest.
fn keep(mut records: Vec<DetectedPhoton>, dropped: u64, max: u64) -> (Vec<DetectedPhoton>, u64) {
    records.sort_unstable_by_key(|d| d.photon);
    let over = (records.len() as u64).saturating_sub(max);
    records.truncate(records.len() - over as usize);
    (records, dropped + over)
}

/// Records as words: detector, photon, weight, time, scatters, pos, dir, then the partial
/// pathlengths and the momentum transfers, each after its length (f64 as their bits).
fn encode(records: &[DetectedPhoton]) -> Vec<u64> {
    let mut w = Vec::new();
    for r in records {
        w.extend([
            u64::from(r.detector),
            r.photon,
            r.weight.to_bits(),
            r.time_ns.to_bits(),
            u64::from(r.scatters),
        ]);
        w.extend(r.pos.iter().chain(&r.dir).map(|v| v.to_bits()));
        for list in [&r.ppath, &r.momentum] {
            w.push(list.len() as u64);
            w.extend(list.iter().map(|v| v.to_bits()));
        }
    }
    w
}

fn decode(mut w: &[u64]) -> Vec<DetectedPhoton> {
    let mut out = Vec::new();
    let f = f64::from_bits;
    while w.len() >= 11 {
        let (head, rest) = w.split_at(11);
        let mut lists = [Vec::new(), Vec::new()];
        let mut rest = rest;
        for list in &mut lists {
            let n = rest[0] as usize;
            *list = rest[1..=n].iter().map(|&v| f(v)).collect();
            rest = &rest[1 + n..];
        }
        let [ppath, momentum] = lists;
        out.push(DetectedPhoton {
            detector: head[0] as u32,
            photon: head[1],
            weight: f(head[2]),
            time_ns: f(head[3]),
            scatters: head[4] as u32,
            pos: [f(head[5]), f(head[6]), f(head[7])],
            dir: [f(head[8]), f(head[9]), f(head[10])],
            ppath,
            momentum,
        });
        w = rest;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_keep_the_lowest_indices() {
        let rec = |photon: u64, regions: usize, momentum: usize| DetectedPhoton {
            detector: 2,
            photon,
            weight: 0.25,
            time_ns: 1.5,
            scatters: 7,
            pos: [1.0, 2.0, 3.0],
            dir: [0.0, 0.0, -1.0],
            ppath: (0..regions).map(|r| r as f64 + 0.5).collect(),
            momentum: (0..momentum).map(|r| r as f64 * 0.1).collect(),
        };
        let records = vec![rec(9, 2, 0), rec(3, 3, 3), rec(5, 0, 0)];
        assert_eq!(decode(&encode(&records)), records);
        let (kept, dropped) = keep(records, 4, 2);
        assert_eq!(kept.iter().map(|d| d.photon).collect::<Vec<_>>(), [3, 5]);
        assert_eq!(dropped, 5);
    }
}
