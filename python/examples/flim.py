"""FLIM: phasor plot and lifetime maps of a B&H .sdt recording and of a two-lifetime phantom,
as phasorpy's tutorial plots a phasor from a TCSPC file.

Run: python flim.py [path.sdt|.ptu] [--device cpu|cuda|...] [--quick] [--out FOLDER]

docs/img/python-flim-phasor.png is this script on shared/data/flim/hazelnut_FLIM_single_image.ptu.
"""

import sys
from pathlib import Path

import numpy as np

import biogpu

device = sys.argv[sys.argv.index("--device") + 1] if "--device" in sys.argv else "auto"
out_arg = sys.argv[sys.argv.index("--out") + 1] if "--out" in sys.argv else None
files = [a for a in sys.argv[1:] if not a.startswith("--") and a not in (device, out_arg)]
path = Path(files[0]) if files else Path(__file__).resolve().parents[2] / "crates/flim-core/tests/data/bh_spc160_4x4.sdt"

counts, meta = biogpu.flim.read(path)
print(f"{path.name}: {counts.shape} (y, x, bins) of {meta['bin_ns']:.4f} ns, period {meta['period_ns']:.2f} ns")
# No reference recording: calibrate with the IRF estimated from the data (the CLI's
# `flim phasor --calibrate auto`), so that the phasors land inside the semicircle.
irf = biogpu.flim.estimate_irf(counts, meta["bin_ns"])
print(f"IRF estimated from the data: centroid {irf['centroid_ns']:.3f} ns, FWHM {irf['fwhm_ns']:.3f} ns")
recording = biogpu.flim.phasor(counts, meta["bin_ns"], period_ns=meta["period_ns"], reference=irf["irf"],
                               threshold=20, device=device)
ok = recording["status"] == 0
print(f"phasor ({ok.sum()} pixels of >= 20 photons) mean g = {recording['g'][ok].mean():.3f}, "
      f"s = {recording['s'][ok].mean():.3f}, tau_phase {np.median(recording['tau_phase'][ok]):.3f} ns")
fit = biogpu.flim.fit(counts, meta["bin_ns"], "mono", period_ns=meta["period_ns"], threshold=100, device=device)
print(f"MLE mono-exponential: median tau {np.nanmedian(fit['tau'][0]):.3f} ns, "
      f"median chi2_red {np.nanmedian(fit['chi2_red']):.2f}")

# A phantom: left half 1 ns, right half 4 ns; on the phasor the two clusters sit on the
# universal semicircle, and a bi-exponential fit of their mixture separates them.
bins, bin_ns = 256, 0.05
t = (np.arange(bins) + 0.5) * bin_ns
size = (16, 16) if "--quick" in sys.argv else (64, 64)
tau = np.where(np.arange(size[1]) < size[1] // 2, 1.0, 4.0)[None, :, None]
p = np.exp(-t / tau)
decays = np.random.default_rng(0).poisson(5000 * p / p.sum(-1, keepdims=True), size=size + (bins,))
ph = biogpu.flim.phasor(decays, bin_ns, device=device)
for name, cols in (("1 ns", slice(0, size[1] // 2)), ("4 ns", slice(size[1] // 2, None))):
    print(f"phantom {name}: g = {ph['g'][:, cols].mean():.3f}, s = {ph['s'][:, cols].mean():.3f}, "
          f"tau_phase = {ph['tau_phase'][:, cols].mean():.3f} ns")
mix = decays[:, :size[1] // 2] + decays[:, size[1] // 2:]
bi = biogpu.flim.fit(mix, bin_ns, "bi", device=device)
print(f"bi-exponential fit of the mixture: tau = {np.median(bi['tau'][0]):.2f}, {np.median(bi['tau'][1]):.2f} ns")

try:
    import matplotlib.pyplot as plt
except ImportError:
    plt = None
if plt is not None and "--quick" not in sys.argv:
    out = Path(sys.argv[sys.argv.index("--out") + 1]) if "--out" in sys.argv else Path(".")
    fig, axes = plt.subplots(1, 2, figsize=(8, 3.4), constrained_layout=True)
    a = np.linspace(0, np.pi, 200)
    panels = ((recording, ok, f"{path.name} (IRF-calibrated)"), (ph, ph["status"] == 0, "phantom: 1 and 4 ns"))
    for ax, (p, keep, title) in zip(axes, panels):
        ax.plot(0.5 + 0.5 * np.cos(a), 0.5 * np.sin(a), "k-", lw=0.8)
        ax.hist2d(p["g"][keep], p["s"][keep], bins=150, range=[[0, 1], [0, 0.6]], cmin=1, cmap="viridis")
        ax.set_xlabel("g"); ax.set_ylabel("s"); ax.set_title(title, fontsize=9); ax.set_aspect("equal")
    fig.savefig(out / "flim_phasor.png", dpi=120)
    print(f"wrote {out / 'flim_phasor.png'}")
