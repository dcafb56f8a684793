//! The GPU path: packs the mesh (f32 SoA), materials and sources, runs
//! `gpu_kernels::montecarlo` in batches (progress and Ctrl-C between batches), and adds each
//! batch's exact fixed-point tallies (64-bit integers of 2^-24 weight units) into f64.

use crate::error::{Error, Result};
use crate::sim::Simulation;
use crate::source::{self, KIND_CONE, KIND_ISOTROPIC, KIND_PENCIL};
use crate::tally::{McResult, Tally};
use crate::transport::{C_MM_PER_NS, MAX_EVENTS};
use gpu_kernels::base::fill;
use gpu_kernels::montecarlo::{self as k, McBatch, McScene};
use gpu_runtime::{Device, Gpu, with_gpu};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

/// Host-side arrays in the kernel's layout.
struct Packed {
    faces: Vec<f32>,
    neigh: Vec<i32>,
    region: Vec<u32>,
    mats: Vec<f32>,
    srcs: Vec<f32>,
    src_tet: Vec<u32>,
}

fn pack(sim: &Simulation) -> Result<Packed> {
    let m = &sim.mesh;
    let n = m.len() + 1;
    if m.boundary.len() >= i32::MAX as usize || n >= i32::MAX as usize {
        return Err(Error::Gpu("mesh too large for 32-bit indices".into()));
    }
    let mut faces = Vec::with_capacity(n * k::FACE_FLOATS);
    for f in &m.faces {
        for p in f {
            // Offsets relative to nothing: f32 keeps ~7 digits, enough for meshes whose
            // coordinates span < 1e4 of their smallest feature.
            faces.extend(p.iter().map(|&v| v as f32));
        }
    }
    let mut neigh = Vec::with_capacity(n * 4);
    for t in 0..n {
        for f in 0..4 {
            let nb = m.neighbours[t][f];
            neigh.push(if nb > 0 {
                nb as i32
            } else if t == 0 {
                0
            } else {
                -(m.boundary_index[t][f] as i32)
            });
        }
    }
    let regions = sim.optics.materials.len();
    let mut mats = Vec::with_capacity((regions + 1) * k::MAT_FLOATS);
    for r in 0..=regions as u32 {
        let mat = sim.optics.get(r);
        let mu_t = mat.mua + mat.mus;
        let inv = if mu_t > 0.0 {
            1.0 / mu_t
        } else {
            f64::INFINITY
        };
        let absorb = if mu_t > 0.0 { mat.mua / mu_t } else { 0.0 };
        mats.extend([mat.mua, mat.mus, inv, mat.g, mat.n, absorb, mu_t, 0.0].map(|v| v as f32));
    }
    let mut srcs = Vec::new();
    let mut src_tet = Vec::new();
    for s in &sim.sources {
        if ![KIND_PENCIL, KIND_ISOTROPIC, KIND_CONE].contains(&s.kind) {
            return Err(Error::Gpu(
                "disk, Gaussian and line sources run on the CPU only for now (use --device cpu)"
                    .into(),
            ));
        }
        let (u, _) = source::basis(s.dir);
        srcs.extend(
            [
                s.kind as f64,
                s.cumulative,
                s.param,
                0.0,
                s.pos[0],
                s.pos[1],
                s.pos[2],
                0.0,
                s.dir[0],
                s.dir[1],
                s.dir[2],
                0.0,
                u[0],
                u[1],
                u[2],
                0.0,
            ]
            .map(|v| v as f32),
        );
        src_tet.push(s.tet);
    }
    Ok(Packed {
        faces,
        neigh,
        region: m.regions.clone(),
        mats,
        srcs,
        src_tet,
    })
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
        tets: sim.mesh.len() + 1,
        boundary: sim.mesh.boundary.len(),
        sources: sim.sources.len() as u32,
    })
}

use gpu_runtime::cubecl::prelude as cubecl_rt;

/// Run `sim` on the GPU `device`.
pub fn run(
    sim: &Simulation,
    device: &Device,
    stop: Option<&AtomicBool>,
    mut progress: impl FnMut(u64, u64),
) -> Result<McResult> {
    let packed = pack(sim)?;
    let gerr = |e: gpu_runtime::Error| Error::Gpu(e.to_string());
    let start = Instant::now();
    let mut tally = Tally::new(&sim.mesh);
    let mut interrupted = false;
    let name = device.info().id.clone();
    let software = matches!(device.backend(), gpu_runtime::Backend::Wgpu);
    with_gpu!(device, |gpu| {
        let scene = upload_scene(gpu, &packed, sim)?;
        let zeros_a = vec![0u32; 2 * scene.tets];
        let zeros_e = vec![0u32; 2 * scene.boundary.max(1)];
        let totals = gpu.empty::<f32>(3)?;
        // Persistent threads: about 2048 per SM on CUDA; fewer on wgpu (lavapipe is a CPU).
        // 16384 cubes was fastest of 1024..16384 on an H100 (docs/montecarlo.md).
        let cubes: u32 = sim
            .params
            .gpu_cubes
            .unwrap_or(if software { 64 } else { 16384 })
            .max(1);
        let threads = u64::from(cubes * k::UNITS);
        // Batches of ~1/20 of the run (progress, Ctrl-C), at least 16 photons per thread,
        // at most 2^31 (u32 photon offsets inside a batch).
        let batch = (sim.photons / 20).clamp(threads * 16, 1 << 31);
        let mut done = 0u64;
        while done < sim.photons {
            if stop.is_some_and(|s| s.load(Ordering::Relaxed)) {
                interrupted = true;
                break;
            }
            let n = batch.min(sim.photons - done);
            let absorbed = gpu.upload(&zeros_a)?;
            let escaped = gpu.upload(&zeros_e)?;
            fill(gpu, &totals, 0.0)?;
            let b = McBatch {
                first: done,
                photons: n as u32,
                seed: sim.params.seed,
                wmin: sim.params.wmin as f32,
                prwin: sim.params.prwin as f32,
                tmax_ns: sim.params.time_limit_ns.map_or(f32::MAX, |t| t as f32),
                inv_c: (1.0 / C_MM_PER_NS) as f32,
                max_events: MAX_EVENTS,
                cubes: cubes.min(n.div_ceil(u64::from(k::UNITS)).max(1) as u32),
            };
            k::transport(gpu, &scene, &b, &absorbed, &escaped, &totals)?;
            let a = gpu.download(&absorbed)?;
            let e = gpu.download(&escaped)?;
            let t = gpu.download(&totals)?;
            let fixed = |w: &[u32]| {
                ((u64::from(w[1]) << 32) | u64::from(w[0])) as f64 / f64::from(k::FIXED_SCALE)
            };
            for (dst, v) in tally.absorbed.iter_mut().zip(a.chunks_exact(2)) {
                *dst += fixed(v);
            }
            for (dst, v) in tally.escaped.iter_mut().zip(e.chunks_exact(2)) {
                *dst += fixed(v);
            }
            tally.roulette += f64::from(t[0]);
            tally.expired += f64::from(t[1]);
            tally.lost += f64::from(t[2]);
            tally.photons += n;
            done += n;
            progress(done, sim.photons);
        }
        Ok(())
    })
    .map_err(gerr)?;
    interrupted |= tally.photons < sim.photons;
    Ok(McResult::new(
        tally,
        start.elapsed().as_secs_f64(),
        name,
        interrupted,
    ))
}
