//! The public verbs, one form: `verb(&Simulation, &RunParams, device(s)) -> Result<(result,
//! RunInfo)>`. [`run`] runs on one device (the f64 CPU reference for a CPU device, the f32
//! GPU path otherwise); [`run_on`] shares the photons between several GPUs; [`run_fixed`]
//! gives the GPU's exact tallies before normalisation; [`run_range`] runs a range of photon
//! indices on one device (GPU: exact tallies, CPU: f64), for sharing one simulation between
//! processes. [`run`] and [`run_range`] are the crate's only CPU-vs-GPU branches.
//! [`Simulation::run_cpu`] runs a photon range on the CPU without batching
//! (what the tests and benchmarks compare against).
//!
//! ```
//! use montecarlo_core::{Material, Optics, RunParams, Simulation, Source, api, sim::generate};
//! let mesh = generate::box_mesh([0.0; 3], [6.0; 3], 2.0, 5)?;
//! let optics = Optics { materials: vec![Material { mua: 0.1, mus: 1.0, g: 0.9, n: 1.0 }], n_outside: 1.0 };
//! let src = [Source::Pencil { pos: [3.0, 3.0, 0.0], dir: [0.0, 0.0, 1.0], power: 1.0 }];
//! let sim = Simulation::new(mesh, optics, &src, 2000, Default::default())?;
//! let (r, info) = api::run(&sim, &RunParams::new(), &gpu_runtime::Device::cpu())?;
//! assert_eq!((r.summary.photons, info.requested), (2000, 2000));
//! assert!(r.summary.balance_error.abs() < 1e-9 && !info.interrupted);
//! # Ok::<(), montecarlo_core::Error>(())
//! ```

use crate::cpu::transport::{Cpu, run_batched};
use crate::error::{Error, Result};
use crate::gpu::transport as gpu;
use crate::model::fixed::FixedTally;
use crate::model::params::{McVariant, RunParams};
use crate::model::simulation::Simulation;
use crate::model::tally::{McResult, Tally};
use gpu_runtime::Device;
use std::sync::atomic::Ordering;
use std::time::Instant;

/// How a run went, besides its result.
#[derive(Debug, Clone, PartialEq)]
pub struct RunInfo {
    /// The device or devices that ran (`cpu (16 threads)`, `cuda:0+cuda:1`).
    pub device: String,
    /// Photons asked for (the result's summary has the photons run).
    pub requested: u64,
    /// Photons run.
    pub photons: u64,
    /// Stopped before all photons ran.
    pub interrupted: bool,
    /// Wall time of the whole run in s (packing, uploads and read-back included).
    pub seconds: f64,
    /// GPU: wall time of the transport alone (launches and their synchronisation, after the
    /// scene is on the device, before the tallies are read back), the slowest device's.
    pub transport_seconds: Option<f64>,
    /// GPU: the kernel variant.
    pub variant: Option<McVariant>,
    /// GPU: cubes per launch on the first device.
    pub cubes: Option<u32>,
    /// CPU: rayon threads.
    pub threads: Option<usize>,
    /// The record to keep with the result: library, device (the first of several), precision,
    /// start time.
    pub provenance: gpu_runtime::Provenance,
}

/// The arithmetic of each path, for [`RunInfo::provenance`].
const GPU_PRECISION: &str = "f32 transport, exact fixed-point tallies";
const CPU_PRECISION: &str = "f64";

