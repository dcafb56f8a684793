//! Monte Carlo light transport in tetrahedral meshes (f32), after FullMonteCUDA and MCX.
//!
//! - [`kernel`]: the transport kernel (flat event loop with photon relaunch, exact
//!   fixed-point tallies, accumulation cache) and its physics.
//! - `source`: packet launch for every source kind, mirroring montecarlo-core's sampling.
//! - `rng`: xoshiro128** seeded per photon index, as montecarlo-core's `rng`.
//!
//! Kernel variants (loop structure, neighbour prefetch, faces crossed per iteration,
//! accumulation cache, IEEE square roots, cube size) are compile-time choices of one
//! kernel ([`McVariant`]), so a benchmark sweep measures them without runtime branches.

// Kernel code is expanded by CubeCL, which has no `clamp` or float-constant paths for
// every backend; the spelled-out forms are what it compiles.
#![allow(clippy::approx_constant, clippy::manual_clamp)]

pub mod kernel;
mod rng;
mod source;

pub use kernel::mc_transport_kernel;
pub use rng::seed_keys;

use crate::catalog::{CatalogEntry, array, entry, settings_1d};
use cubecl::prelude::*;
use gpu_runtime::{Error, Gpu, GpuArray, Result};
use std::fmt;

/// Floats per tetrahedron in the face array: four planes `nx ny nz c` (one 64-byte record,
/// read as four float4).
pub const FACE_FLOATS: usize = 16;
/// Ints per tetrahedron in the neighbour array: per face, the neighbour (> 0; bit 30 set when
/// its material differs, bit 29 when the face is tallied) or `-b` for boundary triangle `b`.
pub const NEIGH_INTS: usize = 4;
/// Bit of a neighbour entry that marks a change of material across the face.
pub const NEIGH_INTERFACE: i32 = 1 << 30;
/// Bit of a neighbour entry that marks a tallied face (face fluence and current).
pub const NEIGH_TALLIED: i32 = 1 << 29;
/// Largest tetrahedron index the neighbour encoding holds.
pub const MAX_TET: usize = (1 << 29) - 1;
/// Float4 per element of a volume or surface source in `src_aux` (see `source`).
pub const AUX_VECS: u32 = 6;
/// `face_slot` entry of a face without a tally.
pub const NO_SLOT: u32 = u32::MAX;
/// Floats per region: `[1/mu_t, g, n, mua/mu_t]`, `[mu_t, n/c, 0, 0]`.
pub const MAT_FLOATS: usize = 8;
/// Floats per source (four float4, see `source`).
pub const SRC_FLOATS: usize = 16;
/// Fixed-point scale of the tallies: weights are added as round(w 2^24) into 64-bit
/// integers (two u32 words), so sums are exact and independent of the order of the adds.
/// Resolution 6e-8 of a packet weight per drop; capacity 2^40 packet weights per entry.
pub const FIXED_SCALE: f64 = 16_777_216.0;
/// Entries of the totals array (each two u32 words): weight killed by roulette, weight
/// given to roulette survivors, weight stopped by the time limit, weight lost (start outside
/// the mesh, event limit).
pub const TOTALS: usize = 4;
pub(crate) const T_KILLED: u32 = 0;
pub(crate) const T_GAINED: u32 = 1;
pub(crate) const T_EXPIRED: u32 = 2;
pub(crate) const T_LOST: u32 = 3;

/// Source kinds (the numbers of montecarlo-core's `source` module).
pub const KIND_PENCIL: u32 = 0;
pub const KIND_ISOTROPIC: u32 = 1;
pub const KIND_CONE: u32 = 2;
pub const KIND_DISK: u32 = 3;
pub const KIND_GAUSSIAN: u32 = 4;
pub const KIND_LINE: u32 = 5;
pub const KIND_VOLUME: u32 = 6;
pub const KIND_SURFACE: u32 = 7;
/// Kinds the kernel launches.
pub const GPU_KINDS: [u32; 8] = [
    KIND_PENCIL,
    KIND_ISOTROPIC,
    KIND_CONE,
    KIND_DISK,
    KIND_GAUSSIAN,
    KIND_LINE,
    KIND_VOLUME,
    KIND_SURFACE,
];

