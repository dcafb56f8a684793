//! One module per subcommand.

pub mod batch;
pub mod demo;
pub mod devices;
pub mod flim;
pub mod flim_fit;
pub mod help_files;
pub mod mc;
#[cfg(feature = "mpi")]
pub mod mc_mpi;
pub mod output;
pub mod perfusion;
pub mod perfusion_t1;
pub mod speckle;
