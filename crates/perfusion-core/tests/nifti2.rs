//! NIfTI-2 series written by nibabel 5 (`tests/data`, numpy's default_rng(1), a 4x3x2x5
//! float32 series with 2x2x5 mm voxels and a 2 s frame interval) read as nibabel reads them;
//! a NIfTI-2 file whose dimensions do not fit NIfTI-1 is refused by name.

use perfusion_core::io::nifti::{frame_interval_s, read_header, read_series};
use std::path::PathBuf;

fn data(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name)
}

#[test]
fn nifti2_series_read_as_nibabel_reads_them() {
    // nibabel get_fdata: shape (4, 3, 2, 5), sum 6111.846654832363, [3,2,1,4] 45.5928955078125,
    // [0,0,0,0] 51.18216323852539.
    for name in ["series_nifti2.nii", "series_nifti2.nii.gz"] {
        let s = read_series(&data(name)).unwrap();
        assert_eq!(s.data.dim(), (4, 3, 2, 5), "{name}");
        let sum: f64 = s.data.iter().map(|&v| f64::from(v)).sum();
        assert!((sum - 6111.846654832363).abs() < 1e-9, "{name}: {sum}");
        assert_eq!(s.data[[3, 2, 1, 4]], 45.592_896_f32, "{name}");
        assert_eq!(s.data[[0, 0, 0, 0]], 51.182_163_f32, "{name}");
        assert_eq!(&s.header.pixdim[1..4], &[2.0, 2.0, 5.0], "{name}");
        assert_eq!(frame_interval_s(&s.header), Some(2.0), "{name}");
        assert_eq!(read_header(&data(name)).unwrap().dim, s.header.dim);
    }
}

#[test]
fn nifti2_dimensions_beyond_nifti1_are_refused_by_name() {
    let name = "too_wide_nifti2.nii";
    let err = read_series(&data(name)).unwrap_err().to_string();
    assert!(err.contains(name) && err.contains("NIfTI-2"), "{err}");
    assert!(err.contains("dim[1]") && err.contains("40000"), "{err}");
}
