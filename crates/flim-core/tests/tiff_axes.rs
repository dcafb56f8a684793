//! FLIM TIFFs with ImageJ axis metadata, written by tifffile 2026.3.3 (`tests/data`, numpy's
//! default_rng(1)): one axis of 20 time bins reads as tifffile reads it; a time-lapse of
//! 2 frames x 20 bins (the bins as slices) reads as two images, not as one decay of 40 bins;
//! frames x channels without slices is refused with its axes named.

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
fn a_time_lapse_of_decays_reads_as_one_image_per_frame() {
    // tifffile.imread: shape (2, 20, 4, 4) (frames, bins as slices, y, x); per-frame sums
    // 7743 and 7335. It used to read as one decay of 40 bins.
    let rec = read(
        &data("imagej_timelapse_2x20.tif"),
        &ReadOptions::default().with_bin_ns(0.2),
    )
    .unwrap();
    assert_eq!(rec.images.len(), 2);
    for (t, want) in [7743.0, 7335.0].into_iter().enumerate() {
        let image = &rec.images[t];
        assert_eq!((image.frame, image.cube.bins()), (t, 20));
        assert_eq!(image.cube.photons().sum(), want);
    }
    assert_eq!(rec.images[1].label(&rec), "f1");
}

#[test]
fn frames_by_channels_without_slices_is_refused_by_its_axes() {
    let name = "imagej_frames_channels_3x2.tif";
    let err = read(&data(name), &ReadOptions::default().with_bin_ns(0.2))
        .unwrap_err()
        .to_string();
    assert!(err.contains(name), "{err}");
    assert!(
        err.contains("ImageJ hyperstack of 2 channels x 3 frames (axes TZCYX)"),
        "{err}"
    );
    assert!(err.contains("time bins along the slices"), "{err}");
}
