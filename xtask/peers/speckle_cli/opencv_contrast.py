"""Peer of `biogpu --device cpu speckle contrast IN.tif --window W --out DIR`: spatial
speckle contrast with OpenCV box filters, end to end from disk.

Reads the u16 multi-page TIFF with tifffile (page by page), computes per frame
K = sqrt(var) / mean with var the sample variance (N - 1, as biogpu) from cv2.boxFilter
means of I and I^2 in float32, border BORDER_REFLECT_101 (mirror about the edge pixel, as
biogpu's default `reflect` border), and writes K as a float32 multi-page TIFF.
Usage: opencv_contrast.py IN.tif OUT.tif WINDOW
"""
import sys

import cv2
import numpy as np
import tifffile


def main():
    src, dst, win = sys.argv[1], sys.argv[2], int(sys.argv[3])
    n = win * win
    ksize = (win, win)
    border = cv2.BORDER_REFLECT_101
    with tifffile.TiffFile(src) as tf, tifffile.TiffWriter(dst) as tw:
        for page in tf.pages:
            i = page.asarray().astype(np.float32)
            m = cv2.boxFilter(i, cv2.CV_32F, ksize, normalize=True, borderType=border)
            m2 = cv2.boxFilter(i * i, cv2.CV_32F, ksize, normalize=True, borderType=border)
            var = np.maximum(m2 - m * m, 0) * (n / (n - 1))
            with np.errstate(divide="ignore", invalid="ignore"):
                k = np.sqrt(var) / m
            tw.write(k.astype(np.float32), contiguous=True)


if __name__ == "__main__":
    main()
