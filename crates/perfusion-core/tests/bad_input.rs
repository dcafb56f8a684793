//! Corrupted NIfTI series, CSV curves and job inputs: every reader must return an error that
//! names the file (or read the file), never panic, hang or allocate without bound.

#[global_allocator]
static ALLOC: bad_input::CappedAlloc = bad_input::CappedAlloc::new(2 << 30);

/// DICOM reading, under the same capped allocator.
mod dicom;

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use bad_input::{Case, bit_flips, check_reader, extreme_numbers, extreme_values, truncations};
use ndarray::Array4;
use perfusion_core::Model;
use perfusion_core::convert::Conversion;
use perfusion_core::io::input::{InputSpec, load};
use perfusion_core::io::{csv as pcsv, nifti as pnii};

/// Offsets of the NIfTI-1 header fields a reader sizes or interprets data by: sizeof_hdr,
/// dim[0..8], datatype, bitpix, pixdim[0..8], vox_offset, scl_slope, scl_inter, xyzt_units,
/// magic, extender.
const NIFTI_FIELDS: [usize; 29] = [
    0, 40, 42, 44, 46, 48, 50, 52, 54, 70, 72, 76, 80, 84, 88, 92, 96, 100, 104, 108, 112, 116,
    123, 344, 345, 346, 347, 348, 349,
];

