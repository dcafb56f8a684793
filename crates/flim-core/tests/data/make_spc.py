"""Write the Becker & Hickl FIFO test files (`.spc` photon streams with their `.set` setup
files) and their expected decay histograms.

The reference decoder is phconvert's `bhreader.load_spc`
(https://github.com/Photon-HDF5/phconvert): the expected histograms of the point
measurements come from phconvert's nanotimes and detectors, never from biogpu.

Run from this folder: python3 make_spc.py   (needs numpy, phconvert)

Files:
- spc150_point.spc/.set: SPC-150 point measurement (FIFO mode), ADC_RE 4096, TAC gain 4,
  routing channels 0 and 3, single overflows (MTOV on photons), multiple-overflow records,
  invalid photons and GAP photons. Expected: `spc150_point.spc.expected.csv`, rows
  `channel,bin,count` of phconvert's nanotimes per detector.
- spc830_adc256.spc/.set: SPC-830 point measurement with ADC_RE 256: phconvert gives 12-bit
  nanotimes (4095 - ADC); the B&H reduction to 256 bins drops the low 4 bits, so the expected
  histogram is of `nanotimes >> 4`. Expected: `spc830_adc256.spc.expected.csv`.
- spc150_image.spc/.set: SPC-150 FIFO imaging (SP_MODE 5), 4 x 3 pixels, 2 frames, routing
  channels 1 and 2, ADC_RE 256. Line markers at fixed 400-tick intervals, photons placed at
  known pixels (their macro time inside the pixel's quarter of the line); the first frame
  starts with a separate frame marker, the second with a frame+line marker record, a frame
  marker ends the recording. Frame 0 has one extra line (past SP_IMG_Y) and photons before
  the first line marker: both are dropped. Markers carry MTOV where an overflow falls before
  them. phconvert drops marker records (it removes every record with INVALID set), so the
  expected image is the known placement: `spc150_image.spc.expected.csv`, rows
  `frame,channel,y,x,bin,count`.
"""

import struct

import numpy as np
import phconvert.bhreader as bh

RNG = np.random.default_rng(20261130)

INVALID, MTOV, GAP, MARK = 1 << 31, 1 << 30, 1 << 29, 1 << 28


def write_set(path, module_code, params, title):
    """A .set file as SPCM writes it: 42-byte header, identification, setup text with a
    short binary part."""
    ident = (
        "*IDENTIFICATION\r\n"
        "  ID        : SPC Setup Script File\r\n"
        f"  Title     : {title}\r\n"
        "  Version   : 1 981 M\r\n"
        "  Revision  : 15\r\n"
        "  Date      : 30-11-2026\r\n"
        "  Time      : 12:00:00\r\n"
        "  Author    : biogpu test writer\r\n"
        "  Contents  : make_spc.py\r\n"
        "*END\r\n\r\n"
    ).encode()
    lines = ["*SETUP", "SYS_PARA_BEGIN:"]
    for key, (kind, value) in params.items():
        lines.append(f"#SP [{key},{kind},{value}]")
    lines += ["#DI [DI_SIMPLE,B,1]", "SYS_PARA_END:"]
    setup = ("\r\n".join("  " + l if l.startswith("#") else l for l in lines) + "\r\n").encode()
    # Binary part: display settings in SPCM; bytes that are no text.
    setup += b"BIN_PARA_BEGIN:\x00" + struct.pack("<I", 8) + bytes([0xff, 0xfe, 0x80, 0x81, 0, 1, 2, 3])
    setup += b"\r\n*END\r\n\r\n"
    revision = (module_code << 4) | 15
    info_offs = 42
    setup_offs = info_offs + len(ident)
    header = struct.pack(
        "<hihihihIihhHIHH",
        revision, info_offs, len(ident), setup_offs, min(len(setup), 32767),
        0, 0, 0, 0, 0, 0, 0x5555, 0, 0, 0,
    )
    assert len(header) == 42
    with open(path, "wb") as f:
        f.write(header + ident + setup)


def timing_params(tac_r, tac_g, adc_re, mode, img=(1, 1)):
    return {
        "SP_MODE": ("I", mode),
        "SP_TAC_R": ("F", f"{tac_r:g}"),
        "SP_TAC_G": ("I", tac_g),
        "SP_TAC_OF": ("F", "0"),
        "SP_ADC_RE": ("I", adc_re),
        "SP_ADC_ZOOM": ("I", 0),
        "SP_SCAN_X": ("I", img[0]),
        "SP_SCAN_Y": ("I", img[1]),
        "SP_IMG_X": ("I", img[0]),
        "SP_IMG_Y": ("I", img[1]),
        "SP_PIX_CLK": ("I", 0),
        "SP_SYN_FD": ("I", 1),
    }


def encode(events):
    """Records of `events`: (time, kind, a, b) sorted by time; kind 'p' photon (a = 12-bit
    micro time, b = routing), 'm' marker (a = marker bits), 'i' invalid photon, 'g' photon
    after a gap. Overflows go into MTOV bits or multiple-overflow records (both forms)."""
    out = []
    ov = 0
    for t, kind, a, b in events:
        need = t // 4096 - ov
        flags = 0
        if need >= 2 or (need == 1 and kind == "i"):
            # INVALID+MTOV on an invalid photon would read as an overflow count: use a record.
            # Markers keep one overflow in their MTOV bit (B&H: a single overflow there).
            if kind == "i":
                n = need
            elif kind == "m":
                n = need - 1
            else:
                n = need if RNG.random() < 0.5 else need - 1
            out.append(INVALID | MTOV | n)
            need -= n
        if need == 1:
            flags |= MTOV
        ov = t // 4096
        mt = t % 4096
        if kind == "m":
            out.append(INVALID | MARK | flags | (a << 12) | mt | (RNG.integers(0, 4096) << 16))
        elif kind == "i":
            out.append(INVALID | flags | (b << 12) | ((4095 - a) << 16) | mt)
        else:
            g = GAP if kind == "g" else 0
            out.append(flags | g | (b << 12) | ((4095 - a) << 16) | mt)
    return out


