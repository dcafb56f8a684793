//! Integration tests of the biogpu command, one file per subject, linked into one binary: one link
//! instead of one per file keeps clean builds (and CI's disk) small.

mod batch;
mod broken_pipe;
mod common;
mod mc_replay;
mod messages;
mod outputs;
mod perfusion_dicom;
mod perfusion_fit;
mod perfusion_t1;
mod phasor;
mod provenance;
mod speckle_live;
mod speckle_live_browser;
