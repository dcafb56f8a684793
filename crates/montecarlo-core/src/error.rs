//! The one error type of montecarlo-core.

use std::path::PathBuf;

/// Everything that can go wrong, with the element, field or line a user needs to fix it.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("tetrahedron {tet} (1-based) {why}")]
    BadTet { tet: usize, why: String },
    #[error(
        "face with nodes {nodes:?} (1-based) is shared by {count} tetrahedra (non-manifold mesh)"
    )]
    NonManifold { nodes: [u32; 3], count: usize },
    #[error(
        "tetrahedron {tet} (1-based) has region {region}, but only regions 1..={regions} have materials"
    )]
    UnknownRegion {
        tet: usize,
        region: u32,
        regions: usize,
    },
    #[error("material of region {region}: {why}")]
    BadMaterial { region: usize, why: String },
    #[error("source {index}: {why}")]
    BadSource { index: usize, why: String },
    #[error("{path}: line {line}: {why}")]
    Parse {
        path: PathBuf,
        line: usize,
        why: String,
    },
    /// A position that is not a line (binary data: "byte 1234"; VTK: "cell 17").
    #[error("{path}: {at}: {why}")]
    Format {
        path: PathBuf,
        at: String,
        why: String,
    },
    #[error("{path}: truncated: {why}")]
    Truncated { path: PathBuf, why: String },
    #[error("invalid simulation: {0}")]
    Invalid(String),
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: {source}")]
    Json {
        path: PathBuf,
        source: serde_json::Error,
    },
    /// What the GPU path cannot run (mesh too large, unknown source kind, not a GPU).
    #[error("GPU: {0}")]
    GpuPath(String),
    /// A self-check of the demo failed (energy balance, GPU against CPU).
    #[error("check failed: {0}")]
    Check(String),
    #[error(transparent)]
    Gpu(#[from] gpu_runtime::Error),
}

pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    pub(crate) fn io(path: &std::path::Path, source: std::io::Error) -> Self {
        Error::Io {
            path: path.to_path_buf(),
            source,
        }
    }
}