/// Variant flag: nested loops (each lane runs its photon to the end; photons
/// `i, i + stride, ...`), the structure of the first GPU version.
pub const F_NESTED: u32 = 1;
/// Variant flag: flat loop but photons handed out statically (`i, i + stride, ...`)
/// instead of by an atomic counter.
pub const F_STATIC: u32 = 2;
/// Variant flag: load the four neighbours with the face planes, before the exit face is
/// known (one dependent load less per crossing, one more load per scattering).
pub const F_PREFETCH: u32 = 4;
/// Variant flag: no accumulation cache (one atomic per drop).
pub const F_NO_CACHE: u32 = 8;
/// Variant flag: IEEE square roots and divisions in the spin and Fresnel (instead of
/// `rsqrtf`).
pub const F_IEEE: u32 = 16;

/// Output flag (set from the simulation, not a variant): absorbed weight per time gate.
pub const F_GATES: u32 = 64;
/// Output flag (set from the simulation, not a variant): fluence and current through
/// tallied faces.
pub const F_FACES: u32 = 128;

/// Variant flag: keep the current tetrahedron's face planes in registers (16 more) and
/// reload them only after a crossing, instead of reloading them at every event.
pub const F_KEEP_PLANES: u32 = 32;

/// A compile-time configuration of the transport kernel. Every variant computes the same
/// physics with the same random numbers per photon; they differ in speed only (and, for
/// `ieee`, in the last bits of f32 rounding).
///
/// Written as a `+`-separated list of changes to the default: `nested`, `static`,
/// `prefetch`, `nocache`, `ieee`, `keep`, `k<N>` (faces per iteration), `u<N>` (threads
/// per cube);
/// `default` alone is the default.
///
/// ```
/// use gpu_kernels::montecarlo::{McVariant, F_PREFETCH};
/// let v: McVariant = "prefetch+k2+u256".parse().unwrap();
/// assert_eq!((v.flags, v.cross_k, v.units), (F_PREFETCH, 2, 256));
/// assert_eq!(v.to_string(), "prefetch+k2+u256");
/// assert_eq!("default".parse::<McVariant>().unwrap(), McVariant::DEFAULT);
/// assert!("fast".parse::<McVariant>().is_err());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct McVariant {
    /// `F_*` bits.
    pub flags: u32,
    /// Faces a packet may cross per loop iteration before the warp scatters (1..=8).
    pub cross_k: u32,
    /// Threads per cube (32..=1024, a multiple of 32).
    pub units: u32,
}

impl Default for McVariant {
    fn default() -> Self {
        McVariant::DEFAULT
    }
}

const TOKENS: [(&str, u32); 6] = [
    ("nested", F_NESTED),
    ("static", F_STATIC),
    ("prefetch", F_PREFETCH),
    ("nocache", F_NO_CACHE),
    ("ieee", F_IEEE),
    ("keep", F_KEEP_PLANES),
];

impl McVariant {
    /// Flat loop, dynamic hand-out, neighbour loaded at the crossing, one face per
    /// iteration, accumulation cache, `rsqrtf`, 128 threads per cube.
    pub const DEFAULT: McVariant = McVariant {
        flags: 0,
        cross_k: 1,
        units: 128,
    };

    /// Whether the combination is valid.
    pub fn check(&self) -> std::result::Result<(), String> {
        if !(1..=8).contains(&self.cross_k) {
            return Err(format!("k{} must lie in 1..=8", self.cross_k));
        }
        if !(32..=1024).contains(&self.units) || !self.units.is_multiple_of(32) {
            return Err(format!(
                "u{} must be a multiple of 32 in 32..=1024",
                self.units
            ));
        }
        if self.flags & F_NESTED != 0 && (self.flags & F_STATIC != 0 || self.cross_k != 1) {
            return Err("nested runs one photon per lane: it takes neither static nor k".into());
        }
        Ok(())
    }

    /// Short name of the kernel build (for the catalog and logs).
    pub fn kernel_name(&self) -> String {
        format!("mc_transport_{}", self.to_string().replace('+', "_"))
    }
}

