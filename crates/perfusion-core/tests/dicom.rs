//! DICOM series in (`perfusion_core::io::dicom`), against fixtures written by pydicom
//! (`tests/data/make_dicom.py`, which documents their contents): values, times, geometry and
//! acquisition parameters of a good series; a clear error for each broken variant; and a
//! job loaded from DICOM whose fitted maps land on the DICOM grid.

use bad_input::{bit_flips, check_reader, truncations};
use gpu_runtime::Device;
use perfusion_core::convert::Conversion;
use perfusion_core::io::dicom::{
    Acquisition, DicomSeries, TimeTag, read_acquisition, read_series, read_series_choice,
};
use perfusion_core::io::input::{InputSpec, load};
use perfusion_core::io::nifti::{NiftiHeader, read_volume, scatter, write_map};
use perfusion_core::{FitInput, FitParams, Model, fit};
use std::path::{Path, PathBuf};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/dicom")
        .join(name)
}

/// A fresh scratch folder for this test binary.
fn scratch(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("perfusion-dicom-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Copy the files of fixture `name` into `to` (created).
fn copy_fixture(name: &str, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(fixture(name)).unwrap() {
        let p = e.unwrap().path();
        std::fs::copy(&p, to.join(p.file_name().unwrap())).unwrap();
    }
}

fn error_of(path: &Path) -> String {
    match read_series(path) {
        Ok(s) => panic!("{} read: {:?}", path.display(), s.series.data.dim()),
        Err(e) => {
            eprintln!("{e}\n");
            e.to_string()
        }
    }
}

fn assert_contains(msg: &str, parts: &[&str]) {
    for p in parts {
        assert!(msg.contains(p), "`{p}` not in: {msg}");
    }
}

/// The fixtures' geometry (make_dicom.py), by hand: LPS axes row (0.8, 0.6, 0) x 0.75 mm,
/// column (-0.36, 0.48, -0.8) x 1.5 mm, normal (-0.48, 0.64, 0.6) x 4 mm, first voxel at
/// (10, -20, 30); RAS negates the x and y rows.
const RAS: [[f32; 4]; 3] = [
    [-0.6, 0.54, 1.92, -10.0],
    [-0.45, -0.72, -2.56, 20.0],
    [0.0, -1.2, 2.4, 30.0],
];

fn assert_affine(h: &NiftiHeader) {
    for (got, want) in [h.srow_x, h.srow_y, h.srow_z].iter().zip(&RAS) {
        for (g, w) in got.iter().zip(want) {
            assert!((g - w).abs() < 1e-5, "sform {got:?}, expected {want:?}");
        }
    }
    assert_eq!((h.sform_code, h.qform_code), (1, 1));
    assert_eq!(&h.pixdim[..4], &[1.0, 0.75, 1.5, 4.0]);
    assert_eq!(
        [h.quatern_x, h.quatern_y, h.quatern_z],
        [RAS[0][3], RAS[1][3], RAS[2][3]]
    );
    // The qform's rotation, from the quaternion, times the voxel sizes is the sform.
    let (b, c, d) = (
        f64::from(h.quatern_b),
        f64::from(h.quatern_c),
        f64::from(h.quatern_d),
    );
    let a = (1.0 - b * b - c * c - d * d).max(0.0).sqrt();
    let r = [
        [
            a * a + b * b - c * c - d * d,
            2.0 * (b * c - a * d),
            2.0 * (b * d + a * c),
        ],
        [
            2.0 * (b * c + a * d),
            a * a + c * c - b * b - d * d,
            2.0 * (c * d - a * b),
        ],
        [
            2.0 * (b * d - a * c),
            2.0 * (c * d + a * b),
            a * a + d * d - c * c - b * b,
        ],
    ];
    for i in 0..3 {
        for j in 0..3 {
            let q = r[i][j] * f64::from(h.pixdim[j + 1]);
            assert!(
                (q - f64::from(RAS[i][j])).abs() < 1e-5,
                "qform {r:?} disagrees with the sform"
            );
        }
    }
}

/// The fixtures' values: 2 (100 + x + 10 y + 100 z + 1000 t) - 10.
fn assert_values(s: &DicomSeries) {
    assert_eq!(s.series.data.dim(), (6, 5, 3, 8));
    for ((x, y, z, t), &v) in s.series.data.indexed_iter() {
        let stored = 100 + x + 10 * y + 100 * z + 1000 * t;
        assert_eq!(v, 2.0 * stored as f32 - 10.0, "voxel {x},{y},{z} frame {t}");
    }
}

#[test]
fn an_oblique_series_reads_with_its_values_times_geometry_and_acquisition() {
    let s = read_series(&fixture("series")).unwrap();
    assert_values(&s);
    assert_eq!(s.time_tag, TimeTag::AcquisitionDateAndTime);
    // Frames 4.5 s apart; each frame's first acquired slice is slice 1 (at +0 s).
    for (t, &got) in s.times.iter().enumerate() {
        assert!((got - 4.5 * t as f64).abs() < 1e-6, "{:?}", s.times);
    }
    assert_eq!(
        s.acquisition,
        Acquisition {
            flip_angle_deg: Some(15.0),
            tr_s: Some(0.0045),
            field_t: Some(3.0),
        }
    );
    assert_eq!(s.series_uid, "1.2.826.0.1.3680043.8.498.10");
    assert_eq!(s.description, "dce oblique");
    assert_eq!(s.files.len(), 24);
    let h = &s.series.header;
    assert_eq!(h.dim, [4, 6, 5, 3, 8, 1, 1, 1]);
    assert!((h.pixdim[4] - 4.5).abs() < 1e-6);
    assert_eq!(h.xyzt_units, 2 | 8);
    assert_affine(h);
    // The headers alone give the same acquisition.
    assert_eq!(read_acquisition(&fixture("series")).unwrap(), s.acquisition);
}

#[test]
fn a_series_across_midnight_is_ordered_by_temporal_position_and_unwrapped() {
    let s = read_series(&fixture("midnight")).unwrap();
    assert_values(&s);
    assert_eq!(s.time_tag, TimeTag::AcquisitionDateAndTime);
    for (t, &got) in s.times.iter().enumerate() {
        assert!((got - 2.5 * t as f64).abs() < 1e-6, "{:?}", s.times);
    }
    assert_affine(&s.series.header);
}

#[test]
fn a_file_of_the_series_reads_its_series_from_its_folder() {
    let dir = scratch("one-file");
    copy_fixture("series", &dir.join("a"));
    copy_fixture("midnight", &dir.join("b"));
    // Both series under one folder: an error listing them, with their folders.
    let e = error_of(&dir);
    assert_contains(
        &e,
        &[
            "2 DICOM series",
            "1.2.826.0.1.3680043.8.498.10 \"dce oblique\": 24 file(s)",
            "1.2.826.0.1.3680043.8.498.11 \"dce midnight\": 24 file(s)",
            "point at the folder of one series",
        ],
    );
    // One file picks its series; a number or UID picks one.
    let s = read_series(&dir.join("b/IM0003")).unwrap();
    assert_eq!(s.description, "dce midnight");
    let s = read_series_choice(&dir, Some("1")).unwrap();
    assert_eq!(s.description, "dce oblique");
    let s = read_series_choice(&dir, Some("1.2.826.0.1.3680043.8.498.11")).unwrap();
    assert_eq!(s.description, "dce midnight");
    let e = read_series_choice(&dir, Some("3")).unwrap_err().to_string();
    assert_contains(&e, &["no series `3`"]);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn two_series_mixed_in_one_folder_are_refused_with_a_list() {
    let dir = scratch("mixed");
    copy_fixture("series", &dir);
    copy_fixture("timing", &dir.join("sub"));
    let e = error_of(&dir);
    assert_contains(
        &e,
        &[
            "2 DICOM series",
            "\"dce oblique\": 24 file(s)",
            "\"dce bad timing\": 12 file(s)",
        ],
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_time_point_without_one_of_its_slices_is_named() {
    let good = read_series(&fixture("series")).unwrap();
    let dir = scratch("missing");
    copy_fixture("series", &dir);
    // Slice 1 of time point 3.
    let gone = &good.files[3 * 3 + 1];
    std::fs::remove_file(dir.join(gone.file_name().unwrap())).unwrap();
    let e = error_of(&dir);
    assert_contains(
        &e,
        &[
            "a missing slice",
            "slice 1",
            "7 images, the other slices 8",
            "time point 3",
        ],
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn an_extra_slice_and_a_copied_file_are_named() {
    let e = error_of(&fixture("extra"));
    assert_contains(
        &e,
        &["an extra slice", "slice 1", "3 images, the other slices 2"],
    );
    let dir = scratch("copied");
    copy_fixture("series", &dir);
    std::fs::copy(dir.join("IM0004"), dir.join("IM0004 copy")).unwrap();
    let e = error_of(&dir);
    assert_contains(&e, &["IM0004 copy", "SOPInstanceUID", "the same image as"]);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn slices_spread_past_the_next_time_point_are_inconsistent_timing() {
    let e = error_of(&fixture("timing"));
    assert_contains(
        &e,
        &[
            "inconsistent timing",
            "time point 2",
            "9.500 s",
            "time point 3 began at 9.000 s",
            "AcquisitionDateTime (0008,002A)",
        ],
    );
}

#[test]
fn mixed_sizes_orientations_and_uneven_slices_are_refused() {
    let e = error_of(&fixture("mixed_size"));
    assert_contains(&e, &["Rows (0028,0010)", "4 x 6", "same size"]);
    let e = error_of(&fixture("mixed_orientation"));
    assert_contains(
        &e,
        &["ImageOrientationPatient (0020,0037)", "same orientation"],
    );
    let e = error_of(&fixture("nonuniform"));
    assert_contains(
        &e,
        &[
            "ImagePositionPatient (0020,0032)",
            "evenly spaced",
            "4.0000 mm from slice 0",
            "4.5000 mm on average",
        ],
    );
    let e = error_of(&fixture("multiframe"));
    assert_contains(&e, &["NumberOfFrames (0028,0008)", "multi-frame"]);
}

#[test]
fn a_compressed_transfer_syntax_is_named() {
    let e = error_of(&fixture("compressed"));
    assert_contains(
        &e,
        &[
            "IM0000",
            "1.2.840.10008.1.2.4.50",
            "JPEG Baseline",
            "decompress",
        ],
    );
}

#[test]
fn non_dicom_files_are_skipped_but_not_all_of_them() {
    let dir = scratch("non-dicom");
    copy_fixture("series", &dir);
    std::fs::write(dir.join("notes.txt"), "acquired on the 3 T scanner\n").unwrap();
    std::fs::write(dir.join(".DS_Store"), [0u8; 10]).unwrap();
    let s = read_series(&dir).unwrap();
    assert_values(&s);
    let only = scratch("only-text");
    std::fs::write(only.join("notes.txt"), "nothing here\n").unwrap();
    let e = error_of(&only);
    assert_contains(&e, &["no DICOM images", "notes.txt"]);
    let e = error_of(&only.join("notes.txt"));
    assert_contains(&e, &["notes.txt", "not a DICOM file"]);
    std::fs::remove_dir_all(&dir).unwrap();
    std::fs::remove_dir_all(&only).unwrap();
}

#[test]
fn a_truncated_file_is_an_error_naming_it() {
    let dir = scratch("truncated");
    copy_fixture("series", &dir);
    let victim = dir.join("IM0007");
    let bytes = std::fs::read(&victim).unwrap();
    for keep in [bytes.len() - 20, 300, 140] {
        std::fs::write(&victim, &bytes[..keep]).unwrap();
        let e = error_of(&dir);
        assert_contains(&e, &["IM0007"]);
        assert!(
            e.contains("truncated") || e.contains("cannot read as DICOM"),
            "{e}"
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn damaged_files_give_errors_naming_them_never_panics() {
    // One file of the series, read as a one-slice, one-frame series, cut and corrupted.
    let good = std::fs::read(fixture("series/IM0000")).unwrap();
    let mut cases = truncations(&good);
    cases.extend(bit_flips(&good, 22, 300));
    let report = check_reader("dcm", &cases, |p| {
        read_series(p).map(|s| s.series.data.len())
    });
    eprintln!("{report}");
    report.assert_clean();
}

fn write_aif(dir: &Path, n: usize) -> PathBuf {
    let path = dir.join("aif.csv");
    let text: String = std::iter::once("aif".to_string())
        .chain((0..n).map(|i| {
            let t = i as f64 * 4.5;
            (5.0 * t * (-t / 6.0).exp()).to_string()
        }))
        .map(|line| line + "\n")
        .collect();
    std::fs::write(&path, text).unwrap();
    path
}

fn spec(dce: &Path, aif: &Path) -> InputSpec {
    InputSpec {
        model: Model::Tofts,
        dce: Some(dce.to_path_buf()),
        series: None,
        mask: None,
        curves: None,
        aif: Some(aif.display().to_string()),
        aif_mask: None,
        pv: None,
        pv_mask: None,
        times: None,
        dt: None,
        hematocrit: None,
        conversion: Conversion::None,
        t10: None,
        t1_map: None,
        b1_map: None,
    }
}

#[test]
fn maps_fitted_from_a_dicom_series_have_its_geometry() {
    let dir = scratch("round-trip");
    let aif = write_aif(&dir, 8);
    let job = load(&spec(&fixture("series"), &aif)).unwrap();
    let s = read_series(&fixture("series")).unwrap();
    assert_eq!(job.problem.times(), s.times.as_slice());
    assert_eq!(job.acquisition, Some(s.acquisition));
    assert_eq!(job.curves.nrows(), 6 * 5 * 3);
    let (fits, _) = fit(
        FitInput::new(job.curves.view(), &job.problem),
        &FitParams::new(Model::Tofts),
        &Device::cpu(),
    )
    .unwrap();
    let grid = job.volume.as_ref().unwrap();
    let map = scatter(fits.params.row(0), &grid.index, grid.shape);
    let path = dir.join("ktrans.nii.gz");
    write_map(&path, map.view(), &grid.header).unwrap();
    let (back, h) = read_volume(&path).unwrap();
    assert_eq!(back.dim(), (6, 5, 3));
    assert_affine(&h);
    for (a, b) in [h.srow_x, h.srow_y, h.srow_z].iter().zip([
        s.series.header.srow_x,
        s.series.header.srow_y,
        s.series.header.srow_z,
    ]) {
        assert_eq!(*a, b);
    }
    // A mask on that grid is taken; one of another shape is refused naming both files.
    let mut mask = ndarray::Array3::<u8>::zeros((6, 5, 3));
    mask[[2, 3, 1]] = 1;
    let mask_path = dir.join("mask.nii.gz");
    write_map(&mask_path, mask.view(), &grid.header).unwrap();
    let job = load(&InputSpec {
        mask: Some(mask_path.clone()),
        ..spec(&fixture("series"), &aif)
    })
    .unwrap();
    assert_eq!(job.names, vec!["2,3,1".to_string()]);
    let wrong = ndarray::Array3::<u8>::ones((5, 6, 3));
    write_map(&mask_path, wrong.view(), &grid.header).unwrap();
    let e = load(&InputSpec {
        mask: Some(mask_path.clone()),
        ..spec(&fixture("series"), &aif)
    })
    .unwrap_err()
    .to_string();
    assert_contains(&e, &["mask.nii.gz", "[5, 6, 3]", "[6, 5, 3]", "series"]);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn tissue_times_that_go_backwards_are_blamed_on_the_tissue_file() {
    let dir = scratch("blame");
    let curves = dir.join("curves.csv");
    std::fs::write(&curves, "time,v1\n0,0\n2,1\n4,2\n3,1\n6,1\n").unwrap();
    let aif = dir.join("aif.csv");
    std::fs::write(&aif, "time,aif\n0,0\n2,5\n4,3\n6,1\n8,0\n").unwrap();
    let e = load(&InputSpec {
        dce: None,
        curves: Some(curves.clone()),
        ..spec(Path::new(""), &aif)
    })
    .unwrap_err()
    .to_string();
    assert_contains(&e, &["curves.csv", "3 s does not follow 4 s"]);
    assert!(!e.contains("aif.csv"), "{e}");
    // Too few time points: the time vector's source is named, not the input function's.
    std::fs::write(&curves, "time,v1\n0,0\n2,1\n4,2\n").unwrap();
    std::fs::write(&aif, "aif\n0\n5\n3\n").unwrap();
    let e = load(&InputSpec {
        dce: None,
        curves: Some(curves.clone()),
        ..spec(Path::new(""), &aif)
    })
    .unwrap_err()
    .to_string();
    assert_contains(&e, &["curves.csv", "3 time points"]);
    assert!(!e.contains("aif.csv"), "{e}");
    // An input function that is all zeros: its own file is named.
    std::fs::write(&curves, "time,v1\n0,0\n2,1\n4,2\n6,1\n").unwrap();
    std::fs::write(&aif, "aif\n0\n0\n0\n0\n").unwrap();
    let e = load(&InputSpec {
        dce: None,
        curves: Some(curves.clone()),
        ..spec(Path::new(""), &aif)
    })
    .unwrap_err()
    .to_string();
    assert_contains(&e, &["aif.csv", "arterial input function"]);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn spgr_settings_take_the_options_first_and_the_header_otherwise() {
    let a = Acquisition {
        flip_angle_deg: Some(15.0),
        tr_s: Some(0.0045),
        field_t: Some(3.0),
    };
    assert_eq!(a.spgr_settings(None, None), (Some(15.0), Some(0.0045)));
    assert_eq!(
        a.spgr_settings(Some(20.0), None),
        (Some(20.0), Some(0.0045))
    );
    assert_eq!(
        Acquisition::default().spgr_settings(None, Some(0.004)),
        (None, Some(0.004))
    );
}

/// `InputSpec::series` (`--series`) chooses one of several DICOM series under the folder
/// given, by number or UID, for the job and for the header lookup of the SPGR settings;
/// without it the error lists them; it is refused for a NIfTI series.
#[test]
fn a_job_reads_the_series_it_is_told_to_from_a_folder_of_several() {
    let dir = scratch("job-series");
    copy_fixture("series", &dir.join("a"));
    copy_fixture("midnight", &dir.join("b"));
    let aif = write_aif(&dir, 8);
    let e = load(&spec(&dir, &aif)).unwrap_err().to_string();
    assert_contains(
        &e,
        &[
            "2 DICOM series",
            "--series",
            "1. 1.2.826.0.1.3680043.8.498.10 \"dce oblique\"",
            "2. 1.2.826.0.1.3680043.8.498.11 \"dce midnight\"",
        ],
    );
    for (choice, tag) in [
        ("1", "series"),
        ("1.2.826.0.1.3680043.8.498.11", "midnight"),
    ] {
        let job = load(&InputSpec {
            series: Some(choice.into()),
            ..spec(&dir, &aif)
        })
        .unwrap();
        let want = read_series(&fixture(tag)).unwrap();
        assert_eq!(job.problem.times(), want.times.as_slice(), "{choice}");
        assert_eq!(job.acquisition, Some(want.acquisition), "{choice}");
        assert_eq!(
            job.volume.as_ref().unwrap().header.srow_x,
            want.series.header.srow_x
        );
        assert_eq!(
            perfusion_core::io::input::dce_acquisition(&dir, Some(choice)).unwrap(),
            Some(want.acquisition)
        );
    }
    let e = load(&InputSpec {
        series: Some("3".into()),
        ..spec(&dir, &aif)
    })
    .unwrap_err()
    .to_string();
    assert_contains(&e, &["no series `3`", "dce midnight"]);
    // A NIfTI series holds one series: --series is refused, naming the file.
    let nifti = dir.join("dce.nii");
    let s = read_series(&fixture("series")).unwrap();
    perfusion_core::io::nifti::write_series(&nifti, &s.series.data, [1.0; 3], 4.5).unwrap();
    let e = load(&InputSpec {
        series: Some("1".into()),
        ..spec(&nifti, &aif)
    })
    .unwrap_err()
    .to_string();
    assert_contains(&e, &["dce.nii", "--series 1", "NIfTI"]);
    std::fs::remove_dir_all(&dir).unwrap();
}
