#!/usr/bin/env python3
"""Write the synthetic DCE-MRI DICOM fixtures of tests/dicom.rs, independently of dicom-rs.

Made with pydicom 3.0.2 (`pip install --user pydicom==3.0.2`; no numpy), Python 3.11:

    python3 crates/perfusion-core/tests/data/make_dicom.py

Every series is classic MR Image Storage, one file per slice per time point, 6 columns x 5
rows, int16 pixels with RescaleSlope 2 and RescaleIntercept -10, an oblique orientation with
exact decimal direction cosines (so tests/dicom.rs can check the affine by hand):

    row (x) direction    (0.8, 0.6, 0.0)        PixelSpacing[1] 0.75 mm
    column (y) direction (-0.36, 0.48, -0.8)    PixelSpacing[0] 1.5 mm
    normal = row x col   (-0.48, 0.64, 0.6)     slice spacing 4 mm
    slice k at (10, -20, 30) + 4 k normal (LPS, mm)

Stored value of column x, row y, slice z (by position), frame t:
    100 + x + 10 y + 100 z + 1000 t      (real value: 2 stored - 10)

File names are shuffled (and InstanceNumber does not follow position), so only the headers
can order the files. Variants (one folder each under dicom/):

- series:      3 slices x 8 frames, explicit VR LE, AcquisitionDate + AcquisitionTime, no
               TemporalPositionIdentifier; frames 4.5 s apart, slices acquired in the order
               1, 2, 0 at +0, +1.2, +2.4 s (2-D multi-slice); FlipAngle 15, TR 4.5 ms, 3 T.
- midnight:    as series, implicit VR LE, another SeriesInstanceUID, frames 2.5 s apart from
               23:59:55.5 (crosses midnight with the date unchanged, as scanners write it),
               all slices of a frame at one time (3-D), TemporalPositionIdentifier 1-8.
- timing:      3 slices x 4 frames, AcquisitionDateTime, 3 s apart; frame 2's last slice at
               +3.5 s, later than the next frame's first (inconsistent timing).
- nonuniform:  3 slices x 2 frames at 0, 4 and 9 mm along the normal.
- extra:       3 slices x 2 frames, plus a third image of slice 1 between them (another
               SOPInstanceUID: an extra slice, not a copied file).
- mixed_size:  3 slices x 2 frames; one file has 4 rows.
- mixed_orientation: 3 slices x 2 frames; one file has another ImageOrientationPatient.
- compressed:  1 file, JPEG Baseline transfer syntax with garbage fragment data.
- multiframe:  1 file with NumberOfFrames 2 (not read: enhanced multi-frame).

Broken variants that are copies of `series` with a file removed, duplicated, truncated or a
non-DICOM file added are made by the tests themselves.
"""

import os
import random
import shutil
import struct

import pydicom
from pydicom.dataset import Dataset, FileMetaDataset
from pydicom.encaps import encapsulate
from pydicom.uid import (
    ExplicitVRLittleEndian,
    ImplicitVRLittleEndian,
    JPEGBaseline8Bit,
    MRImageStorage,
)

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "dicom")
ROW = (0.8, 0.6, 0.0)
COL = (-0.36, 0.48, -0.8)
NORMAL = (-0.48, 0.64, 0.6)
ORIGIN = (10.0, -20.0, 30.0)
COLS, ROWS = 6, 5
STUDY = "1.2.826.0.1.3680043.8.498.1"
FRAME_OF_REF = "1.2.826.0.1.3680043.8.498.2"


def ds_number(v):
    """A DS string of at most 16 characters, exact for the fixtures' decimals."""
    s = f"{v:.6f}".rstrip("0").rstrip(".")
    return "0" if s == "-0" else s


def position(offset_mm):
    return [ds_number(o + offset_mm * n) for o, n in zip(ORIGIN, NORMAL)]


