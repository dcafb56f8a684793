//! Monte Carlo light transport in tetrahedral meshes (f32), after FullMonteCUDA and MCX.
//!
//! - [`mod@transport`]: the transport kernel (flat event loop with photon relaunch, exact
//!   fixed-point tallies, accumulation cache), its physics and its launch wrapper
//!   ([`transport()`](transport::transport), with the buffers [`McScene`], [`McTallies`] and
//!   the launch settings [`McBatch`]); montecarlo-core's `cpu/transport.rs` and
//!   `gpu/transport.rs` are its CPU reference and host side.
//! - `photon`: the packet state and the tetrahedron geometry the transport and the launch
//!   share.
//! - `source`: packet launch for every source kind, mirroring montecarlo-core's sampling.
//! - `rng`: xoshiro128** seeded per photon index, as montecarlo-core's `model/rng.rs`.
//!
//! This file holds what the host and the kernel agree on: buffer layouts, flag bits, source
//! kinds, the variant syntax and the catalog.
//!
//! Kernel variants (loop structure, neighbour prefetch, faces crossed per iteration,
//! accumulation cache, IEEE square roots, cube size) are compile-time choices of one
//! kernel ([`McVariant`]), so a benchmark sweep measures them without runtime branches.

// Kernel code is expanded by CubeCL, which has no `clamp` or float-constant paths for
// every backend; the spelled-out forms are what it compiles.
#![allow(clippy::approx_constant, clippy::manual_clamp)]

mod photon;
mod rng;
mod source;
pub mod transport;

pub use rng::seed_keys;
pub use transport::{McBatch, McScene, McTallies, mc_transport_kernel, transport};

use crate::configured::{CatalogEntry, entry};
use cubecl::prelude::*;
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
/// the mesh, event limit), weight reflected at launch (specular).
pub const TOTALS: usize = 5;
pub(crate) const T_KILLED: u32 = 0;
pub(crate) const T_GAINED: u32 = 1;
pub(crate) const T_EXPIRED: u32 = 2;
pub(crate) const T_LOST: u32 = 3;
pub(crate) const T_SPECULAR: u32 = 4;

/// Source kinds (montecarlo-core's `model::source` re-exports them: defined once).
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
/// Output flag (set from the simulation, not a variant): the track-length estimator (steps
/// in scattering mean free paths, weight decaying as exp(-mua l) along every segment and
/// scored there) instead of drops at interactions.
pub const F_TRACK: u32 = 256;
/// Output flag (set from the simulation, not a variant): detectors. Each packet carries its
/// photon index, region, scatter count and per-region partial pathlengths (and momentum
/// transfers) in per-lane arrays; a packet escaping through a detector's disk adds to that
/// detector's exact totals and appends a record (see [`DET_U32`], [`DET_F_HEAD`]).
pub const F_DETECT: u32 = 512;

/// Floats per detector in the detector buffer: one float4 `[x, y, z, r^2]`.
pub const DET_FLOATS: usize = 4;
/// u32 words per detected-photon record: detector (1-based), photon index low word, high
/// word, scatterings.
pub const DET_U32: usize = 4;
/// f32 words at the head of each record's float part: weight, time (ns), exit position
/// x, y, z, exit direction ux, uy, uz; then R partial pathlengths (region 1..=R) and, with
/// momentum, R momentum transfers.
pub const DET_F_HEAD: usize = 8;

/// f32 words per record for `regions` regions, with or without momentum transfer.
pub fn det_floats(regions: u32, momentum: bool) -> usize {
    DET_F_HEAD + regions as usize * if momentum { 2 } else { 1 }
}

/// Entries (two u32 words each) of the detector totals for `detectors` detectors and
/// `gates` gates: entry 0 word 0 is the record counter (the slot of the next record), then
/// the weight per detector (entries `1 + k`), the count per detector (entries `1 + D + k`)
/// and the TPSF per detector and gate (entries `1 + 2D + k G + g`), all 64-bit fixed point
/// (counts in units of 1).
pub fn det_entries(detectors: u32, gates: u32) -> usize {
    1 + 2 * detectors as usize + detectors as usize * gates as usize
}

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

/// Variants compiled by `cargo xtask build-ptx` (register and spill report for each), with
/// their catalog names and output flags.
pub const CATALOG_VARIANTS: [(&str, &str, u32); 8] = [
    ("mc_transport", "default", F_TRACK),
    ("mc_transport_nested", "nested", F_TRACK),
    ("mc_transport_prefetch", "prefetch", F_TRACK),
    ("mc_transport_k2", "k2", F_TRACK),
    ("mc_transport_keep", "keep", F_TRACK),
    (
        "mc_transport_gates_faces",
        "default",
        F_GATES | F_FACES | F_TRACK,
    ),
    ("mc_transport_interaction", "default", 0),
    (
        "mc_transport_detect",
        "default",
        F_DETECT | F_GATES | F_TRACK,
    ),
];

/// This module's kernels, configured as their launch wrappers configure them.
pub(crate) fn catalog<R: Runtime>(client: &ComputeClient<R>) -> Vec<CatalogEntry> {
    CATALOG_VARIANTS
        .iter()
        .map(|&(kname, variant, outputs)| {
            let v: McVariant = variant.parse().expect("catalog variants parse");
            // The detector build is catalogued with 3 regions and momentum transfer.
            let det = outputs & F_DETECT != 0;
            let k = transport::configured(
                client,
                v.units,
                v.flags | outputs,
                v.cross_k,
                if det { 3 } else { 0 },
                det,
            );
            entry("montecarlo", kname, k)
        })
        .collect()
}
