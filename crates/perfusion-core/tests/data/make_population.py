#!/usr/bin/env python3
"""Reference values of the population input functions for crates/perfusion-core/tests/population.rs.

Run from this directory with dcmri (0.6.x) and osipy (0.1.x, Python >= 3.12) installed:

    python3 -m venv /tmp/pop && /tmp/pop/bin/pip install dcmri osipy
    /tmp/pop/bin/python make_population.py

Written with dcmri 0.6.20, osipy 0.1.4, scipy 1.18.1, numpy 2.5.5. The output is
deterministic (every value printed with 17 significant digits, so the CSV round-trips f64).

population_reference.csv: one row per time point (s), bolus arrival ARRIVAL_S = 7.25 s;
each column is the package's function of the time since arrival (t - 7.25 s), set to 0
before arrival (the convention of perfusion_core::model::population), all in mM:

  parker_osipy    osipy.ParkerAIF: Parker et al. 2006 (MRM 56:993), Table 1 values, whole
                  blood. Expected equal to ours to rounding (1e-12 relative).
  parker_dcmri    1000 * dcmri.aif_parker(t, BAT=7.25): the same model with the two Gaussian
                  amplitudes A/(sigma sqrt(2 pi)) rounded to 6 digits (5.73258, 0.997356),
                  so expected within 4e-7 relative.
  weinmann_osipy  osipy.WeinmannAIF: Weinmann et al. 1984 bi-exponential as used by Tofts &
                  Kermode 1991 (MRM 17:357), dose 0.1 mmol/kg, plasma.
  georgiou        Georgiou et al. 2019 (MRM 81:1955), eq. 1 with Table 3, whole blood. osipy
                  0.1.4's GeorgiouAIF is not that model (it is a Parker-like form with other
                  numbers), so eq. 1 is written out here as the OSIPI DCE-DSC-MRI
                  CodeCollection and Bliesener's MATLAB AIF_georgiou.m write it, with
                  scipy.stats.gamma.pdf (MATLAB's gampdf, evaluated in logs) so that it holds
                  past the 27th recirculation where a direct Gamma(a + 1) overflows; checked
                  below against the direct form where that one is finite.
  portal          the portal-venous input: the Parker AIF (exact Table 1 values) through a gut
                  compartment of mean transit time 10 s, dcmri.flux_comp (the normalised
                  exponential convolution of dcmri's one-inlet liver model and fake_liver),
                  on a 0.01 s grid from arrival and linearly interpolated, as ours does.
"""

import math

import dcmri
import numpy as np
from osipy.common.aif.population import ParkerAIF, WeinmannAIF
from scipy.stats import gamma

ARRIVAL_S = 7.25
GUT_TRANSIT_S = 10.0
FINE_DT_S = 0.01

# Georgiou et al. 2019, Table 3: A (mM), m (1/min), alpha, beta (min), tau (min).
G_A = (0.37, 0.33, 10.06)
G_M = (0.11, 1.17, 16.02)
G_ALPHA, G_BETA, G_TAU = 5.26, 0.032, 0.129


def times():
    """0-60 s every 0.5 s (the first pass), then every 3 s to 600 s."""
    return np.concatenate([np.arange(0.0, 60.0, 0.5), np.arange(60.0, 600.0 + 1e-9, 3.0)])


def after_arrival(t, f):
    """f(t - arrival) where t >= arrival, else 0."""
    since = t - ARRIVAL_S
    out = np.zeros_like(t)
    ok = since >= 0
    out[ok] = f(since[ok])
    return out


def parker_osipy(since_s):
    return np.asarray(ParkerAIF()(since_s).concentration, dtype=float)


def weinmann_osipy(since_s):
    return np.asarray(WeinmannAIF()(since_s).concentration, dtype=float)


def georgiou(since_s):
    t = np.asarray(since_s, dtype=float) / 60.0
    out = np.zeros_like(t)
    for i, ti in enumerate(t):
        if ti <= 0:
            continue
        n = int(math.floor(ti / G_TAU))
        recirculation = sum(
            gamma.pdf(ti - j * G_TAU, (j + 1) * G_ALPHA + j + 1, scale=G_BETA) for j in range(n + 1)
        )
        out[i] = sum(a * math.exp(-m * ti) for a, m in zip(G_A, G_M)) * recirculation
    return out


def georgiou_direct(since_s):
    """The CodeCollection's direct form, x^a e^(-x/b) / (b^(a+1) Gamma(a+1)), where finite."""
    t = np.asarray(since_s, dtype=float) / 60.0
    out = np.zeros_like(t)
    for i, ti in enumerate(t):
        n = int(math.floor(ti / G_TAU))
        s = 0.0
        for j in range(n + 1):
            a = (j + 1) * G_ALPHA + j
            x = ti - j * G_TAU
            s += x**a * math.exp(-x / G_BETA) / (G_BETA ** (a + 1) * math.gamma(a + 1))
        out[i] = sum(a * math.exp(-m * ti) for a, m in zip(G_A, G_M)) * s
    return out


def portal(since_s):
    end = float(np.max(since_s))
    fine = np.arange(int(math.ceil(end / FINE_DT_S)) + 2) * FINE_DT_S
    ca = parker_osipy(fine)
    cv = dcmri.flux_comp(ca, GUT_TRANSIT_S, t=fine)
    return np.interp(since_s, fine, cv)


def main():
    t = times()
    cols = {
        "time_s": t,
        "parker_osipy": after_arrival(t, parker_osipy),
        "parker_dcmri": np.where(t >= ARRIVAL_S, 1000.0 * dcmri.aif_parker(t, BAT=ARRIVAL_S), 0.0),
        "weinmann_osipy": after_arrival(t, weinmann_osipy),
        "georgiou": after_arrival(t, georgiou),
        "portal": after_arrival(t, portal),
    }
    # The log-domain Georgiou equals the direct form wherever Gamma(a + 1) is finite
    # (27 recirculations, 3.5 min).
    early = np.arange(0.05, 3.4 * 60.0, 0.7)
    ref, direct = georgiou(early), georgiou_direct(early)
    assert np.all(np.abs(ref - direct) <= 1e-12 * np.abs(direct) + 1e-300), "georgiou forms differ"
    # dcmri's own docstring values (BAT 0), as a check of the installed package.
    doc = 1000 * dcmri.aif_parker(np.arange(0, 20, 1.5))
    assert abs(doc[7] - 6.06793854) < 1e-8, doc
    names = list(cols)
    with open("population_reference.csv", "w") as f:
        f.write(",".join(names) + "\n")
        for row in zip(*(cols[n] for n in names)):
            f.write(",".join(f"{v:.17g}" for v in row) + "\n")


if __name__ == "__main__":
    main()
