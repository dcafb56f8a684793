//! The GPU path, host side: packs the mesh (f32 planes, encoded neighbours), materials and
//! sources, runs `gpu_kernels::montecarlo::transport` in batches on one or several devices
//! (progress and Ctrl-C between batches), and sums the exact fixed-point tallies (64-bit
//! integers of 2^-24 weight units) before converting them to f64 once.
//!
//! Every photon's random stream is seeded by its global index and every tally is an
//! integer sum, so the result is bit-identical whatever the batching, the launch size, the
//! kernel variant's loop structure or the split of the photons between devices.
//!
//! ```no_run
//! use montecarlo_core::{GpuTuning, RunParams, Simulation, api};
//! # fn demo(sim: &Simulation, lookup: impl Fn(&str) -> Option<String>) -> montecarlo_core::Result<()> {
//! // Two GPUs of one host share the photons; the kernel variant comes from
//! // BIOGPU_MC_VARIANT as `lookup` gives it (the default without it).
//! let devices = [
//!     gpu_runtime::Device::select("cuda:0".parse().unwrap(), false).unwrap().device,
//!     gpu_runtime::Device::select("cuda:1".parse().unwrap(), false).unwrap().device,
//! ];
//! let tuning = GpuTuning::from_lookup(lookup)?;
//! let progress = |done: u64, total: u64| eprintln!("{done}/{total}");
//! let params = RunParams::new().with_tuning(tuning).with_progress(&progress);
//! let (r, _info) = api::run_on(sim, &params, &devices)?;
//! println!("{} photons/ms", r.summary.photons_per_ms);
//! # Ok(()) }
//! ```

use crate::error::{Error, Result};
use crate::model::detector::DetectedPhoton;
use crate::model::fixed::{FixedDetectors, FixedTally};
use crate::model::mesh::FACE_NODES;
use crate::model::params::{Estimator, GpuTuning};
use crate::model::physics::{C_MM_PER_NS, MAX_EVENTS};
use crate::model::simulation::Simulation;
use crate::model::source::{self, KIND_DISK, KIND_GAUSSIAN};
use gpu_kernels::montecarlo::{self as k, GPU_KINDS, McBatch, McScene, McTallies, NEIGH_INTERFACE};
use gpu_runtime::cubecl::prelude as cubecl_rt;
use gpu_runtime::{Device, Gpu, with_gpu};
use rayon::prelude::*;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::Instant;

/// Host-side arrays in the kernel's layout.
pub(crate) struct Packed {
    pub(crate) faces: Vec<f32>,
    pub(crate) neigh: Vec<i32>,
    pub(crate) region: Vec<u32>,
    pub(crate) mats: Vec<f32>,
    pub(crate) srcs: Vec<f32>,
    pub(crate) src_tet: Vec<u32>,
    pub(crate) src_aux: Vec<f32>,
    pub(crate) face_slot: Vec<u32>,
    pub(crate) face_normal: Vec<f32>,
    /// [`k::DET_FLOATS`] per detector, `[x, y, z, r^2]` (4 zeros without detectors).
    pub(crate) detectors: Vec<f32>,
    /// Packed tetrahedron -> mesh tetrahedron (index 0: outside).
    pub(crate) orig: Vec<u32>,
}

/// Optical constants of every region (0 = outside) as the kernel reads them: [1/mu, g, n,
/// absorb, mu, n/c, 0, 0], where mu is the coefficient steps are measured in (mus for the
/// track-length estimator, mu_t for the interaction one) and absorb is mua (track length:
/// the decay rate) or mua/mu_t (interaction: the share dropped).
fn pack_materials(sim: &Simulation) -> Vec<f32> {
    let regions = sim.mesh.max_region().max(sim.optics.materials.len() as u32);
    let mut mats = Vec::with_capacity((regions as usize + 1) * k::MAT_FLOATS);
    for r in 0..=regions {
        let m = sim.optics.get(r);
        let mu_t = m.mua + m.mus;
        let (mu, absorb) = match sim.params.estimator {
            Estimator::TrackLength => (m.mus, m.mua),
            Estimator::Interaction => (mu_t, if mu_t > 0.0 { m.mua / mu_t } else { 0.0 }),
        };
        let inv = if mu > 0.0 { 1.0 / mu } else { f64::INFINITY };
        mats.extend([inv, m.g, m.n, absorb, mu, m.n / C_MM_PER_NS, 0.0, 0.0].map(|v| v as f32));
    }
    mats
}

