//! The simulation description (JSON): mesh (file or generator), materials, sources,
//! photons, seed, time limit and outputs; resolved into a validated [`Simulation`].

use crate::error::{Error, Result};
use crate::generate;
use crate::mesh::Mesh;
use crate::optics::{Material, Optics};
use crate::source::{self, Element, Placed, Source};
use crate::tally::{FaceSet, Gates, McResult, Tally};
use crate::timos;
use crate::transport::{Cpu, Params};
use gpu_runtime::Device;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

/// Where the mesh comes from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum MeshSpec {
    /// A TIM-OS `.mesh` file (relative paths are relative to the JSON file).
    Timos(PathBuf),
    /// MMC's `node_<key>.dat` and `elem_<key>.dat`.
    Mmc { node: PathBuf, elem: PathBuf },
    /// A Gmsh `.msh` file (2.2 or 4.1, ASCII or binary); regions from physical tags.
    Gmsh(PathBuf),
    /// A VTK unstructured grid (`.vtk` legacy or `.vtu`); regions from the cell array
    /// `region` names (default: see `vtk::REGION_ARRAYS`).
    Vtk {
        path: PathBuf,
        #[serde(default)]
        region: Option<String>,
    },
    /// A box on a regular grid.
    Box {
        origin: [f64; 3],
        size: [f64; 3],
        cell: f64,
        #[serde(default = "five")]
        tets_per_cell: u32,
    },
    /// Layered slabs stacked from z = 0, one region per layer.
    Slab {
        width: f64,
        layers: Vec<f64>,
        #[serde(default = "ten")]
        lateral_cells: usize,
        #[serde(default = "one_usize")]
        cells_per_layer: usize,
        #[serde(default = "five")]
        tets_per_cell: u32,
    },
}

fn five() -> u32 {
    5
}
fn ten() -> usize {
    10
}
fn one_usize() -> usize {
    1
}
fn default_wmin() -> f64 {
    1e-4
}
fn default_prwin() -> f64 {
    10.0
}
fn default_seed() -> u64 {
    1
}
fn yes() -> bool {
    true
}

/// Materials inline or from a TIM-OS `.opt` file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum MaterialsSpec {
    Inline(Vec<Material>),
    Timos { timos: PathBuf },
}

/// A plane of mesh faces where the fluence of crossing packets is tallied: every face whose
/// three nodes lie within 1e-7 x the mesh size of the plane through `point` with unit
/// normal `normal` (which also gives the sign of the current).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Plane {
    pub point: [f64; 3],
    pub normal: [f64; 3],
}

/// What `biogpu mc run` tallies and writes besides `summary.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Outputs {
    /// `result.vtu` (XML, for ParaView): mesh with region, absorbed and fluence per
    /// tetrahedron (and per gate).
    #[serde(default = "yes")]
    pub vtk: bool,
    /// `result.vtk`: the same in legacy ASCII VTK, for older tools.
    #[serde(default)]
    pub vtk_legacy: bool,
    /// `tets.csv` and `exitance.csv` (and `faces.csv`, `gates.csv` when tallied).
    #[serde(default = "yes")]
    pub csv: bool,
    /// Planes of mesh faces with a fluence tally.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub planes: Vec<Plane>,
    /// Single faces with a fluence tally: `[tet, face]` (tet 1-based, face 0..=3 opposite
    /// node `face`); the current's sign follows that face's outward normal.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub faces: Vec<[u32; 2]>,
    /// Time-of-flight gates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gates: Option<Gates>,
}

impl Default for Outputs {
    fn default() -> Self {
        Outputs {
            vtk: true,
            vtk_legacy: false,
            csv: true,
            planes: Vec::new(),
            faces: Vec::new(),
            gates: None,
        }
    }
}

