//! NIfTI-2 in and out, against nibabel 5. The fixtures in `tests/data` are written by
//! `tests/data/make_nifti2.py` (see its docstring): series read as nibabel reads them; maps
//! written from a NIfTI-2 series are NIfTI-2 and hold, field by field and voxel by voxel, what
//! nibabel writes for the same map with the series' header; NIfTI-1 inputs keep NIfTI-1
//! outputs; our NIfTI-2 files read back identical. A NIfTI-2 file whose dimensions do not fit
//! NIfTI-1 is refused by name.

use gpu_runtime::Device;
use ndarray::{Array3, Array4, ArrayView3, Axis};
use perfusion_core::convert::Conversion;
use perfusion_core::io::input::{InputSpec, load};
use perfusion_core::io::nifti::{
    NiftiHeader, NiftiVersion, frame_interval_s, read_header, read_series, read_volume, scatter,
    write_map, write_series,
};
use perfusion_core::{FitInput, FitParams, Model, fit};
use std::io::Read;
use std::path::{Path, PathBuf};

fn data(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name)
}

fn scratch(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("perfusion-nifti2-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The (decompressed) bytes of a file.
fn bytes(path: &Path) -> Vec<u8> {
    let mut out = Vec::new();
    let file = std::io::BufReader::new(std::fs::File::open(path).unwrap());
    if path.extension().is_some_and(|e| e == "gz") {
        nifti::object::GzDecodedFile::new(file)
            .read_to_end(&mut out)
            .unwrap();
    } else {
        { file }.read_to_end(&mut out).unwrap();
    }
    out
}

#[derive(Debug, Clone, Copy)]
enum Kind {
    Int(usize),
    F64,
    Bytes(usize),
}

/// Every field of the NIfTI-2 header: name, byte offset, kind (little-endian).
const FIELDS: &[(&str, usize, Kind)] = {
    use Kind::*;
    &[
        ("sizeof_hdr", 0, Int(4)),
        ("magic", 4, Bytes(8)),
        ("datatype", 12, Int(2)),
        ("bitpix", 14, Int(2)),
        ("dim[0]", 16, Int(8)),
        ("dim[1]", 24, Int(8)),
        ("dim[2]", 32, Int(8)),
        ("dim[3]", 40, Int(8)),
        ("dim[4]", 48, Int(8)),
        ("dim[5]", 56, Int(8)),
        ("dim[6]", 64, Int(8)),
        ("dim[7]", 72, Int(8)),
        ("intent_p1", 80, F64),
        ("intent_p2", 88, F64),
        ("intent_p3", 96, F64),
        ("pixdim[0]", 104, F64),
        ("pixdim[1]", 112, F64),
        ("pixdim[2]", 120, F64),
        ("pixdim[3]", 128, F64),
        ("pixdim[4]", 136, F64),
        ("pixdim[5]", 144, F64),
        ("pixdim[6]", 152, F64),
        ("pixdim[7]", 160, F64),
        ("vox_offset", 168, Int(8)),
        ("scl_slope", 176, F64),
        ("scl_inter", 184, F64),
        ("cal_max", 192, F64),
        ("cal_min", 200, F64),
        ("slice_duration", 208, F64),
        ("toffset", 216, F64),
        ("slice_start", 224, Int(8)),
        ("slice_end", 232, Int(8)),
        ("descrip", 240, Bytes(80)),
        ("aux_file", 320, Bytes(24)),
        ("qform_code", 344, Int(4)),
        ("sform_code", 348, Int(4)),
        ("quatern_b", 352, F64),
        ("quatern_c", 360, F64),
        ("quatern_d", 368, F64),
        ("qoffset_x", 376, F64),
        ("qoffset_y", 384, F64),
        ("qoffset_z", 392, F64),
        ("srow_x[0]", 400, F64),
        ("srow_x[1]", 408, F64),
        ("srow_x[2]", 416, F64),
        ("srow_x[3]", 424, F64),
        ("srow_y[0]", 432, F64),
        ("srow_y[1]", 440, F64),
        ("srow_y[2]", 448, F64),
        ("srow_y[3]", 456, F64),
        ("srow_z[0]", 464, F64),
        ("srow_z[1]", 472, F64),
        ("srow_z[2]", 480, F64),
        ("srow_z[3]", 488, F64),
        ("slice_code", 496, Int(4)),
        ("xyzt_units", 500, Int(4)),
        ("intent_code", 504, Int(4)),
        ("intent_name", 508, Bytes(16)),
        ("dim_info", 524, Bytes(1)),
        ("unused_str", 525, Bytes(15)),
        ("extension", 540, Bytes(4)),
    ]
};

/// Our maps' `descrip` (byte 240, 80 bytes) names the build that wrote them, NUL-padded,
/// where nibabel's copies the reference's.
fn assert_stamped(what: &str, ours: &[u8]) {
    let note = imaging_io::software_note().as_bytes();
    let descrip = &ours[240..320];
    assert!(
        descrip.starts_with(&note[..note.len().min(79)]),
        "{what}: descrip"
    );
    assert!(
        descrip[note.len().min(79)..].iter().all(|&b| b == 0),
        "{what}: descrip padding"
    );
}

fn int_at(b: &[u8], o: usize, n: usize) -> i64 {
    let mut v = [0u8; 8];
    v[..n].copy_from_slice(&b[o..o + n]);
    let x = i64::from_le_bytes(v);
    (x << (64 - 8 * n)) >> (64 - 8 * n)
}

fn f64_at(b: &[u8], o: usize) -> f64 {
    f64::from_le_bytes(b[o..o + 8].try_into().unwrap())
}

/// Check the header of `ours` against nibabel's `theirs`, field by field (`skip`: fields not
/// compared), as written: integers and bytes equal, and 64-bit floats equal to nibabel's
/// rounded to 32 bits (our reader holds the header in NIfTI-1's 32-bit fields; nibabel's
/// values that are exact in 32 bits are matched exactly).
fn assert_header_matches(what: &str, ours: &[u8], theirs: &[u8], skip: &[&str]) {
    assert!(ours.len() >= 544 && theirs.len() >= 544, "{what}");
    for &(name, o, kind) in FIELDS {
        if skip.contains(&name) {
            continue;
        }
        match kind {
            Kind::Int(n) => assert_eq!(
                int_at(ours, o, n),
                int_at(theirs, o, n),
                "{what}: field `{name}` (byte {o})"
            ),
            Kind::Bytes(n) => assert_eq!(
                &ours[o..o + n],
                &theirs[o..o + n],
                "{what}: field `{name}` (byte {o})"
            ),
            Kind::F64 => {
                let (a, b) = (f64_at(ours, o), f64_at(theirs, o));
                assert_eq!(
                    a.to_bits(),
                    f64::from(b as f32).to_bits(),
                    "{what}: field `{name}` (byte {o}): ours {a}, nibabel {b}"
                );
            }
        }
    }
}

/// Our map of `map` written with `reference` as `name` (.nii or .nii.gz) in `dir`, checked
/// against nibabel's `expected`: header field by field, then the voxel bytes and length.
fn check_against_nibabel<T>(
    dir: &Path,
    name: &str,
    map: ArrayView3<T>,
    reference: &NiftiHeader,
    expected: &str,
) where
    T: nifti::DataElement + bytemuck::Pod,
{
    let path = dir.join(name);
    write_map(&path, map, reference).unwrap();
    let ours = bytes(&path);
    let theirs = bytes(&data(expected));
    let what = format!("{name} against nibabel's {expected}");
    assert_header_matches(&what, &ours, &theirs, &["descrip"]);
    assert_stamped(&what, &ours);
    assert_eq!(ours.len(), theirs.len(), "{what}: file length");
    assert!(ours[544..] == theirs[544..], "{what}: voxel data differ");
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
        assert_eq!(NiftiVersion::of(&s.header), NiftiVersion::Nifti2, "{name}");
        let h = read_header(&data(name)).unwrap();
        assert_eq!(h.dim, s.header.dim);
        assert_eq!(NiftiVersion::of(&h), NiftiVersion::Nifti2, "{name}");
    }
    // nibabel: int16 raw * 0.5 + 10; [0,0,0,0] -15, [4,3,2,5] 35.5 (raw 359 * 7 % 201 - 50
    // = 51), frames of 3500 ms.
    let s = read_series(&data("oblique_nifti2.nii")).unwrap();
    assert_eq!(s.data.dim(), (5, 4, 3, 6));
    assert_eq!(s.data[[0, 0, 0, 0]], -15.0);
    assert_eq!(s.data[[4, 3, 2, 5]], 35.5);
    assert_eq!(frame_interval_s(&s.header), Some(3.5));
    assert_eq!((s.header.qform_code, s.header.sform_code), (1, 4));
}

#[test]
fn maps_from_nifti2_series_are_the_nifti2_files_nibabel_writes() {
    let dir = scratch("maps");
    for input in ["series_nifti2.nii", "series_nifti2.nii.gz"] {
        let s = read_series(&data(input)).unwrap();
        let last = s.data.index_axis(Axis(3), 4);
        for out in ["last.nii", "last.nii.gz"] {
            check_against_nibabel(&dir, out, last, &s.header, "map_series_nifti2.nii");
        }
    }
    let s = read_series(&data("oblique_nifti2.nii")).unwrap();
    let last = s.data.index_axis(Axis(3), 5);
    let status = s.data.index_axis(Axis(3), 0).mapv(|v| u8::from(v > 40.0));
    for out in ["oblique.nii", "oblique.nii.gz"] {
        check_against_nibabel(&dir, out, last, &s.header, "map_oblique_nifti2.nii");
        let out = format!("status_{out}");
        check_against_nibabel(
            &dir,
            &out,
            status.view(),
            &s.header,
            "status_oblique_nifti2.nii",
        );
    }
    // Rounded to 32 bits, not equal: the qform quaternion and the rotated sform.
    let ours = bytes(&dir.join("oblique.nii"));
    let theirs = bytes(&data("map_oblique_nifti2.nii"));
    assert_ne!(ours[352..400], theirs[352..400]);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_fit_of_a_nifti2_series_writes_nifti2_maps() {
    // As `biogpu perfusion fit --dce series_nifti2.nii --aif-mask aif.nii` does.
    let dir = scratch("fit");
    let series = read_series(&data("series_nifti2.nii")).unwrap();
    let mut aif = Array3::<u8>::zeros((4, 3, 2));
    aif[[0, 0, 0]] = 1;
    let aif_path = dir.join("aif.nii.gz");
    write_map(&aif_path, aif.view(), &series.header).unwrap();
    let job = load(&InputSpec {
        model: Model::Tofts,
        dce: Some(data("series_nifti2.nii")),
        series: None,
        mask: None,
        curves: None,
        aif: None,
        aif_mask: Some(aif_path),
        pv: None,
        pv_mask: None,
        times: None,
        dt: None,
        hematocrit: None,
        conversion: Conversion::None,
        t10: None,
        t1_map: None,
        b1_map: None,
    })
    .unwrap();
    let (fits, _) = fit(
        FitInput::new(job.curves.view(), &job.problem),
        &FitParams::new(Model::Tofts),
        &Device::cpu(),
    )
    .unwrap();
    let grid = job.volume.as_ref().unwrap();
    assert_eq!(NiftiVersion::of(&grid.header), NiftiVersion::Nifti2);
    let map = scatter(fits.params.row(0), &grid.index, grid.shape);
    let path = dir.join("ktrans.nii.gz");
    write_map(&path, map.view(), &grid.header).unwrap();
    let ours = bytes(&path);
    let theirs = bytes(&data("map_series_nifti2.nii"));
    assert_header_matches("ktrans.nii.gz", &ours, &theirs, &["descrip"]);
    assert_stamped("ktrans.nii.gz", &ours);
    let (back, h) = read_volume(&path).unwrap();
    assert_eq!(NiftiVersion::of(&h), NiftiVersion::Nifti2);
    assert!(
        back.iter()
            .zip(&map)
            .all(|(a, b)| a.to_bits() == b.to_bits())
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn nifti2_maps_read_back_identical() {
    let dir = scratch("round-trip");
    let s = read_series(&data("oblique_nifti2.nii")).unwrap();
    // NaN outside a mask, as the fit writes, and values that need all 32 bits.
    let map = Array3::from_shape_fn((5, 4, 3), |(x, y, z)| {
        if (x + y + z) % 4 == 0 {
            f32::NAN
        } else {
            (x as f32 + 0.1) * (y as f32 - 1.7) / (z as f32 + 0.3)
        }
    });
    let frame = s.data.index_axis(Axis(3), 2).to_owned();
    for name in ["m.nii", "m.nii.gz"] {
        let path = dir.join(name);
        write_map(&path, map.view(), &s.header).unwrap();
        let (back, h) = read_volume(&path).unwrap();
        assert!(
            back.iter()
                .zip(&map)
                .all(|(a, b)| a.to_bits() == b.to_bits()),
            "{name}"
        );
        assert_eq!(NiftiVersion::of(&h), NiftiVersion::Nifti2, "{name}");
        // The header as the reference had it, less the time axis, unscaled, float32.
        let mut want = s.header.clone();
        want.dim = [3, 5, 4, 3, 1, 1, 1, 1];
        want.pixdim[4] = 0.0;
        want.xyzt_units &= 0x07;
        (want.datatype, want.bitpix, want.scl_slope, want.scl_inter) = (16, 32, 1.0, 0.0);
        want.descrip = imaging_io::software_note().as_bytes().to_vec();
        want.descrip.resize(80, 0);
        assert_eq!(h, want, "{name}");
        assert_eq!(read_header(&path).unwrap(), want, "{name}");
        // And a map of the series' own (scaled) values.
        write_map(&path, frame.view(), &s.header).unwrap();
        assert_eq!(read_volume(&path).unwrap().0, frame, "{name}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn nifti1_inputs_keep_nifti1_outputs() {
    let dir = scratch("nifti1");
    let series = dir.join("s.nii.gz");
    let data4 = Array4::from_shape_fn((3, 2, 2, 4), |(x, y, z, t)| (x + y + z + t) as f32);
    write_series(&series, &data4, [1.5, 1.5, 3.0], 2.0).unwrap();
    assert_eq!(&bytes(&series)[0..4], &348i32.to_le_bytes());
    let s = read_series(&series).unwrap();
    assert_eq!(NiftiVersion::of(&s.header), NiftiVersion::Nifti1);
    assert_eq!(
        NiftiVersion::of(&read_header(&series).unwrap()),
        NiftiVersion::Nifti1
    );
    let frame = s.data.index_axis(Axis(3), 3);
    for name in ["m.nii", "m.nii.gz"] {
        let path = dir.join(name);
        write_map(&path, frame, &s.header).unwrap();
        let b = bytes(&path);
        assert_eq!(&b[0..4], &348i32.to_le_bytes(), "{name}");
        assert_eq!(&b[344..348], b"n+1\0", "{name}");
        assert_eq!(b.len(), 352 + 12 * 4, "{name}");
        let (back, h) = read_volume(&path).unwrap();
        assert_eq!(back, frame);
        assert_eq!(NiftiVersion::of(&h), NiftiVersion::Nifti1);
        // Marked NIfTI-2, the same header gives NIfTI-2 with the same content.
        let mut h2 = s.header.clone();
        NiftiVersion::Nifti2.mark(&mut h2);
        let path2 = dir.join(format!("two-{name}"));
        write_map(&path2, frame, &h2).unwrap();
        assert_eq!(
            &bytes(&path2)[0..12],
            b"\x1c\x02\0\0n+2\0\r\n\x1a\n",
            "{name}"
        );
        let (back2, mut h2) = read_volume(&path2).unwrap();
        assert_eq!(back2, frame);
        NiftiVersion::Nifti1.mark(&mut h2);
        assert_eq!(h2, h, "{name}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn nifti2_dimensions_beyond_nifti1_are_refused_by_name() {
    let name = "too_wide_nifti2.nii";
    let err = read_series(&data(name)).unwrap_err().to_string();
    assert!(err.contains(name) && err.contains("NIfTI-2"), "{err}");
    assert!(err.contains("dim[1]") && err.contains("40000"), "{err}");
}
