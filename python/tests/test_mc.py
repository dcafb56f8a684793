"""Monte Carlo runs: energy ledger, Beer-Lambert in a non-scattering slab, pmmc-style input."""

import numpy as np
import pytest

from biogpu import mc

MESH = mc.box_mesh((10.0, 10.0, 10.0), 2.0)
#: Matched boundary (n = 1 inside and out) so that nothing reflects at entry or exit.
PROP = [[0.0, 0.0, 1.0, 1.0], [0.1, 1.0, 0.9, 1.0]]


def test_energy_is_conserved_and_runs_are_reproducible():
    cfg = dict(node=MESH["node"], elem=MESH["elem"], prop=PROP, srcpos=[5, 5, 0], srcdir=[0, 0, 1], nphoton=5000)
    a = mc.run(cfg, device="cpu")
    s = a["summary"]
    assert s["photons"] == 5000 and not s["interrupted"]
    total = s["absorbed"] + s["escaped"] + s["specular"] + s["expired"] + s["lost"]
    assert abs(total - 1.0) < 1e-9 and abs(s["balance_error"]) < 1e-9
    assert a["fluence"].shape == (len(MESH["elem"]),) and a["fluence_node"].shape == (len(MESH["node"]),)
    # Absorbed = fluence x mua x volume, per element.
    np.testing.assert_allclose(a["absorbed"], a["fluence"] * 0.1 * a["volume"], rtol=1e-12)
    assert a["volume"].sum() == pytest.approx(1000.0)
    b = mc.run(cfg, device="cpu")
    np.testing.assert_array_equal(a["fluence"], b["fluence"])
    c = mc.run(cfg, seed=2, device="cpu")
    assert not np.array_equal(a["fluence"], c["fluence"])


def test_beer_lambert_without_scattering():
    # No scattering: a pencil beam loses 1 - exp(-mua L) over L = 10 mm (mua = 0.1/mm).
    prop = [[0, 0, 1, 1], [0.1, 0.0, 0.0, 1.0]]
    out = mc.run(node=MESH["node"], elem=MESH["elem"], prop=prop, srcpos=[5.1, 4.9, 0],
                 srcdir=[0, 0, 1], nphoton=2000, device="cpu")
    # Russian roulette (wmin 1e-4) changes the absorbed fraction by well under 1e-3.
    assert out["summary"]["absorbed"] == pytest.approx(1 - np.exp(-1.0), abs=1e-3)


def test_four_column_elem_with_elemprop_and_a_disk_source():
    two = np.where(MESH["node"][MESH["elem"][:, :4] - 1][:, :, 2].mean(1) > 5, 2, 1)
    prop = [[0, 0, 1, 1], [0.01, 1.0, 0.9, 1.37], [0.2, 1.0, 0.9, 1.37]]
    out = mc.run(node=MESH["node"], elem=MESH["elem"][:, :4], elemprop=two, prop=prop,
                 srctype="disk", srcpos=[5, 5, 0], srcdir=[0, 0, 1], srcparam1=[2.0],
                 nphoton=3000, device="cpu")
    assert out["summary"]["specular"] > 0  # n 1.37 inside, 1 outside
    assert abs(out["summary"]["balance_error"]) < 1e-9


def test_bad_input_raises_value_error_with_the_reason():
    base = dict(node=MESH["node"], elem=MESH["elem"], prop=PROP, srcpos=[5, 5, 0], srcdir=[0, 0, 1], nphoton=10)
    with pytest.raises(ValueError, match="1-based"):
        mc.run(base, elem=MESH["elem"] - 1)
    with pytest.raises(ValueError, match="prop"):
        mc.run(base, prop=[[0.1, 1, 0.9, 1]])
    with pytest.raises(ValueError, match="g = 1.5"):
        mc.run(base, prop=[[0, 0, 1, 1], [0.1, 1, 1.5, 1]])
    with pytest.raises(ValueError, match="srctype"):
        mc.run(base, srctype="laser")
    with pytest.raises(ValueError, match="names node"):
        mc.run(base, elem=np.array([[1, 2, 3, 100000]]))
    with pytest.raises(ValueError, match="photons"):
        mc.run(base, nphoton=0)


def test_gpu_run_equals_the_cpu_statistically(gpu_device):
    cfg = dict(node=MESH["node"], elem=MESH["elem"], prop=PROP, srcpos=[5, 5, 0], srcdir=[0, 0, 1], nphoton=20000)
    cpu = mc.run(cfg, device="cpu")
    gpu = mc.run(cfg, device=gpu_device)
    assert gpu["device"] != "cpu"
    assert abs(gpu["summary"]["balance_error"]) < 1e-4
    # Different random streams (f32 GPU vs f64 CPU): totals agree to Monte Carlo noise.
    assert gpu["summary"]["absorbed"] == pytest.approx(cpu["summary"]["absorbed"], abs=0.01)


