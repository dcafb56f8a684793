"""Synthetic but realistic laser-speckle stacks for the CLI benchmark: u16 multi-page TIFF.

Fully developed speckle (|FFT-filtered complex Gaussian field|^2, speckle ~3 px), a flowing
vessel band and perfused background that decorrelate over frames, a static region, 12-bit
camera with shot noise. Usage: make_stack.py OUT.tif FRAMES [HEIGHT WIDTH]
"""
import sys

import numpy as np
import tifffile


def main():
    out, frames = sys.argv[1], int(sys.argv[2])
    h, w = (int(sys.argv[3]), int(sys.argv[4])) if len(sys.argv) > 4 else (1040, 1392)
    rng = np.random.default_rng(23)
    fy = np.fft.fftfreq(h)[:, None]
    fx = np.fft.fftfreq(w)[None, :]
    pupil = (fx**2 + fy**2) < (1 / 6.0) ** 2  # speckle about 3 pixels
    yy, xx = np.mgrid[0:h, 0:w]
    vessel = np.abs(yy - h / 2 - 80 * np.sin(xx / 150)) < 40
    static = (xx < w // 8)
    # fraction of the field replaced per frame: fast in the vessel, slow in tissue, 0 static
    rate = np.where(vessel, 0.9, np.where(static, 0.0, 0.25)).astype(np.float32)
    def field():
        z = rng.standard_normal((h, w), dtype=np.float32) + 1j * rng.standard_normal((h, w), dtype=np.float32)
        return np.fft.ifft2(np.fft.fft2(z) * pupil).astype(np.complex64)
    e = field()
    scale = None
    with tifffile.TiffWriter(out) as tw:
        for t in range(frames):
            if t:
                a = np.sqrt(1 - rate**2)
                e = (a * e + rate * field()).astype(np.complex64)
            inten = np.abs(e) ** 2
            if scale is None:
                scale = 900.0 / inten.mean()
            counts = rng.poisson(inten * scale).clip(0, 4095).astype(np.uint16)
            tw.write(counts, contiguous=True)


if __name__ == "__main__":
    main()