/// Walker's alias table of `weights` (Vose's construction): keep index `i` with
/// probability `prob[i]`, else take `alias[i]`; with `i` uniform this picks index `j` with
/// probability `weights[j] / sum`, the distribution of the CPU's cumulative table.
fn alias_table(weights: &[f64]) -> (Vec<f32>, Vec<u32>) {
    let n = weights.len();
    let total: f64 = weights.iter().sum();
    let mut p: Vec<f64> = weights.iter().map(|w| w * n as f64 / total).collect();
    let mut prob = vec![1.0f32; n];
    let mut alias: Vec<u32> = (0..n as u32).collect();
    let (mut small, mut large): (Vec<usize>, Vec<usize>) = (0..n).partition(|&i| p[i] < 1.0);
    while let (Some(s), Some(&l)) = (small.pop(), large.last()) {
        prob[s] = p[s] as f32;
        alias[s] = l as u32;
        p[l] -= 1.0 - p[s];
        if p[l] < 1.0 {
            large.pop();
            small.push(l);
        }
    }
    (prob, alias)
}

/// The element tables of volume and surface sources ([`k::AUX_VECS`] float4 per element,
/// see `gpu_kernels::montecarlo::source`), tetrahedra in packed numbering.
fn pack_source_elements(sim: &Simulation, packed_of: &[u32]) -> Vec<f32> {
    let m = &sim.mesh;
    let per = 4 * k::AUX_VECS as usize;
    let mut aux = vec![0.0f32; per * sim.source_elements.len().max(1)];
    for s in &sim.sources {
        if s.count == 0 {
            continue;
        }
        let els = &sim.source_elements[s.first as usize..(s.first + s.count) as usize];
        let weights: Vec<f64> = els
            .iter()
            .scan(0.0, |prev, e| {
                let w = (e.cdf - *prev).max(0.0);
                *prev = e.cdf;
                Some(w)
            })
            .collect();
        let (prob, alias) = alias_table(&weights);
        for (i, e) in els.iter().enumerate() {
            let r = &mut aux[(s.first as usize + i) * per..][..per];
            r[0] = prob[i];
            r[1] = f32::from_bits(alias[i]);
            r[2] = f32::from_bits(packed_of[e.tet as usize]);
            let t = m.tets[e.tet as usize];
            let nodes: Vec<usize> = if e.face >= 4 {
                t.iter().map(|&v| v as usize).collect()
            } else {
                FACE_NODES[e.face as usize]
                    .iter()
                    .map(|&k| t[k] as usize)
                    .collect()
            };
            for (j, &v) in nodes.iter().enumerate() {
                for c in 0..3 {
                    r[4 * (1 + j) + c] = m.nodes[v][c] as f32;
                }
            }
            if e.face < 4 {
                let f = m.faces[e.tet as usize][e.face as usize];
                let inward = [-f[0], -f[1], -f[2]];
                let (u, _) = source::basis(inward);
                for c in 0..3 {
                    r[16 + c] = inward[c] as f32;
                    r[20 + c] = u[c] as f32;
                }
            }
        }
    }
    aux
}

