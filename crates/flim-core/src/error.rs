//! Errors of flim-core: every message names the field or input and what was expected.

/// flim-core's error.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A parameter outside its valid range.
    #[error("invalid {name} = {value}: {why}")]
    InvalidParameter {
        name: &'static str,
        value: String,
        why: String,
    },
    /// Input data that do not fit together (shapes, lengths).
    #[error("{0}")]
    Shape(String),
    /// A file could not be opened or read.
    #[error("{path}: {source}")]
    Io {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
    /// A file's content is not what its format requires; `what` names the part.
    #[error("{path}: {what}")]
    Format {
        path: std::path::PathBuf,
        what: String,
    },
    /// The GPU path failed.
    #[error("GPU: {0}")]
    Gpu(String),
}

impl From<gpu_runtime::Error> for Error {
    fn from(e: gpu_runtime::Error) -> Self {
        Error::Gpu(e.to_string())
    }
}

/// flim-core's result.
pub type Result<T> = std::result::Result<T, Error>;

pub(crate) fn invalid(name: &'static str, value: impl ToString, why: impl Into<String>) -> Error {
    Error::InvalidParameter {
        name,
        value: value.to_string(),
        why: why.into(),
    }
}