def write_spc(path, clock_tenths_ns, routing_bits, markers, records):
    header = INVALID | (routing_bits << 27) | (clock_tenths_ns & 0xFFFFFF)
    if markers:
        header |= 1 << 25
    np.array([header] + records, dtype="<u4").tofile(path)


def write_expected_point(path, detectors, bins):
    with open(path + ".expected.csv", "w") as f:
        f.write("channel,bin,count\n")
        for ch in np.unique(detectors):
            h = np.bincount(bins[detectors == ch])
            for b in np.nonzero(h)[0]:
                f.write(f"{ch},{b},{h[b]}\n")


def decay_sample(n, tau_ch, offset, limit):
    t = offset + RNG.exponential(tau_ch, n).astype(int)
    return np.minimum(t, limit - 1)


def point_stream(n, channels, limit, tau):
    """Photon events at increasing macro times with long quiet stretches."""
    events = []
    t = 5
    for k in range(n):
        step = int(RNG.integers(1, 300))
        if k % 97 == 0:
            step += int(RNG.integers(4096 * 2, 4096 * 9))  # several overflows in a row
        t += step
        ch = channels[k % len(channels)]
        micro = int(decay_sample(1, tau[ch], 300, limit)[0])
        kind = "p"
        if k % 211 == 5:
            kind = "g"
        if k % 150 == 7:
            kind = "i"
        events.append((t, kind, micro, ch))
    return events


def make_point(name, module_code, tac_r, tac_g, adc_re, channels, tau, n):
    write_set(name.replace(".spc", ".set"), module_code, timing_params(tac_r, tac_g, adc_re, 1),
              name)
    events = point_stream(n, channels, 4096, tau)
    write_spc(name, 250, 2, False, encode(events))
    data = bh.load_spc(name)
    pd = data["photon_data"]
    assert data["meta"]["setup"]["SP_ADC_RE"] == adc_re
    nanotimes = np.asarray(pd["nanotimes"], dtype=np.int64)
    detectors = np.asarray(pd["detectors"], dtype=np.int64)
    assert len(pd["marker_ids"]) == 0
    # The stream encodes the intended macro times (overflows included) as phconvert reads them.
    valid = [e for e in events if e[1] != "i"]
    assert np.array_equal(np.asarray(pd["timestamps"], dtype=np.int64), [e[0] for e in valid])
    assert np.array_equal(detectors, [e[3] for e in valid])
    shift = 12 - int(np.log2(adc_re))
    write_expected_point(name, detectors, nanotimes >> shift)
    n_invalid = sum(1 for e in events if e[1] == "i")
    n_gap = sum(1 for e in events if e[1] == "g")
    print(f"{name}: {len(events)} events, {len(nanotimes)} photons (phconvert), "
          f"{n_invalid} invalid, {n_gap} GAP, last macro time {events[-1][0]}")


def make_image(name):
    pix_x, pix_y, line = 4, 3, 400
    write_set(name.replace(".spc", ".set"), 0x28,
              timing_params(2.5e-8, 1, 256, 5, (pix_x, pix_y)), name)
    events = []
    placed = {}  # (frame, channel, y, x, bin) -> count

    def photon(t, ch, b, key=None):
        micro = b * 16 + int(RNG.integers(0, 16))
        events.append((t, "p", micro, ch))
        if key is not None:
            placed[key + (b,)] = placed.get(key + (b,), 0) + 1

    t = 1000
    # Photons before the first line marker: outside lines.
    for _ in range(5):
        photon(t, 1, 10)
        t += 7
    t = 4000
    for frame in range(2):
        if frame == 0:
            events.append((t, "m", 4, 0))  # a frame marker on its own
            t += 50
        lines = pix_y + 1 if frame == 0 else pix_y
        for y in range(lines):
            if frame == 1 and y == 0:
                events.append((t, "m", 4 | 2, 0))  # frame + line in one record
            else:
                events.append((t, "m", 2, 0))
            if y == 1:
                events.append((t + 3, "m", 1, 0))  # a pixel marker: counted only
            for x in range(pix_x):
                for _ in range(int(RNG.integers(2, 8))):
                    ch = int(RNG.choice([1, 2]))
                    b = int(RNG.integers(0, 256))
                    dt = x * 100 + int(RNG.integers(1, 100))
                    key = (frame, ch, y, x) if y < pix_y else None
                    photon(t + dt, ch, b, key)
            t += line
        events.append((t, "m", 4, 0))  # frame marker: ends the last line
        # A quiet stretch of many overflows between frames.
        t += 4096 * 37 + 1234
    events.sort(key=lambda e: e[0])
    write_spc(name, 250, 2, True, encode(events))
    with open(name + ".expected.csv", "w") as f:
        f.write("frame,channel,y,x,bin,count\n")
        for key in sorted(placed):
            f.write(",".join(map(str, key)) + f",{placed[key]}\n")
    print(f"{name}: {len(events)} events, {sum(placed.values())} photons placed")


if __name__ == "__main__":
    make_point("spc150_point.spc", 0x28, 5.00032e-08, 4, 4096, [0, 3], {0: 180.0, 3: 420.0},
               2400)
    make_point("spc830_adc256.spc", 0x25, 2.0e-08, 2, 256, [0, 1], {0: 600.0, 1: 250.0}, 1500)
    make_image("spc150_image.spc")