impl fmt::Display for McVariant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts: Vec<String> = TOKENS
            .iter()
            .filter(|(_, bit)| self.flags & bit != 0)
            .map(|(name, _)| (*name).to_string())
            .collect();
        if self.cross_k != McVariant::DEFAULT.cross_k {
            parts.push(format!("k{}", self.cross_k));
        }
        if self.units != McVariant::DEFAULT.units {
            parts.push(format!("u{}", self.units));
        }
        if parts.is_empty() {
            write!(f, "default")
        } else {
            write!(f, "{}", parts.join("+"))
        }
    }
}

impl std::str::FromStr for McVariant {
    type Err = String;

    fn from_str(text: &str) -> std::result::Result<Self, String> {
        let mut v = McVariant::DEFAULT;
        let text = text.trim();
        if text.is_empty() || text == "default" {
            return Ok(v);
        }
        for token in text.split(['+', ',']).map(str::trim) {
            if let Some((_, bit)) = TOKENS.iter().find(|(name, _)| *name == token) {
                v.flags |= bit;
            } else if let Some(n) = token.strip_prefix('k').and_then(|n| n.parse().ok()) {
                v.cross_k = n;
            } else if let Some(n) = token.strip_prefix('u').and_then(|n| n.parse().ok()) {
                v.units = n;
            } else {
                return Err(format!(
                    "unknown kernel variant `{token}` in `{text}`: expected default, nested, \
                     static, prefetch, nocache, ieee, keep, k<N> or u<N> joined by +"
                ));
            }
        }
        v.check()?;
        Ok(v)
    }
}

/// Device buffers of a mesh, its materials and sources.
#[derive(Debug)]
pub struct McScene {
    /// [`FACE_FLOATS`] per tetrahedron (index 0 a placeholder).
    pub faces: GpuArray<f32>,
    /// [`NEIGH_INTS`] per tetrahedron.
    pub neigh: GpuArray<i32>,
    /// Region per tetrahedron.
    pub region: GpuArray<u32>,
    /// [`MAT_FLOATS`] per region (index 0 = outside).
    pub mats: GpuArray<f32>,
    /// [`SRC_FLOATS`] per source.
    pub srcs: GpuArray<f32>,
    /// Start tetrahedron per source.
    pub src_tet: GpuArray<u32>,
    /// Elements of volume and surface sources, `4 AUX_VECS` floats each (at least 4
    /// floats).
    pub src_aux: GpuArray<f32>,
    /// Per tetrahedron face (4 per tet): the index of its face tally or [`NO_SLOT`] (at
    /// least one element).
    pub face_slot: GpuArray<u32>,
    /// Reference unit normal per tallied face, 4 floats each (at least 4 floats).
    pub face_normal: GpuArray<f32>,
    /// Tallied faces.
    pub tallied_faces: usize,
    /// Time gates of the gated tally (0: none).
    pub gates: u32,
    /// Tetrahedra including the placeholder 0.
    pub tets: usize,
    pub boundary: usize,
    pub sources: u32,
}

/// The tallies a run adds to: 64-bit fixed-point entries as two u32 words
/// (see [`FIXED_SCALE`]), zero at the start.
#[derive(Debug)]
pub struct McTallies {
    /// Two words per tetrahedron.
    pub absorbed: GpuArray<u32>,
    /// Two words per boundary triangle.
    pub escaped: GpuArray<u32>,
    /// Two words per [`TOTALS`] entry.
    pub totals: GpuArray<u32>,
    /// Two words per gate and tetrahedron (`gate x tets + tet`; two words without gates).
    pub gated: GpuArray<u32>,
    /// Per tallied face: fluence (two words), then net current (two words, two's
    /// complement).
    pub face_tally: GpuArray<u32>,
}

