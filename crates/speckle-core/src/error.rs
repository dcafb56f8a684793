//! The one error type of speckle-core.

use std::path::PathBuf;

/// Everything that can go wrong in speckle processing, with the facts a user needs to fix it.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("window {size} is {why}; use an odd size from 3 to 31, such as 5 or 7")]
    InvalidWindow { size: usize, why: &'static str },
    #[error("temporal window of {frames} frames is invalid: {why}")]
    InvalidTemporalWindow { frames: usize, why: String },
    #[error("exposure time {value} s is invalid: it must be a finite number greater than zero")]
    InvalidExposure { value: f64 },
    #[error("invalid parameter `{name}` = {value}: {why}")]
    InvalidParameter {
        name: &'static str,
        value: String,
        why: String,
    },
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
    #[error(
        "image of {width}x{height} is too small for a {window}x{window} window in `valid` border mode"
    )]
    ImageTooSmall {
        width: usize,
        height: usize,
        window: usize,
    },
    #[error("{path}: {why}")]
    Format { path: PathBuf, why: String },
    #[error("{path}: file is empty")]
    EmptyFile { path: PathBuf },
    #[error("{path}: truncated: expected {expected} bytes for {what}, found {found}")]
    Truncated {
        path: PathBuf,
        expected: u64,
        found: u64,
        what: String,
    },
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Gpu(#[from] gpu_runtime::Error),
    #[error("pixel type mismatch in {what}: expected {expected}, got {got}")]
    PixelTypeMismatch {
        what: String,
        expected: &'static str,
        got: &'static str,
    },
    #[error("frame stream closed: the receiving side was dropped, so no more frames can be sent")]
    StreamClosed,
    #[error("a GPU stream worker stopped before its batch was done")]
    StreamWorkerStopped,
    #[error("demo check failed: {0}")]
    DemoCheck(String),
}

/// Result alias for speckle-core.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl From<imaging_io::Error> for Error {
    fn from(e: imaging_io::Error) -> Self {
        use imaging_io::Error as E;
        match e {
            E::InvalidParameter { name, value, why } => Self::InvalidParameter { name, value, why },
            E::FrameSizeMismatch {
                what,
                expected_w,
                expected_h,
                got_w,
                got_h,
            } => Self::FrameSizeMismatch {
                what,
                expected_w,
                expected_h,
                got_w,
                got_h,
            },
            E::Format { path, why } => Self::Format { path, why },
            E::Io { path, source } => Self::Io { path, source },
        }
    }
}
