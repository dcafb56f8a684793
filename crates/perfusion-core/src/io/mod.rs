//! File formats, one file each: NIfTI-1 and NIfTI-2 series and maps, DICOM series in, CSV curves
//! and results, PNG overlays and plots; a job's input assembled from them ([`input`]); lists
//! of studies for one run ([`studies`]).

pub mod csv;
pub mod dicom;
pub mod input;
pub mod nifti;
mod nifti2;
pub mod png;
pub mod studies;
