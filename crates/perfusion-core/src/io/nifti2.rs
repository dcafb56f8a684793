//! NIfTI-2 headers: read by translating them into NIfTI-1 for the `nifti` crate (which reads
//! and writes NIfTI-1 only), and written by translating back.
//!
//! NIfTI-2 (540-byte header) widens NIfTI-1's fields to 64 bits. A file whose dimensions fit
//! NIfTI-1's 16-bit fields (up to 32,767 per axis) is read as the same NIfTI-1 header would
//! be: every field is copied, 64-bit floats rounded to 32 bits (pixdim, scaling,
//! orientation), extensions dropped. Larger dimensions are refused by name.
//!
//! Writing goes the other way ([`to_nifti2`]): every NIfTI-1 field is widened into its
//! NIfTI-2 field (32-bit floats exactly to 64 bits, so a value that was rounded on reading
//! stays rounded), NIfTI-1's unused fields (`data_type`, `db_name`, `extents`,
//! `session_error`, `regular`, `glmax`, `glmin`) are dropped, and the file is little-endian
//! with `vox_offset` 544: the header, a zero extender, no extensions. `.nii.gz` files are
//! compressed with flate2 ([`gzip`]).

use super::nifti::MAX_VOX_OFFSET;
use crate::error::{Error, Result};
use nifti::NiftiHeader;
use std::path::Path;

/// Size of the NIfTI-2 header (`sizeof_hdr`).
pub(crate) const NIFTI2_BYTES: usize = 540;

/// Magic of a single-file NIfTI-2: `n+2\0` and the `\r\n\x1a\n` transfer check.
pub(crate) const NIFTI2_MAGIC: [u8; 8] = *b"n+2\0\r\n\x1a\n";

/// `vox_offset` of the NIfTI-2 files written: the header and a 4-byte zero extender.
pub(crate) const NIFTI2_VOX_OFFSET: usize = NIFTI2_BYTES + 4;

/// Whether `first4` is the `sizeof_hdr` of a NIfTI-2 header, in either byte order.
pub(crate) fn is_nifti2(first4: &[u8]) -> bool {
    let b: [u8; 4] = first4[..4].try_into().expect("4 bytes");
    i32::from_le_bytes(b) == 540 || i32::from_be_bytes(b) == 540
}

/// The NIfTI-1 header (348 bytes and a zero extender, little-endian) equivalent to the
/// NIfTI-2 `header` (540 bytes), and the NIfTI-2 `vox_offset` (where the voxel data start).
pub(crate) fn to_nifti1(path: &Path, h: &[u8]) -> Result<(Vec<u8>, u64)> {
    let fail = |offset: usize, field: &str, why: String| Error::File {
        path: path.to_path_buf(),
        why: format!("NIfTI-2 header field `{field}` (byte {offset}): {why}"),
    };
    let le = i32::from_le_bytes(h[0..4].try_into().expect("4 bytes")) == 540;
    let int = |o: usize, n: usize| -> i64 {
        let b = &h[o..o + n];
        let mut v = [0u8; 8];
        if le {
            v[..n].copy_from_slice(b);
            let x = i64::from_le_bytes(v);
            // Sign-extend from n bytes.
            (x << (64 - 8 * n)) >> (64 - 8 * n)
        } else {
            v[8 - n..].copy_from_slice(b);
            let x = i64::from_be_bytes(v);
            (x << (64 - 8 * n)) >> (64 - 8 * n)
        }
    };
    let f64_at = |o: usize| -> f64 {
        let b: [u8; 8] = h[o..o + 8].try_into().expect("8 bytes");
        if le {
            f64::from_le_bytes(b)
        } else {
            f64::from_be_bytes(b)
        }
    };
    if &h[4..8] != b"n+2\0" {
        return Err(fail(
            4,
            "magic",
            "expected \"n+2\" (a single-file .nii)".into(),
        ));
    }
    let mut out = vec![0u8; 352];
    let put_i16 = |out: &mut Vec<u8>, o: usize, v: i64, field: &str, at: usize| -> Result<()> {
        let v = i16::try_from(v).map_err(|_| {
            fail(
                at,
                field,
                format!("{v} does not fit NIfTI-1's 16-bit field, which this reader needs"),
            )
        })?;
        out[o..o + 2].copy_from_slice(&v.to_le_bytes());
        Ok(())
    };
    let put_f32 = |out: &mut Vec<u8>, o: usize, v: f64| {
        out[o..o + 4].copy_from_slice(&(v as f32).to_le_bytes());
    };
    out[0..4].copy_from_slice(&348i32.to_le_bytes());
    out[39] = h[524]; // dim_info
    for i in 0..8 {
        put_i16(
            &mut out,
            40 + 2 * i,
            int(16 + 8 * i, 8),
            &format!("dim[{i}]"),
            16 + 8 * i,
        )?;
    }
    for (i, o) in [80, 88, 96].into_iter().enumerate() {
        put_f32(&mut out, 56 + 4 * i, f64_at(o));
    }
    put_i16(&mut out, 68, int(504, 4), "intent_code", 504)?;
    put_i16(&mut out, 70, int(12, 2), "datatype", 12)?;
    put_i16(&mut out, 72, int(14, 2), "bitpix", 14)?;
    put_i16(&mut out, 74, int(224, 8), "slice_start", 224)?;
    for i in 0..8 {
        put_f32(&mut out, 76 + 4 * i, f64_at(104 + 8 * i));
    }
    let vox_offset = int(168, 8);
    if !(544..=MAX_VOX_OFFSET as i64).contains(&vox_offset) {
        return Err(fail(
            168,
            "vox_offset",
            format!("{vox_offset}; expected 544 to {MAX_VOX_OFFSET} bytes"),
        ));
    }
    put_f32(&mut out, 108, 352.0);
    put_f32(&mut out, 112, f64_at(176)); // scl_slope
    put_f32(&mut out, 116, f64_at(184)); // scl_inter
    put_i16(&mut out, 120, int(232, 8), "slice_end", 232)?;
    out[122] =
        u8::try_from(int(496, 4)).map_err(|_| fail(496, "slice_code", "above 255".into()))?;
    out[123] =
        u8::try_from(int(500, 4)).map_err(|_| fail(500, "xyzt_units", "above 255".into()))?;
    for (o1, o2) in [(124, 192), (128, 200), (132, 208), (136, 216)] {
        put_f32(&mut out, o1, f64_at(o2)); // cal_max, cal_min, slice_duration, toffset
    }
    out[148..228].copy_from_slice(&h[240..320]); // descrip
    out[228..252].copy_from_slice(&h[320..344]); // aux_file
    put_i16(&mut out, 252, int(344, 4), "qform_code", 344)?;
    put_i16(&mut out, 254, int(348, 4), "sform_code", 348)?;
    for i in 0..6 {
        put_f32(&mut out, 256 + 4 * i, f64_at(352 + 8 * i)); // quatern_b..qoffset_z
    }
    for i in 0..12 {
        put_f32(&mut out, 280 + 4 * i, f64_at(400 + 8 * i)); // srow_x, srow_y, srow_z
    }
    out[328..344].copy_from_slice(&h[508..524]); // intent_name
    out[344..348].copy_from_slice(b"n+1\0");
    Ok((out, vox_offset as u64))
}

