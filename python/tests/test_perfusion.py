"""Perfusion fits against an independent numpy Tofts model, the simulator and bad input."""

import numpy as np
import pytest

from biogpu import perfusion

#: Noise-free Tofts curves: the fit recovers Ktrans and ve to 1e-3 relative (docs: LM on
#: noise-free curves converges to the truth; the numpy model's own error is ~1e-5).
RECOVERY = 1e-3


def aif(t):
    """A gamma-variate bolus at 6 s plus a plateau (mM)."""
    s = np.clip(t - 6.0, 0.0, None)
    return np.where(t > 6.0, 6.0 * s / 5.0 * np.exp(-s / 5.0) + 0.5, 0.0)


def numpy_tofts(t, ktrans_per_min, ve):
    """C(t) = Ktrans int Ca(u) exp(-kep (t - u)) du, the AIF linear between samples, on a
    0.01 s grid by the trapezoid rule."""
    fine = np.arange(0.0, t[-1] + 1e-9, 0.01)
    ca = np.interp(fine, t, aif(t))
    k, kep = ktrans_per_min / 60.0, ktrans_per_min / 60.0 / ve
    c = np.empty_like(fine)
    acc, prev = 0.0, 0.0
    decay = np.exp(-kep * 0.01)
    for i, v in enumerate(ca):
        if i:
            acc = acc * decay + 0.5 * 0.01 * (prev * decay + v)
        prev = v
        c[i] = k * acc
    return np.interp(t, fine, c)


T = np.arange(64) * 1.5


def test_predict_equals_numpy_tofts():
    got = perfusion.predict(T, aif(T), [0.3, 0.4, 0.0], model="tofts")
    np.testing.assert_allclose(got, numpy_tofts(T, 0.3, 0.4), rtol=1e-4, atol=1e-6)


def test_tofts_fit_recovers_a_numpy_curve_for_lm_and_nm():
    truth = [(0.3, 0.4), (0.1, 0.2), (0.6, 0.5)]
    curves = np.stack([numpy_tofts(T, k, v) for k, v in truth])
    for method in ("lm", "nm"):
        out = perfusion.fit(curves, T, aif(T), model="tofts", method=method, device="cpu")
        assert out["param_names"] == ["ktrans", "ve", "tau"] and out["units"][0] == "1/min"
        assert (out["status"] == 0).all(), (method, out["status"])
        np.testing.assert_allclose(out["params"]["ktrans"], [k for k, _ in truth], rtol=RECOVERY)
        np.testing.assert_allclose(out["params"]["ve"], [v for _, v in truth], rtol=RECOVERY)
        assert np.isfinite(out["se"]["ktrans"]).all()


def test_volume_with_time_last_and_fixed_parameters():
    s = perfusion.simulate("tofts", [0.3, 0.4, 2.0], voxels=6, cnr=50, seed=3)
    vol = s["curves"].reshape(1, 2, 3, -1)
    out = perfusion.fit(vol, s["t"], s["aif"], model="tofts", fixed={"tau": 2.0}, device="cpu")
    assert out["params"]["ktrans"].shape == (1, 2, 3)
    np.testing.assert_array_equal(out["params"]["tau"], 2.0)
    assert np.isnan(out["se"]["tau"]).all()
    np.testing.assert_allclose(out["params"]["ktrans"], 0.3, rtol=0.05)


def test_dual_input_liver_is_recovered_from_the_simulator():
    s = perfusion.simulate(voxels=3)
    out = perfusion.fit(s["curves"], s["t"], s["aif"], s["pif"], model="dual-input", device="cpu")
    assert out["status_names"][out["status"][0]] == "converged"
    np.testing.assert_allclose(out["params"]["ka"], 20.0, rtol=1e-3)
    np.testing.assert_allclose(out["params"]["kl"], 400.0, rtol=1e-3)


def test_bad_input_raises_value_error_with_the_reason():
    c = numpy_tofts(T, 0.3, 0.4)[None]
    with pytest.raises(ValueError, match="model"):
        perfusion.fit(c, T, aif(T), model="toft")
    with pytest.raises(ValueError, match="method"):
        perfusion.fit(c, T, aif(T), method="sgd")
    with pytest.raises(ValueError, match="tissue curve"):
        perfusion.fit(c[:, :10], T, aif(T))
    with pytest.raises(ValueError):
        perfusion.fit(c, T, aif(T), model="dual-input")  # no portal input
    with pytest.raises(ValueError):
        perfusion.fit(c, T, aif(T), fixed={"kep": 1.0})
    with pytest.raises(ValueError, match="parameters"):
        perfusion.predict(T, aif(T), [0.3], model="tofts")


def test_gpu_fit_equals_the_cpu(gpu_device):
    curves = np.stack([numpy_tofts(T, k, 0.4) for k in (0.1, 0.2, 0.3, 0.5)])
    cpu = perfusion.fit(curves, T, aif(T), model="tofts", device="cpu")
    gpu = perfusion.fit(curves, T, aif(T), model="tofts", device=gpu_device)
    assert gpu["device"] != "cpu"
    # f32 on wgpu (no f64 there): parameters to 1e-3 relative (docs/perfusion.md).
    np.testing.assert_allclose(gpu["params"]["ktrans"], cpu["params"]["ktrans"], rtol=1e-3)
    np.testing.assert_allclose(gpu["params"]["ve"], cpu["params"]["ve"], rtol=1e-3)


