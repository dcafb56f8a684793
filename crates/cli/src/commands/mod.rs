//! One module per subcommand.

pub mod demo;
pub mod devices;
pub mod flim;
pub mod mc;
pub mod output;
pub mod perfusion;
pub mod speckle;
