//! Integration tests of perfusion-core, one file per subject, linked into one binary: one link
//! instead of one per file keeps clean builds (and CI's disk) small. `bad_input.rs` is its own
//! binary: it caps the allocator and measures live bytes, which other tests would disturb.

mod b1_map;
mod common;
mod forward;
mod nifti2;
mod paper;
mod population;
mod population_input;
mod recovery;
mod standard_errors;
mod statuses;
