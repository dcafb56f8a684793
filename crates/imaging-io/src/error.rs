//! The error type of imaging-io.

use std::path::PathBuf;

/// What can go wrong writing images, with the facts needed to fix it.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A parameter outside its valid range.
    #[error("invalid parameter `{name}` = {value}: {why}")]
    InvalidParameter {
        name: &'static str,
        value: String,
        why: String,
    },
    /// Pages of one stack with different sizes.
    #[error(
        "frame size mismatch in {what}: expected {expected_w}x{expected_h}, got {got_w}x{got_h}"
    )]
    FrameSizeMismatch {
        what: String,
        expected_w: usize,
        expected_h: usize,
        got_w: usize,
        got_h: usize,
    },
    /// The encoder refused the data.
    #[error("{path}: {why}")]
    Format { path: PathBuf, why: String },
    /// The file could not be written.
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// Result alias for imaging-io.
pub type Result<T, E = Error> = std::result::Result<T, E>;
