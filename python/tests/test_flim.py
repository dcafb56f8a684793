"""FLIM readers, lifetimes, phasor and fits against numpy, known lifetimes and the CLI."""

import json
import subprocess

import numpy as np
import pytest

from biogpu import flim
from conftest import FLIM_DATA

SDT = FLIM_DATA / "bh_spc160_4x4.sdt"
#: Photon noise at 20,000 photons per pixel: CMM/MLE spread about 0.8%; 0.04 ns is ~2 sigma
#: of a pixel at 2.5 ns, and the image means are much tighter.
TAU_TOLERANCE_NS = 0.04


def mono_decays(tau_ns=2.5, shape=(4, 5), bins=256, bin_ns=0.05, photons=20_000, seed=0):
    t = (np.arange(bins) + 0.5) * bin_ns
    p = np.exp(-t / tau_ns)
    return np.random.default_rng(seed).poisson(photons * p / p.sum(), size=shape + (bins,))


def test_read_sdt_returns_counts_and_metadata():
    counts, meta = flim.read(SDT)
    assert counts.shape == (4, 4, 256) and counts.dtype == np.uint16
    assert meta["format"] == "sdt" and meta["images"] == 1
    assert abs(meta["bin_ns"] - 0.048861) < 1e-5 and abs(meta["period_ns"] - 12.4885) < 1e-3
    assert meta["header"]["module"] == "SPC-160"
    assert counts.sum() > 1_000_000


def test_read_other_formats_and_several_images():
    counts, meta = flim.read(FLIM_DATA / "spc150_image.spc")
    assert counts.ndim == 3 and meta["images"] == 4
    everything = flim.read_all(FLIM_DATA / "picoharp.pt3")
    assert len(everything) == 2 and everything[0][1]["format"] == "pt3"


