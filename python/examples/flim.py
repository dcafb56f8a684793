"""FLIM: phasor plot and lifetime maps of a B&H .sdt recording and of a two-lifetime phantom,
as phasorpy's tutorial plots a phasor from a TCSPC file.

Run: python flim.py [path.sdt|.ptu] [--device cpu|cuda|...] [--quick]
"""

import sys
from pathlib import Path

import numpy as np

import biogpu

device = sys.argv[sys.argv.index("--device") + 1] if "--device" in sys.argv else "auto"
files = [a for a in sys.argv[1:] if not a.startswith("--") and a != device]
path = Path(files[0]) if files else Path(__file__).resolve().parents[2] / "crates/flim-core/tests/data/bh_spc160_4x4.sdt"

counts, meta = biogpu.flim.read(path)
print(f"{path.name}: {counts.shape} (y, x, bins) of {meta['bin_ns']:.4f} ns, period {meta['period_ns']:.2f} ns")
ph = biogpu.flim.phasor(counts, meta["bin_ns"], period_ns=meta["period_ns"], device=device)
ok = ph["status"] == 0
print(f"phasor mean g = {ph['g'][ok].mean():.3f}, s = {ph['s'][ok].mean():.3f}, "
      f"tau_phase {np.median(ph['tau_phase'][ok]):.3f} ns")
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
    fig, ax = plt.subplots(figsize=(4, 3))
    a = np.linspace(0, np.pi, 100)
    ax.plot(0.5 + 0.5 * np.cos(a), 0.5 * np.sin(a), "k-", lw=0.8)
    ax.hist2d(ph["g"].ravel(), ph["s"].ravel(), bins=100, range=[[0, 1], [0, 0.6]], cmin=1)
    ax.set_xlabel("g"); ax.set_ylabel("s"); fig.savefig("flim_phasor.png", dpi=120)
    print("wrote flim_phasor.png")
