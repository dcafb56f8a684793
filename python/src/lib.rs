//! `biogpu._biogpu`: the native module of the `biogpu` Python package (issue 25).
//!
//! Thin bindings of each crate's `api` verbs: numpy arrays in, numpy arrays out (maps are
//! handed over without a copy), the GIL released during compute, Ctrl-C honoured where the
//! Rust API has a stop flag, errors raised as Python exceptions with the Rust message. The
//! public Python API, its defaults and docstrings live in `python/python/biogpu/*.py`;
//! these functions take every argument explicitly.

mod device;
mod error;
mod flim;
mod mc;
mod perfusion;
mod speckle;

use pyo3::prelude::*;

#[pymodule]
fn _biogpu(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    device::register(m)?;
    speckle::register(m)?;
    flim::register(m)?;
    perfusion::register(m)?;
    mc::register(m)?;
    Ok(())
}