/// What a run of `photons` costs on each side, for `auto`'s choice between a GPU and the
/// CPU ([`Device::for_job`]). Rates per photon for MCX's cube60 benchmark (about 100
/// scattering events per photon; a mesh with more per photon costs more on both sides):
/// CPU seconds per thread from the H200 host (1e6 photons in ~1.0 s on 16 threads; the
/// 2-core CI machine: 4.1 s on 2 cores, 8e-6), GPU seconds from the H200 end-to-end figure
/// (175,420 photons/ms, docs/benchmarks.md); first compilation 0.6 s (H200).
///
/// ```
/// let small = montecarlo_core::job_estimate(10_000);
/// assert!(small.cpu_seconds(16) < gpu_runtime::GPU_OPEN_SECONDS);
/// let large = montecarlo_core::job_estimate(1_000_000);
/// assert!(large.cpu_seconds(16) > gpu_runtime::GPU_OPEN_SECONDS + large.first_compile_seconds);
/// ```
pub fn job_estimate(photons: u64) -> gpu_runtime::JobEstimate {
    gpu_runtime::JobEstimate::per_item(photons as f64, 1.6e-5, 5.7e-9).with_first_compile(0.6)
}

/// Run `sim` on `device` (the CPU path for a CPU device) in batches, calling
/// `params.progress(done, total)` between batches; when `params.stop` is set, returns the
/// result of the photons finished so far, normalised by that count and marked interrupted.
/// On a GPU, `params.tuning` chooses the kernel variant and launch size.
///
/// ```
/// use montecarlo_core::{RunParams, api, sim::demo_simulation};
/// use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
/// // The demo's two-layer slab under a pencil beam, 2,000 photons, with progress reports.
/// let (sim, cpu) = (demo_simulation(2_000)?, gpu_runtime::Device::cpu());
/// let done = AtomicU64::new(0);
/// let progress = |d: u64, _total: u64| done.store(d, Ordering::Relaxed);
/// let (r, info) = api::run(&sim, &RunParams::new().with_progress(&progress), &cpu)?;
/// assert_eq!((done.load(Ordering::Relaxed), info.photons), (2_000, 2_000));
/// assert!(r.summary.absorbed > 0.0 && r.summary.balance_error.abs() < 1e-9);
/// // A stop flag already set (say by Ctrl-C): the photons so far (none), marked interrupted.
/// let stop = AtomicBool::new(true);
/// let (r, info) = api::run(&sim, &RunParams::new().with_stop(&stop), &cpu)?;
/// assert!(info.interrupted && r.summary.photons < 2_000);
/// # Ok::<(), montecarlo_core::Error>(())
/// ```
pub fn run(sim: &Simulation, params: &RunParams, device: &Device) -> Result<(McResult, RunInfo)> {
    if device.is_gpu() {
        return run_on(sim, params, std::slice::from_ref(device));
    }
    let start = Instant::now();
    let started = std::time::SystemTime::now();
    let (tally, interrupted) = run_batched(sim, params.stop, &|done, total| {
        params.report(done, total);
    });
    let threads = rayon::current_num_threads();
    let r = McResult::new(
        tally,
        start.elapsed().as_secs_f64(),
        format!("cpu ({threads} threads)"),
        interrupted,
    );
    let info = RunInfo {
        device: r.summary.device.clone(),
        requested: sim.photons,
        photons: r.summary.photons,
        interrupted,
        seconds: r.summary.seconds,
        transport_seconds: None,
        variant: None,
        cubes: None,
        threads: Some(threads),
        provenance: gpu_runtime::Provenance::new(device, CPU_PRECISION, started),
    };
    Ok((r, info))
}

