"""Independent simulator of noisy DCE curves for the issue-22 "noisy curves" comparison.

Written without any code from perfusion-core: the tissue curves are computed on a fine
0.01 s grid (trapezoidal convolution by FFT of the analytic Parker AIF, and of a portal
input made from it on the same grid), then sampled at the frames. The fitters only see
the frame samples of the inputs (as in practice). By default (`--inputs pl`) the true
inputs ARE the linear interpolants of their frame samples (what all three fitters assume),
evaluated on the fine grid, so that bias measures the estimators and not the frame
sampling of a 2 s grid; `--inputs analytic` convolves the analytic Parker AIF itself (its
peak, 8 s wide, is then poorly represented by 2 s samples: every fitter, biogpu and the C
reference alike, then finds ka ~5 instead of 20 on noise-free dual-input curves).

Models (rates in the units `biogpu perfusion models` lists):
  dual-input     C(t) = int_0^t [ka/6000 Ca(s - tau_a) + kp/6000 Cp(s - tau_p)] exp(-kl/6000 (t - s)) ds
                 ka, kp, kl in ml/100g/min (x 1/6000 -> 1/s), tau_a, tau_p in s
  extended-tofts C(t) = vp Ca(t - tau) + int_0^t Ktrans/60 Ca(s - tau) exp(-Ktrans/(60 ve) (t - s)) ds
                 Ktrans in 1/min, ve, vp fractions, tau in s
  tofts          extended-tofts with vp = 0

Inputs: Ca = Parker et al. 2006 population AIF (mM; taken as plasma, no haematocrit), bolus
arrival BAT s after the first frame, 0 before it (the formula cut at arrival, as biogpu's
`parker`). Cp = Ca convolved with a gut compartment exp(-t/Tg)/Tg, Tg = 10 s (biogpu's
`portal` and dcmri's one-inlet liver model).

Noise: Gaussian, SD = peak of the noise-free sampled curve / SNR, one draw per curve, seeded
per (seed, setting, SNR) with numpy's PCG64.

Usage: python3 simulate.py OUTDIR [--n N] [--seed S]
Writes OUTDIR/<setting>_snr<SNR>/{curves.csv, inputs.csv, truth.json} and OUTDIR/settings.json.
"""

import argparse
import json
import os

import numpy as np

H = 0.01  # fine grid (s)
NT = 120  # frames
DT = 2.0  # frame interval (s): 0 .. 238 s
BAT = 10.0  # bolus arrival after the first frame (s)
TG = 10.0  # gut transit time of the portal input (s)
SNRS = (20, 50)

# Truth points: bias and SD are per point. `peers` lists the fitters run on the setting.
SETTINGS = [
    {
        "name": "di_paper",
        "model": "dual-input",
        "truth": {"ka": 20.0, "kp": 100.0, "kl": 400.0, "tau_a": 1.0, "tau_p": 2.0},
        "note": "Wang & Cao 2012's truth (both delays free); dcmri has no portal delay: not run",
    },
    {
        "name": "di_frames",
        "model": "dual-input",
        "truth": {"ka": 20.0, "kp": 100.0, "kl": 400.0, "tau_a": 2.0, "tau_p": 4.0},
        "note": "the paper's rates with both delays on frames (1 and 2 frames): the fitters' "
                "model is then exact (no off-frame interpolation error); dcmri: no portal delay",
    },
    {
        "name": "di_dcmri",
        "model": "dual-input",
        "truth": {"ka": 30.0, "kp": 90.0, "kl": 300.0, "tau_a": 4.0, "tau_p": 0.0},
        "note": "portal delay 0 (and the arterial one on a frame) so that dcmri's 2I-EC (arterial delay only) is the same model",
    },
    {
        "name": "etm",
        "model": "extended-tofts",
        "truth": {"ktrans": 0.25, "ve": 0.3, "vp": 0.05, "tau": 0.0},
        "note": "delay 0 so that dcmri's Tissue HF (no delay by default) is the same model",
    },
    {
        "name": "tofts",
        "model": "tofts",
        "truth": {"ktrans": 0.25, "ve": 0.3, "tau": 0.0},
        "note": "standard Tofts; dcmri's default Tissue kinetics have no vp-free Tofts: not run",
    },
    {
        "name": "etm_delay",
        "model": "extended-tofts",
        "truth": {"ktrans": 0.25, "ve": 0.3, "vp": 0.05, "tau": 3.3},
        "note": "a delay between frames; dcmri's default fit has none: not run",
    },
]


def parker(t_s, bat_s):
    """Parker et al. MRM 2006;56:993, Table 1 (mM); 0 before arrival."""
    t = (np.asarray(t_s, float) - bat_s) / 60.0  # minutes since arrival
    a1, a2 = 0.809, 0.330
    t1, t2 = 0.17046, 0.365
    s1, s2 = 0.0563, 0.132
    alpha, beta, s, tau = 1.050, 0.1685, 38.078, 0.483
    g1 = a1 / (s1 * np.sqrt(2 * np.pi)) * np.exp(-((t - t1) ** 2) / (2 * s1**2))
    g2 = a2 / (s2 * np.sqrt(2 * np.pi)) * np.exp(-((t - t2) ** 2) / (2 * s2**2))
    sig = alpha * np.exp(-beta * t) / (1 + np.exp(-s * (t - tau)))
    c = g1 + g2 + sig
    return np.where(t >= 0, c, 0.0)