pub(crate) fn pack(sim: &Simulation, reorder: bool) -> Result<Packed> {
    let m = &sim.mesh;
    let n = m.len() + 1;
    if n > k::MAX_TET || m.boundary.len() >= k::MAX_TET {
        return Err(Error::GpuPath(format!(
            "mesh too large for the GPU path: {} tetrahedra, {} boundary triangles (at most {} each)",
            m.len(),
            m.boundary.len(),
            k::MAX_TET - 1
        )));
    }
    if let Some(g) = sim.gates
        && (g.count as usize) * n >= 1 << 31
    {
        return Err(Error::GpuPath(format!(
            "{} time gates x {} tetrahedra exceed the GPU's gated tally (2^31 entries)",
            g.count,
            m.len()
        )));
    }
    // Morton order of the centroids (the CPU path's packing): neighbours close in memory.
    let mut orig = Vec::with_capacity(n);
    orig.push(0u32);
    if !reorder {
        orig.extend(1..n as u32);
    } else if m.order.len() == m.len() {
        orig.extend_from_slice(&m.order);
    } else {
        orig.extend(m.morton_order());
    }
    let mut packed_of = vec![0u32; n];
    for (p, &o) in orig.iter().enumerate() {
        packed_of[o as usize] = p as u32;
    }
    let mats = pack_materials(sim);
    let material = |t: usize| {
        let r = m.regions[t] as usize * k::MAT_FLOATS;
        &mats[r..r + k::MAT_FLOATS]
    };
    // With detectors every change of region is an interface, so the packet's region (for
    // its partial pathlengths) follows it even between regions of equal materials.
    let detect = sim.outputs.detection.is_some();
    let interface =
        |a: usize, b: usize| material(a) != material(b) || (detect && m.regions[a] != m.regions[b]);
    // Tallied faces: both sides of each carry its slot.
    let tallied = sim.faces.len();
    let mut face_slot = vec![k::NO_SLOT; if tallied > 0 { 4 * n } else { 1 }];
    let mut face_normal = vec![0.0f32; 4 * tallied.max(1)];
    for (i, &(t, f)) in sim.faces.faces.iter().enumerate() {
        face_slot[4 * packed_of[t as usize] as usize + f as usize] = i as u32;
        let nb = m.neighbours[t as usize][f as usize];
        if nb > 0
            && let Some(back) = m.neighbours[nb as usize].iter().position(|&x| x == t)
        {
            face_slot[4 * packed_of[nb as usize] as usize + back] = i as u32;
        }
        for c in 0..3 {
            face_normal[4 * i + c] = sim.faces.normals[i][c] as f32;
        }
    }
    let mut faces = Vec::with_capacity(n * k::FACE_FLOATS);
    let mut neigh = Vec::with_capacity(n * k::NEIGH_INTS);
    let mut region = Vec::with_capacity(n);
    for (p, &o) in orig.iter().enumerate() {
        let o = o as usize;
        for plane in &m.faces[o] {
            // f32 keeps ~7 digits: enough for meshes whose coordinates span < 1e4 of their
            // smallest feature.
            faces.extend(plane.iter().map(|&v| v as f32));
        }
        for f in 0..4 {
            let nb = m.neighbours[o][f] as usize;
            neigh.push(if o == 0 {
                0
            } else if nb == 0 {
                -(m.boundary_index[o][f] as i32)
            } else {
                let mut v = packed_of[nb] as i32;
                if interface(nb, o) {
                    v |= NEIGH_INTERFACE;
                }
                if tallied > 0 && face_slot[4 * p + f] != k::NO_SLOT {
                    v |= k::NEIGH_TALLIED;
                }
                v
            });
        }
        region.push(m.regions[o]);
    }
    let e = 1e-7 * m.scale();
    let mut srcs = Vec::with_capacity(sim.sources.len() * k::SRC_FLOATS);
    let mut src_tet = Vec::with_capacity(sim.sources.len());
    for s in &sim.sources {
        if !GPU_KINDS.contains(&s.kind) {
            return Err(Error::GpuPath(format!(
                "source kind {} is unknown to the GPU kernel (use --device cpu)",
                s.kind
            )));
        }
        // Disk and Gaussian samples walk from the centre moved a hair into the mesh.
        let pos = if s.kind == KIND_DISK || s.kind == KIND_GAUSSIAN {
            [0, 1, 2].map(|i| s.pos[i] + e * s.dir[i])
        } else {
            s.pos
        };
        let (u, _) = source::basis(s.dir);
        let f = |v: f64| v as f32;
        // Specular reflection at launch: the packet's start weight and the reflected share.
        let rsp = s.specular(sim.params.specular);
        srcs.extend([
            f(f64::from(s.kind)),
            f(s.cumulative),
            f(s.param),
            f32::from_bits(s.first),
            f(pos[0]),
            f(pos[1]),
            f(pos[2]),
            f32::from_bits(s.count),
            f(s.dir[0]),
            f(s.dir[1]),
            f(s.dir[2]),
            f(1.0 - rsp),
            f(u[0]),
            f(u[1]),
            f(u[2]),
            f(rsp),
        ]);
        src_tet.push(packed_of[s.tet as usize]);
    }
    Ok(Packed {
        faces,
        neigh,
        region,
        mats,
        srcs,
        src_tet,
        src_aux: pack_source_elements(sim, &packed_of),
        face_slot,
        face_normal,
        detectors: pack_detectors(sim),
        orig,
    })
}

