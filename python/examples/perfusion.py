"""DCE perfusion: the liver model on simulated curves and a Tofts volume, as docs/perfusion.md's
recovery table (dcmri/osipy-style arrays: curves with time last, t in s, AIF in mM).

Run: python perfusion.py [--device cpu|cuda|wgpu...] [--quick]
"""

import sys

import numpy as np

import biogpu

device = sys.argv[sys.argv.index("--device") + 1] if "--device" in sys.argv else "auto"
quick = "--quick" in sys.argv
names = [p["name"] + (f" ({p['unit']})" if p["unit"] else "") for p in biogpu.perfusion.models()["dual-input"]]

# The liver (Wang & Cao 2012): ka, kp, kl in ml/100g/min, arterial and portal delays in s.
truth = [20.0, 100.0, 400.0, 1.0, 2.0]
sim = biogpu.perfusion.simulate("dual-input", truth, nt=64, cnr=50, voxels=16 if quick else 1000, seed=2)
fit = biogpu.perfusion.fit(sim["curves"], sim["t"], sim["aif"], sim["pif"], model="dual-input", device=device)
ok = fit["status"] == 0
print(f"dual-input, {len(ok)} voxels at CNR 50 on {fit['device']} ({fit['precision']}): {ok.sum()} converged")
for name, value, key in zip(names, truth, fit["param_names"]):
    v = fit["params"][key][ok]
    print(f"  {name:22s} truth {value:7.2f}  median {np.median(v):7.2f}  IQR {np.subtract(*np.percentile(v, [75, 25])):6.2f}"
          f"  median SE {np.median(fit['se'][key][ok]):6.2f}")

# A Tofts volume (x, y, z, t): Ktrans rising across x.
t = sim["t"]
aif = sim["aif"]
shape = (8, 4, 2) if quick else (32, 32, 4)
ktrans = np.linspace(0.05, 0.5, shape[0])
curves = np.stack([biogpu.perfusion.predict(t, aif, [k, 0.3, 0.0], model="tofts") for k in ktrans])
vol = np.broadcast_to(curves[:, None, None, :], shape + (len(t),))
vol = vol + np.random.default_rng(0).normal(0, 0.01 * curves.max(), vol.shape)
out = biogpu.perfusion.fit(vol, t, aif, model="tofts", fixed={"tau": 0.0}, device=device)
print("Tofts Ktrans (1/min) across x, truth -> median fit:")
print("  " + ", ".join(f"{k:.2f}->{np.median(out['params']['ktrans'][i]):.2f}" for i, k in enumerate(ktrans)))
