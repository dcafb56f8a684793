//! The CPU reference: hop-drop-spin transport (f64 positions, directions, weights and times;
//! f32 face planes), one xoshiro stream per photon, rayon over blocks of photons with one
//! tally per worker and two packets in flight per worker (their events interleave, so one
//! packet's dependency chain overlaps the other's). The mesh is packed once per run in Morton
//! order of tetrahedron centroids for cache locality; results are in the mesh's own
//! numbering.
//!
//! Per event: draw a dimensionless step s = -ln(u) (in units of mean free paths), walk it
//! through tetrahedra (at each face the leftover s is kept, so the physical length rescales
//! with the next region's coefficient), score absorption, scatter by Henyey-Greenstein.
//! Two estimators ([`Estimator`]): track length (steps in scattering mean free paths 1/mus;
//! along every segment of length l the weight decays by exp(-mua l) and the loss is scored
//! in the tetrahedron crossed) and interaction (steps in total mean free paths 1/mu_t;
//! w mua/mu_t dropped at each interaction). Faces between different indices apply the exact unpolarised Fresnel
//! reflectance (with total internal reflection); equal indices are crossed untouched.
//! Below `wmin` a packet survives roulette with probability 1/prwin, weight x prwin.

use crate::model::detector::{DetectedPhoton, Detection, DetectorTally, PathLog};
use crate::model::mesh::Mesh;
use crate::model::optics::{Material, Optics};
use crate::model::params::Estimator;
use crate::model::physics::{C_MM_PER_NS, Hg, MAX_EVENTS, azimuth, fresnel, spin};
use crate::model::rng::Xoshiro128;
use crate::model::simulation::Simulation;
use crate::model::source::launch;
use crate::model::tally::{Tally, face_crossing, gate_of};
use rayon::prelude::*;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};

/// Per-region constants used in the inner loop.
#[derive(Debug, Clone, Copy)]
struct Region {
    /// The coefficient steps are measured in: mus (track length) or mu_t (interaction).
    step_mu: f64,
    /// 1 / `step_mu` (infinite where it is 0).
    inv_step_mu: f64,
    /// Interaction estimator: mua / mu_t, the share of the weight dropped at an
    /// interaction (0 with the track-length estimator).
    absorb: f64,
    /// Track-length estimator: mua, the decay rate of the weight along a path (0 with the
    /// interaction estimator).
    decay: f64,
    hg: Hg,
    n: f64,
    /// n / c: ns per mm of flight.
    n_over_c: f64,
}

fn regions(optics: &Optics, mesh: &Mesh, estimator: Estimator) -> Vec<Region> {
    (0..=mesh.max_region().max(optics.materials.len() as u32))
        .map(|r| {
            let m: Material = optics.get(r);
            let mu_t = m.mua + m.mus;
            let (step_mu, absorb, decay) = match estimator {
                Estimator::TrackLength => (m.mus, 0.0, m.mua),
                Estimator::Interaction => (mu_t, if mu_t > 0.0 { m.mua / mu_t } else { 0.0 }, 0.0),
            };
            Region {
                step_mu,
                inv_step_mu: if step_mu > 0.0 {
                    1.0 / step_mu
                } else {
                    f64::INFINITY
                },
                absorb,
                decay,
                hg: Hg::new(m.g),
                n: m.n,
                n_over_c: m.n / C_MM_PER_NS,
            }
        })
        .collect()
}

/// The share of the weight lost along a path of optical depth `x` = mua l: 1 - exp(-x),
/// accurate for small `x` (`exp_m1`).
#[inline(always)]
pub(crate) fn decay_share(x: f64) -> f64 {
    -(-x).exp_m1()
}

/// Everything the inner loop reads about one tetrahedron in 96 bytes: the four face planes
/// in f32 as a structure of arrays (the four distances are computed side by side),
/// neighbours (in the packed numbering; 0 = outside), region and which faces are tallied.
/// f32 planes put the faces up to ~1e-7 of the mesh size off their nodes (6e-6 mm on a
/// 60 mm mesh); positions, directions, weights and times stay f64.
#[derive(Debug, Clone, Copy, Default)]
#[repr(C, align(32))]
struct Tet {
    nx: [f32; 4],
    ny: [f32; 4],
    nz: [f32; 4],
    c: [f32; 4],
    neighbours: [u32; 4],
    region: u32,
    /// Bit f set: face f is a tallied face.
    flags: u32,
}

