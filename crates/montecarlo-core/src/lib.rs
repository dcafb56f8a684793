//! Monte Carlo light transport in tetrahedral meshes (FullMonte/MMC-style): mesh building and
//! validation, readers (TIM-OS, MMC, Gmsh, VTK) and VTK writers, generators, sources, an f64 CPU reference with rayon, and the
//! f32 GPU path (`gpu_kernels::montecarlo`).
//!
//! ```
//! use montecarlo_core::{generate, Optics, Material, Source, Simulation, transport::Params};
//! let mesh = generate::box_mesh([0.0; 3], [10.0; 3], 2.0, 5)?;
//! let optics = Optics { materials: vec![Material { mua: 0.1, mus: 1.0, g: 0.9, n: 1.0 }], n_outside: 1.0 };
//! let src = [Source::Pencil { pos: [5.0, 5.0, 0.0], dir: [0.0, 0.0, 1.0], power: 1.0 }];
//! let sim = Simulation::new(mesh, optics, &src, 1000, Params::default())?;
//! let r = sim.run_cpu(0, 1000);
//! assert!(r.summary.balance_error.abs() < 1e-9);
//! # Ok::<(), montecarlo_core::Error>(())
//! ```

// `!(x > 0.0)` is how inputs are checked on purpose: it also rejects NaN.
#![allow(clippy::neg_cmp_op_on_partial_ord)]

pub mod error;
pub mod generate;
pub mod gmsh;
pub mod gpu;
pub mod mesh;
pub mod mmc;
pub mod mmc_json;
pub mod optics;
pub mod problems;
pub mod rng;
pub mod sim;
pub mod source;
pub mod tally;
pub mod timos;
pub mod transport;
pub mod vtk;

pub use error::{Error, Result};
pub use mesh::{Imported, Mesh};
pub use optics::{Material, Optics};
pub use sim::{SimSpec, Simulation};
pub use source::Source;
pub use tally::{McResult, Summary, Tally, l1_norm};
