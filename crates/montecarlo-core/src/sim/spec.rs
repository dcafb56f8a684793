//! The simulation description (JSON): mesh (file or generator), materials, sources,
//! photons, seed, time limit and outputs ([`SimSpec`]); resolved into a validated
//! [`Simulation`] by [`Simulation::from_spec`], or read from a file (ours or MMC's input) by
//! [`Simulation::from_json`].
//!
//! Errors of a simulation file name it and the part at fault (`mesh`, `materials`,
//! `n_outside`, `sources`, `outputs`, `simulation`), and wrap the error of a file it names
//! (which names that file). Generated meshes are capped at
//! [`generate::MAX_GENERATED_TETS`] tetrahedra.

use crate::error::{Error, Result};
use crate::io::{gmsh, mmc, mmc_json, timos, vtk};
use crate::model::mesh::{Imported, Mesh};
use crate::model::optics::{Material, Optics};
use crate::model::params::{Estimator, Params};
use crate::model::simulation::{Outputs, Simulation};
use crate::model::source::Source;
use crate::sim::generate;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

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
    /// A box on a regular grid (at most [`generate::MAX_GENERATED_TETS`] tetrahedra).
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
    /// Nested spheres (a layered head): `radii[i]` is the outer radius of region i + 1,
    /// strictly decreasing; each tetrahedron of a grid of about `cell` takes the region of
    /// its centroid, those outside `radii[0]` are left out (see `generate::spheres_mesh`).
    Spheres {
        #[serde(default)]
        centre: [f64; 3],
        radii: Vec<f64>,
        cell: f64,
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

/// Materials inline or from a TIM-OS `.opt` file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum MaterialsSpec {
    Inline(Vec<Material>),
    Timos { timos: PathBuf },
}

/// The simulation file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SimSpec {
    pub mesh: MeshSpec,
    /// Region i+1 uses `materials[i]`.
    pub materials: MaterialsSpec,
    /// Index outside the mesh. Default: 1.0 with inline materials, the `.opt` file's outside
    /// index with materials from a TIM-OS `.opt` file; when given, it is used in both cases (it
    /// overrides the `.opt` file's value, as a value written in the simulation file should).
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
    /// `track-length` (default) or `interaction`.
    #[serde(default)]
    pub estimator: Estimator,
    /// Specular reflection at launch for beam sources on the surface (default true).
    #[serde(default = "yes")]
    pub specular: bool,
}

fn yes() -> bool {
    true
}

impl Simulation {
    /// Read and resolve a JSON simulation file: ours ([`SimSpec`]) or MMC's input (see
    /// [`crate::io::mmc_json`]), told apart by MMC's `Domain` and `Session` keys.
    pub fn from_json(path: &Path) -> Result<Simulation> {
        let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
        let value: serde_json::Value =
            serde_json::from_str(&text).map_err(|source| Error::Json {
                path: path.to_path_buf(),
                source,
            })?;
        if mmc_json::is_mmc(&value) {
            let r = mmc_json::resolve(path, value)?;
            let mesh = mmc::read_mmc_mesh(&r.node, &r.elem)
                .map_err(|e| in_file(Some(path), "Domain.MeshID", e))?;
            let mut sim = Simulation::new(mesh, r.optics, &r.sources, r.photons, r.params)
                .map_err(|e| in_file(Some(path), part(&e), e))?;
            if let Some(detection) = r.detection {
                sim.set_outputs(Outputs {
                    detection: Some(detection),
                    ..Outputs::default()
                })
                .map_err(|e| in_file(Some(path), "Optode.Detector", e))?;
            }
            return Ok(sim);
        }
        let spec: SimSpec = serde_json::from_value(value).map_err(|source| Error::Json {
            path: path.to_path_buf(),
            source,
        })?;
        resolve(&spec, path.parent().unwrap_or(Path::new(".")), Some(path))
    }

    /// Resolve a spec; relative file names are taken relative to `base`.
    pub fn from_spec(spec: &SimSpec, base: &Path) -> Result<Simulation> {
        resolve(spec, base, None)
    }
}

/// `e` as an error of the simulation file `file` (when known) at `at`.
fn in_file(file: Option<&Path>, at: &str, e: Error) -> Error {
    match file {
        Some(path) => Error::Format {
            path: path.to_path_buf(),
            at: at.to_string(),
            why: e.to_string(),
        },
        None => e,
    }
}

/// The part of a simulation file that an error of [`Simulation::new`] is about.
fn part(e: &Error) -> &'static str {
    match e {
        Error::BadMaterial { region: 0, .. } => "n_outside",
        Error::BadMaterial { .. } | Error::UnknownRegion { .. } => "materials",
        Error::BadSource { .. } => "sources",
        _ => "simulation",
    }
}

/// The mesh of `spec` and its reader's notes.
fn mesh_of(spec: &MeshSpec, base: &Path) -> Result<(Mesh, Vec<String>)> {
    let imported = |i: Imported| (i.mesh, i.notes);
    Ok(match spec {
        MeshSpec::Timos(p) => (timos::read_mesh(&base.join(p))?, Vec::new()),
        MeshSpec::Mmc { node, elem } => (
            mmc::read_mmc_mesh(&base.join(node), &base.join(elem))?,
            Vec::new(),
        ),
        MeshSpec::Gmsh(p) => imported(gmsh::read_gmsh(&base.join(p))?),
        MeshSpec::Vtk { path, region } => {
            imported(vtk::read_vtk(&base.join(path), region.as_deref())?)
        }
        MeshSpec::Box {
            origin,
            size,
            cell,
            tets_per_cell,
        } => (
            generate::box_mesh(*origin, *size, *cell, *tets_per_cell)?,
            Vec::new(),
        ),
        MeshSpec::Slab {
            width,
            layers,
            lateral_cells,
            cells_per_layer,
            tets_per_cell,
        } => (
            generate::slab_mesh(
                *width,
                layers,
                *lateral_cells,
                *cells_per_layer,
                *tets_per_cell,
            )?,
            Vec::new(),
        ),
        MeshSpec::Spheres {
            centre,
            radii,
            cell,
            tets_per_cell,
        } => (
            generate::spheres_mesh(*centre, radii, *cell, *tets_per_cell)?,
            Vec::new(),
        ),
    })
}

/// [`Simulation::from_spec`], naming `file` (the simulation file, when read from one) in errors.
fn resolve(spec: &SimSpec, base: &Path, file: Option<&Path>) -> Result<Simulation> {
    let (mesh, notes) = mesh_of(&spec.mesh, base).map_err(|e| in_file(file, "mesh", e))?;
    let optics = match &spec.materials {
        MaterialsSpec::Inline(m) => Optics {
            materials: m.clone(),
            n_outside: spec.n_outside.unwrap_or(1.0),
        },
        MaterialsSpec::Timos { timos } => {
            let mut optics =
                timos::read_opt(&base.join(timos)).map_err(|e| in_file(file, "materials", e))?;
            if let Some(n) = spec.n_outside {
                optics.n_outside = n;
            }
            optics
        }
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
            estimator: spec.estimator,
            specular: spec.specular,
        },
    )
    .map_err(|e| in_file(file, part(&e), e))
    .and_then(|mut s| {
        s.set_outputs(spec.outputs.clone())
            .map_err(|e| in_file(file, "outputs", e))?;
        s.notes = notes;
        Ok(s)
    })
}