impl Tet {
    /// Distance along unit `d` from `p` to the face the ray leaves through, and that face.
    /// Faces whose normal does not point along `d` are never exits; a point a hair outside
    /// (rounding) gives distance 0.
    #[inline(always)]
    fn exit(&self, p: [f64; 3], d: [f64; 3]) -> (f64, usize) {
        let h = self.distances(p, d);
        let (a, fa) = if h[1] < h[0] { (h[1], 1) } else { (h[0], 0) };
        let (b, fb) = if h[3] < h[2] { (h[3], 3) } else { (h[2], 2) };
        let (best, face) = if b < a { (b, fb) } else { (a, fa) };
        (f64::from(best.max(0.0)), face)
    }

    /// Distances to the four face planes along `d` (infinite for faces `d` does not point
    /// out of), the four lanes at once with SSE.
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    fn distances(&self, p: [f64; 3], d: [f64; 3]) -> [f32; 4] {
        use std::arch::x86_64::{
            _mm_add_ps, _mm_and_ps, _mm_andnot_ps, _mm_cmpgt_ps, _mm_div_ps, _mm_load_ps,
            _mm_mul_ps, _mm_or_ps, _mm_set1_ps, _mm_setzero_ps, _mm_storeu_ps, _mm_sub_ps,
        };
        let mut out = [0f32; 4];
        // SAFETY: SSE is part of every x86_64 target; the four arrays are 16-byte aligned
        // (the record is 32-byte aligned and each array is 16 bytes), `out` is written
        // unaligned.
        unsafe {
            let (nx, ny, nz, c) = (
                _mm_load_ps(self.nx.as_ptr()),
                _mm_load_ps(self.ny.as_ptr()),
                _mm_load_ps(self.nz.as_ptr()),
                _mm_load_ps(self.c.as_ptr()),
            );
            let cos = _mm_add_ps(
                _mm_add_ps(
                    _mm_mul_ps(nx, _mm_set1_ps(d[0] as f32)),
                    _mm_mul_ps(ny, _mm_set1_ps(d[1] as f32)),
                ),
                _mm_mul_ps(nz, _mm_set1_ps(d[2] as f32)),
            );
            let dot = _mm_add_ps(
                _mm_add_ps(
                    _mm_mul_ps(nx, _mm_set1_ps(p[0] as f32)),
                    _mm_mul_ps(ny, _mm_set1_ps(p[1] as f32)),
                ),
                _mm_mul_ps(nz, _mm_set1_ps(p[2] as f32)),
            );
            let h = _mm_div_ps(_mm_sub_ps(c, dot), cos);
            let out_of = _mm_cmpgt_ps(cos, _mm_setzero_ps());
            let h = _mm_or_ps(
                _mm_and_ps(out_of, h),
                _mm_andnot_ps(out_of, _mm_set1_ps(f32::INFINITY)),
            );
            _mm_storeu_ps(out.as_mut_ptr(), h);
        }
        out
    }

    #[cfg(not(target_arch = "x86_64"))]
    #[inline(always)]
    fn distances(&self, p: [f64; 3], d: [f64; 3]) -> [f32; 4] {
        let (px, py, pz) = (p[0] as f32, p[1] as f32, p[2] as f32);
        let (dx, dy, dz) = (d[0] as f32, d[1] as f32, d[2] as f32);
        std::array::from_fn(|i| {
            let cos = self.nx[i] * dx + self.ny[i] * dy + self.nz[i] * dz;
            let num = self.c[i] - (self.nx[i] * px + self.ny[i] * py + self.nz[i] * pz);
            if cos > 0.0 { num / cos } else { f32::INFINITY }
        })
    }
}

/// The CPU transport of one simulation, prepared once per run: the mesh packed in Morton
/// order of tetrahedron centroids (neighbouring tets close in memory; tallies are mapped
/// back to the mesh's numbering), per-region constants and the tallied faces.
pub(crate) struct Cpu<'a> {
    sim: &'a Simulation,
    tets: Vec<Tet>,
    /// Packed id -> mesh id (index 0: outside).
    orig: Vec<u32>,
    /// Mesh id -> packed id.
    packed_of: Vec<u32>,
    regs: Vec<Region>,
    /// (packed tet, face) -> tallied face index, both sides of each tallied face.
    face_index: HashMap<(u32, u8), u32>,
    gates: usize,
    gate_inv_width: f64,
    /// Time limit in ns (infinite without one).
    tmax: f64,
    /// Detectors (None: no path logs are kept).
    detection: Option<&'a Detection>,
}

