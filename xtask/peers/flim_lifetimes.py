"""Time the peers of biogpu's non-iterative FLIM methods on one thread, on the same cube as
`cargo run --release -p flim-core --example lifetimes_speed -- FILE`:

- flimlib (PyPI `flimlib`, the FLIMLib C library behind SPCImage-style RLD in Fiji's
  FLIMJ): `GCI_triple_integral_fitting_engine` (RLD) from the decay's peak to the end,
  lifetimes only (no fitted curve, residuals or chi^2: its fastest setting);
- phasorpy: `phasor_from_signal(signal, num_threads=1)` over every bin.

Usage: python3 flim_lifetimes.py CUBE.npy BIN_NS [REPS]
CUBE.npy: (y, x, bins), e.g. from `biogpu flim convert FILE --out DIR` (npy output).
"""

import sys
import time

import numpy as np


def median_ms(reps, f):
    f()
    t = []
    for _ in range(reps):
        t0 = time.perf_counter()
        f()
        t.append((time.perf_counter() - t0) * 1e3)
    return float(np.median(t))


def main():
    path, bin_ns = sys.argv[1], float(sys.argv[2])
    reps = int(sys.argv[3]) if len(sys.argv) > 3 else 5
    cube = np.load(path)
    if cube.ndim == 4:
        cube = cube[0]
    h, w, bins = cube.shape
    pixels = h * w
    peak = int(np.argmax(cube.sum(axis=(0, 1), dtype=np.float64)))
    print(f"{path}: {w} x {h} x {bins} {cube.dtype}, peak bin {peak}")
    import flimlib
    from phasorpy.phasor import phasor_from_signal
    import phasorpy

    counts = np.ascontiguousarray(cube, dtype=np.float32)
    rld = lambda: flimlib.GCI_triple_integral_fitting_engine(
        bin_ns, counts, fit_start=peak, fit_end=bins,
        compute_fitted=False, compute_residuals=False, compute_chisq=False)
    ms = median_ms(reps, rld)
    print(f"flimlib RLD (triple integral), 1 thread: {ms:.1f} ms, {pixels / ms / 1e3:.2f} Mpixels/s"
          f" (float32 input; the conversion is not timed)")
    ph = lambda: phasor_from_signal(cube, axis=-1, num_threads=1)
    ms = median_ms(reps, ph)
    print(f"phasorpy {phasorpy.__version__} phasor_from_signal, 1 thread: {ms:.1f} ms,"
          f" {pixels / ms / 1e3:.2f} Mpixels/s ({cube.dtype} input)")


if __name__ == "__main__":
    main()