/// Run `sim` on the GPUs `devices`, which split the photons into equal contiguous index
/// ranges (one thread per device); naming a device twice runs two workers on it (results
/// are the same as with one). Progress and stop as in [`run`]; when stopped, every device
/// stops after its current batch.
///
/// ```
/// use gpu_runtime::{Backend, Device};
/// use montecarlo_core::{RunParams, api, sim::demo_simulation};
/// let sim = demo_simulation(1_000)?;
/// // GPUs only: an empty list or the CPU is an error (the CPU runs through `api::run`).
/// assert!(api::run_on(&sim, &RunParams::new(), &[]).is_err());
/// assert!(api::run_on(&sim, &RunParams::new(), &[Device::cpu()]).is_err());
/// // On a GPU host: every CUDA device splits the photons, the result the same as on one.
/// let gpus = Device::all_of(Backend::Cuda).unwrap_or_default();
/// assert!(gpus.iter().all(Device::is_gpu));
/// # Ok::<(), montecarlo_core::Error>(())
/// ```
pub fn run_on(
    sim: &Simulation,
    params: &RunParams,
    devices: &[Device],
) -> Result<(McResult, RunInfo)> {
    let start = Instant::now();
    let (fixed, info) = run_fixed(sim, params, devices)?;
    let r = McResult::new(
        fixed.to_tally(sim),
        start.elapsed().as_secs_f64(),
        info.device.clone(),
        info.interrupted,
    );
    let info = RunInfo {
        seconds: r.summary.seconds,
        ..info
    };
    Ok((r, info))
}

/// [`run_on`]'s exact tallies, before normalisation (bit-identical whatever the batching,
/// launch size, packing order or split between devices).
///
/// ```
/// use montecarlo_core::{RunParams, api, sim::demo_simulation};
/// let sim = demo_simulation(1_000)?;
/// // Exact tallies come from the GPU kernels: the CPU device is refused, with the reason.
/// let cpu = gpu_runtime::Device::cpu();
/// let err = api::run_fixed(&sim, &RunParams::new(), &[cpu]).unwrap_err();
/// assert!(err.to_string().contains("not a GPU"), "{err}");
/// # Ok::<(), montecarlo_core::Error>(())
/// ```
pub fn run_fixed(
    sim: &Simulation,
    params: &RunParams,
    devices: &[Device],
) -> Result<(FixedTally, RunInfo)> {
    let start = Instant::now();
    let started = std::time::SystemTime::now();
    if devices.is_empty() {
        return Err(Error::Invalid("no GPU devices given".into()));
    }
    if let Some(d) = devices.iter().find(|d| !d.is_gpu()) {
        return Err(Error::GpuPath(format!("{} is not a GPU", d.info().id)));
    }
    let tuning = &params.tuning;
    tuning
        .variant
        .check()
        .map_err(|e| Error::Invalid(format!("kernel variant: {e}")))?;
    let (fixed, total) = gpu::run_fixed(sim, devices, tuning, params.stop, &|done, total| {
        params.report(done, total);
    })?;
    let names: Vec<_> = devices.iter().map(|d| d.info().id.clone()).collect();
    let mut provenance = gpu_runtime::Provenance::new(&devices[0], GPU_PRECISION, started);
    provenance.device_id = names.join("+");
    let info = RunInfo {
        device: names.join("+"),
        requested: total,
        photons: fixed.photons,
        interrupted: fixed.photons < total,
        seconds: start.elapsed().as_secs_f64(),
        transport_seconds: Some(fixed.transport_seconds),
        variant: Some(tuning.variant),
        cubes: Some(tuning.cubes_on(&devices[0])),
        threads: None,
        provenance,
    };
    Ok((fixed, info))
}

/// The tallies of a photon range ([`run_range`]), before normalisation.
#[derive(Debug, Clone)]
pub enum RangeTally {
    /// GPU: exact 64-bit integer tallies; ranges add up bit for bit to one run's.
    Exact(FixedTally),
    /// CPU: f64 sums; ranges add up to one run's to rounding (about 1e-15 relative).
    Float(Tally),
}

impl RangeTally {
    /// The f64 tally (weights in packet units).
    pub fn to_tally(&self, sim: &Simulation) -> Tally {
        match self {
            RangeTally::Exact(f) => f.to_tally(sim),
            RangeTally::Float(t) => t.clone(),
        }
    }

    /// Photons run.
    pub fn photons(&self) -> u64 {
        match self {
            RangeTally::Exact(f) => f.photons,
            RangeTally::Float(t) => t.photons,
        }
    }
}