impl McTallies {
    /// Zeroed tallies for `scene`.
    pub fn zeroed<R: Runtime>(gpu: &Gpu<R>, scene: &McScene) -> Result<McTallies> {
        Ok(McTallies {
            absorbed: gpu.upload(&vec![0u32; 2 * scene.tets])?,
            escaped: gpu.upload(&vec![0u32; 2 * scene.boundary.max(1)])?,
            totals: gpu.upload(&[0u32; 2 * TOTALS])?,
            gated: gpu.upload(&vec![0u32; 2 * (scene.gates as usize * scene.tets).max(1)])?,
            face_tally: gpu.upload(&vec![0u32; 4 * scene.tallied_faces.max(1)])?,
        })
    }
}

/// One launch's settings.
#[derive(Debug, Clone, Copy)]
pub struct McBatch {
    /// Global index of the first photon.
    pub first: u64,
    pub photons: u32,
    pub seed: u64,
    pub wmin: f32,
    pub prwin: f32,
    /// ns; `f32::MAX` for no limit.
    pub tmax_ns: f32,
    /// Refractive index outside the mesh.
    pub n_out: f32,
    /// Width of the time gates in ns (with `scene.gates` > 0).
    pub gate_width_ns: f32,
    pub max_events: u32,
    /// Loop iterations after which a lane of the flat loop takes no new photon (it ends
    /// after the two it holds); the launch is repeated until every photon was handed out.
    /// `u32::MAX` on GPUs; lavapipe ends any shader loop after 65,535 iterations, so it
    /// needs a finite budget there.
    pub budget: u32,
    /// Cubes of `variant.units` threads.
    pub cubes: u32,
    pub variant: McVariant,
}

/// Transport one batch of photons, adding into `tallies`.
pub fn transport<R: Runtime>(
    gpu: &Gpu<R>,
    scene: &McScene,
    batch: &McBatch,
    tallies: &McTallies,
) -> Result<()> {
    let mut name = batch.variant.kernel_name();
    if scene.gates > 0 {
        name.push_str("_gates");
    }
    if scene.tallied_faces > 0 {
        name.push_str("_faces");
    }
    let bad = |why: String| Error::InvalidLaunch {
        kernel: name.clone(),
        why,
    };
    batch.variant.check().map_err(bad)?;
    if scene.faces.len() < scene.tets * FACE_FLOATS
        || scene.neigh.len() < scene.tets * NEIGH_INTS
        || scene.region.len() < scene.tets
        || scene.mats.len() < MAT_FLOATS
        || !scene.mats.len().is_multiple_of(MAT_FLOATS)
        || tallies.absorbed.len() < 2 * scene.tets
        || tallies.escaped.len() < 2 * scene.boundary.max(1)
        || tallies.totals.len() < 2 * TOTALS
        || scene.srcs.len() < scene.sources as usize * SRC_FLOATS
        || scene.src_tet.len() < scene.sources as usize
        || scene.src_aux.len() < 4
        || scene.face_slot.is_empty()
        || (scene.tallied_faces > 0 && scene.face_slot.len() < 4 * scene.tets)
        || scene.face_normal.len() < 4 * scene.tallied_faces.max(1)
        || tallies.gated.len() < 2 * (scene.gates as usize * scene.tets).max(1)
        || tallies.face_tally.len() < 4 * scene.tallied_faces.max(1)
        || scene.gates as usize * scene.tets >= 1 << 31
        || scene.sources == 0
        || scene.tets > MAX_TET + 1
    {
        return Err(bad("buffer lengths do not match the scene".into()));
    }
    if batch.cubes == 0 {
        return Err(bad("no cubes".into()));
    }
    let stride = u64::from(batch.cubes) * u64::from(batch.variant.units);
    if stride > u64::from(u32::MAX / 2) || u64::from(batch.photons) > u64::from(u32::MAX / 2) {
        return Err(bad(format!(
            "{} photons on {stride} threads: both must stay below 2^31",
            batch.photons
        )));
    }
    let (key_lo, key_hi) = seed_keys(batch.seed);
    let counter = gpu.upload(&[0u32])?;
    let count = CubeCount::Static(batch.cubes, 1, 1);
    let v = batch.variant;
    let dynamic = v.flags & (F_NESTED | F_STATIC) == 0;
    let mut flags = v.flags;
    if scene.gates > 0 {
        flags |= F_GATES;
    }
    if scene.tallied_faces > 0 {
        flags |= F_FACES;
    }
    let mut handed_out = 0u32;
    loop {
        gpu.launch(&name, count.clone(), |count| {
            // SAFETY: lengths checked above; the host builds neighbours, regions and source
            // tetrahedra in range (montecarlo-core validates the mesh); f32/i32 buffers read
            // as float4/int4 hold whole vectors (lengths are multiples of 4, allocations are
            // aligned), and u32 buffers read as Atomic<u32> have the same layout.
            unsafe {
                let vec4f =
                    |a: &GpuArray<f32>| ArrayArg::from_raw_parts(a.handle().clone(), a.len() / 4);
                let vec4i =
                    |a: &GpuArray<i32>| ArrayArg::from_raw_parts(a.handle().clone(), a.len() / 4);
                let atomic =
                    |a: &GpuArray<u32>| ArrayArg::from_raw_parts(a.handle().clone(), a.len());
                mc_transport_kernel::launch_unchecked::<R>(
                    gpu.client(),
                    count,
                    CubeDim::new_1d(v.units),
                    vec4f(&scene.faces),
                    vec4i(&scene.neigh),
                    scene.region.arg(),
                    vec4f(&scene.mats),
                    vec4f(&scene.srcs),
                    scene.src_tet.arg(),
                    vec4f(&scene.src_aux),
                    scene.face_slot.arg(),
                    vec4f(&scene.face_normal),
                    atomic(&counter),
                    atomic(&tallies.absorbed),
                    atomic(&tallies.escaped),
                    atomic(&tallies.totals),
                    atomic(&tallies.gated),
                    atomic(&tallies.face_tally),
                    batch.photons,
                    batch.first as u32,
                    (batch.first >> 32) as u32,
                    key_lo,
                    key_hi,
                    scene.sources,
                    stride as u32,
                    batch.max_events,
                    batch.budget,
                    scene.tets as u32,
                    scene.gates,
                    batch.wmin,
                    batch.prwin,
                    batch.tmax_ns,
                    batch.n_out,
                    if scene.gates > 0 {
                        1.0 / batch.gate_width_ns
                    } else {
                        0.0
                    },
                    flags,
                    v.cross_k,
                );
            }
        })?;
        if !dynamic || batch.budget == u32::MAX {
            return Ok(());
        }
        // Lanes past their budget stopped taking photons: go on until all were handed out.
        let now = gpu.download(&counter)?[0];
        if now >= batch.photons {
            return Ok(());
        }
        if now <= handed_out {
            return Err(bad(format!(
                "no progress: {now} of {} photons handed out",
                batch.photons
            )));
        }
        handed_out = now;
    }
}

