//! Monte Carlo light transport in tetrahedral meshes (FullMonte/MMC-style): mesh building and
//! validation, readers (TIM-OS, MMC, Gmsh, VTK) and result writers, generators, sources, an
//! f64 CPU reference with rayon, and the f32 GPU path (`gpu_kernels::montecarlo`).
//!
//! Units: lengths in mm (any unit works if the optics use its inverse), absorption and
//! scattering coefficients `mua`, `mus` per length, time limits and gates in ns (with
//! lengths in mm). Results are per launched photon: absorbed weight per tetrahedron,
//! fluence and exitance per length^2.
//!
//! Layout: [`api`] (the verbs: [`api::run`], [`api::run_on`], [`api::run_fixed`]),
//! [`model`] (mesh, optics, sources, parameters and [`GpuTuning`], formulas, results), the
//! CPU reference and the GPU host side (private, one file per operation), [`io`] (one file
//! per format) and [`sim`] (generators, named problems, the simulation file, the demo).
//!
//! ```
//! use montecarlo_core::{Material, Optics, RunParams, Simulation, Source, api, sim::generate};
//! let mesh = generate::box_mesh([0.0; 3], [10.0; 3], 2.0, 5)?;
//! let optics = Optics { materials: vec![Material { mua: 0.1, mus: 1.0, g: 0.9, n: 1.0 }], n_outside: 1.0 };
//! let src = [Source::Pencil { pos: [5.0, 5.0, 0.0], dir: [0.0, 0.0, 1.0], power: 1.0 }];
//! let sim = Simulation::new(mesh, optics, &src, 1000, Default::default())?;
//! let (r, _info) = api::run(&sim, &RunParams::new(), &gpu_runtime::Device::cpu())?;
//! assert!(r.summary.balance_error.abs() < 1e-9);
//! # Ok::<(), montecarlo_core::Error>(())
//! ```

// `!(x > 0.0)` is how inputs are checked on purpose: it also rejects NaN.
#![allow(clippy::neg_cmp_op_on_partial_ord)]

pub mod api;
mod cpu;
pub mod error;
mod gpu;
pub mod io;
pub mod model;
pub mod sim;

pub use api::{RunInfo, job_estimate};
pub use cpu::replay::Jacobian;
pub use error::{Error, Result};
pub use model::fixed::FixedTally;
pub use model::mesh::{Imported, Mesh};
pub use model::optics::{Material, Optics};
pub use model::params::{Estimator, GpuTuning, McVariant, Params, RunParams};
pub use model::simulation::{Outputs, Plane, Simulation};
pub use model::source::Source;
pub use model::tally::{Gates, McResult, Summary, Tally, l1_norm};
pub use sim::spec::SimSpec;
