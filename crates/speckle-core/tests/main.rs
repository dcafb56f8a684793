//! Integration tests of speckle-core, one file per subject, linked into one binary: one link
//! instead of one per file keeps clean builds (and CI's disk) small. `bad_input.rs` is its own
//! binary: it caps the allocator and measures live bytes, which other tests would disturb.

mod beta_and_status;
mod tiff_axes;