/// Packets in flight per worker (see [`Cpu::run_photons`]).
const LANES: usize = 2;

/// The state of one packet between events.
struct Packet {
    rng: Xoshiro128,
    pos: [f64; 3],
    d: [f64; 3],
    /// Packed tetrahedron id.
    t: u32,
    w: f64,
    /// Optical depth left of the current step (mean free paths).
    s: f64,
    /// Time of flight in ns.
    time: f64,
    events: u32,
    /// The photon's index (its replay seed).
    index: u64,
    /// Path lengths per region and scatterings, with detectors.
    log: Option<Box<PathLog>>,
    /// Every segment (packed tet, length in mm), when replayed for a Jacobian.
    trace: Option<Vec<(u32, f64)>>,
}

impl<'a> Cpu<'a> {
    pub(crate) fn new(sim: &'a Simulation) -> Self {
        let mesh = &sim.mesh;
        let mut orig = Vec::with_capacity(mesh.len() + 1);
        orig.push(0);
        if mesh.order.len() == mesh.len() {
            orig.extend_from_slice(&mesh.order);
        } else {
            orig.extend(mesh.morton_order());
        }
        let mut packed_of = vec![0u32; mesh.len() + 1];
        for (p, &o) in orig.iter().enumerate() {
            packed_of[o as usize] = p as u32;
        }
        let mut face_index = HashMap::new();
        let mut flags = vec![0u32; mesh.len() + 1];
        for (i, &(t, f)) in sim.faces.faces.iter().enumerate() {
            face_index.insert((packed_of[t as usize], f), i as u32);
            flags[t as usize] |= 1 << f;
            let nb = mesh.neighbours[t as usize][f as usize];
            if nb > 0 {
                let back = mesh.neighbours[nb as usize]
                    .iter()
                    .position(|&x| x == t)
                    .unwrap_or(0);
                face_index.insert((packed_of[nb as usize], back as u8), i as u32);
                flags[nb as usize] |= 1 << back;
            }
        }
        let tets = orig
            .par_iter()
            .map(|&o| {
                let o = o as usize;
                let f = &mesh.faces[o];
                Tet {
                    nx: f.map(|p| p[0] as f32),
                    ny: f.map(|p| p[1] as f32),
                    nz: f.map(|p| p[2] as f32),
                    c: f.map(|p| p[3] as f32),
                    neighbours: mesh.neighbours[o].map(|n| packed_of[n as usize]),
                    region: mesh.regions[o],
                    flags: flags[o],
                }
            })
            .collect();
        let (gates, gate_inv_width) = sim
            .gates
            .map_or((0, 0.0), |g| (g.count as usize, 1.0 / g.width_ns));
        Cpu {
            sim,
            tets,
            orig,
            packed_of,
            regs: regions(&sim.optics, mesh, sim.params.estimator),
            face_index,
            gates,
            gate_inv_width,
            tmax: sim.params.time_limit_ns.unwrap_or(f64::INFINITY),
            detection: sim.outputs.detection.as_ref(),
        }
    }

    pub(crate) fn tally(&self) -> Tally {
        let mut t = Tally::with_outputs(&self.sim.mesh, self.sim.faces.len(), self.gates);
        if let Some(d) = self.detection {
            t.detectors = DetectorTally::new(d, self.gates);
        }
        t
    }

    /// Launch photon `index`; None (counted as lost) when its start point is outside.
    fn start(&self, index: u64, tally: &mut Tally) -> Option<Packet> {
        let sim = self.sim;
        let mut rng = Xoshiro128::for_photon(sim.params.seed, index);
        let start = launch(&sim.sources, &sim.source_elements, &sim.mesh, &mut rng);
        let (pos, d) = (start.pos, start.dir);
        let Some(tet) = start.tet else {
            // A sample outside the mesh never reaches the surface: lost whole.
            tally.lost += 1.0;
            return None;
        };
        // Specular reflection at launch: Rsp never enters the medium.
        let rsp = sim.sources[start.source].specular(sim.params.specular);
        tally.specular += rsp;
        Some(Packet {
            rng,
            pos,
            d,
            t: self.packed_of[tet as usize],
            w: 1.0 - rsp,
            s: 0.0,
            time: 0.0,
            events: 0,
            index,
            log: self
                .detection
                .map(|d| Box::new(PathLog::new(self.regs.len() - 1, d.momentum))),
            trace: None,
        })
    }