/// A fresh scratch folder for this test binary.
fn scratch(tag: &str) -> PathBuf {
    let dir =
        std::env::temp_dir().join(format!("perfusion-bad-input-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A small valid series (3x4x2 voxels, 6 frames of f32) written with the crate's writer.
fn good_series(dir: &Path, name: &str) -> Vec<u8> {
    let data = Array4::from_shape_fn((3, 4, 2, 6), |(x, y, z, t)| {
        (x + 10 * y + 100 * z) as f32 + 0.5 * t as f32
    });
    let path = dir.join(name);
    pnii::write_series(&path, &data, [1.5, 1.5, 3.0], 2.0).unwrap();
    std::fs::read(&path).unwrap()
}

fn set_i16(bytes: &mut [u8], at: usize, v: i16) {
    bytes[at..at + 2].copy_from_slice(&v.to_le_bytes());
}

fn nifti_cases(good: &[u8], seed: u64, flips: usize) -> Vec<Case> {
    let mut cases = truncations(good);
    cases.extend(bit_flips(good, seed, flips));
    cases.extend(extreme_values(good, &NIFTI_FIELDS));
    cases
}

#[test]
fn corrupted_nifti_files_give_errors_naming_the_file() {
    let dir = scratch("nii");
    let good = good_series(&dir, "good.nii");
    assert!(pnii::read_series(&dir.join("good.nii")).is_ok());
    let cases = nifti_cases(&good, 20, 400);
    let report = check_reader("nii", &cases, pnii::read_series);
    eprintln!("{report}");
    report.assert_clean();
    let report = check_reader("nii", &cases, pnii::read_header);
    eprintln!("header only: {report}");
    report.assert_clean();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn corrupted_nifti_gz_files_give_errors_naming_the_file() {
    let dir = scratch("niigz");
    let good = good_series(&dir, "good.nii.gz");
    assert!(pnii::read_series(&dir.join("good.nii.gz")).is_ok());
    let mut cases = truncations(&good);
    cases.extend(bit_flips(&good, 21, 300));
    let report = check_reader("nii.gz", &cases, pnii::read_series);
    eprintln!("{report}");
    report.assert_clean();

    // A plain file named .gz is refused cleanly.
    let plain = good_series(&dir, "plain.nii");
    let report = check_reader("nii.gz", &[Case::new("plain bytes", plain)], |p| {
        pnii::read_series(p)
    });
    eprintln!("{report}");
    report.assert_clean();
    let _ = std::fs::remove_dir_all(&dir);
}

fn read_err(dir: &Path, name: &str, bytes: &[u8]) -> String {
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    let err = pnii::read_series(&path).unwrap_err().to_string();
    assert!(err.contains(name), "{err}");
    err
}

#[test]
fn nifti_bitpix_disagreeing_with_datatype_is_an_error_not_a_panic() {
    let dir = scratch("bitpix");
    let mut bytes = good_series(&dir, "g.nii");
    // float32 (16) with 8 bits per voxel: the `nifti` crate panics on this header.
    set_i16(&mut bytes, 72, 8);
    let err = read_err(&dir, "bitpix.nii", &bytes);
    assert!(
        err.contains("bitpix") && err.contains("byte 72") && err.contains("has 32"),
        "{err}"
    );
    // uint8 data type with the float32 layout's bitpix.
    let mut bytes = good_series(&dir, "g.nii");
    set_i16(&mut bytes, 70, 2);
    let err = read_err(&dir, "datatype.nii", &bytes);
    assert!(err.contains("bitpix") && err.contains("has 8"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn nifti_rgb_datatype_is_refused_as_unsupported() {
    let dir = scratch("rgb");
    let mut bytes = good_series(&dir, "g.nii");
    set_i16(&mut bytes, 70, 128);
    set_i16(&mut bytes, 72, 24);
    let err = read_err(&dir, "rgb.nii", &bytes);
    assert!(
        err.contains("unsupported data type 128") && err.contains("RGB24"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn nifti_sizes_are_checked_against_the_file_before_reading() {
    let dir = scratch("sizes");
    let good = good_series(&dir, "g.nii");
    // 30000 frames in a file holding 6: refused from the header, nothing reserved.
    let mut bytes = good.clone();
    set_i16(&mut bytes, 48, 30000);
    let before = ALLOC.live();
    let err = read_err(&dir, "frames.nii", &bytes);
    assert!(ALLOC.live() < before + (1 << 20));
    assert!(
        err.contains("truncated") && err.contains("declares"),
        "{err}"
    );
    // One frame fewer than the data: extra bytes are an error, not silently dropped.
    let mut bytes = good.clone();
    set_i16(&mut bytes, 48, 5);
    let err = read_err(&dir, "fewer.nii", &bytes);
    assert!(err.contains("longer than its header says"), "{err}");
    // A zero dimension and a NaN voxel size.
    let mut bytes = good.clone();
    set_i16(&mut bytes, 44, 0);
    let err = read_err(&dir, "zero.nii", &bytes);
    assert!(
        err.contains("dim[2]") && err.contains("at least 1"),
        "{err}"
    );
    let mut bytes = good.clone();
    bytes[80..84].copy_from_slice(&f32::NAN.to_le_bytes());
    let err = read_err(&dir, "nan.nii", &bytes);
    assert!(err.contains("pixdim[1]") && err.contains("finite"), "{err}");
    // vox_offset inside the header.
    let mut bytes = good.clone();
    bytes[108..112].copy_from_slice(&100.0f32.to_le_bytes());
    let err = read_err(&dir, "offset.nii", &bytes);
    assert!(err.contains("vox_offset"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// CRC-32 (IEEE), bit by bit: enough for the few small files written here.
fn crc32(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in bytes {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0xEDB8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

/// `bytes` as a gzip file of stored (uncompressed) DEFLATE blocks, so that any decompressed
/// content, a corrupt header included, can be written as .nii.gz.
fn gzip_stored(bytes: &[u8]) -> Vec<u8> {
    let mut out = vec![0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 255];
    let chunks: Vec<&[u8]> = bytes.chunks(65535).collect();
    for (i, chunk) in chunks.iter().enumerate() {
        out.push(u8::from(i + 1 == chunks.len()));
        let len = chunk.len() as u16;
        out.extend(len.to_le_bytes());
        out.extend((!len).to_le_bytes());
        out.extend_from_slice(chunk);
    }
    out.extend(crc32(bytes).to_le_bytes());
    out.extend((bytes.len() as u32).to_le_bytes());
    out
}

#[test]
fn nifti_gz_header_fields_are_checked_like_nii() {
    let dir = scratch("gzfields");
    let plain = good_series(&dir, "g.nii");
    let path = dir.join("stored.nii.gz");
    std::fs::write(&path, gzip_stored(&plain)).unwrap();
    assert_eq!(
        pnii::read_series(&path).unwrap().data,
        pnii::read_series(&dir.join("g.nii")).unwrap().data
    );
    // Every extreme header value of the .nii cases, inside a valid gzip stream.
    let cases: Vec<Case> = extreme_values(&plain, &NIFTI_FIELDS)
        .into_iter()
        .map(|c| Case::new(c.label, gzip_stored(&c.bytes)))
        .collect();
    let report = check_reader("nii.gz", &cases, pnii::read_series);
    eprintln!("stored gzip, extreme header values: {report}");
    report.assert_clean();

    // 32000^3 voxels declared by a 1 KiB gzip file: refused before anything is reserved.
    let mut huge = plain.clone();
    for (at, v) in [(42, 32000i16), (44, 32000), (46, 1), (48, 1)] {
        set_i16(&mut huge, at, v);
    }
    let before = ALLOC.live();
    let err = read_err(&dir, "huge.nii.gz", &gzip_stored(&huge));
    assert!(ALLOC.live() < before + (1 << 20));
    assert!(err.contains("gzip file can hold"), "{err}");
    // Decompressed data longer than the header says.
    let mut long = plain.clone();
    long.extend([0u8; 16]);
    let err = read_err(&dir, "long.nii.gz", &gzip_stored(&long));
    assert!(err.contains("longer than its header says"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

fn curves_csv() -> String {
    let mut s = String::from("time,v1,v2\n");
    for i in 0..8 {
        let t = f64::from(i) * 2.0;
        writeln!(s, "{t},{},{}", 0.1 * t, 0.05 * t + 1.0).unwrap();
    }
    s
}

fn aif_csv() -> String {
    let mut s = String::from("time,aif\n");
    for i in 0..8 {
        let t = f64::from(i) * 2.0;
        let v = if i == 0 { 0.0 } else { 5.0 / f64::from(i) };
        writeln!(s, "{t},{v}").unwrap();
    }
    s
}

fn csv_cases(text: &str, seed: u64) -> Vec<Case> {
    let good = text.as_bytes();
    let mut cases = truncations(good);
    cases.extend(bit_flips(good, seed, 300));
    cases.extend(extreme_numbers(text, 40));
    cases
}

#[test]
fn corrupted_csv_tables_give_errors_naming_the_file() {
    let text = curves_csv();
    let cases = csv_cases(&text, 22);
    let report = check_reader("csv", &cases, pcsv::read_table);
    eprintln!("{report}");
    report.assert_clean();
}

fn spec(curves: PathBuf, aif: &Path) -> InputSpec {
    InputSpec {
        model: Model::Tofts,
        dce: None,
        series: None,
        mask: None,
        curves: Some(curves),
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
fn corrupted_job_inputs_give_errors_naming_the_file() {
    let dir = scratch("job");
    let aif = dir.join("aif.csv");
    std::fs::write(&aif, aif_csv()).unwrap();
    let curves = dir.join("curves.csv");
    std::fs::write(&curves, curves_csv()).unwrap();
    load(&spec(curves.clone(), &aif)).unwrap();

    // The tissue curves corrupted, the input function good.
    let cases = csv_cases(&curves_csv(), 23);
    let aif2 = aif.clone();
    let report = check_reader("csv", &cases, move |p| load(&spec(p.to_path_buf(), &aif2)));
    eprintln!("job, curves corrupted: {report}");
    report.assert_clean();

    // The input function corrupted, the tissue curves good.
    let cases = csv_cases(&aif_csv(), 24);
    let curves2 = curves.clone();
    let report = check_reader("csv", &cases, move |p| load(&spec(curves2.clone(), p)));
    eprintln!("job, input function corrupted: {report}");
    report.assert_clean();

    // A series with a mask and an ROI input, the mask corrupted.
    let series = dir.join("dce.nii");
    good_series(&dir, "dce.nii");
    let mask = Array4::from_shape_fn((3, 4, 2, 1), |(x, _, _, _)| f32::from(x == 1));
    let mask_path = dir.join("mask.nii");
    pnii::write_series(&mask_path, &mask, [1.5, 1.5, 3.0], 0.0).unwrap();
    let good_mask = std::fs::read(&mask_path).unwrap();
    let mut cases = truncations(&good_mask);
    cases.extend(bit_flips(&good_mask, 25, 200));
    cases.extend(extreme_values(&good_mask, &NIFTI_FIELDS));
    let report = check_reader("nii", &cases, move |p| {
        load(&InputSpec {
            dce: Some(series.clone()),
            curves: None,
            aif: None,
            aif_mask: Some(p.to_path_buf()),
            mask: Some(p.to_path_buf()),
            dt: Some(2.0),
            ..spec(PathBuf::new(), Path::new(""))
        })
    });
    eprintln!("job, mask corrupted: {report}");
    report.assert_clean();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn csv_times_must_be_finite_and_increasing_and_values_finite() {
    let dir = scratch("times");
    let path = dir.join("t.csv");
    for (text, want) in [
        ("time,a\n0,1\n2,2\n2,3\n", "line 4"),
        ("time,a\n0,1\nnan,2\n4,3\n", "line 3"),
        ("time,a\n0,1\n1,inf\n", "not a finite number"),
        ("time,a\n0,1\n1,1e400\n", "not a finite number"),
        ("time,,a\n0,1,2\n", "no name"),
        ("a,A\n0,1\n", "appears twice"),
    ] {
        std::fs::write(&path, text).unwrap();
        let err = pcsv::read_table(&path).unwrap_err().to_string();
        assert!(
            err.contains("t.csv") && err.contains(want),
            "{text:?}: {err}"
        );
    }
    // Times from the first column of a --times file, NaN in an input function.
    let aif = dir.join("aif.csv");
    std::fs::write(&aif, aif_csv()).unwrap();
    let curves = dir.join("curves.csv");
    std::fs::write(&curves, curves_csv()).unwrap();
    let times = dir.join("times.csv");
    std::fs::write(&times, "s\n0\n1\n3\n2\n4\n5\n6\n7\n").unwrap();
    let err = load(&InputSpec {
        times: Some(times.clone()),
        ..spec(curves.clone(), &aif)
    })
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("times.csv") && err.contains("line 5") && err.contains("increase"),
        "{err}"
    );
    std::fs::write(&aif, aif_csv().replace("\n4,2.5\n", "\n4,nan\n")).unwrap();
    let err = load(&spec(curves.clone(), &aif)).unwrap_err().to_string();
    assert!(
        err.contains("aif.csv") && err.contains("line 4") && err.contains("input function"),
        "{err}"
    );
    // A zero or negative --dt.
    for dt in [0.0, -1.0, f64::NAN] {
        std::fs::write(&aif, aif_csv()).unwrap();
        let err = load(&InputSpec {
            dt: Some(dt),
            ..spec(curves.clone(), &aif)
        });
        let err = err.unwrap_err().to_string();
        assert!(
            err.contains("--dt") && err.contains("> 0"),
            "--dt {dt}: {err}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