/// Run photons `first..first + count` of `sim` (global photon indices) on `device`: the GPU
/// path for a GPU, the CPU path for the CPU, in batches. Every photon's random stream is
/// seeded by its index, so ranges that cover `0..sim.photons` once add up to one run of the
/// whole: bit for bit on a GPU ([`RangeTally::Exact`]), to rounding on the CPU
/// ([`RangeTally::Float`]). This is how several processes share one simulation (the CLI's
/// MPI mode). Progress is `params.report(done, count)`; when `params.stop` is set, returns
/// the photons finished so far (`RunInfo::interrupted`). `count` may be 0 (zero tallies of
/// the right shape).
///
/// ```
/// use montecarlo_core::api::{RangeTally, run_range};
/// use montecarlo_core::{RunParams, sim::demo_simulation};
/// let (sim, cpu) = (demo_simulation(2_000)?, gpu_runtime::Device::cpu());
/// // Two "processes" share the 2,000 photons: 0..1200 and 1200..2000.
/// let (a, _) = run_range(&sim, &RunParams::new(), &cpu, 0, 1_200)?;
/// let (b, info) = run_range(&sim, &RunParams::new(), &cpu, 1_200, 800)?;
/// assert!(matches!(b, RangeTally::Float(_)) && info.photons == 800 && a.photons() == 1_200);
/// let shared = a.to_tally(&sim).merge(b.to_tally(&sim));
/// let whole = sim.run_cpu(0, 2_000).tally;
/// let sum = |v: &[f64]| v.iter().sum::<f64>();
/// assert!((sum(&shared.absorbed) / sum(&whole.absorbed) - 1.0).abs() < 1e-9);
/// assert!(run_range(&sim, &RunParams::new(), &cpu, 1_500, 600).is_err()); // past the end
/// # Ok::<(), montecarlo_core::Error>(())
/// ```
pub fn run_range(
    sim: &Simulation,
    params: &RunParams,
    device: &Device,
    first: u64,
    count: u64,
) -> Result<(RangeTally, RunInfo)> {
    if first.checked_add(count).is_none_or(|end| end > sim.photons) {
        return Err(Error::Invalid(format!(
            "photon range {first}..{first}+{count} is beyond the simulation's {} photons",
            sim.photons
        )));
    }
    let start = Instant::now();
    let started = std::time::SystemTime::now();
    if device.is_gpu() {
        let tuning = &params.tuning;
        tuning
            .variant
            .check()
            .map_err(|e| Error::Invalid(format!("kernel variant: {e}")))?;
        let mut fixed = if count == 0 {
            FixedTally::zero(sim)
        } else {
            let packed = gpu::pack(sim, tuning.reorder)?;
            gpu::run_range(
                sim,
                &packed,
                device,
                tuning,
                first,
                count,
                params.stop,
                |done| {
                    params.report(done, count);
                },
            )?
        };
        fixed.detectors.photons.sort_unstable_by_key(|d| d.photon);
        let info = RunInfo {
            device: device.info().id.clone(),
            requested: count,
            photons: fixed.photons,
            interrupted: fixed.photons < count,
            seconds: start.elapsed().as_secs_f64(),
            transport_seconds: Some(fixed.transport_seconds),
            variant: Some(tuning.variant),
            cubes: Some(tuning.cubes_on(device)),
            threads: None,
            provenance: gpu_runtime::Provenance::new(device, GPU_PRECISION, started),
        };
        return Ok((RangeTally::Exact(fixed), info));
    }
    // As `run_batched`, over the range.
    let cpu = Cpu::new(sim);
    let mut tally = cpu.run(first, 0, None);
    let batch = (count / 20).clamp(100_000, 10_000_000);
    let mut done = 0;
    while done < count {
        if params.stop.is_some_and(|s| s.load(Ordering::Relaxed)) {
            break;
        }
        let t = cpu.run(first + done, batch.min(count - done), params.stop);
        done += t.photons;
        tally = tally.merge(t);
        params.report(done, count);
    }
    tally.detectors.sort();
    let threads = rayon::current_num_threads();
    let info = RunInfo {
        device: format!("cpu ({threads} threads)"),
        requested: count,
        photons: tally.photons,
        interrupted: tally.photons < count,
        seconds: start.elapsed().as_secs_f64(),
        transport_seconds: None,
        variant: None,
        cubes: None,
        threads: Some(threads),
        provenance: gpu_runtime::Provenance::new(device, CPU_PRECISION, started),
    };
    Ok((RangeTally::Float(tally), info))
}

