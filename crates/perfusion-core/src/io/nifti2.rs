//! NIfTI-2 headers, read by translating them into NIfTI-1 for the `nifti` crate (which reads
//! NIfTI-1 only).
//!
//! NIfTI-2 (540-byte header) widens NIfTI-1's fields to 64 bits. A file whose dimensions fit
//! NIfTI-1's 16-bit fields (up to 32,767 per axis) is read as the same NIfTI-1 header would
//! be: every field is copied, 64-bit floats rounded to 32 bits (pixdim, scaling,
//! orientation), extensions dropped. Larger dimensions are refused by name.

use super::nifti::MAX_VOX_OFFSET;
use crate::error::{Error, Result};
use std::path::Path;

/// Size of the NIfTI-2 header (`sizeof_hdr`).
pub(crate) const NIFTI2_BYTES: usize = 540;

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