/// The faces selected by `planes` and `faces`, each once.
fn face_set(mesh: &Mesh, planes: &[Plane], faces: &[[u32; 2]]) -> Result<FaceSet> {
    let mut set = FaceSet::default();
    let mut seen = std::collections::HashSet::new();
    let mut add = |set: &mut FaceSet, t: u32, f: u8, n: [f64; 3], plane: Option<u32>| {
        let nb = mesh.neighbours[t as usize][f as usize];
        // One key per geometric face: the side with the smaller tet id.
        let key = if nb > 0 && nb < t {
            let back = mesh.neighbours[nb as usize]
                .iter()
                .position(|&x| x == t)
                .unwrap_or(0);
            (nb, back as u8)
        } else {
            (t, f)
        };
        if !seen.insert(key) {
            return Err(Error::Invalid(format!(
                "outputs: face {f} of tetrahedron {t} is selected twice"
            )));
        }
        set.faces.push((t, f));
        set.normals.push(n);
        set.areas.push(mesh.face_area(t, f as usize));
        set.plane.push(plane);
        Ok(())
    };
    let tol = 1e-7 * mesh.scale();
    for (i, pl) in planes.iter().enumerate() {
        let l = (pl.normal.iter().map(|v| v * v).sum::<f64>()).sqrt();
        if !(l > 0.0 && l.is_finite()) || pl.point.iter().any(|v| !v.is_finite()) {
            return Err(Error::Invalid(format!(
                "outputs.planes[{i}]: point {:?} and normal {:?} must be finite, the normal non-zero",
                pl.point, pl.normal
            )));
        }
        let n = pl.normal.map(|v| v / l);
        let off = n[0] * pl.point[0] + n[1] * pl.point[1] + n[2] * pl.point[2];
        let before = set.len();
        for t in 1..=mesh.len() as u32 {
            for f in 0..4u8 {
                let nb = mesh.neighbours[t as usize][f as usize];
                if nb > 0 && nb < t {
                    continue; // counted from the other side
                }
                let on = crate::mesh::FACE_NODES[f as usize].iter().all(|&k| {
                    let x = mesh.nodes[mesh.tets[t as usize][k] as usize];
                    (n[0] * x[0] + n[1] * x[1] + n[2] * x[2] - off).abs() <= tol
                });
                if on {
                    add(&mut set, t, f, n, Some(i as u32))?;
                }
            }
        }
        if set.len() == before {
            return Err(Error::Invalid(format!(
                "outputs.planes[{i}]: no mesh face lies in the plane through {:?} with normal {:?} (the plane must coincide with mesh faces)",
                pl.point, pl.normal
            )));
        }
    }
    for (i, &[t, f]) in faces.iter().enumerate() {
        if t == 0 || t as usize > mesh.len() || f > 3 {
            return Err(Error::Invalid(format!(
                "outputs.faces[{i}] = [{t}, {f}]: needs a tetrahedron 1..={} and a face 0..=3",
                mesh.len()
            )));
        }
        let p = mesh.faces[t as usize][f as usize];
        add(&mut set, t, f as u8, [p[0], p[1], p[2]], None)?;
    }
    Ok(set)
}

/// The simulation file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SimSpec {
    pub mesh: MeshSpec,
    /// Region i+1 uses materials[i].
    pub materials: MaterialsSpec,
    /// Index outside the mesh (ignored when materials come from a `.opt` file, which has it).
    #[serde(default)]
    pub n_outside: Option<f64>,
    pub sources: Vec<Source>,
    pub photons: u64,
    #[serde(default = "default_seed")]
    pub seed: u64,
    /// Stop packets after this flight time in ns (lengths in mm); MCX's benchmarks use 5.
    #[serde(default)]
    pub time_limit_ns: Option<f64>,
    #[serde(default = "default_wmin")]
    pub wmin: f64,
    #[serde(default = "default_prwin")]
    pub prwin: f64,
    #[serde(default)]
    pub outputs: Outputs,
}

impl SimSpec {
    /// The example printed by `biogpu mc example`: cube60 (MCX's benchmark) at 1e6 photons.
    pub fn example() -> SimSpec {
        crate::problems::cube60_spec(1.37, 1_000_000)
    }
}

/// A validated simulation ready to run.
#[derive(Debug, Clone)]
pub struct Simulation {
    pub mesh: Mesh,
    pub optics: Optics,
    pub sources: Vec<Placed>,
    pub photons: u64,
    pub params: Params,
    pub outputs: Outputs,
    /// What the mesh reader ignored or assumed (shown to the user).
    pub notes: Vec<String>,
    /// Elements of volume and surface sources (see [`Placed::first`]).
    pub source_elements: Vec<Element>,
    /// Faces with a fluence tally (from `outputs`).
    pub faces: FaceSet,
    /// Time gates (from `outputs`).
    pub gates: Option<Gates>,
}

