//! The standard benchmark problems by name (`biogpu mc bench NAME`): MCX's cube60 and
//! cube60b on a generated 135,000-tet mesh, and the TIM-OS models cube_5med and FourLayer
//! read from a data folder.

use crate::error::{Error, Result};
use crate::io::timos;
use crate::model::optics::{Material, Optics};
use crate::model::params::Params;
use crate::model::simulation::{Outputs, Simulation};
use crate::model::source::Source;
use crate::sim::spec::{MaterialsSpec, MeshSpec, SimSpec};
use std::path::Path;

/// Names accepted by [`problem`].
pub const NAMES: [&str; 4] = ["cube60", "cube60b", "cube_5med", "fourlayer"];

/// MCX's cube60 benchmark (60 mm cube on a 2 mm grid, 5 tets per cell: 135,000 tets;
/// mua 0.005/mm, mus 1/mm, g 0.01, n 1.37; pencil at (30.1, 30.2, 0) along +z; 5 ns) with
/// `n_outside` 1.37 (cube60) or 1 (cube60b, Fresnel at the surface).
pub fn cube60_spec(n_outside: f64, photons: u64) -> SimSpec {
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
        n_outside: Some(n_outside),
        sources: vec![Source::Pencil {
            pos: [30.1, 30.2, 0.0],
            dir: [0.0, 0.0, 1.0],
            power: 1.0,
        }],
        photons,
        seed: 1,
        time_limit_ns: Some(5.0),
        wmin: 1e-4,
        prwin: 10.0,
        outputs: Outputs::default(),
    }
}

impl SimSpec {
    /// The example printed by `biogpu mc example`: cube60 (MCX's benchmark) at 1e6 photons.
    pub fn example() -> SimSpec {
        cube60_spec(1.37, 1_000_000)
    }
}

/// The problem `name` (see [`NAMES`]) with `photons` photons. TIM-OS models are read from
/// `data/cube_5med/cube_5med.*` and `data/fourlayer/FourLayer.*`.
///
/// ```
/// let sim = montecarlo_core::sim::problems::problem("cube60b", 1000, None)?;
/// assert_eq!(sim.mesh.len(), 135_000);
/// assert_eq!(sim.optics.n_outside, 1.0);
/// # Ok::<(), montecarlo_core::Error>(())
/// ```
pub fn problem(name: &str, photons: u64, data: Option<&Path>) -> Result<Simulation> {
    match name {
        "cube60" | "cube60b" => {
            let n_out = if name == "cube60" { 1.37 } else { 1.0 };
            Simulation::from_spec(&cube60_spec(n_out, photons), Path::new("."))
        }
        "cube_5med" | "fourlayer" => {
            let data = data.ok_or_else(|| {
                Error::Invalid(format!(
                    "{name} needs the TIM-OS model files: give their folder (holding cube_5med/ and fourlayer/)"
                ))
            })?;
            let (dir, stem) = if name == "cube_5med" {
                ("cube_5med", "cube_5med")
            } else {
                ("fourlayer", "FourLayer")
            };
            let base = data.join(dir);
            let mesh = timos::read_mesh(&base.join(format!("{stem}.mesh")))?;
            let optics: Optics = timos::read_opt(&base.join(format!("{stem}.opt")))?;
            let (src, _) = timos::read_source(&base.join(format!("{stem}.source")))?;
            Simulation::new(mesh, optics, &src, photons, Params::default())
        }
        other => Err(Error::Invalid(format!(
            "unknown problem `{other}` (one of {})",
            NAMES.join(", ")
        ))),
    }
}

/// The published reference a benchmark of problem `name` is compared with (printed by
/// `biogpu mc bench`).
pub fn reference(name: &str) -> &'static str {
    match name {
        "cube60" => "MCX (voxels): absorbed 0.177, 274,000 photons/ms on an H200",
        "cube60b" => "MCX (voxels): absorbed 0.272, 152,000 photons/ms on an H200",
        _ => "TIM-OS / FullMonte model (compare absorbed and L1 with the CPU)",
    }
}
