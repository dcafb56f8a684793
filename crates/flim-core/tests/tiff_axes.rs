//! FLIM TIFFs with ImageJ axis metadata, written by tifffile 2026.3.3 (`tests/data`, numpy's
//! default_rng(1)): one axis of 20 time bins reads as tifffile reads it; a time-lapse of
//! 2 frames x 20 bins is refused with its axes named instead of being read as one decay of
//! 40 bins.

use flim_core::io::{ReadOptions, read};
use std::path::PathBuf;

fn data(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name)
}

#[test]
fn one_axis_of_bins_reads_as_tifffile_reads_it() {
    // tifffile.imread: shape (20, 4, 4) (bins, y, x), sum 7713.
    let rec = read(
        &data("imagej_bins_20.tif"),
        &ReadOptions::default().with_bin_ns(0.2),
    )
    .unwrap();
    assert_eq!(rec.images.len(), 1);
    let cube = &rec.images[0].cube;
    assert_eq!((cube.shape(), cube.bins()), ((4, 4), 20));
    assert_eq!(cube.photons().sum(), 7713.0);
}

#[test]
fn a_time_lapse_of_decays_is_refused_not_joined() {
    let name = "imagej_timelapse_2x20.tif";
    let err = read(&data(name), &ReadOptions::default().with_bin_ns(0.2))
        .unwrap_err()
        .to_string();
    assert!(err.contains(name), "{err}");
    assert!(
        err.contains("ImageJ hyperstack of 20 slices x 2 frames (axes TZCYX)"),
        "{err}"
    );
    assert!(err.contains("one axis of time bins"), "{err}");
}
