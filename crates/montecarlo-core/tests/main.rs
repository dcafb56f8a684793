//! Integration tests of montecarlo-core, one file per subject, linked into one binary: one link
//! instead of one per file keeps clean builds (and CI's disk) small. `bad_input.rs` is its own
//! binary: it caps the allocator and measures live bytes, which other tests would disturb.

mod detectors;
mod estimators;
mod formats;
mod mesh_props;
mod physics;
mod sources_outputs;
mod specular;
