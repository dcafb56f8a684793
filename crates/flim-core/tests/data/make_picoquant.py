"""Write the PicoQuant test files (T2 .ptu, .pt3, .ht3, .phu) and their expected decay
histograms, decoded by phconvert (https://github.com/Photon-HDF5/phconvert, `pqreader`),
the reference decoder: the expected histograms come from phconvert's timestamps, detectors
and nanotimes, never from biogpu.

Run from this folder: python3 make_picoquant.py   (needs numpy, phconvert)

Each file `X` gets `X.expected.csv`: rows `channel,bin,count` of every non-zero bin.
"""

import struct

import numpy as np
import phconvert.pqreader as pq

RNG = np.random.default_rng(20261128)

TY = dict(empty=0xFFFF0008, int=0x10000008, float=0x20000008, date=0x21000008,
          ansi=0x4001FFFF)


def tag(name, kind, value, idx=-1):
    head = name.encode().ljust(32, b"\0") + struct.pack("<iI", idx, TY[kind])
    if kind == "float" or kind == "date":
        return head + struct.pack("<d", value), b""
    if kind == "ansi":
        data = value.encode() + b"\0"
        data = data.ljust((len(data) + 7) // 8 * 8, b"\0")
        return head + struct.pack("<q", len(data)), data
    return head + struct.pack("<q", value), b""


def tagged_header(magic, tags):
    out = magic.ljust(8, b"\0") + b"1.0.00".ljust(8, b"\0")
    for t in tags:
        head, data = tag(*t)
        out += head + data
    return out + tag("Header_End", "empty", 0)[0]


def common_tags(hw):
    return [("File_CreatingTime", "date", 46000.5),
            ("CreatorSW_Name", "ansi", "biogpu test writer"),
            ("CreatorSW_Version", "ansi", "1.0"),
            ("HW_Type", "ansi", hw),
            ("MeasDesc_AcquisitionTime", "int", 1000)]


def write_expected(path, hist):
    with open(path + ".expected.csv", "w") as f:
        f.write("channel,bin,count\n")
        for ch in sorted(hist):
            for b in np.nonzero(hist[ch])[0]:
                f.write(f"{ch},{b},{hist[ch][b]}\n")


def histograms(channels, bins, keep=None):
    hist = {}
    for ch in np.unique(channels):
        if keep is not None and ch not in keep:
            continue
        hist[int(ch)] = np.bincount(bins[channels == ch])
    return hist


def write_t2_expected(path, times, dets, sync, photon):
    """T2 records no nanotime: time each photon (mask `photon`) from the last sync event
    before it (mask `sync`) and write the histograms of the photons that follow a sync."""
    times = np.asarray(times, dtype=np.int64)
    idx = np.searchsorted(times[sync], times[photon], side="right") - 1
    ok = idx >= 0
    dt = times[photon][ok] - times[sync][idx[ok]]
    write_expected(path, histograms(dets[photon][ok], dt))


def hydraharp_t2():
    """HydraHarp V2 T2: 1 ps ticks, 80 MHz sync recorded (special channel 0), photons on
    inputs 0 and 1 about 2 and 3.5 ns after their pulse; > 1 overflow of 2^25 ticks."""
    period = 12500
    recs, t_over = [], 0
    for k in range(4000):
        t = k * period
        while t - t_over >= 2**25:
            recs.append((1 << 31) | (63 << 25) | 1)
            t_over += 2**25
        recs.append((1 << 31) | (0 << 25) | (t - t_over))
        for ch, tau in ((0, 2000.0), (1, 3500.0)):
            if RNG.random() < 0.35:
                d = int(RNG.exponential(tau)) % period
                tp = t + d
                while tp - t_over >= 2**25:
                    recs.append((1 << 31) | (63 << 25) | 1)
                    t_over += 2**25
                recs.append((ch << 25) | (tp - t_over))
    recs = np.array(recs, dtype="<u4")
    path = "hydraharp_t2.ptu"
    tags = common_tags("HydraHarp") + [
        ("TTResultFormat_TTTRRecType", "int", 0x01010204),
        ("MeasDesc_Resolution", "float", 1e-12),
        ("MeasDesc_GlobalResolution", "float", 1e-12),
        ("TTResult_SyncRate", "int", 80_000_000),
        ("TTResult_NumberOfRecords", "int", len(recs)),
        ("Measurement_SubMode", "int", 0)]
    with open(path, "wb") as f:
        f.write(tagged_header(b"PQTTTR", tags) + recs.tobytes())
    times, dets, _, meta, _ = pq.load_ptu(path)
    dets = np.asarray(dets)
    # Special bit (64) + channel 0: a sync event.
    write_t2_expected(path, times, dets, sync=dets == 64, photon=dets < 64)


def picoharp_t2():
    """PicoHarp 300 T2: 4 ps ticks, input 0 sees the 40 MHz laser, input 1 the photons."""
    period = 6250  # 25 ns in 4 ps ticks
    recs, t_over, wrap = [], 0, 210698240
    for k in range(3000):
        t = k * period + 200_000_000  # crosses one wrap
        while t - t_over >= wrap:
            recs.append(0xF0000000)
            t_over += wrap
        recs.append((0 << 28) | (t - t_over))
        if RNG.random() < 0.5:
            tp = t + int(RNG.exponential(600.0)) % period
            while tp - t_over >= wrap:
                recs.append(0xF0000000)
                t_over += wrap
            recs.append((1 << 28) | (tp - t_over))
    recs = np.array(recs, dtype="<u4")
    path = "picoharp_t2.ptu"
    tags = common_tags("PicoHarp") + [
        ("TTResultFormat_TTTRRecType", "int", 0x00010203),
        ("MeasDesc_Resolution", "float", 4e-12),
        ("MeasDesc_GlobalResolution", "float", 4e-12),
        ("TTResult_SyncRate", "int", 40_000_000),
        ("TTResult_NumberOfRecords", "int", len(recs)),
        ("Measurement_SubMode", "int", 0)]
    with open(path, "wb") as f:
        f.write(tagged_header(b"PQTTTR", tags) + recs.tobytes())
    # phconvert's numpy overflow correction for PicoHarp T2 fails on numpy 2: its loop
    # version decodes the same records.
    times, dets, _, meta, _ = pq.load_ptu(path, ovcfunc="loop")
    dets = np.asarray(dets)
    write_t2_expected(path, times, dets, sync=dets == 0, photon=dets == 1)


def text_header(ident, version):
    return (ident.ljust(16, b"\0") + version.ljust(6, b"\0") + b"biogpu".ljust(18, b"\0")
            + b"1.0".ljust(12, b"\0") + b"28/11/26 06:00:00".ljust(18, b"\0") + b"\r\n"
            + b"synthetic test file".ljust(256, b"\0"))


def common_tail():
    disp = struct.pack("<16i", *([0] * 16))
    params = struct.pack("<9f", *([0.0] * 9))
    repeat = struct.pack("<4i", 0, 1, 0, 0) + b"".ljust(20, b"\0")
    return disp + params + repeat


def t3_photons_picoharp(n_sync, rate):
    """PicoHarp T3 records: photons on routing channels 1 and 2, overflows every 65536."""
    recs, over = [], 0
    for k in range(0, n_sync, 14):
        while k - over >= 65536:
            recs.append(0xF0000000)
            over += 65536
        ch = 1 + int(RNG.random() < 0.4)
        d = min(int(RNG.exponential(300.0 if ch == 1 else 700.0)), 4095)
        recs.append((ch << 28) | (d << 16) | (k - over))
    return np.array(recs, dtype="<u4")


def pt3():
    recs = t3_photons_picoharp(140_000, 40e6)
    head = text_header(b"PicoHarp 300", b"2.0")
    head += struct.pack("<18i", 1, 32, 4, 1, 0, 3, 0, 0, 0, 1000, 0, 0, 0, 0, 0, 0, 0, 0)
    head += common_tail()
    head += b"PicoHarp 300".ljust(16, b"\0") + b"2.0".ljust(8, b"\0")
    head += struct.pack("<6i", 1001, 8, 0, 100, 0, 100)
    head += struct.pack("<f", 0.016)  # ns
    head += struct.pack("<2i", 0, 0) + struct.pack("<24i", *([0] * 24))
    head += struct.pack("<9i", 0, 0, 0, 40_000_000, 1000, 0, 0, len(recs), 0)
    assert len(head) == 728, len(head)
    path = "picoharp.pt3"
    with open(path, "wb") as f:
        f.write(head + recs.tobytes())
    times, dets, nanot, meta, _ = pq.load_pt3(path)
    dets, nanot = np.asarray(dets), np.asarray(nanot, dtype=np.int64)
    keep = (dets >= 1) & (dets <= 4)
    write_expected(path, histograms(dets[keep] - 1, nanot[keep]))


def ht3():
    """HydraHarp 1.0 T3 (V1 records: one 1024-sync overflow per overflow record)."""
    recs, over = [], 0
    for k in range(0, 40_000, 5):
        while k - over >= 1024:
            recs.append((1 << 31) | (63 << 25))
            over += 1024
        ch = int(RNG.random() < 0.5)
        d = min(int(RNG.exponential(1500.0 if ch == 0 else 3000.0)), 2**15 - 1)
        recs.append((ch << 25) | (d << 10) | (k - over))
    recs = np.array(recs, dtype="<u4")
    head = text_header(b"HydraHarp", b"1.0")
    head += struct.pack("<6i", 1, 32, 0, 3, 0, 0) + struct.pack("<d", 4.0)  # ps
    head += struct.pack("<10i", *([0] * 10))
    head += common_tail()
    head += b"HydraHarp".ljust(16, b"\0") + b"930021".ljust(8, b"\0") + struct.pack("<2i", 1, 1)
    head += struct.pack("<20i", *([0] * 20))
    head += struct.pack("<dQ", 1.0, 3) + struct.pack("<8i", 2, 0, 0, 0, 1, 0, 0, 0)
    head += struct.pack("<10i", *([0] * 10))  # 2 inputs x 5 fields
    head += struct.pack("<4iQ", 20_000_000, 0, 0, 0, len(recs))
    assert len(head) == 696 + 40 + 24, len(head)
    path = "hydraharp_v1.ht3"
    with open(path, "wb") as f:
        f.write(head + recs.tobytes())
    times, dets, nanot, meta, _ = pq.load_ht3(path)
    dets, nanot = np.asarray(dets), np.asarray(nanot, dtype=np.int64)
    keep = dets < 64
    write_expected(path, histograms(dets[keep], nanot[keep]))


def phu():
    """Two curves of 1024 bins at 8 ps and 16 ps, 40 MHz."""
    curves = [RNG.poisson(1000 * np.exp(-np.arange(1024) / 300.0)).astype("<u4"),
              RNG.poisson(500 * np.exp(-np.arange(1024) / 150.0)).astype("<u4")]
    tags = common_tags("PicoHarp 330") + [("HistoResult_NumberOfCurves", "int", 2)]
    def build(offsets):
        t = list(tags)
        for i, c in enumerate(curves):
            t += [("HistResDscr_CurveIndex", "int", i, i),
                  ("HistResDscr_HistogramBins", "int", len(c), i),
                  ("HistResDscr_MDescResolution", "float", (i + 1) * 8e-12, i),
                  ("HistResDscr_SyncRate", "int", 40_000_000, i),
                  ("HistResDscr_DataOffset", "int", offsets[i], i)]
        return tagged_header(b"PQHISTO", t)
    n = len(build([0, 0]))
    offsets = [n, n + 4 * len(curves[0])]
    path = "curves.phu"
    with open(path, "wb") as f:
        f.write(build(offsets) + b"".join(c.tobytes() for c in curves))
    hists, res, meta = pq.load_phu(path)
    write_expected(path, {i: np.asarray(h) for i, h in enumerate(hists)})


if __name__ == "__main__":
    hydraharp_t2()
    picoharp_t2()
    pt3()
    ht3()
    phu()
