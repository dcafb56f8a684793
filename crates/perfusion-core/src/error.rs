//! The one error type of perfusion-core.

use std::path::PathBuf;

/// Everything that can stop a perfusion job, with the facts a user needs to fix it.
///
/// Problems of single voxels (NaN samples, a flat curve, a fit that does not converge) are
/// not errors: they are reported per voxel by [`FitStatus`](crate::FitStatus).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The time vector is unusable (too short, not increasing, not finite).
    #[error("time vector: {why}")]
    InvalidTimes { why: String },
    /// Two things that must have the same length do not.
    #[error(
        "{what}: {got} values, but the time vector has {expected}; give one value per time point"
    )]
    LengthMismatch {
        what: String,
        expected: usize,
        got: usize,
    },
    /// An input function is missing, not finite, or all zero.
    #[error("{which} input function: {why}")]
    InvalidInputFunction { which: &'static str, why: String },
    /// A model parameter setting (start, bound, fixed value) is unusable.
    #[error("parameter `{name}` of the {model} model: {why}")]
    InvalidParameter {
        model: &'static str,
        name: String,
        why: String,
    },
    /// An option outside its valid range.
    #[error("option `{name}` = {value}: {why}")]
    InvalidOption {
        name: &'static str,
        value: String,
        why: String,
    },
    /// Arrays that must share a shape do not (volume and mask, T1 map, ...).
    #[error("shape mismatch: {what}: expected {expected:?}, got {got:?}")]
    ShapeMismatch {
        what: String,
        expected: Vec<usize>,
        got: Vec<usize>,
    },
    /// A file could not be read or written, or its contents are malformed.
    #[error("{path}: {why}")]
    File { path: PathBuf, why: String },
    /// The input files and options do not make up a job (no time vector, a missing input
    /// function, an ROI without a series, ...).
    #[error("{0}")]
    Input(String),
    /// A CSV file has a bad field.
    #[error("{path}, line {line}: {why}")]
    Csv {
        path: PathBuf,
        line: usize,
        why: String,
    },
    /// The GPU path failed (compilation, memory, launch).
    #[error(transparent)]
    Gpu(#[from] gpu_runtime::Error),
    /// The demo's device result disagreed with the CPU or with the truth.
    #[error("{0}")]
    DemoFailed(String),
    /// The job was interrupted (Ctrl-C) before it finished.
    #[error("interrupted after {done} of {total} voxels")]
    Interrupted { done: usize, total: usize },
}

/// Result alias for perfusion-core.
pub type Result<T, E = Error> = std::result::Result<T, E>;
