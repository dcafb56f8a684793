//! `biogpu perfusion t1map` on synthetic variable-flip-angle images: T1 read back from the
//! maps it writes (one 3-D file per angle, or one 4-D file with a B1 map and a mask), and
//! bad inputs refused with a message and a non-zero exit, never a panic.

use crate::common::{self, scratch, stderr};
use ndarray::{Array3, Array4, Axis};
use perfusion_core::io::nifti::{read_header, read_volume, write_map, write_series};
use perfusion_core::t1::spgr_signal;
use std::path::Path;
use std::process::Output;

const ANGLES: [f64; 4] = [2.0, 5.0, 10.0, 15.0];
const TR: f64 = 0.005;
const SHAPE: (usize, usize, usize) = (6, 5, 3);

fn biogpu(args: &[&str]) -> Output {
    common::biogpu(&[&["perfusion", "t1map"][..], args].concat())
}

/// True T1 (s) of voxel (x, y, z): 0.3 to 3.2 s.
fn truth(x: usize, y: usize, z: usize) -> f64 {
    0.3 + 0.1 * (x + SHAPE.0 * y) as f64 + 0.05 * z as f64
}

/// The VFA images `(x, y, z, angle)` of M0 1000 at actual angles `b1` x nominal.
fn images(b1: f64) -> Array4<f32> {
    Array4::from_shape_fn((SHAPE.0, SHAPE.1, SHAPE.2, ANGLES.len()), |(x, y, z, a)| {
        spgr_signal(1000.0, truth(x, y, z), ANGLES[a] * b1, TR) as f32
    })
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// One 3-D file per angle; their paths comma-separated.
fn per_angle_files(dir: &Path, data: &Array4<f32>) -> String {
    let mut names = Vec::new();
    for a in 0..ANGLES.len() {
        let path = dir.join(format!("fa{a}.nii.gz"));
        let frame = data.index_axis(Axis(3), a).insert_axis(Axis(3)).to_owned();
        write_series(&path, &frame, [1.0, 1.0, 2.0], 0.0).unwrap();
        names.push(path.display().to_string());
    }
    names.join(",")
}

fn angles() -> String {
    ANGLES.map(|a| a.to_string()).join(",")
}

#[test]
fn t1map_recovers_t1_from_per_angle_files() {
    let dir = scratch("t1map-files");
    let vfa = per_angle_files(&dir, &images(1.0));
    let out = dir.join("out");
    let o = biogpu(&[
        "--vfa",
        &vfa,
        "--flip-angles",
        &angles(),
        "--tr",
        "0.005",
        "--out",
        s(&out),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let (t1, header) = read_volume(&out.join("t1.nii.gz")).unwrap();
    let (status, _) = read_volume(&out.join("t1_status.nii.gz")).unwrap();
    let (m0, _) = read_volume(&out.join("m0.nii.gz")).unwrap();
    assert_eq!(t1.dim(), SHAPE);
    assert_eq!(header.pixdim[3], 2.0);
    for ((x, y, z), &v) in t1.indexed_iter() {
        // f32 images: T1 to 1e-4.
        assert!(
            (f64::from(v) / truth(x, y, z) - 1.0).abs() < 1e-4,
            "{x},{y},{z}: {v}"
        );
        assert_eq!(status[[x, y, z]], 0.0);
        assert!((m0[[x, y, z]] / 1000.0 - 1.0).abs() < 1e-4);
    }
    assert!(out.join("t1_z1.png").is_file());
    let summary = std::fs::read_to_string(out.join("summary.json")).unwrap();
    assert!(summary.contains("\"ok\": 90"), "{summary}");
    // A second run into the same folder is refused; --force replaces.
    let again = biogpu(&[
        "--vfa",
        &vfa,
        "--flip-angles",
        &angles(),
        "--tr",
        "0.005",
        "--out",
        s(&out),
    ]);
    assert!(!again.status.success() && stderr(&again).contains("t1.nii.gz"));
    let forced = biogpu(&[
        "--vfa",
        &vfa,
        "--flip-angles",
        &angles(),
        "--tr",
        "0.005",
        "--out",
        s(&out),
        "--force",
    ]);
    assert!(forced.status.success(), "{}", stderr(&forced));
}

#[test]
fn t1map_reads_one_4d_file_with_a_b1_map_and_a_mask() {
    let dir = scratch("t1map-4d");
    let vfa = dir.join("vfa.nii.gz");
    write_series(&vfa, &images(0.85), [1.0, 1.0, 2.0], 0.0).unwrap();
    let header = read_header(&vfa).unwrap();
    let b1 = dir.join("b1.nii.gz");
    write_map(&b1, Array3::from_elem(SHAPE, 0.85f32).view(), &header).unwrap();
    let mask = Array3::from_shape_fn(SHAPE, |(x, _, _)| u8::from(x > 0));
    let mask_path = dir.join("mask.nii.gz");
    write_map(&mask_path, mask.view(), &header).unwrap();
    let out = dir.join("out");
    let o = biogpu(&[
        "--vfa",
        s(&vfa),
        "--flip-angles",
        &angles(),
        "--tr",
        "0.005",
        "--b1",
        s(&b1),
        "--mask",
        s(&mask_path),
        "--slice",
        "0",
        "--out",
        s(&out),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let (t1, _) = read_volume(&out.join("t1.nii.gz")).unwrap();
    let (status, _) = read_volume(&out.join("t1_status.nii.gz")).unwrap();
    for ((x, y, z), &v) in t1.indexed_iter() {
        if x == 0 {
            assert!(v.is_nan() && status[[x, y, z]] == 255.0);
        } else {
            assert!(
                (f64::from(v) / truth(x, y, z) - 1.0).abs() < 1e-4,
                "{x},{y},{z}: {v}"
            );
        }
    }
    assert!(out.join("t1_z0.png").is_file());
}

#[test]
fn bad_inputs_are_clear_errors_not_panics() {
    let dir = scratch("t1map-bad");
    let data = images(1.0);
    let vfa = per_angle_files(&dir, &data);
    let four_d = dir.join("vfa4.nii.gz");
    write_series(&four_d, &data, [1.0, 1.0, 2.0], 0.0).unwrap();
    let header = read_header(&four_d).unwrap();
    let b1 = dir.join("b1.nii.gz");
    write_map(
        &b1,
        Array3::from_shape_fn(SHAPE, |(x, _, _)| x as f32 / 5.0).view(),
        &header,
    )
    .unwrap();
    let out = dir.join("out");
    let angles = angles();
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (
            vec!["--vfa", &vfa, "--flip-angles", "2,5,10", "--tr", "0.005"],
            "give one angle per image",
        ),
        (
            vec![
                "--vfa",
                s(&four_d),
                "--flip-angles",
                "2,5,10",
                "--tr",
                "0.005",
            ],
            "4 volume(s)",
        ),
        (
            vec!["--vfa", &vfa, "--flip-angles", "2", "--tr", "0.005"],
            "at least 2 flip angles",
        ),
        (
            vec![
                "--vfa",
                &vfa,
                "--flip-angles",
                "2,5,10,200",
                "--tr",
                "0.005",
            ],
            "between 0 and 180",
        ),
        (
            vec!["--vfa", &vfa, "--flip-angles", &angles, "--tr", "0"],
            "`tr` = 0",
        ),
        (
            vec![
                "--vfa",
                &vfa,
                "--flip-angles",
                &angles,
                "--tr",
                "0.005",
                "--b1",
                s(&b1),
            ],
            "at voxel 0,0,0",
        ),
        (
            vec![
                "--vfa",
                &vfa,
                "--flip-angles",
                &angles,
                "--tr",
                "0.005",
                "--slice",
                "3",
            ],
            "3 slices",
        ),
        (
            vec![
                "--vfa",
                &vfa,
                "--flip-angles",
                &angles,
                "--tr",
                "0.005",
                "--t1-range",
                "1",
            ],
            "LOWER:UPPER",
        ),
        (
            vec![
                "--vfa",
                "missing.nii.gz",
                "--flip-angles",
                "2,5",
                "--tr",
                "0.005",
            ],
            "missing.nii.gz",
        ),
    ];
    for (args, want) in cases {
        let mut args = args.clone();
        args.extend(["--out", s(&out)]);
        let o = biogpu(&args);
        let err = stderr(&o);
        assert!(!o.status.success(), "{args:?} succeeded");
        assert!(err.contains(want), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        assert!(!out.join("t1.nii.gz").exists());
    }
}
