"""Laser speckle: contrast K and tau_c of a simulated vessel, as docs/speckle.md's flow figure.

A speckle pattern is fully developed (K = 1) in static tissue; in a vessel, moving scatterers
average N independent patterns within the exposure, so K falls to about 1/sqrt(N).
Run: python speckle.py [--device cpu|cuda|wgpu...] [--quick] [--out FOLDER]

docs/img/python-speckle-contrast.png is this script (without --quick).
"""

import sys

import numpy as np
from pathlib import Path

import biogpu

device = sys.argv[sys.argv.index("--device") + 1] if "--device" in sys.argv else "auto"
#: Where the figure goes (--out FOLDER; default the current folder).
OUT = Path(sys.argv[sys.argv.index("--out") + 1]) if "--out" in sys.argv else Path(".")
h, w, frames = (64, 96, 2) if "--quick" in sys.argv else (256, 384, 8)
rng = np.random.default_rng(1)


def speckle(shape):
    """Fully developed speckle: exponential intensity with ~2-pixel grains."""
    field = rng.normal(size=shape) + 1j * rng.normal(size=shape)
    f = np.fft.fft2(field)
    ky, kx = np.meshgrid(np.fft.fftfreq(shape[-2]), np.fft.fftfreq(shape[-1]), indexing="ij")
    f[..., np.hypot(ky, kx) > 0.25] = 0
    return np.abs(np.fft.ifft2(f)) ** 2


vessel = np.broadcast_to(np.abs(np.arange(h) - h / 2)[:, None] < h / 8, (h, w))  # a horizontal vessel
raw = np.empty((frames, h, w))
for t in range(frames):
    still = speckle((h, w))
    moving = np.mean([speckle((h, w)) for _ in range(8)], axis=0)  # 8 patterns per exposure
    raw[t] = np.where(vessel, moving, still)
counts = np.clip(raw / raw.mean() * 1000, 0, 65535).astype(np.uint16)

out = biogpu.speckle.contrast(counts, window=7, exposure=5e-3, device=device)
k = out["k"].mean(axis=0)
print(f"K tissue {k[~vessel].mean():.3f}, vessel {k[vessel].mean():.3f} on {out['device']}")
flow = biogpu.speckle.tau_c(k, exposure=5e-3, beta=float(np.mean(k[~vessel] ** 2)), device=device)
tau = flow["tau_c"][vessel]
print(f"tau_c in the vessel: median {np.median(tau[np.isfinite(tau)]) * 1e3:.3f} ms; "
      f"{flow['no_motion']} pixels with K^2 >= beta (no motion: mostly static tissue)")

try:
    import matplotlib.pyplot as plt
except ImportError:
    plt = None
if plt is not None and "--quick" not in sys.argv:
    fig, ax = plt.subplots(1, 2, figsize=(9, 3), constrained_layout=True)
    ax[0].imshow(counts[0], cmap="gray"); ax[0].set_title("raw frame")
    im = ax[1].imshow(k, vmin=0, vmax=1); ax[1].set_title("K (7x7)"); fig.colorbar(im, ax=ax[1])
    fig.savefig(OUT / "speckle_contrast.png", dpi=120); print(f"wrote {OUT / 'speckle_contrast.png'}")
