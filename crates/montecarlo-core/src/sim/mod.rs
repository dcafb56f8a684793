//! Phantoms and named problems: mesh generators, the benchmark problems, the simulation
//! file ([`spec::SimSpec`]) and the demo.

mod demo;
pub mod generate;
pub mod problems;
pub mod spec;

pub use demo::{DemoReport, demo, demo_simulation};