/// Variants compiled by `cargo xtask build-ptx` (register and spill report for each), with
/// their catalog names and output flags.
pub const CATALOG_VARIANTS: [(&str, &str, u32); 6] = [
    ("mc_transport", "default", 0),
    ("mc_transport_nested", "nested", 0),
    ("mc_transport_prefetch", "prefetch", 0),
    ("mc_transport_k2", "k2", 0),
    ("mc_transport_keep", "keep", 0),
    ("mc_transport_gates_faces", "default", F_GATES | F_FACES),
];

/// This module's kernels, configured as their launch wrappers configure them.
pub(crate) fn catalog<R: Runtime>(client: &ComputeClient<R>) -> Vec<CatalogEntry> {
    CATALOG_VARIANTS
        .iter()
        .map(|&(kname, variant, outputs)| {
            let v: McVariant = variant.parse().expect("catalog variants parse");
            let k = mc_transport_kernel::McTransportKernel::<R>::new(
                settings_1d(v.units),
                client.clone(),
                array(),
                array(),
                array(),
                array(),
                array(),
                array(),
                array(),
                array(),
                array(),
                array(),
                array(),
                array(),
                array(),
                array(),
                array(),
                (),
                (),
                (),
                (),
                (),
                (),
                (),
                (),
                (),
                (),
                (),
                (),
                (),
                (),
                (),
                (),
                v.flags | outputs,
                v.cross_k,
            );
            entry("montecarlo", kname, k)
        })
        .collect()
}