def conv_exp(f, k, h=H):
    """int_0^t f(s) exp(-k (t - s)) ds on the fine grid, trapezoidal rule, by FFT."""
    n = len(f)
    kern = np.exp(-k * h * np.arange(n))
    m = 1 << int(np.ceil(np.log2(2 * n)))
    full = np.fft.irfft(np.fft.rfft(f, m) * np.fft.rfft(kern, m), m)[:n]
    # rectangle sum -> trapezoid: subtract half of both end terms
    return h * (full - 0.5 * f[0] * kern - 0.5 * f)


def fine_grid():
    t_end = (NT - 1) * DT
    return np.arange(0.0, t_end + 40.0 + H / 2, H)  # a margin so that shifts stay inside


def portal_fine(tf):
    ca = parker(tf, BAT)
    return conv_exp(ca, 1.0 / TG) / TG


def tissue_fine(model, p, tf, pv_f, times, aif, pv, inputs):
    if inputs == "analytic":
        def ca_del(tau):
            return parker(tf - tau, BAT)

        def cp_del(tau):
            return np.interp(tf - tau, tf, pv_f, left=0.0)
    else:  # "pl": the inputs are the linear interpolants of their frame samples
        def ca_del(tau):
            return np.interp(tf - tau, times, aif)

        def cp_del(tau):
            return np.interp(tf - tau, times, pv)

    if model == "dual-input":
        f = p["ka"] / 6000.0 * ca_del(p["tau_a"]) + p["kp"] / 6000.0 * cp_del(p["tau_p"])
        return conv_exp(f, p["kl"] / 6000.0)
    if model in ("tofts", "extended-tofts"):
        kt = p["ktrans"] / 60.0
        ca = ca_del(p["tau"])
        c = conv_exp(kt * ca, kt / p["ve"])
        return c + p.get("vp", 0.0) * ca
    raise ValueError(model)


def sample(tf, yf, times):
    # frames lie on the fine grid (DT a multiple of H): exact indices
    idx = np.rint(times / H).astype(int)
    assert np.allclose(tf[idx], times)
    return yf[idx]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--n", type=int, default=500)
    ap.add_argument("--seed", type=int, default=20261128)
    ap.add_argument("--inputs", choices=("pl", "analytic"), default="pl")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    times = DT * np.arange(NT)
    tf = fine_grid()
    pv_f = portal_fine(tf)
    aif = parker(times, BAT)
    pv = sample(tf, pv_f, times)
    index = []
    for si, s in enumerate(SETTINGS):
        c_f = tissue_fine(s["model"], s["truth"], tf, pv_f, times, aif, pv, a.inputs)
        c0 = sample(tf, c_f, times)
        peak = float(np.max(c0))
        for snr in SNRS:
            rng = np.random.Generator(np.random.PCG64([a.seed, si, snr]))
            sd = peak / snr
            noisy = c0[:, None] + sd * rng.standard_normal((NT, a.n))
            d = os.path.join(a.out, f"{s['name']}_snr{snr}")
            os.makedirs(d, exist_ok=True)
            names = [f"c{i:04d}" for i in range(a.n)]
            with open(os.path.join(d, "curves.csv"), "w") as fh:
                fh.write("time," + ",".join(names) + "\n")
                for i in range(NT):
                    fh.write(repr(float(times[i])) + "," + ",".join(repr(float(v)) for v in noisy[i]) + "\n")
            with open(os.path.join(d, "inputs.csv"), "w") as fh:
                fh.write("time,aif,pv\n")
                for i in range(NT):
                    fh.write(f"{float(times[i])!r},{float(aif[i])!r},{float(pv[i])!r}\n")
            with open(os.path.join(d, "noise_free.csv"), "w") as fh:
                fh.write("time,c\n")
                for i in range(NT):
                    fh.write(f"{float(times[i])!r},{float(c0[i])!r}\n")
            info = {
                "setting": s["name"], "model": s["model"], "truth": s["truth"], "snr": snr,
                "noise_sd": sd, "peak": peak, "n": a.n, "seed": [a.seed, si, snr],
                "inputs": a.inputs, "nt": NT, "dt": DT, "bat": BAT, "tg": TG, "fine_grid_s": H, "note": s["note"],
            }
            with open(os.path.join(d, "truth.json"), "w") as fh:
                json.dump(info, fh, indent=1)
            index.append(info | {"dir": os.path.basename(d)})
    with open(os.path.join(a.out, "settings.json"), "w") as fh:
        json.dump(index, fh, indent=1)


if __name__ == "__main__":
    main()
