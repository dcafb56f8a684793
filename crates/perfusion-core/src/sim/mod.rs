//! Simulated DCE data with known parameters (phantoms: a population arterial input, a
//! portal-venous input derived from it, tissue curves from any model with noise, the paper's
//! simulation, a synthetic liver volume) and the demo ([`demo`]) built on them.

mod demo;
mod phantom;

pub use demo::{DemoReport, demo};
pub use phantom::{
    Normal, Simulated, Simulation, SyntheticLiver, add_noise, parker_aif, portal_venous,
    synthetic_liver,
};
