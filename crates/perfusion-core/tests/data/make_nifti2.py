#!/usr/bin/env python3
"""NIfTI-2 fixtures for crates/perfusion-core/tests/nifti2.rs, written by nibabel (5.x).

Run from this directory: python3 make_nifti2.py. Output is deterministic (nibabel's gzip has
no mtime), so a rerun leaves the committed files unchanged.

Inputs:
  series_nifti2.nii(.gz)  float32 4x3x2x5, numpy default_rng(1) * 100, 2x2x5 mm, 2 s frames,
                          sform aligned (2), no qform.
  too_wide_nifti2.nii     uint8 40000x1x1, cut to 600 bytes (only the header is read).
  oblique_nifti2.nii      int16 5x4x3x6, scl_slope 0.5, scl_inter 10, a rotated qform
                          (scanner, 1) and a sheared sform (MNI, 4), 1.5x1.5x4 mm, 3500 ms
                          frames, descrip, aux_file, intent, cal, slice and dim_info set.

Expected outputs, the maps biogpu writes from those inputs, as nibabel writes them: a
Nifti2Image with the input's header, pixdim[4] 0 and the time unit dropped (as write_map
does), in float32 (the fitted maps) or uint8 (the status map):
  map_series_nifti2.nii   series_nifti2's last frame.
  map_oblique_nifti2.nii  oblique_nifti2's last frame, scaled (raw * 0.5 + 10).
  status_oblique_nifti2.nii  uint8(oblique_nifti2's first frame > 40).
"""

import nibabel as nib
import numpy as np


def series():
    rng = np.random.default_rng(1)
    data = (rng.random((4, 3, 2, 5)) * 100).astype(np.float32)
    img = nib.Nifti2Image(data, np.diag([2.0, 2.0, 5.0, 1.0]))
    img.header.set_xyzt_units("mm", "sec")
    img.header["pixdim"][4] = 2
    img.to_filename("series_nifti2.nii")
    img.to_filename("series_nifti2.nii.gz")


def too_wide():
    img = nib.Nifti2Image(np.zeros((40000, 1, 1), np.uint8), np.eye(4))
    img.to_filename("too_wide_nifti2.nii")
    with open("too_wide_nifti2.nii", "r+b") as f:
        f.truncate(600)


def oblique():
    shape = (5, 4, 3, 6)
    raw = (np.arange(np.prod(shape)).reshape(shape, order="F") * 7 % 201 - 50).astype(np.int16)
    c, s = np.cos(0.3), np.sin(0.3)
    rot = np.array([[c, -s, 0], [s, c, 0], [0, 0, 1]]) @ np.diag([1.5, 1.5, 4.0])
    qform = np.eye(4)
    qform[:3, :3] = rot
    qform[:3, 3] = [-90.25, 112.5, -31.0]
    sform = qform.copy()
    sform[0, 1] += 0.125  # a shear the qform cannot hold
    sform[:3, 3] += [1.0, -2.0, 0.5]
    hdr = nib.Nifti2Header()
    hdr.set_data_dtype(np.int16)
    hdr.set_data_shape(shape)
    hdr.set_qform(qform, code=1)
    hdr.set_sform(sform, code=4)
    hdr["pixdim"][4] = 3500.0
    hdr.set_xyzt_units("mm", "msec")
    hdr.set_slope_inter(0.5, 10.0)
    hdr.set_dim_info(freq=0, phase=1, slice=2)
    hdr["slice_start"] = 0
    hdr["slice_end"] = 2
    hdr["slice_code"] = 1
    hdr["slice_duration"] = 1.125
    hdr["toffset"] = 0.75
    hdr["cal_min"] = -15.0
    hdr["cal_max"] = 100.0
    hdr["descrip"] = b"biogpu oblique NIfTI-2 test series"
    hdr["aux_file"] = b"aux.txt"
    hdr.set_intent("estimate", name="conc")
    hdr["vox_offset"] = 544
    with open("oblique_nifti2.nii", "wb") as f:
        hdr.write_to(f)  # the 540-byte header and the 4-byte extender
        assert f.tell() == 544
        f.write(raw.tobytes(order="F"))


def map_like(src, data, dtype, out):
    """Write `data` as nibabel would write a map with the header of `src`."""
    hdr = nib.load(src).header.copy()
    hdr["pixdim"][4] = 0
    hdr["xyzt_units"] = hdr["xyzt_units"] & 0x07
    img = nib.Nifti2Image(data.astype(dtype), None, hdr)
    img.set_data_dtype(dtype)
    img.header["pixdim"][4] = 0  # nibabel resets pixdim past dim[0] to 1; write_map keeps 0
    img.to_filename(out)


def maps():
    s = nib.load("series_nifti2.nii").get_fdata(dtype=np.float32)
    map_like("series_nifti2.nii", s[..., -1], np.float32, "map_series_nifti2.nii")
    o = nib.load("oblique_nifti2.nii").get_fdata(dtype=np.float32)
    map_like("oblique_nifti2.nii", o[..., -1], np.float32, "map_oblique_nifti2.nii")
    map_like("oblique_nifti2.nii", o[..., 0] > 40, np.uint8, "status_oblique_nifti2.nii")


if __name__ == "__main__":
    series()
    too_wide()
    oblique()
    maps()