    /// One event of packet `p` (a hop to the next interaction or face, and what happens
    /// there); false when the packet has ended (its weight is in `tally`).
    #[inline(always)]
    fn event(&self, p: &mut Packet, tally: &mut Tally) -> bool {
        let sim = self.sim;
        let par = &sim.params;
        p.events += 1;
        if p.events > MAX_EVENTS {
            tally.lost += p.w;
            return false;
        }
        let t = p.t;
        let tet = &self.tets[t as usize];
        let r = &self.regs[tet.region as usize];
        if p.s <= 0.0 {
            p.s = -p.rng.uniform().ln();
        }
        let (h, f) = tet.exit(p.pos, p.d);
        let l = p.s * r.inv_step_mu;
        let seg = l.min(h);
        let t0 = p.time;
        p.time += seg * r.n_over_c;
        if let Some(log) = &mut p.log {
            log.ppath[tet.region as usize - 1] += seg;
        }
        if let Some(trace) = &mut p.trace {
            trace.push((t, seg));
        }
        if p.time > self.tmax {
            if r.decay > 0.0 {
                // The weight decays up to the time limit, then what is left expires.
                let cut = ((self.tmax - t0) / r.n_over_c).max(0.0);
                self.decay_along(p, t, cut, t0, r, tally);
            }
            tally.expired += p.w;
            return false;
        }
        if r.decay > 0.0 {
            self.decay_along(p, t, seg, t0, r, tally);
        }
        let d = p.d;
        if l < h {
            // Hop to the interaction, drop (interaction estimator), spin.
            p.pos = [
                p.pos[0] + l * d[0],
                p.pos[1] + l * d[1],
                p.pos[2] + l * d[2],
            ];
            p.s = 0.0;
            if r.absorb > 0.0 {
                let dw = p.w * r.absorb;
                self.score(t, dw, p.time, tally);
                p.w -= dw;
            }
            let ct = r.hg.cos(p.rng.uniform32());
            if let Some(log) = &mut p.log {
                log.scatters += 1;
                if let Some(m) = log.momentum.get_mut(tet.region as usize - 1) {
                    *m += 1.0 - ct;
                }
            }
            let (cp, sp) = azimuth(p.rng.uniform32());
            p.d = spin(d, ct, cp, sp);
            if p.w < par.wmin {
                if p.rng.uniform32() * par.prwin <= 1.0 {
                    tally.roulette -= p.w * (par.prwin - 1.0);
                    p.w *= par.prwin;
                } else {
                    tally.roulette += p.w;
                    return false;
                }
            }
            return true;
        }
        // Hop to the face, keep the leftover optical depth.
        p.pos = [
            p.pos[0] + h * d[0],
            p.pos[1] + h * d[1],
            p.pos[2] + h * d[2],
        ];
        p.s -= h * r.step_mu;
        let next = tet.neighbours[f];
        let next_tet = &self.tets[next as usize];
        let n2 = self.regs[next_tet.region as usize].n;
        if r.n != n2 {
            // Exact f64 normal from the mesh (rare path).
            let fp = sim.mesh.faces[self.orig[t as usize] as usize][f];
            let nrm = [fp[0], fp[1], fp[2]];
            let cos_i = (nrm[0] * d[0] + nrm[1] * d[1] + nrm[2] * d[2]).min(1.0);
            let (refl, cos_t) = fresnel(r.n, n2, cos_i);
            if p.rng.uniform() <= refl {
                p.d = [0, 1, 2].map(|k| d[k] - 2.0 * cos_i * nrm[k]);
                return true;
            }
            let eta = r.n / n2;
            let e = [0, 1, 2].map(|k| eta * d[k] + (cos_t - eta * cos_i) * nrm[k]);
            let l = (e[0] * e[0] + e[1] * e[1] + e[2] * e[2]).sqrt();
            p.d = [e[0] / l, e[1] / l, e[2] / l];
        }
        if tet.flags & (1 << f) != 0 {
            self.cross_face(t, f, d, p.w, tally);
        }
        if next == 0 {
            let o = self.orig[t as usize] as usize;
            tally.escaped[sim.mesh.boundary_index[o][f] as usize] += p.w;
            if let Some(det) = self.detection {
                self.detect(det, p, tally);
            }
            return false;
        }
        p.t = next;
        self.prefetch_neighbours(next_tet);
        true
    }