/// The NIfTI-2 header (540 bytes, little-endian) and zero extender, 544 bytes in all, for
/// voxel data of `shape` (1 to 7 axes), with every other field from the NIfTI-1 `header`
/// (its `dim`, `sizeof_hdr`, `vox_offset` and `magic` are not read): integers widened, 32-bit
/// floats converted exactly to 64 bits. `datatype`, `bitpix` and the scaling are taken as they
/// are, so `header` must describe the data as written (the writer sets them).
pub(crate) fn to_nifti2(header: &NiftiHeader, shape: &[usize]) -> Vec<u8> {
    assert!(
        (1..=7).contains(&shape.len()),
        "a NIfTI volume has 1 to 7 axes, not {}",
        shape.len()
    );
    let h = header;
    let mut out = vec![0u8; NIFTI2_VOX_OFFSET];
    let put = |out: &mut Vec<u8>, o: usize, b: &[u8]| out[o..o + b.len()].copy_from_slice(b);
    let put_f64 = |out: &mut Vec<u8>, o: usize, v: f32| {
        out[o..o + 8].copy_from_slice(&f64::from(v).to_le_bytes());
    };
    let put_i64 = |out: &mut Vec<u8>, o: usize, v: i64| {
        out[o..o + 8].copy_from_slice(&v.to_le_bytes());
    };
    let put_i32 = |out: &mut Vec<u8>, o: usize, v: i32| {
        out[o..o + 4].copy_from_slice(&v.to_le_bytes());
    };
    put_i32(&mut out, 0, NIFTI2_BYTES as i32);
    put(&mut out, 4, &NIFTI2_MAGIC);
    put(&mut out, 12, &h.datatype.to_le_bytes());
    put(&mut out, 14, &h.bitpix.to_le_bytes());
    put_i64(&mut out, 16, shape.len() as i64);
    for i in 1..8 {
        let d = shape.get(i - 1).map_or(1, |&d| d as i64);
        put_i64(&mut out, 16 + 8 * i, d);
    }
    for (i, v) in [h.intent_p1, h.intent_p2, h.intent_p3]
        .into_iter()
        .enumerate()
    {
        put_f64(&mut out, 80 + 8 * i, v);
    }
    for (i, &v) in h.pixdim.iter().enumerate() {
        put_f64(&mut out, 104 + 8 * i, v);
    }
    put_i64(&mut out, 168, NIFTI2_VOX_OFFSET as i64);
    put_f64(&mut out, 176, h.scl_slope);
    put_f64(&mut out, 184, h.scl_inter);
    put_f64(&mut out, 192, h.cal_max);
    put_f64(&mut out, 200, h.cal_min);
    put_f64(&mut out, 208, h.slice_duration);
    put_f64(&mut out, 216, h.toffset);
    put_i64(&mut out, 224, i64::from(h.slice_start));
    put_i64(&mut out, 232, i64::from(h.slice_end));
    let n = h.descrip.len().min(80);
    put(&mut out, 240, &h.descrip[..n]);
    put(&mut out, 320, &h.aux_file);
    put_i32(&mut out, 344, i32::from(h.qform_code));
    put_i32(&mut out, 348, i32::from(h.sform_code));
    let quatern = [
        h.quatern_b,
        h.quatern_c,
        h.quatern_d,
        h.quatern_x,
        h.quatern_y,
        h.quatern_z,
    ];
    for (i, v) in quatern.into_iter().enumerate() {
        put_f64(&mut out, 352 + 8 * i, v);
    }
    for (i, &v) in h
        .srow_x
        .iter()
        .chain(&h.srow_y)
        .chain(&h.srow_z)
        .enumerate()
    {
        put_f64(&mut out, 400 + 8 * i, v);
    }
    put_i32(&mut out, 496, i32::from(h.slice_code));
    put_i32(&mut out, 500, i32::from(h.xyzt_units));
    put_i32(&mut out, 504, i32::from(h.intent_code));
    put(&mut out, 508, &h.intent_name);
    out[524] = h.dim_info;
    // 525..540 unused_str and 540..544 the extender: zeros.
    out
}