impl Simulation {
    /// The CPU path for photons `first..first + count` (no batching, no stop flag).
    ///
    /// ```
    /// let sim = montecarlo_core::sim::demo_simulation(1_000)?;
    /// // Each photon's random stream is seeded by its index: a range repeats to rounding.
    /// let (a, b) = (sim.run_cpu(0, 500), sim.run_cpu(0, 500));
    /// assert_eq!(a.summary.photons, 500);
    /// assert!((a.summary.absorbed - b.summary.absorbed).abs() < 1e-12);
    /// assert!(a.summary.balance_error.abs() < 1e-9);
    /// # Ok::<(), montecarlo_core::Error>(())
    /// ```
    pub fn run_cpu(&self, first: u64, count: u64) -> McResult {
        let start = Instant::now();
        let t = Cpu::new(self).run(first, count, None);
        McResult::new(t, start.elapsed().as_secs_f64(), "cpu".into(), false)
    }

    /// The absorption Jacobian of `detector` (1-based): each of its photons in `records`
    /// (the `detected` records of a CPU run of this simulation) is run again on the CPU
    /// with its path through every tet, and must end as recorded (else an error: another
    /// simulation, or records from a GPU, whose f32 transport the CPU cannot repeat).
    /// Track-length estimator only. Divide by the photons launched for per-photon units.
    ///
    /// ```
    /// use montecarlo_core::Outputs;
    /// use montecarlo_core::model::detector::{Detection, Detector};
    /// let mut sim = montecarlo_core::sim::demo_simulation(20_000)?;
    /// // A detector on the entrance face, 3 mm from the beam.
    /// let detectors = vec![Detector { pos: [3.0, 0.0, 0.0], radius: 1.5 }];
    /// let detection = Some(Detection { detectors, max_photons: 100_000, momentum: false });
    /// sim.set_outputs(Outputs { detection, ..Outputs::default() })?;
    /// let run = sim.run_cpu(0, 20_000);
    /// let records = &run.tally.detectors.photons;
    /// assert!(records.len() > 100);
    /// let jac = sim.replay_cpu(records, 1)?;
    /// assert_eq!(jac.photons, records.len());
    /// // The weighted path summed over the tets is the weighted total path of the records.
    /// let total: f64 = records.iter().map(|r| r.weight * r.ppath.iter().sum::<f64>()).sum();
    /// let sum: f64 = jac.weighted_path.iter().sum();
    /// assert!((sum - total).abs() <= 1e-9 * total);
    /// # Ok::<(), montecarlo_core::Error>(())
    /// ```
    pub fn replay_cpu(
        &self,
        records: &[crate::model::detector::DetectedPhoton],
        detector: u32,
    ) -> Result<crate::Jacobian> {
        crate::cpu::replay::replay(self, records, detector)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::transport::pack;
    use crate::model::optics::{Material, Optics};
    use crate::model::params::Params;
    use crate::model::source::{KIND_DISK, Source};
    use crate::sim::generate;
    use gpu_kernels::montecarlo::{self as k, NEIGH_INTERFACE};

    fn sim(same_material: bool) -> Simulation {
        let mesh = generate::grid_mesh(
            &generate::planes(0.0, 4.0, 2),
            &generate::planes(0.0, 4.0, 2),
            &generate::planes(0.0, 4.0, 2),
            6,
            |c| if c[2] > 2.0 { 2 } else { 1 },
        )
        .unwrap();
        let m = Material {
            mua: 0.1,
            mus: 1.0,
            g: 0.5,
            n: 1.4,
        };
        let m2 = if same_material {
            m
        } else {
            Material { mua: 0.2, ..m }
        };
        let optics = Optics {
            materials: vec![m, m2],
            n_outside: 1.0,
        };
        let src = [Source::Disk {
            pos: [2.0, 2.0, 0.0],
            dir: [0.0, 0.0, 1.0],
            radius: 1.0,
            power: 1.0,
        }];
        Simulation::new(mesh, optics, &src, 10, Params::default()).unwrap()
    }

    /// Neighbour entries: boundary faces are `-b` with the right triangle, interior faces
    /// carry the interface bit exactly where the two regions' materials differ.
    #[test]
    fn packed_neighbours_flag_material_changes_and_name_boundary_triangles() {
        for same in [true, false] {
            let s = sim(same);
            let p = pack(&s, false).unwrap();
            let m = &s.mesh;
            let mut flagged = 0;
            for t in 1..=m.len() {
                for f in 0..4 {
                    let v = p.neigh[t * 4 + f];
                    let nb = m.neighbours[t][f];
                    if nb == 0 {
                        assert_eq!(v, -(m.boundary_index[t][f] as i32));
                    } else {
                        let differ = m.regions[t] != m.regions[nb as usize] && !same;
                        assert_eq!(v & NEIGH_INTERFACE != 0, differ, "tet {t} face {f}");
                        assert_eq!((v & !NEIGH_INTERFACE) as u32, nb);
                        flagged += usize::from(differ);
                    }
                }
            }
            assert_eq!(flagged > 0, !same);
            // Planes: 16 floats per tet, the f64 ones rounded.
            assert_eq!(p.faces.len(), (m.len() + 1) * k::FACE_FLOATS);
            assert_eq!(p.faces[k::FACE_FLOATS + 3], m.faces[1][0][3] as f32);
            // The disk's start is its centre moved a hair along the beam.
            let z = p.srcs[6];
            assert!(z > 0.0 && z < 1e-5, "{z}");
            assert_eq!(p.srcs[0], KIND_DISK as f32);
        }
    }

    #[test]
    fn fixed_tallies_convert_exactly_and_compare_without_timing() {
        let s = sim(true);
        let mut a = FixedTally::zero(&s);
        a.absorbed[1] = 3 << 24;
        a.escaped[0] = 1 << 23;
        a.totals = [5 << 24, 1 << 24, 1 << 22, 0, 0];
        a.photons = 10;
        let mut b = a.clone();
        b.transport_seconds = 1.0;
        assert!(a.same_tallies(&b));
        let t = a.to_tally(&s);
        assert_eq!(t.absorbed[1], 3.0);
        assert_eq!(t.escaped[0], 0.5);
        assert_eq!(t.roulette, 4.0);
        assert_eq!(t.expired, 0.25);
        a.add(&b);
        assert_eq!(a.absorbed[1], 6 << 24);
        assert_eq!(a.photons, 20);
        assert!(!a.same_tallies(&b));
    }

    #[test]
    fn bad_variant_and_device_lists_are_errors() {
        assert!("k9".parse::<McVariant>().is_err());
        assert!("nested+k2".parse::<McVariant>().is_err());
        assert!("u48".parse::<McVariant>().is_err());
        let s = sim(true);
        let p = RunParams::new();
        let e = run_on(&s, &p, &[]).unwrap_err();
        assert!(e.to_string().contains("no GPU devices"), "{e}");
        let e = run_on(&s, &p, &[Device::cpu()]).unwrap_err();
        assert!(e.to_string().contains("not a GPU"), "{e}");
    }
}
