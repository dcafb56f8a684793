"""Peer of `biogpu --device cpu speckle contrast IN.tif --mode temporal --frames N --out DIR`:
temporal speckle contrast with numpy, end to end from disk.

As biogpu (docs/speckle.md): per pixel, K = sigma / mean over N consecutive frames, sample
variance (N - 1), the window sliding by one frame, so a stack of F frames gives F - N + 1
maps. Running sums of I and I^2 over the window in float64 (exact for u16 data), updated by
adding the entering frame and subtracting the leaving one; K written as a float32 multi-page
TIFF. Usage: numpy_temporal.py IN.tif OUT.tif N
"""
import sys

import numpy as np
import tifffile


def main():
    src, dst, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    with tifffile.TiffFile(src) as tf, tifffile.TiffWriter(dst) as tw:
        ring = []
        s1 = s2 = None
        for page in tf.pages:
            f = page.asarray().astype(np.float64)
            if s1 is None:
                s1, s2 = np.zeros_like(f), np.zeros_like(f)
            s1 += f
            s2 += f * f
            ring.append(f)
            if len(ring) > n:
                old = ring.pop(0)
                s1 -= old
                s2 -= old * old
            if len(ring) == n:
                var = np.maximum(n * s2 - s1 * s1, 0) / (n * (n - 1))
                with np.errstate(divide="ignore", invalid="ignore"):
                    k = np.sqrt(var) / (s1 / n)
                tw.write(k.astype(np.float32), contiguous=True)


if __name__ == "__main__":
    main()
