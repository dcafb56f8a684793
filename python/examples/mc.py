"""Monte Carlo: fluence in a box under a pencil beam, a slice and the depth profile, as
pmcx/pmmc's fluence-slice figures (pmmc's argument names).

Run: python mc.py [--device cpu|cuda|wgpu...] [--quick] [--out FOLDER]

docs/img/python-mc-fluence.png is this script (without --quick).
"""

import sys

import numpy as np
from pathlib import Path

import biogpu

device = sys.argv[sys.argv.index("--device") + 1] if "--device" in sys.argv else "auto"
#: Where the figure goes (--out FOLDER; default the current folder).
OUT = Path(sys.argv[sys.argv.index("--out") + 1]) if "--out" in sys.argv else Path(".")
quick = "--quick" in sys.argv
cell = 2.0 if quick else 1.0
mesh = biogpu.mc.box_mesh((20.0, 20.0, 20.0), cell)
mua, mus, g = 0.01, 10.0, 0.9  # 1/mm: tissue-like, reduced scattering 1/mm
cfg = {
    "node": mesh["node"], "elem": mesh["elem"],
    "prop": [[0, 0, 1, 1], [mua, mus, g, 1.37]],
    "srctype": "pencil", "srcpos": [10, 10, 0], "srcdir": [0, 0, 1],
    "nphoton": 20_000 if quick else 300_000, "seed": 7,
}
res = biogpu.mc.run(cfg, device=device)
s = res["summary"]
print(f"{len(mesh['elem'])} tets, {s['photons']} photons on {res['device']} in {s['seconds']:.2f} s: "
      f"absorbed {s['absorbed']:.3f}, escaped {s['escaped']:.3f}, specular {s['specular']:.3f}, "
      f"balance error {s['balance_error']:.1e}")

# Depth profile on the beam axis: elements whose centroid is within 1.5 cells of it.
cent = mesh["node"][mesh["elem"][:, :4] - 1].mean(axis=1)
axis = np.hypot(cent[:, 0] - 10, cent[:, 1] - 10) < 1.5 * cell
depth = np.arange(2, 18, 2)
prof = [res["fluence"][axis & (np.abs(cent[:, 2] - z) < cell)].mean() for z in depth]
mu_eff = np.sqrt(3 * mua * (mua + mus * (1 - g)))
slope = -np.polyfit(depth[2:], np.log(prof[2:]), 1)[0]
print("depth (mm) and fluence (1/mm^2 per photon):", ", ".join(f"{z}: {f:.2e}" for z, f in zip(depth, prof)))
print(f"fitted attenuation {slope:.3f}/mm (diffusion theory mu_eff {mu_eff:.3f}/mm; "
      f"the box's sides lower the deep fluence)")

try:
    import matplotlib.pyplot as plt
except ImportError:
    plt = None
if plt is not None and not quick:
    sl = np.abs(cent[:, 1] - 10) < 1
    fig, ax = plt.subplots(figsize=(4.2, 3.6), constrained_layout=True)
    sc = ax.scatter(cent[sl, 0], cent[sl, 2], c=np.log10(res["fluence"][sl] + 1e-12), s=6)
    ax.invert_yaxis(); ax.set_xlabel("x (mm)"); ax.set_ylabel("z (mm)")
    fig.colorbar(sc, label="log10 fluence"); fig.savefig(OUT / "mc_fluence_slice.png", dpi=120)
    print(f"wrote {OUT / 'mc_fluence_slice.png'}")
