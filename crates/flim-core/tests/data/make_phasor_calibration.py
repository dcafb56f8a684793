"""Write the phasor-calibration reference recording and phasorpy's calibrated phasors of
`bh_spc160_4x4.sdt` against it, for tests/phasor_calibration.rs.

phasorpy computes everything here (phasor_from_signal, phasor_calibrate), never biogpu:
phasorpy 0.7, reading the .sdt with sdtfile.

Run from this folder: python3 make_phasor_calibration.py   (needs numpy, scipy, phasorpy 0.7,
sdtfile 2026.2.8)

Files:
- phasor_reference_2p5ns.npy: (3, 2, 256) uint16, a 2.5 ns single exponential convolved
  with a Gaussian IRF (sigma 0.03 ns at 0.05 ns, as the .sdt's decays start at bin 0; the
  tails of the previous laser periods included), bin-integrated with the .sdt's bin width and laser period, about 20,000 photons
  per pixel (scaled per pixel), rounded; no noise. A .npy stores no bin width: the reader
  takes the data's.
- phasor_calibration.expected.csv: rows `case,harmonic,first,bins,frequency_mhz,bin_ns,
  ref_tau_ns,phi_zero,mod_zero,y,x,g,s`: per pixel of the .sdt (block 0), the phasor of
  bins `first..first + bins` with sample phases `harmonic * omega * (j + 1/2) * bin_ns`
  (biogpu's bin-centre convention; omega = 2 pi x the header's sync rate), calibrated by
  `phasor_calibrate` (method `mean`, i.e. the intensity-weighted mean phasor of the
  reference) onto the 2.5 ns point at `harmonic x` the laser frequency. Pixels without
  counts are left out.
"""

import math

import numpy as np
import phasorpy
import sdtfile
from phasorpy.lifetime import phasor_calibrate
from phasorpy.phasor import phasor_from_signal
from scipy.special import erfc

assert phasorpy.__version__ == '0.7', phasorpy.__version__

SDT = 'bh_spc160_4x4.sdt'
REF = 'phasor_reference_2p5ns.npy'
TAU = 2.5

sdt = sdtfile.SdtFile(SDT)
signal = np.asarray(sdt.data[0], dtype=np.float64)  # (4, 4, 256)
bins = signal.shape[-1]
bin_ns = float(sdt.times[0][1]) * 1e9
sync_hz = float(sdt.measure_info[0]['StopInfo']['max_sync_rate'])
frequency_mhz = sync_hz * 1e-6
period_ns = 1e3 / frequency_mhz


def ex_gauss(t, tau, mu, sigma):
    """A unit-area exponential of `tau` convolved with a Gaussian (mu, sigma)."""
    z = (t - mu) / sigma
    return (
        0.5
        / tau
        * np.exp(sigma**2 / (2 * tau**2) - (t - mu) / tau)
        * erfc((sigma / tau - z) / math.sqrt(2))
    )


# Reference: bin-integrated by 200 sub-samples per bin, two periods back included.
sub = 200
t = (np.arange(bins * sub) + 0.5) * bin_ns / sub
shape = sum(ex_gauss(t + k * period_ns, TAU, 0.05, 0.03) for k in range(3))
per_bin = shape.reshape(bins, sub).sum(axis=1)
per_bin /= per_bin.sum()
scale = np.array([[1.0, 0.8], [1.2, 0.6], [0.9, 1.1]]) * 20000.0
reference = np.rint(scale[..., None] * per_bin).astype(np.uint16)
np.save(REF, reference)

rows = []
for case, (harmonic, first, m) in enumerate([(1, 0, bins), (2, 10, 230)]):
    omega = 2 * math.pi * frequency_mhz * 1e-3 * harmonic  # rad/ns
    phase = omega * (np.arange(m) + 0.5) * bin_ns
    mean, g, s = phasor_from_signal(
        signal[..., first : first + m], sample_phase=phase
    )
    rmean, rg, rs = phasor_from_signal(
        reference[..., first : first + m].astype(np.float64), sample_phase=phase
    )
    cg, cs = phasor_calibrate(
        g,
        s,
        rmean,
        rg,
        rs,
        frequency=frequency_mhz * harmonic,
        lifetime=TAU,
    )
    # phi_zero and mod_zero, as phasor_calibrate derives them.
    mg = np.nansum(rg * rmean) / np.nansum(rmean)
    ms = np.nansum(rs * rmean) / np.nansum(rmean)
    wt = omega * TAU
    phi_zero = math.atan(wt) - math.atan2(ms, mg)
    mod_zero = 1 / math.sqrt(1 + wt * wt) / math.hypot(mg, ms)
    for y in range(signal.shape[0]):
        for x in range(signal.shape[1]):
            if mean[y, x] > 0:
                rows.append(
                    f'{case},{harmonic},{first},{m},{frequency_mhz!r},{bin_ns!r},{TAU},'
                    f'{phi_zero!r},{mod_zero!r},{y},{x},{float(cg[y, x])!r},{float(cs[y, x])!r}'
                )

with open('phasor_calibration.expected.csv', 'w') as f:
    f.write(
        f'# phasorpy {phasorpy.__version__}, numpy {np.__version__}: make_phasor_calibration.py\n'
    )
    f.write(
        'case,harmonic,first,bins,frequency_mhz,bin_ns,ref_tau_ns,phi_zero,mod_zero,y,x,g,s\n'
    )
    f.write('\n'.join(rows) + '\n')
print(f'{len(rows)} rows; {frequency_mhz} MHz, {bin_ns} ns bins')
