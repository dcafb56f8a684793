//! The simulation description (JSON): mesh (file or generator), materials, sources,
//! photons, seed, time limit and outputs ([`SimSpec`]); resolved into a validated
//! [`Simulation`] by [`Simulation::from_spec`], or read from a file (ours or MMC's input) by
//! [`Simulation::from_json`].

use crate::error::{Error, Result};
use crate::io::{gmsh, mmc, mmc_json, timos, vtk};
use crate::model::mesh::Imported;
use crate::model::optics::{Material, Optics};
use crate::model::params::Params;
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
            let mesh = mmc::read_mmc_mesh(&r.node, &r.elem)?;
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
        let mut imported = |i: Imported| {
            notes = i.notes;
            i.mesh
        };
        let mesh = match &spec.mesh {
            MeshSpec::Timos(p) => timos::read_mesh(&base.join(p))?,
            MeshSpec::Mmc { node, elem } => mmc::read_mmc_mesh(&base.join(node), &base.join(elem))?,
            MeshSpec::Gmsh(p) => imported(gmsh::read_gmsh(&base.join(p))?),
            MeshSpec::Vtk { path, region } => {
                imported(vtk::read_vtk(&base.join(path), region.as_deref())?)
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
            },
        )
        .and_then(|mut s| {
            s.set_outputs(spec.outputs.clone())?;
            s.notes = notes;
            Ok(s)
        })
    }
}
