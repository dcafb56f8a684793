//! Simulated TCSPC data with known lifetimes (the paper's phantoms, Poisson
//! noise, IRF and background) and the modality's demo ([`demo()`]).

mod demo;
mod phantom;

pub use demo::{DemoReport, demo};
pub use phantom::{DecaySim, bi_exponential, mono_exponential};