impl Simulation {
    /// Read and resolve a JSON simulation file: ours ([`SimSpec`]) or MMC's input (see
    /// [`crate::mmc_json`]), told apart by MMC's `Domain` and `Session` keys.
    pub fn from_json(path: &Path) -> Result<Simulation> {
        let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
        let value: serde_json::Value =
            serde_json::from_str(&text).map_err(|source| Error::Json {
                path: path.to_path_buf(),
                source,
            })?;
        if crate::mmc_json::is_mmc(&value) {
            let r = crate::mmc_json::resolve(path, value)?;
            let mesh = crate::mmc::read_mmc_mesh(&r.node, &r.elem)?;
            return Simulation::new(mesh, r.optics, &r.sources, r.photons, r.params);
        }
        let spec: SimSpec = serde_json::from_value(value).map_err(|source| Error::Json {
            path: path.to_path_buf(),
            source,
        })?;
        Simulation::from_spec(&spec, path.parent().unwrap_or(Path::new(".")))
    }

    /// Resolve a spec; relative file names are taken relative to `base`.
    pub fn from_spec(spec: &SimSpec, base: &Path) -> Result<Simulation> {
        let mut notes = Vec::new();
        let mut imported = |i: crate::mesh::Imported| {
            notes = i.notes;
            i.mesh
        };
        let mesh = match &spec.mesh {
            MeshSpec::Timos(p) => timos::read_mesh(&base.join(p))?,
            MeshSpec::Mmc { node, elem } => {
                crate::mmc::read_mmc_mesh(&base.join(node), &base.join(elem))?
            }
            MeshSpec::Gmsh(p) => imported(crate::gmsh::read_gmsh(&base.join(p))?),
            MeshSpec::Vtk { path, region } => {
                imported(crate::vtk::read_vtk(&base.join(path), region.as_deref())?)
            }
            MeshSpec::Box {
                origin,
                size,
                cell,
                tets_per_cell,
            } => generate::box_mesh(*origin, *size, *cell, *tets_per_cell)?,
            MeshSpec::Slab {
                width,
                layers,
                lateral_cells,
                cells_per_layer,
                tets_per_cell,
            } => generate::slab_mesh(
                *width,
                layers,
                *lateral_cells,
                *cells_per_layer,
                *tets_per_cell,
            )?,
        };
        let optics = match &spec.materials {
            MaterialsSpec::Inline(m) => Optics {
                materials: m.clone(),
                n_outside: spec.n_outside.unwrap_or(1.0),
            },
            MaterialsSpec::Timos { timos } => timos::read_opt(&base.join(timos))?,
        };
        Simulation::new(
            mesh,
            optics,
            &spec.sources,
            spec.photons,
            Params {
                wmin: spec.wmin,
                prwin: spec.prwin,
                time_limit_ns: spec.time_limit_ns,
                seed: spec.seed,
                gpu_cubes: None,
            },
        )
        .and_then(|mut s| {
            s.set_outputs(spec.outputs.clone())?;
            s.notes = notes;
            Ok(s)
        })
    }

    /// Validate and place the sources.
    pub fn new(
        mesh: Mesh,
        optics: Optics,
        sources: &[Source],
        photons: u64,
        params: Params,
    ) -> Result<Simulation> {
        optics.validate(&mesh)?;
        if photons == 0 {
            return Err(Error::Invalid("photons must be at least 1".into()));
        }
        if !(params.wmin > 0.0
            && params.wmin < 1.0
            && params.prwin > 1.0
            && params.wmin * params.prwin <= 1.0)
        {
            return Err(Error::Invalid(format!(
                "roulette needs 0 < wmin < 1, prwin > 1 and wmin x prwin <= 1 (got wmin {}, prwin {})",
                params.wmin, params.prwin
            )));
        }
        if let Some(t) = params.time_limit_ns
            && !(t > 0.0)
        {
            return Err(Error::Invalid(format!("time_limit_ns {t} must be > 0")));
        }
        let (placed, source_elements) = source::place(sources, &mesh, |r| optics.get(r).n)?;
        Ok(Simulation {
            mesh,
            optics,
            sources: placed,
            photons,
            params,
            outputs: Outputs::default(),
            notes: Vec::new(),
            source_elements,
            faces: FaceSet::default(),
            gates: None,
        })
    }

