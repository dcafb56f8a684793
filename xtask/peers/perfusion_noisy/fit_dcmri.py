"""dcmri peer for the issue-22 noisy-curve comparison (dcmri 0.6.20, PyPI `dcmri`).

dcmri's `Liver.train` / `Tissue.train` fit MR *signals* (SPGR, with S0 and R10); our curves
are concentrations. So this calls dcmri's own kinetic functions (`dcmri.conc_liver`,
`dcmri.conc_tissue`) and `scipy.optimize.curve_fit` exactly as dcmri's `ui.train` does
(`curve_fit(f, None, y, p0, bounds=bounds)`, default method then 'trf', numerical Jacobian;
a RuntimeError/ValueError returns the initial values, as dcmri does: counted as failed),
with dcmri's default initial values and bounds of the free parameters, H = 0 (our curves and
inputs are plasma concentrations; dcmri divides the inputs by 1 - H) and the inputs on the
frame grid (`t` = frame times):

dual-input -> `Liver(kinetics='2I-EC')`: free ve [0.01, 0.6] (init 0.3), Fp [0, inf]
  (0.008 mL/s/cm3), fa [0, 1] (0.2), Ta [0, inf] (2 s). C = conv(Fp/ve; Fp (fa Ca(t - Ta) +
  (1 - fa) Cv(t))): ka = 6000 Fp fa, kp = 6000 Fp (1 - fa), kl = 6000 Fp / ve, tau_a = Ta,
  tau_p = 0 (dcmri has no portal delay: the same model only when the truth's tau_p is 0).
extended-tofts -> `Tissue(kinetics='HF')` (high-flow = extended Tofts): free vb [1e-3, 0.999]
  (0.1), vi [1e-3, 0.999] (0.3), PS [0, inf] (0.003 mL/s/cm3); with H = 0, vp = vb, ve = vi,
  Ktrans = 60 PS (1/min); Ta not free by default (0): tau = 0.

Usage: python fit_dcmri.py MODEL CURVES.csv INPUTS.csv OUT.csv [N]   (first N curves)
"""

import sys
import time
import warnings

import numpy as np
from scipy.optimize import curve_fit

import dcmri


def read_csv(path):
    with open(path) as fh:
        head = fh.readline().strip().split(",")
        data = np.loadtxt(fh, delimiter=",", ndmin=2)
    return head, data


def main():
    model, curves, inputs, out = sys.argv[1:5]
    nmax = int(sys.argv[5]) if len(sys.argv) > 5 else None
    ih, idata = read_csv(inputs)
    t = idata[:, ih.index("time")]
    ca = idata[:, ih.index("aif")]
    ch, cdata = read_csv(curves)
    names = ch[1:]
    if nmax is not None:
        names = names[:nmax]
    assert np.allclose(cdata[:, 0], t)

    if model == "dual-input":
        cv = idata[:, ih.index("pv")]
        p0 = [0.3, 0.008, 0.2, 2.0]
        bounds = ([0.01, 0.0, 0.0, 0.0], [0.6, np.inf, 1.0, np.inf])

        def f(_, ve, Fp, fa, Ta):
            return dcmri.conc_liver(ca, t=t, cv=cv, H=0.0, ve=ve, Fp=Fp, fa=fa, Ta=Ta)

        def ours(p):
            ve, Fp, fa, Ta = p
            return [6000 * Fp * fa, 6000 * Fp * (1 - fa), 6000 * Fp / ve, Ta, 0.0]

        cols = ["ka", "kp", "kl", "tau_a", "tau_p"]
        native = ["ve", "Fp", "fa", "Ta"]
    elif model == "extended-tofts":
        p0 = [0.1, 0.3, 0.003]
        bounds = ([1e-3, 1e-3, 0.0], [0.999, 0.999, np.inf])

        def f(_, vb, vi, PS):
            return dcmri.conc_tissue(ca, t=t, kinetics="HF", H=0.0, vb=vb, vi=vi, PS=PS)

        def ours(p):
            vb, vi, PS = p
            return [60 * PS, vi, vb, 0.0]

        cols = ["ktrans", "ve", "vp", "tau"]
        native = ["vb", "vi", "PS"]
    else:
        raise SystemExit(f"no dcmri mapping for model {model}")

    lo, hi = np.array(bounds[0]), np.array(bounds[1])
    t0 = time.perf_counter()
    with open(out, "w") as fh:
        fh.write("curve," + ",".join(cols) + "," + ",".join("dcmri_" + n for n in native) + ",sse,failed,at_bound\n")
        for j, name in enumerate(names):
            y = cdata[:, 1 + j]
            failed = 0
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                try:
                    p, _ = curve_fit(f, None, y, p0, bounds=bounds)
                except (RuntimeError, ValueError):
                    p, failed = np.array(p0), 1
            span = np.where(np.isfinite(hi - lo), hi - lo, np.maximum(np.abs(p), 1.0))
            at_bound = int(np.any((p - lo <= 1e-4 * span) | (hi - p <= 1e-4 * span)))
            sse = float(np.sum((f(None, *p) - y) ** 2))
            fh.write(name + "," + ",".join(repr(float(v)) for v in ours(p)) + ","
                     + ",".join(repr(float(v)) for v in p) + f",{sse!r},{failed},{at_bound}\n")
    print(f"dcmri {model}: {len(names)} curves in {time.perf_counter() - t0:.2f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