    /// Score weight `dw` absorbed in packed tet `t` at time of flight `time` (ns).
    #[inline(always)]
    fn score(&self, t: u32, dw: f64, time: f64, tally: &mut Tally) {
        tally.absorbed[t as usize] += dw;
        if self.gates > 0
            && let Some(g) = gate_of(time, self.gate_inv_width, self.gates)
        {
            tally.gated[g * self.tets.len() + t as usize] += dw;
        }
    }

    /// Track length: packet `p` flies `len` mm through packed tet `t` (region `r`) from time
    /// `t0`; its weight decays by exp(-mua len), the loss scored in `t`. With time gates the
    /// loss is split at the gate boundaries the segment crosses (each part the decay along
    /// its piece), so gate tallies are exact integrals whatever the gate width.
    #[inline(always)]
    fn decay_along(
        &self,
        p: &mut Packet,
        t: u32,
        len: f64,
        t0: f64,
        r: &Region,
        tally: &mut Tally,
    ) {
        let dw = p.w * decay_share(r.decay * len);
        if dw <= 0.0 {
            return;
        }
        tally.absorbed[t as usize] += dw;
        if self.gates > 0 {
            self.gate_split(p.w, t, len, t0, r, tally);
        }
        p.w -= dw;
    }

    /// The gated part of [`Self::decay_along`]: weight `w` at the segment's start.
    #[cold]
    fn gate_split(&self, mut w: f64, t: u32, len: f64, t0: f64, r: &Region, tally: &mut Tally) {
        let Some(first) = gate_of(t0, self.gate_inv_width, self.gates) else {
            return;
        };
        let mut a = 0.0;
        for g in first..self.gates {
            // Where (in mm along the segment) gate g ends.
            let end = ((g + 1) as f64 / self.gate_inv_width - t0) / r.n_over_c;
            let b = end.clamp(a, len);
            let part = w * decay_share(r.decay * (b - a));
            tally.gated[g * self.tets.len() + t as usize] += part;
            w -= part;
            a = b;
            if a >= len {
                break;
            }
        }
    }

    /// A packet leaving the mesh: recorded by the first detector whose disk holds its exit
    /// point, if any.
    #[cold]
    fn detect(&self, det: &Detection, p: &mut Packet, tally: &mut Tally) {
        let Some(k) = Detection::hit(&det.detectors, p.pos) else {
            return;
        };
        let Some(log) = p.log.take() else {
            return;
        };
        let d = &mut tally.detectors;
        d.count[k] += 1;
        d.weight[k] += p.w;
        if self.gates > 0
            && let Some(g) = gate_of(p.time, self.gate_inv_width, self.gates)
        {
            d.tpsf[k * self.gates + g] += p.w;
        }
        let log = *log;
        d.photons.push(DetectedPhoton {
            detector: k as u32 + 1,
            photon: p.index,
            weight: p.w,
            time_ns: p.time,
            scatters: log.scatters,
            pos: p.pos,
            dir: p.d,
            ppath: log.ppath,
            momentum: log.momentum,
        });
        // Bound a worker's records: keep the lowest indices once twice the cap is held.
        if d.photons.len() as u64 >= 2 * d.max_photons.max(1) {
            d.keep();
        }
    }

    /// Run photons `lo..hi`, [`LANES`] packets in flight at a time: their events are
    /// independent, so the processor overlaps one packet's dependency chain (distances,
    /// divisions, square roots) with the other's. Each photon still draws only from its
    /// own stream, so results do not depend on the interleaving (up to summation order).
    fn run_photons(&self, lo: u64, hi: u64, tally: &mut Tally) {
        let mut next = lo;
        let mut lanes: [Option<Packet>; LANES] = [const { None }; LANES];
        loop {
            let mut alive = false;
            for lane in &mut lanes {
                while lane.is_none() && next < hi {
                    *lane = self.start(next, tally);
                    next += 1;
                }
                if let Some(p) = lane {
                    alive = true;
                    if !self.event(p, tally) {
                        *lane = None;
                    }
                }
            }
            if !alive {
                break;
            }
        }
    }

    /// Photon `index` again, alone, with every segment it flies: its detection record (if
    /// a detector records it) and the segments (mesh tet, length in mm).
    pub(crate) fn replay(
        &self,
        index: u64,
        tally: &mut Tally,
    ) -> Option<(DetectedPhoton, Vec<(u32, f64)>)> {
        let mut p = self.start(index, tally)?;
        p.trace = Some(Vec::new());
        let before = tally.detectors.photons.len();
        while self.event(&mut p, tally) {}
        if tally.detectors.photons.len() == before {
            return None;
        }
        let record = tally.detectors.photons.pop()?;
        let trace = p.trace.take()?;
        Some((
            record,
            trace
                .into_iter()
                .map(|(t, len)| (self.orig[t as usize], len))
                .collect(),
        ))
    }