/// The detectors as the kernel reads them: `[x, y, z, r^2]` each (f32).
fn pack_detectors(sim: &Simulation) -> Vec<f32> {
    match &sim.outputs.detection {
        Some(d) if !d.detectors.is_empty() => d
            .detectors
            .iter()
            .flat_map(|d| [d.pos[0], d.pos[1], d.pos[2], d.radius * d.radius].map(|v| v as f32))
            .collect(),
        _ => vec![0.0; k::DET_FLOATS],
    }
}

/// Regions of the partial pathlengths: every region a tet or a material names (the CPU's
/// `PathLog` size).
fn det_regions(sim: &Simulation) -> u32 {
    sim.mesh.max_region().max(sim.optics.materials.len() as u32)
}

/// Records per device and batch at most: the record buffers stay below ~256 MiB.
const MAX_RECORDS: u64 = 1 << 22;
const MAX_RECORD_BYTES: u64 = 256 << 20;

/// Record slots for a device running `count` photons: at most `max_photons`, [`MAX_RECORDS`]
/// and 256 MiB of record buffers.
fn record_capacity(sim: &Simulation, count: u64) -> u32 {
    let Some(d) = &sim.outputs.detection else {
        return 0;
    };
    let bytes = 4 * (k::DET_U32 + k::det_floats(det_regions(sim), d.momentum)) as u64;
    d.max_photons
        .min(MAX_RECORDS)
        .min(MAX_RECORD_BYTES / bytes)
        .min(count)
        .max(1) as u32
}

/// After a batch: add the detector totals to `out`, convert the records written (the first
/// `min(counter, capacity)` slots) to [`DetectedPhoton`]s and count the rest as dropped,
/// then clear the totals and the counter on the device.
fn collect_detected<R: cubecl_rt::Runtime>(
    gpu: &Gpu<R>,
    scene: &McScene,
    tallies: &McTallies,
    out: &mut FixedDetectors,
) -> gpu_runtime::Result<()> {
    let words = gpu.download(&tallies.det_tally)?;
    let e = words_to_u64(&words);
    let n = scene.n_det as usize;
    let gates = scene.gates as usize;
    let counter = u64::from(words[0]);
    for i in 0..n {
        out.weight[i] += e[1 + i];
        out.count[i] += e[1 + n + i];
    }
    for (i, t) in out.tpsf.iter_mut().enumerate().take(n * gates) {
        *t += e[1 + 2 * n + i];
    }
    k::transport::zero_words(gpu, &tallies.det_tally)?;
    let written = counter.min(u64::from(tallies.rec_cap)) as usize;
    out.dropped += counter - written as u64;
    if written == 0 {
        return Ok(());
    }
    if out.photons.len() as u64 >= out.max_photons {
        // Batches of a device run in index order: every record of this one has a higher
        // index than the `max_photons` held, and `keep` would drop it.
        out.dropped += written as u64;
        return Ok(());
    }
    let regions = scene.det_regions as usize;
    let per = k::det_floats(scene.det_regions, scene.det_momentum);
    let u = gpu.download(&tallies.rec_u.prefix(written * k::DET_U32))?;
    let f = gpu.download(&tallies.rec_f.prefix(written * per))?;
    let h = k::DET_F_HEAD;
    let v = |x: f32| f64::from(x);
    out.photons.extend(
        u.chunks_exact(k::DET_U32)
            .zip(f.chunks_exact(per))
            .map(|(u, f)| DetectedPhoton {
                detector: u[0],
                photon: (u64::from(u[2]) << 32) | u64::from(u[1]),
                weight: v(f[0]),
                time_ns: v(f[1]),
                scatters: u[3],
                pos: [v(f[2]), v(f[3]), v(f[4])],
                dir: [v(f[5]), v(f[6]), v(f[7])],
                ppath: f[h..h + regions].iter().map(|&x| v(x)).collect(),
                momentum: f[h + regions..].iter().map(|&x| v(x)).collect(),
            }),
    );
    out.keep();
    Ok(())
}

