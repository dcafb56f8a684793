//! Integration tests of flim-core, one file per subject, linked into one binary: one link
//! instead of one per file keeps clean builds (and CI's disk) small. `bad_input.rs` is its own
//! binary: it caps the allocator and measures live bytes, which other tests would disturb.

mod accuracy;
mod common;
mod figures;
mod fit_accuracy;
mod fret_accuracy;
mod io;
mod output;
mod phasor_calibration;
mod picoquant;
mod preprocess;
mod spc;
mod tiff_axes;