    /// Ask for the records of the four neighbours while this tet's faces are tested: the
    /// next one is needed right after, and a miss would sit on the packet's critical path.
    #[inline(always)]
    fn prefetch_neighbours(&self, tet: &Tet) {
        #[cfg(target_arch = "x86_64")]
        for &n in &tet.neighbours {
            use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
            let p: *const Tet = &raw const self.tets[n as usize];
            // SAFETY: a prefetch is only a hint and never faults; SSE is part of every
            // x86_64 target.
            unsafe { _mm_prefetch::<_MM_HINT_T0>(p.cast::<i8>()) };
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = tet;
    }

    /// A packet of weight `w` with direction `d` crosses tallied face `f` of packed `t`.
    #[cold]
    fn cross_face(&self, t: u32, f: usize, d: [f64; 3], w: f64, tally: &mut Tally) {
        let Some(&i) = self.face_index.get(&(t, f as u8)) else {
            return;
        };
        let n = self.sim.faces.normals[i as usize];
        let (fluence, current) = face_crossing(w, n[0] * d[0] + n[1] * d[1] + n[2] * d[2]);
        tally.face_fluence[i as usize] += fluence;
        tally.face_current[i as usize] += current;
    }

    /// Run photons `first..first + count` with rayon (blocks of 4096 photons, one tally per
    /// worker); stops early (with the photons finished so far counted) when `stop` is set.
    /// The tally is in the mesh's numbering.
    pub(crate) fn run(&self, first: u64, count: u64, stop: Option<&AtomicBool>) -> Tally {
        const BLOCK: u64 = 4096;
        let blocks = count.div_ceil(BLOCK);
        let packed = (0..blocks)
            .into_par_iter()
            .fold(
                || self.tally(),
                |mut tally, b| {
                    if stop.is_some_and(|s| s.load(Ordering::Relaxed)) {
                        return tally;
                    }
                    let lo = first + b * BLOCK;
                    let hi = (lo + BLOCK).min(first + count);
                    self.run_photons(lo, hi, &mut tally);
                    tally.photons += hi - lo;
                    tally
                },
            )
            .reduce(|| self.tally(), Tally::merge);
        self.unpack(packed)
    }

    /// Per-tet tallies from the packed numbering back to the mesh's.
    fn unpack(&self, mut t: Tally) -> Tally {
        t.detectors.sort();
        let stride = self.tets.len();
        let mut absorbed = vec![0.0; stride];
        for (p, &o) in self.orig.iter().enumerate() {
            absorbed[o as usize] = t.absorbed[p];
        }
        t.absorbed = absorbed;
        if !t.gated.is_empty() {
            let mut gated = vec![0.0; t.gated.len()];
            for g in 0..self.gates {
                for (p, &o) in self.orig.iter().enumerate() {
                    gated[g * stride + o as usize] = t.gated[g * stride + p];
                }
            }
            t.gated = gated;
        }
        t
    }
}

/// The CPU path of a whole run, in batches of 1/20 of the photons (at least 1e5, at most
/// 1e7), calling `progress(done, total)` after each; when `stop` is set, ends with the
/// photons finished so far. Returns the tally (mesh numbering) and whether it was
/// interrupted.
pub(crate) fn run_batched(
    sim: &Simulation,
    stop: Option<&AtomicBool>,
    progress: &dyn Fn(u64, u64),
) -> (Tally, bool) {
    let cpu = Cpu::new(sim);
    let mut tally = Tally::new(&sim.mesh);
    let batch = (sim.photons / 20).clamp(100_000, 10_000_000);
    let mut done = 0;
    let mut interrupted = false;
    while done < sim.photons {
        if stop.is_some_and(|s| s.load(Ordering::Relaxed)) {
            interrupted = true;
            break;
        }
        let n = batch.min(sim.photons - done);
        let t = cpu.run(done, n, stop);
        done += t.photons;
        tally = tally.merge(t);
        progress(done, sim.photons);
    }
    interrupted |= done < sim.photons;
    tally.detectors.sort();
    (tally, interrupted)
}