def test_fit_equals_the_cli(cli, tmp_path):
    """Noisy curves from `biogpu perfusion simulate`, fitted by `perfusion fit` and by
    perfusion.fit with the defaults of both: the same parameters, standard errors and
    statuses (results.csv prints them exactly)."""
    import subprocess

    sim, out = tmp_path / "sim", tmp_path / "fit"
    run = lambda *a: subprocess.run([str(cli), "--device", "cpu", "perfusion", *a], check=True, capture_output=True)
    run("simulate", "--model", "extended-tofts", "--voxels", "12", "--cnr", "30", "--out", str(sim))
    run("fit", "--model", "extended-tofts", "--curves", str(sim / "curves.csv"),
        "--aif", f"{sim / 'inputs.csv'}:aif", "--out", str(out))
    curves = np.genfromtxt(sim / "curves.csv", delimiter=",", names=True)
    names = [n for n in curves.dtype.names if n != "time"]
    c = np.stack([curves[n] for n in names])
    aif_values = np.genfromtxt(sim / "inputs.csv", delimiter=",", names=True)["aif"]
    got = perfusion.fit(c, curves["time"], aif_values, model="extended-tofts", device="cpu")
    import csv

    with open(out / "results.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert [r["curve"] for r in rows] == names

    def column(name):
        """A column by parameter name (the header adds the unit: `ktrans (1/min)`)."""
        key = next(k for k in rows[0] if k == name or k.startswith(name + " ("))
        return np.array([float(r[key]) for r in rows])

    for p in got["param_names"]:
        np.testing.assert_allclose(got["params"][p], column(p), rtol=1e-9, atol=1e-12, err_msg=p)
        np.testing.assert_allclose(got["se"][p], column(p + "_se"), rtol=1e-6, atol=1e-12, err_msg=p)
    status = [got["status_names"][code] for code in got["status"]]
    assert status == [r["status"] for r in rows]


def test_population_inputs_follow_the_published_formulas():
    """Parker 2006 (whole blood) and Weinmann 1984 (plasma) written out in numpy from the
    papers' constants, minutes since arrival; 0 before the bolus arrives."""
    t = np.arange(0.0, 300.0, 2.5)
    m = np.clip(t - 12.0, 0.0, None) / 60.0
    gauss = lambda a, mu, s: a / (s * np.sqrt(2 * np.pi)) * np.exp(-((m - mu) ** 2) / (2 * s * s))
    parker = gauss(0.809, 0.17046, 0.0563) + gauss(0.330, 0.365, 0.132) \
        + 1.050 * np.exp(-0.1685 * m) / (1 + np.exp(-38.078 * (m - 0.483)))
    parker[t < 12.0] = 0.0
    np.testing.assert_allclose(perfusion.population_input(t, "parker", arrival_s=12.0), parker, rtol=1e-12)
    weinmann = 0.1 * (3.99 * np.exp(-0.144 * t / 60) + 4.78 * np.exp(-0.0111 * t / 60))
    np.testing.assert_allclose(perfusion.population_input(t, "Weinmann"), weinmann, rtol=1e-12)
    with pytest.raises(ValueError, match="parker, weinmann, georgiou, portal"):
        perfusion.population_input(t, "fritz")
    with pytest.raises(ValueError, match="increasing"):
        perfusion.population_input(t[::-1])


def test_read_dce_of_the_simulated_liver_fits_like_the_cli(cli, tmp_path):
    """`perfusion simulate --liver` writes a NIfTI series; read_dce returns its signal and
    frame times, and a voxel fitted from them recovers the simulation's truth."""
    import subprocess

    subprocess.run([str(cli), "perfusion", "simulate", "--liver", "--out", str(tmp_path)], check=True, capture_output=True)
    dce = perfusion.read_dce(tmp_path / "dce.nii.gz")
    assert dce["data"].shape == (48, 40, 4, 128) and dce["data"].dtype == np.float32
    t = dce["times"]
    assert len(t) == 128 and t[0] == 0.0 and t[-1] == pytest.approx(120.0, rel=1e-3)
    assert dce["flip_angle_deg"] is None
    inputs = np.genfromtxt(tmp_path / "inputs.csv", delimiter=",", names=True)
    truth = perfusion.read_dce(tmp_path / "truth_ka.nii.gz")["data"]
    x, y, z = np.argwhere(truth[..., 0] > 0)[0]
    out = perfusion.fit(dce["data"][x, y, z], t, inputs["aif"], inputs["pv"], model="dual-input", device="cpu")
    assert float(out["params"]["ka"]) == pytest.approx(float(truth[x, y, z, 0]), rel=1e-3)
    with pytest.raises(OSError, match="missing.nii.gz"):
        perfusion.read_dce(tmp_path / "missing.nii.gz")