fn upload_scene<R: cubecl_rt::Runtime>(
    gpu: &Gpu<R>,
    p: &Packed,
    sim: &Simulation,
) -> gpu_runtime::Result<McScene> {
    Ok(McScene {
        faces: gpu.upload(&p.faces)?,
        neigh: gpu.upload(&p.neigh)?,
        region: gpu.upload(&p.region)?,
        mats: gpu.upload(&p.mats)?,
        srcs: gpu.upload(&p.srcs)?,
        src_tet: gpu.upload(&p.src_tet)?,
        src_aux: gpu.upload(&p.src_aux)?,
        face_slot: gpu.upload(&p.face_slot)?,
        face_normal: gpu.upload(&p.face_normal)?,
        tallied_faces: sim.faces.len(),
        gates: sim.gates.map_or(0, |g| g.count),
        tets: sim.mesh.len() + 1,
        boundary: sim.mesh.boundary.len(),
        sources: sim.sources.len() as u32,
        track: sim.params.estimator == Estimator::TrackLength,
        detectors: gpu.upload(&p.detectors)?,
        n_det: sim
            .outputs
            .detection
            .as_ref()
            .map_or(0, |d| d.detectors.len() as u32),
        det_regions: det_regions(sim),
        det_momentum: sim.outputs.detection.as_ref().is_some_and(|d| d.momentum),
    })
}

fn words_to_u64(words: &[u32]) -> Vec<u64> {
    words
        .chunks_exact(2)
        .map(|w| (u64::from(w[1]) << 32) | u64::from(w[0]))
        .collect()
}

/// Event-loop iterations per lane and launch on software adapters. lavapipe (llvmpipe)
/// ends every loop of a shader invocation once the invocation has run 65,535 loop
/// iterations in all (inner loops included: the source pick and the start-point walk run
/// at every launch), silently dropping the photons a lane holds. Past this budget the
/// kernel takes no new photon and the launch is repeated: 2,048 event iterations leave
/// room for ~30 inner-loop iterations per event.
const LAVAPIPE_BUDGET: u32 = 2_048;

/// A message from a device worker.
enum Report {
    /// Photons finished on device `i` so far.
    Progress(usize, u64),
}

/// Run photons `first..first + count` on `device` in batches, adding nothing to the host
/// until the end (tallies accumulate on the device); stops between batches when `stop` is
/// set. Returns the exact tallies of the photons finished.
pub(crate) fn run_range(
    sim: &Simulation,
    packed: &Packed,
    device: &Device,
    tuning: &GpuTuning,
    first: u64,
    count: u64,
    stop: Option<&AtomicBool>,
    mut report: impl FnMut(u64),
) -> Result<FixedTally> {
    let variant = tuning.variant;
    let cubes = tuning.cubes_on(device);
    let threads = u64::from(cubes) * u64::from(variant.units);
    let software = device.info().software;
    // Software adapters end long shader loops (see `LAVAPIPE_BUDGET`): the static and
    // nested variants keep to 8 photons per thread per launch there.
    let max_batch = if software {
        threads * 8
    } else {
        (1u64 << 31) - threads.min(1 << 30)
    };
    let out = with_gpu!(device, |gpu| {
        let scene = upload_scene(gpu, packed, sim)?;
        let tallies = McTallies::zeroed(gpu, &scene, record_capacity(sim, count))?;
        let mut detected = FixedTally::zero(sim).detectors;
        let mut done = 0u64;
        // The first batch measures the rate; later ones aim at `batch_seconds` each.
        let mut batch = (threads * 8).min(max_batch);
        let started = Instant::now();
        while done < count {
            if stop.is_some_and(|s| s.load(Ordering::Relaxed)) {
                break;
            }
            let n = batch.min(count - done);
            let b = McBatch {
                first: first + done,
                photons: n as u32,
                seed: sim.params.seed,
                wmin: sim.params.wmin as f32,
                prwin: sim.params.prwin as f32,
                tmax_ns: sim.params.time_limit_ns.map_or(f32::MAX, |t| t as f32),
                n_out: sim.optics.n_outside as f32,
                gate_width_ns: sim.gates.map_or(1.0, |g| g.width_ns as f32),
                max_events: MAX_EVENTS,
                budget: if software { LAVAPIPE_BUDGET } else { u32::MAX },
                cubes: cubes.min(n.div_ceil(u64::from(variant.units)).max(1) as u32),
                variant,
            };
            k::transport(gpu, &scene, &b, &tallies)?;
            gpu.sync()?;
            if scene.n_det > 0 {
                collect_detected(gpu, &scene, &tallies, &mut detected)?;
            }
            done += n;
            report(done);
            let rate = done as f64 / started.elapsed().as_secs_f64().max(1e-9);
            batch = ((rate * tuning.batch_seconds) as u64).clamp(threads * 8, max_batch);
        }
        let transport_seconds = started.elapsed().as_secs_f64();
        let mut out = FixedTally::zero(sim);
        out.transport_seconds = transport_seconds;
        // Per-tet tallies back from the packed numbering to the mesh's.
        let stride = packed.orig.len();
        let absorbed = words_to_u64(&gpu.download(&tallies.absorbed)?);
        for (p, &o) in packed.orig.iter().enumerate() {
            out.absorbed[o as usize] = absorbed[p];
        }
        if !out.gated.is_empty() {
            // Through page-locked staging on CUDA: a plain download of the gated tally (54 MB
            // for 50 gates on cube60) ran at ~0.2 GB/s on an H200, 0.3 s of a 1.2 s run.
            let bytes = tallies.gated.len() * 4;
            let mut staging = gpu.host_staging(bytes);
            gpu.download_staged(&tallies.gated, &mut staging)?;
            let raw = &staging.as_bytes()[..bytes];
            // Words (low, high) to u64 and packed to mesh order in one pass, gates in parallel.
            let _span =
                tracing::debug_span!("mc_gated_unpack", entries = out.gated.len()).entered();
            let word = |b: &[u8], i: usize| {
                u64::from(u32::from_ne_bytes([
                    b[4 * i],
                    b[4 * i + 1],
                    b[4 * i + 2],
                    b[4 * i + 3],
                ]))
            };
            out.gated
                .par_chunks_mut(stride)
                .zip(raw.par_chunks(8 * stride))
                .for_each(|(dst, src)| {
                    for (p, &o) in packed.orig.iter().enumerate() {
                        dst[o as usize] = (word(src, 2 * p + 1) << 32) | word(src, 2 * p);
                    }
                });
        }
        if !out.face_fluence.is_empty() {
            let faces = words_to_u64(&gpu.download(&tallies.face_tally)?);
            for (i, pair) in faces
                .chunks_exact(2)
                .take(out.face_fluence.len())
                .enumerate()
            {
                out.face_fluence[i] = pair[0];
                out.face_current[i] = pair[1] as i64;
            }
        }
        out.escaped = words_to_u64(&gpu.download(&tallies.escaped)?);
        out.escaped.truncate(sim.mesh.boundary.len());
        let totals = words_to_u64(&gpu.download(&tallies.totals)?);
        out.totals.copy_from_slice(&totals);
        out.photons = done;
        out.detectors = detected;
        Ok(out)
    })?;
    Ok(out)
}