def test_detected_photons_follow_their_paths():
    # A matched slab (n = 1: no refraction) lit by a pencil beam, one detector around the entry
    # point on the lit face: each record's time of flight is its path over c, and without
    # roulette (all weights stay above wmin here: mua 0.01/mm) its weight exp(-mua * path).
    prop = [[0, 0, 1, 1], [0.01, 1.0, 0.0, 1.0]]
    out = mc.run(node=MESH["node"], elem=MESH["elem"], prop=prop, srcpos=[5.1, 4.9, 0], srcdir=[0, 0, 1],
                 nphoton=3000, detpos=[[5.0, 5.0, 0.0, 3.0]], device="cpu")
    d = out["detp"]
    n = len(d["weight"])
    assert n > 100, n
    assert d["ppath"].shape == (n, 1) and d["p"].shape == (n, 3)
    assert np.all(d["detid"] == 1) and d["count"][0] == n and d["dropped"] == 0
    assert np.all(np.diff(d["photon"]) > 0)
    path = d["ppath"][:, 0]
    np.testing.assert_allclose(d["time_ns"], path / 299.792458, rtol=1e-9)
    np.testing.assert_allclose(d["weight"], np.exp(-0.01 * path), rtol=1e-9)
    assert d["detected_weight"][0] == pytest.approx(d["weight"].sum(), rel=1e-12)
    # Exits on the lit face, within the detector's disk.
    assert np.all(np.abs(d["p"][:, 2]) < 1e-6)  # mm: the exit point from the face crossing
    assert np.all(np.hypot(d["p"][:, 0] - 5, d["p"][:, 1] - 5) <= 3.0 + 1e-6)
    with pytest.raises(ValueError, match="detect"):
        mc.run(node=MESH["node"], elem=MESH["elem"], prop=prop, srcpos=[5.1, 4.9, 0], srcdir=[0, 0, 1],
               nphoton=10, detpos=[[5.0, 5.0, 30.0, 1.0]], device="cpu")


def test_run_equals_the_cli(cli, tmp_path):
    """A pmmc-style run and `biogpu mc run` of the same box, source and seed: the same
    absorbed energy and fluence in every tetrahedron (tets.csv prints them exactly)."""
    import json
    import subprocess

    sim = {
        "mesh": {"box": {"origin": [0.0, 0.0, 0.0], "size": [10.0, 10.0, 10.0], "cell": 2.0, "tets_per_cell": 5}},
        "materials": [{"mua": 0.1, "mus": 1.0, "g": 0.9, "n": 1.0}],
        "n_outside": 1.0,
        "sources": [{"type": "pencil", "pos": [5.0, 5.0, 0.0], "dir": [0.0, 0.0, 1.0], "power": 1.0}],
        "photons": 4000,
        "seed": 11,
    }
    (tmp_path / "sim.json").write_text(json.dumps(sim))
    out = tmp_path / "out"
    subprocess.run(
        [str(cli), "--device", "cpu", "mc", "run", str(tmp_path / "sim.json"), "--out", str(out)],
        check=True,
        capture_output=True,
    )
    table = np.genfromtxt(out / "tets.csv", delimiter=",", names=True)
    got = mc.run(node=MESH["node"], elem=MESH["elem"], prop=PROP, srcpos=[5, 5, 0], srcdir=[0, 0, 1],
                 nphoton=4000, seed=11, device="cpu")
    assert len(got["absorbed"]) == len(table)
    np.testing.assert_allclose(got["absorbed"], table["absorbed"], rtol=1e-12, atol=0)
    np.testing.assert_allclose(got["fluence"], table["fluence"], rtol=1e-12, atol=0)
    summary = json.loads((out / "summary.json").read_text())
    for key in ("absorbed", "escaped", "specular"):
        assert got["summary"][key] == pytest.approx(summary[key], rel=1e-12), key


def test_jacobian_is_the_derivative_of_the_detected_weight():
    # The slab of the test above, roulette never reached: a detected photon's path does not
    # depend on mua, so the detector's weight at mua +- d (same seed) gives dW/dmua by a
    # central difference, which the replayed Jacobian summed over the elements must match.
    prop = [[0, 0, 1, 1], [0.01, 1.0, 0.0, 1.0]]
    kw = dict(node=MESH["node"], elem=MESH["elem"], srcpos=[5.1, 4.9, 0], srcdir=[0, 0, 1],
              nphoton=3000, detpos=[[5.0, 5.0, 0.0, 3.0]], device="cpu")
    out = mc.run(prop=prop, jacobian=1, **kw)
    jac, d = out["jacobian"], out["detp"]
    assert jac.shape == out["volume"].shape and np.all(jac <= 0)
    # Summed over the elements: minus the records' weight x path per launched photon.
    assert jac.sum() == pytest.approx(-(d["weight"] * d["ppath"][:, 0]).sum() / 3000, rel=1e-9)
    w = lambda mua: mc.run(prop=[[0, 0, 1, 1], [mua, 1.0, 0.0, 1.0]], **kw)["detp"]["detected_weight"][0] / 3000
    h = 1e-6
    assert jac.sum() == pytest.approx((w(0.01 + h) - w(0.01 - h)) / (2 * h), rel=1e-6)
    assert np.all(out["mean_path"] >= 0)
    with pytest.raises(ValueError, match="detpos"):
        mc.run(prop=prop, jacobian=1, **{k: v for k, v in kw.items() if k != "detpos"})
    with pytest.raises(ValueError, match="maxdetphoton"):
        mc.run(prop=prop, jacobian=1, maxdetphoton=10, **kw)