    /// Set the outputs: resolves the tallied planes and faces and checks the gates.
    ///
    /// ```
    /// use montecarlo_core::{generate, sim::{Outputs, Plane}, tally::Gates, Optics, Material, Source, Simulation};
    /// let mesh = generate::box_mesh([0.0; 3], [4.0; 3], 1.0, 5)?;
    /// let optics = Optics { materials: vec![Material { mua: 0.1, mus: 1.0, g: 0.0, n: 1.0 }], n_outside: 1.0 };
    /// let src = [Source::Isotropic { pos: [2.1, 2.2, 2.3], power: 1.0 }];
    /// let mut sim = Simulation::new(mesh, optics, &src, 1000, Default::default())?;
    /// sim.set_outputs(Outputs {
    ///     planes: vec![Plane { point: [0.0, 0.0, 3.0], normal: [0.0, 0.0, 1.0] }],
    ///     gates: Some(Gates { width_ns: 0.01, count: 20 }),
    ///     ..Outputs::default()
    /// })?;
    /// assert_eq!(sim.faces.len(), 32); // 4 x 4 cells, 2 triangles each
    /// let r = sim.run_cpu(0, 1000);
    /// assert!(r.face_fluence(&sim.faces).iter().sum::<f64>() > 0.0);
    /// # Ok::<(), montecarlo_core::Error>(())
    /// ```
    pub fn set_outputs(&mut self, outputs: Outputs) -> Result<()> {
        if let Some(g) = outputs.gates {
            if !(g.width_ns > 0.0 && g.width_ns.is_finite()) || g.count == 0 {
                return Err(Error::Invalid(format!(
                    "outputs.gates: width_ns {} must be > 0 and count {} >= 1",
                    g.width_ns, g.count
                )));
            }
            let cells = u64::from(g.count) * (self.mesh.len() as u64 + 1);
            if cells > 1 << 27 {
                return Err(Error::Invalid(format!(
                    "outputs.gates: {} gates x {} tetrahedra is more than 2^27 tallies per thread (1 GiB); use fewer gates",
                    g.count,
                    self.mesh.len()
                )));
            }
        }
        self.faces = face_set(&self.mesh, &outputs.planes, &outputs.faces)?;
        self.gates = outputs.gates;
        self.outputs = outputs;
        Ok(())
    }

    /// Run on `device` (the CPU path for a CPU device) in batches, calling `progress(done,
    /// total)` between batches; when `stop` is set, returns the result of the photons
    /// finished so far, normalised by that count and marked interrupted.
    pub fn run(
        &self,
        device: &Device,
        stop: Option<&AtomicBool>,
        mut progress: impl FnMut(u64, u64),
    ) -> Result<McResult> {
        if device.is_gpu() {
            return crate::gpu::run(self, device, stop, progress);
        }
        let start = Instant::now();
        let cpu = Cpu::new(self);
        let mut tally = Tally::new(&self.mesh);
        let batch = (self.photons / 20).clamp(100_000, 10_000_000);
        let mut done = 0;
        let mut interrupted = false;
        while done < self.photons {
            if stop.is_some_and(|s| s.load(Ordering::Relaxed)) {
                interrupted = true;
                break;
            }
            let n = batch.min(self.photons - done);
            let t = cpu.run(done, n, stop);
            done += t.photons;
            tally = tally.merge(t);
            progress(done, self.photons);
        }
        interrupted |= done < self.photons;
        Ok(McResult::new(
            tally,
            start.elapsed().as_secs_f64(),
            format!("cpu ({} threads)", rayon::current_num_threads()),
            interrupted,
        ))
    }

    /// The CPU path for photons `first..first + count` (no batching).
    pub fn run_cpu(&self, first: u64, count: u64) -> McResult {
        let start = Instant::now();
        let t = Cpu::new(self).run(first, count, None);
        McResult::new(t, start.elapsed().as_secs_f64(), "cpu".into(), false)
    }
}