/// `bytes` gzip-compressed (the default level, as the `nifti` crate writes `.nii.gz`).
pub(crate) fn gzip(bytes: &[u8]) -> std::io::Result<Vec<u8>> {
    use std::io::Write;
    let mut enc = flate2::write::GzEncoder::new(
        Vec::with_capacity(bytes.len() / 2),
        flate2::Compression::default(),
    );
    enc.write_all(bytes)?;
    enc.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    /// A NIfTI-1 header with every translated field set to a distinct value.
    fn full_header() -> NiftiHeader {
        let mut descrip = b"perfusion map".to_vec();
        descrip.resize(80, 0);
        let mut aux_file = [0u8; 24];
        aux_file[..3].copy_from_slice(b"aux");
        let mut intent_name = [0u8; 16];
        intent_name[..4].copy_from_slice(b"Ktr\0");
        NiftiHeader {
            sizeof_hdr: 348,
            dim_info: 0b00_11_10_01,
            dim: [3, 5, 4, 3, 1, 1, 1, 1],
            intent_p1: 0.25,
            intent_p2: -1.5,
            intent_p3: 1.0e-7,
            intent_code: 1007,
            datatype: 16,
            bitpix: 32,
            slice_start: 1,
            pixdim: [-1.0, 1.1, 1.2, 3.3, 0.0, 1.0, 1.0, 1.0],
            vox_offset: 352.0,
            scl_slope: 0.5,
            scl_inter: -10.0,
            slice_end: 2,
            slice_code: 4,
            xyzt_units: 2 | 8,
            cal_max: 3.0,
            cal_min: -3.0,
            slice_duration: 0.07,
            toffset: 1.25,
            descrip,
            aux_file,
            qform_code: 1,
            sform_code: 4,
            quatern_b: 0.1,
            quatern_c: -0.2,
            quatern_d: 0.3,
            quatern_x: -90.5,
            quatern_y: 120.25,
            quatern_z: -33.0,
            srow_x: [1.1, 0.01, 0.02, -90.5],
            srow_y: [-0.03, 1.2, 0.04, 120.25],
            srow_z: [0.05, -0.06, 3.3, -33.0],
            intent_name,
            magic: *b"n+1\0",
            endianness: nifti::Endianness::Little,
            ..NiftiHeader::default()
        }
    }

    #[test]
    fn nifti2_header_translates_back_to_the_same_nifti1_header() {
        let h = full_header();
        let bytes = to_nifti2(&h, &[5, 4, 3]);
        assert_eq!(bytes.len(), 544);
        assert_eq!(&bytes[0..4], &540i32.to_le_bytes());
        assert_eq!(&bytes[4..12], b"n+2\0\r\n\x1a\n");
        assert_eq!(&bytes[168..176], &544i64.to_le_bytes());
        assert_eq!(&bytes[540..544], &[0; 4]);
        let (back, vox_offset) = to_nifti1(Path::new("x.nii"), &bytes).unwrap();
        assert_eq!(vox_offset, 544);
        let back = NiftiHeader::from_reader(std::io::Cursor::new(back)).unwrap();
        assert_eq!(back, h);
    }

    #[test]
    fn gzip_round_trips() {
        for n in [0usize, 1, 65_535, 200_001] {
            let data: Vec<u8> = (0..n).map(|i| (i * 7 + i / 300) as u8).collect();
            let gz = gzip(&data).unwrap();
            let mut back = Vec::new();
            flate2::read::GzDecoder::new(gz.as_slice())
                .read_to_end(&mut back)
                .unwrap();
            assert_eq!(back, data, "{n} bytes");
        }
    }
}