def tm(seconds_of_day):
    """DICOM TM `HHMMSS.FFFFFF` of a time of day (s), wrapped past midnight."""
    s = seconds_of_day % 86400.0
    h = int(s // 3600)
    m = int((s - 3600 * h) // 60)
    sec = s - 3600 * h - 60 * m
    return f"{h:02d}{m:02d}{sec:09.6f}"


def pixels(z, t, rows=ROWS):
    vals = [100 + x + 10 * y + 100 * z + 1000 * t for y in range(rows) for x in range(COLS)]
    return struct.pack("<%dh" % len(vals), *vals)


def base_dataset(series_uid, description, sop_uid, ts=ExplicitVRLittleEndian):
    meta = FileMetaDataset()
    meta.MediaStorageSOPClassUID = MRImageStorage
    meta.MediaStorageSOPInstanceUID = sop_uid
    meta.TransferSyntaxUID = ts
    meta.ImplementationClassUID = "1.2.826.0.1.3680043.8.498.99"
    ds = Dataset()
    ds.file_meta = meta
    ds.SOPClassUID = MRImageStorage
    ds.SOPInstanceUID = sop_uid
    ds.Modality = "MR"
    ds.StudyInstanceUID = STUDY
    ds.SeriesInstanceUID = series_uid
    ds.FrameOfReferenceUID = FRAME_OF_REF
    ds.SeriesDescription = description
    ds.SeriesNumber = 7
    ds.FlipAngle = "15"
    ds.RepetitionTime = "4.5"
    ds.MagneticFieldStrength = "3"
    ds.ImageOrientationPatient = [ds_number(v) for v in ROW + COL]
    ds.PixelSpacing = ["1.5", "0.75"]
    ds.SliceThickness = "3.5"
    ds.SpacingBetweenSlices = "4"
    ds.SamplesPerPixel = 1
    ds.PhotometricInterpretation = "MONOCHROME2"
    ds.Rows = ROWS
    ds.Columns = COLS
    ds.BitsAllocated = 16
    ds.BitsStored = 16
    ds.HighBit = 15
    ds.PixelRepresentation = 1
    ds.RescaleSlope = "2"
    ds.RescaleIntercept = "-10"
    return ds


class Writer:
    """Writes one variant's files under shuffled names."""

    def __init__(self, name, series_uid, description, ts=ExplicitVRLittleEndian, seed=1):
        self.dir = os.path.join(HERE, name)
        shutil.rmtree(self.dir, ignore_errors=True)
        os.makedirs(self.dir)
        self.series_uid = series_uid
        self.description = description
        self.ts = ts
        self.items = []
        self.rng = random.Random(seed)

    def add(self, z, t, offset_mm=None, rows=ROWS, **tags):
        n = len(self.items) + 1
        sop = f"{self.series_uid}.{n}"
        ds = base_dataset(self.series_uid, self.description, sop, self.ts)
        ds.InstanceNumber = 1000 - n  # not the position order
        ds.ImagePositionPatient = position(4.0 * z if offset_mm is None else offset_mm)
        ds.Rows = rows
        for k, v in tags.items():
            setattr(ds, k, v)
        ds.PixelData = pixels(z, t, rows)
        self.items.append(ds)
        return ds

    def write(self):
        order = list(range(len(self.items)))
        self.rng.shuffle(order)
        for i, k in enumerate(order):
            ds = self.items[k]
            ds.save_as(os.path.join(self.dir, f"IM{i:04d}"), enforce_file_format=True)


def series():
    w = Writer("series", "1.2.826.0.1.3680043.8.498.10", "dce oblique")
    start = 10 * 3600 + 15 * 60 + 3.25  # 10:15:03.25
    acquired_at = {1: 0.0, 2: 1.2, 0: 2.4}
    for t in range(8):
        for z in range(3):
            when = start + 4.5 * t + acquired_at[z]
            w.add(z, t, AcquisitionDate="20260312", AcquisitionTime=tm(when))
    w.write()


def midnight():
    w = Writer("midnight", "1.2.826.0.1.3680043.8.498.11", "dce midnight", ImplicitVRLittleEndian, 2)
    start = 23 * 3600 + 59 * 60 + 55.5
    for t in range(8):
        for z in range(3):
            w.add(
                z,
                t,
                AcquisitionDate="20260312",
                AcquisitionTime=tm(start + 2.5 * t),
                TemporalPositionIdentifier=t + 1,
                NumberOfTemporalPositions=8,
            )
    w.write()


def timing():
    w = Writer("timing", "1.2.826.0.1.3680043.8.498.12", "dce bad timing", seed=3)
    for t in range(4):
        for z in range(3):
            offset = 3.5 if (t == 2 and z == 2) else float(z)
            s = 8 * 3600 + 3.0 * t + offset
            w.add(z, t, AcquisitionDateTime="20260312" + tm(s))
    w.write()


def two_frames(name, uid, seed, tweak):
    w = Writer(name, uid, name, seed=seed)
    for t in range(2):
        for z in range(3):
            tags = {"AcquisitionDate": "20260312", "AcquisitionTime": tm(9 * 3600 + 5.0 * t + z)}
            tweak(w, z, t, tags)
    w.write()


def nonuniform():
    offsets = [0.0, 4.0, 9.0]
    two_frames(
        "nonuniform",
        "1.2.826.0.1.3680043.8.498.13",
        4,
        lambda w, z, t, tags: w.add(z, t, offset_mm=offsets[z], **tags),
    )


def extra():
    def tweak(w, z, t, tags):
        w.add(z, t, **tags)
        if (z, t) == (1, 0):
            w.add(z, t, AcquisitionDate="20260312", AcquisitionTime=tm(9 * 3600 + 3.0))

    two_frames("extra", "1.2.826.0.1.3680043.8.498.18", 9, tweak)


def mixed_size():
    def tweak(w, z, t, tags):
        w.add(z, t, rows=4 if (z, t) == (1, 1) else ROWS, **tags)

    two_frames("mixed_size", "1.2.826.0.1.3680043.8.498.14", 5, tweak)


def mixed_orientation():
    def tweak(w, z, t, tags):
        ds = w.add(z, t, **tags)
        if (z, t) == (2, 1):
            ds.ImageOrientationPatient = ["1", "0", "0", "0", "1", "0"]

    two_frames("mixed_orientation", "1.2.826.0.1.3680043.8.498.15", 6, tweak)


def compressed():
    w = Writer("compressed", "1.2.826.0.1.3680043.8.498.16", "dce jpeg", JPEGBaseline8Bit, 7)
    ds = w.add(0, 0, AcquisitionDate="20260312", AcquisitionTime="120000")
    ds.BitsAllocated = 8
    ds.BitsStored = 8
    ds.HighBit = 7
    ds.PixelRepresentation = 0
    ds.PixelData = encapsulate([b"\xff\xd8\xff\xe0 not really a JPEG \xff\xd9\x00"])
    ds["PixelData"].VR = "OB"
    ds["PixelData"].is_undefined_length = True
    w.write()


def multiframe():
    w = Writer("multiframe", "1.2.826.0.1.3680043.8.498.17", "dce multi-frame", seed=8)
    ds = w.add(0, 0, AcquisitionDate="20260312", AcquisitionTime="120000")
    ds.NumberOfFrames = 2
    ds.PixelData = pixels(0, 0) + pixels(0, 1)
    w.write()


if __name__ == "__main__":
    assert pydicom.__version__ == "3.0.2", pydicom.__version__
    series()
    midnight()
    timing()
    nonuniform()
    extra()
    mixed_size()
    mixed_orientation()
    compressed()
    multiframe()
    total = sum(
        os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(HERE) for f in fs
    )
    print(f"wrote {HERE}: {total} bytes")