def test_phasor_matches_numpy():
    d = mono_decays()
    bin_ns = 0.05
    period = 256 * bin_ns
    out = flim.phasor(d, bin_ns, device="cpu")
    t = (np.arange(256) + 0.5) * bin_ns
    w = 2 * np.pi / period
    n = d.sum(-1)
    g = (d * np.cos(w * t)).sum(-1) / n
    s = (d * np.sin(w * t)).sum(-1) / n
    np.testing.assert_allclose(out["g"], g, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(out["s"], s, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(out["intensity"], n, rtol=1e-6)
    assert "tau_cmm" not in out and out["period_ns"] == pytest.approx(period)


def test_lifetimes_and_fits_recover_a_mono_exponential():
    d = mono_decays()
    out = flim.lifetimes(d, 0.05, device="cpu")
    for key in ("tau_rld", "tau_iem", "tau_cmm", "tau_phase", "tau_mod"):
        assert out[key].shape == (4, 5)
        assert abs(float(out[key].mean()) - 2.5) < TAU_TOLERANCE_NS, (key, out[key].mean())
    fit = flim.fit(d, 0.05, "mono", device="cpu")
    assert fit["tau"].shape == (1, 4, 5)
    assert (fit["status"] == 0).all() and fit["status_names"][0] == "converged"
    np.testing.assert_allclose(fit["tau"][0], 2.5, atol=3 * TAU_TOLERANCE_NS)
    assert abs(float(np.median(fit["chi2_red"])) - 1.0) < 0.3
    single = flim.fit(d[0, 0], 0.05, device="cpu")
    assert single["tau"].shape == (1,) and single["tau"][0] == fit["tau"][0, 0, 0]
    glob = flim.fit(d, 0.05, segments="whole", device="cpu")
    assert abs(float(glob["tau"][0, 0, 0]) - 2.5) < TAU_TOLERANCE_NS


def test_bi_exponential_fit_separates_two_lifetimes():
    t = (np.arange(256) + 0.5) * 0.05
    p = 0.5 * np.exp(-t / 0.8) + 0.5 * np.exp(-t / 3.0)
    d = np.random.default_rng(3).poisson(200_000 * p / p.sum(), size=(2, 2, 256))
    out = flim.fit(d, 0.05, "bi", device="cpu")
    assert out["tau"].shape == (2, 2, 2)
    np.testing.assert_allclose(out["tau"][0], 0.8, rtol=0.1)
    np.testing.assert_allclose(out["tau"][1], 3.0, rtol=0.1)


def test_fit_of_the_sdt_equals_the_cli(cli, tmp_path):
    subprocess.run(
        [str(cli), "flim", "fit", str(SDT), "--method", "mle", "--device", "cpu", "--out", str(tmp_path)],
        check=True,
        capture_output=True,
    )
    summary = json.loads((tmp_path / "summary.json").read_text())
    want = summary["images"][0]["tau"]
    counts, meta = flim.read(SDT)
    out = flim.fit(counts, meta["bin_ns"], period_ns=meta["period_ns"], threshold=summary["threshold"], device="cpu")
    tau = out["tau"][0][out["status"] == 0]
    assert len(tau) == want["valid"]
    for stat, value in (("median", np.median(tau)), ("min", tau.min()), ("max", tau.max())):
        assert value == pytest.approx(want[stat], rel=1e-6), stat


def test_bad_input_raises_value_error_with_the_reason():
    d = mono_decays(shape=(2, 2))
    with pytest.raises(ValueError, match="bin width"):
        flim.fit(d, -1.0)
    with pytest.raises(ValueError, match="unknown model `quad`"):
        flim.fit(d, 0.05, "quad")
    with pytest.raises(ValueError, match="estimator"):
        flim.fit(d, 0.05, estimator="bayes")
    with pytest.raises(ValueError, match="lifetime method"):
        flim.lifetimes(d, 0.05, methods=["magic"])
    with pytest.raises(ValueError, match="at least 4 time bins"):
        flim.phasor(np.ones((2, 2, 3), np.uint16), 0.05)
    with pytest.raises(ValueError, match="truncated"):
        flim.read(FLIM_DATA / "hazelnut_head.ptu")
    with pytest.raises(OSError):
        flim.read(FLIM_DATA / "does_not_exist.sdt")


def test_gpu_fit_and_phasor_equal_the_cpu(gpu_device):
    d = mono_decays(shape=(8, 8)).astype(np.uint16)
    cpu = flim.fit(d, 0.05, device="cpu")
    gpu = flim.fit(d, 0.05, device=gpu_device)
    assert gpu["backend"] != "cpu"
    # f32 kernels against the f64 reference (docs/flim.md: lifetimes within 1e-3 relative).
    np.testing.assert_allclose(gpu["tau"], cpu["tau"], rtol=1e-3)
    np.testing.assert_array_equal(gpu["status"], cpu["status"])
    cpu_p = flim.phasor(d, 0.05, device="cpu")
    gpu_p = flim.phasor(d, 0.05, device=gpu_device)
    np.testing.assert_allclose(gpu_p["g"], cpu_p["g"], atol=1e-4)
    np.testing.assert_allclose(gpu_p["s"], cpu_p["s"], atol=1e-4)


def test_default_ranges_start_on_the_tail_as_the_cli():
    """Decays with a rise (a 2 ns lifetime behind a Gaussian IRF at 2 ns): by default the
    tail methods and the fit without an IRF start at the peak, as the CLI, and recover the
    lifetime; forced to start at bin 0 they fit the rise as well and are biased."""
    bins, bin_ns, tau = 256, 0.05, 2.0
    t = (np.arange(bins) + 0.5) * bin_ns
    irf = np.exp(-0.5 * ((t - 2.0) / 0.1) ** 2)
    decay = np.convolve(irf, np.exp(-t / tau))[:bins]
    counts = np.random.default_rng(5).poisson(20000 * decay / decay.sum(), size=(4, 4, bins))
    fit = flim.fit(counts, bin_ns, device="cpu")
    np.testing.assert_allclose(np.median(fit["tau"][0]), tau, rtol=0.03)
    from_zero = flim.fit(counts, bin_ns, first=0, device="cpu")
    assert abs(np.median(from_zero["tau"][0]) - tau) > 0.1
    iem = flim.lifetimes(counts, bin_ns, methods=("iem",), device="cpu")["tau_iem"]
    np.testing.assert_allclose(np.median(iem), tau, rtol=0.05)