/// Run `sim` on `devices`, which split the photons into equal contiguous index ranges
/// (one thread per device); `progress(done, total)` is called between batches. Naming a
/// device twice runs two workers on it (results are the same as with one). When `stop` is
/// set, every device stops after its current batch. Returns the exact tallies of the
/// photons finished and the photons asked for.
pub(crate) fn run_fixed(
    sim: &Simulation,
    devices: &[Device],
    tuning: &GpuTuning,
    stop: Option<&AtomicBool>,
    progress: &dyn Fn(u64, u64),
) -> Result<(FixedTally, u64)> {
    let packed = pack(sim, tuning.reorder)?;
    let total = sim.photons;
    let parts = devices.len() as u64;
    let range = |i: u64| (total * i / parts, total * (i + 1) / parts);
    let (tx, rx) = mpsc::channel::<Report>();
    let results: Vec<Result<FixedTally>> = std::thread::scope(|scope| {
        let handles: Vec<_> = devices
            .iter()
            .enumerate()
            .map(|(i, device)| {
                let tx = tx.clone();
                let packed = &packed;
                let (lo, hi) = range(i as u64);
                scope.spawn(move || {
                    run_range(sim, packed, device, tuning, lo, hi - lo, stop, |done| {
                        // The receiver outlives the workers; a send cannot fail.
                        let _ = tx.send(Report::Progress(i, done));
                    })
                })
            })
            .collect();
        drop(tx);
        let mut done = vec![0u64; devices.len()];
        for Report::Progress(i, d) in rx {
            done[i] = d;
            progress(done.iter().sum(), total);
        }
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(Error::GpuPath("a device worker panicked".into())))
            })
            .collect()
    });
    let mut results = results.into_iter();
    let mut sum = match results.next() {
        Some(first) => first?,
        None => FixedTally::zero(sim),
    };
    for r in results {
        sum.add(&r?);
    }
    sum.detectors.photons.sort_unstable_by_key(|d| d.photon);
    Ok((sum, total))
}
