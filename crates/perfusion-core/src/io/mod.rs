//! File formats: NIfTI-1 series and maps, CSV curves and results, PNG overlays and plots.

pub mod csv;
pub mod nifti;
pub mod png;
