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
    /// A check of the demo failed (the device disagrees with the CPU, or a phantom's
    /// lifetime was not recovered).
    #[error("{0}")]
    DemoCheck(String),
    /// The GPU path failed.
    #[error(transparent)]
    Gpu(#[from] gpu_runtime::Error),
}

impl From<imaging_io::Error> for Error {
    fn from(e: imaging_io::Error) -> Self {
        use imaging_io::Error as E;
        match e {
            E::InvalidParameter { name, value, why } => {
                Error::InvalidParameter { name, value, why }
            }
            E::FrameSizeMismatch { .. } => Error::Shape(e.to_string()),
            E::Format { path, why } => Error::Format { path, what: why },
            E::Io { path, source } => Error::Io { path, source },
        }
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
