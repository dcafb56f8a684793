//! The simulation description (JSON): mesh (file or generator), materials, sources,
//! photons, seed, time limit and outputs; resolved into a validated [`Simulation`].

use crate::error::{Error, Result};
use crate::generate;
use crate::mesh::Mesh;
use crate::optics::{Material, Optics};
use crate::source::{self, Placed, Source};
use crate::tally::{McResult, Tally};
use crate::timos;
use crate::transport::{Params, run_cpu};
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

/// Which files `biogpu mc run` writes besides `summary.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Outputs {
    /// `result.vtk`: mesh with region, absorbed and fluence per tetrahedron.
    #[serde(default = "yes")]
    pub vtk: bool,
    /// `tets.csv` and `exitance.csv`.
    #[serde(default = "yes")]
    pub csv: bool,
}

impl Default for Outputs {
    fn default() -> Self {
        Outputs {
            vtk: true,
            csv: true,
        }
    }
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
        SimSpec {
            mesh: MeshSpec::Box {
                origin: [0.0; 3],
                size: [60.0; 3],
                cell: 2.0,
                tets_per_cell: 5,
            },
            materials: MaterialsSpec::Inline(vec![Material {
                mua: 0.005,
                mus: 1.0,
                g: 0.01,
                n: 1.37,
            }]),
            n_outside: Some(1.37),
            sources: vec![Source::Pencil {
                pos: [30.1, 30.2, 0.0],
                dir: [0.0, 0.0, 1.0],
                power: 1.0,
            }],
            photons: 1_000_000,
            seed: 1,
            time_limit_ns: Some(5.0),
            wmin: 1e-4,
            prwin: 10.0,
            outputs: Outputs::default(),
        }
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
        let mesh = match &spec.mesh {
            MeshSpec::Timos(p) => timos::read_mesh(&base.join(p))?,
            MeshSpec::Mmc { node, elem } => {
                crate::mmc::read_mmc_mesh(&base.join(node), &base.join(elem))?
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
        .map(|mut s| {
            s.outputs = spec.outputs.clone();
            s
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
        let placed = source::place(sources, &mesh, |r| optics.get(r).n)?;
        Ok(Simulation {
            mesh,
            optics,
            sources: placed,
            photons,
            params,
            outputs: Outputs::default(),
        })
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
            let t = run_cpu(
                &self.mesh,
                &self.optics,
                &self.sources,
                &self.params,
                done,
                n,
                stop,
            );
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
        let t = run_cpu(
            &self.mesh,
            &self.optics,
            &self.sources,
            &self.params,
            first,
            count,
            None,
        );
        McResult::new(t, start.elapsed().as_secs_f64(), "cpu".into(), false)
    }
}
