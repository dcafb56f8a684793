"""Speckle contrast, tau_c and MESI against independent numpy computations."""

import numpy as np
import pytest
from numpy.lib.stride_tricks import sliding_window_view

import biogpu
from biogpu import speckle

#: K of integer frames is computed from exact integer window sums; float32 output.
K_TOLERANCE = 1e-5


def numpy_spatial_k(frames, window):
    """K = s / mean over each window (sample variance, N - 1), valid region only."""
    w = sliding_window_view(frames.astype(np.float64), (window, window), axis=(-2, -1))
    mean = w.mean(axis=(-2, -1))
    sd = w.std(axis=(-2, -1), ddof=1)
    return sd / mean


def frames_u16(n=3, h=40, w=52, seed=1):
    rng = np.random.default_rng(seed)
    return (rng.exponential(800.0, size=(n, h, w)) + 20).astype(np.uint16)


def test_spatial_k_matches_numpy_for_uint16_and_windows():
    f = frames_u16()
    for window in (3, 5, 7):
        out = speckle.contrast(f, window, border="valid", device="cpu")
        want = numpy_spatial_k(f, window)
        assert out["k"].shape == want.shape
        assert out["k"].dtype == np.float32
        np.testing.assert_allclose(out["k"], want, rtol=K_TOLERANCE)
        assert out["backend"] == "cpu"


def test_reflect_border_interior_equals_valid_and_uint8_float_agree():
    f = frames_u16(n=2).clip(0, 255).astype(np.uint8)
    full = speckle.contrast(f, 7, device="cpu")["k"]
    valid = speckle.contrast(f, 7, border="valid", device="cpu")["k"]
    assert full.shape == f.shape
    np.testing.assert_array_equal(full[:, 3:-3, 3:-3], valid)
    as_float = speckle.contrast(f.astype(np.float32), 7, device="cpu")["k"]
    np.testing.assert_allclose(as_float, full, rtol=K_TOLERANCE)


def test_single_frame_gives_2d_maps_and_sfi_with_exposure():
    f = frames_u16(n=1)[0]
    out = speckle.contrast(f, 5, exposure=5e-3, device="cpu")
    assert out["k"].shape == f.shape and out["flags"].shape == f.shape
    k = out["k"].astype(np.float64)
    np.testing.assert_allclose(out["sfi"], 1.0 / (2 * 5e-3 * k * k), rtol=1e-5)


def test_temporal_k_matches_numpy():
    f = frames_u16(n=10, h=6, w=7)
    out = speckle.contrast(f, mode="temporal", temporal_frames=5, device="cpu")
    w = sliding_window_view(f.astype(np.float64), 5, axis=0)
    want = w.std(axis=-1, ddof=1) / w.mean(axis=-1)
    assert out["k"].shape == want.shape
    np.testing.assert_allclose(out["k"], want, rtol=K_TOLERANCE)


def test_tau_c_inverts_the_lorentzian_model():
    # Lorentzian: K^2 = beta * (exp(-2x) - 1 + 2x) / (2x^2), x = T / tau_c.
    t, beta = 5e-3, 0.5
    tau = np.array([[1e-4, 3e-4], [1e-3, 2e-3]])
    x = t / tau
    k = np.sqrt(beta * (np.exp(-2 * x) - 1 + 2 * x) / (2 * x * x)).astype(np.float32)
    out = speckle.tau_c(k, t, beta, device="cpu")
    np.testing.assert_allclose(out["tau_c"], tau, rtol=1e-4)
    stacked = speckle.tau_c(np.stack([k, k]), t, beta, device="cpu")
    assert stacked["tau_c"].shape == (2, 2, 2)
    no_motion = speckle.tau_c(np.array([[0.9]], np.float32), t, beta, device="cpu")
    assert np.isinf(no_motion["tau_c"][0, 0]) and no_motion["no_motion"] == 1


def test_mesi_recovers_tau_c():
    beta, rho, v_noise, tau = 0.5, 0.9, 0.001, 1e-3
    exposures = np.array([5e-5, 1e-4, 5e-4, 1e-3, 5e-3, 1e-2, 5e-2])
    x = exposures / tau
    f = (np.exp(-2 * x) - 1 + 2 * x) / (2 * x * x)
    g = (np.exp(-x) - 1 + x) / (x * x)
    k2 = beta * (rho * rho * f + 4 * rho * (1 - rho) * g + (1 - rho) ** 2) + v_noise
    k = np.broadcast_to(np.sqrt(k2)[:, None, None], (7, 2, 3)).astype(np.float32)
    out = speckle.mesi(k, exposures, beta=beta, device="cpu")
    assert out["status_names"][0] == "Converged"
    assert (out["status"] == 0).all(), out["status"]
    np.testing.assert_allclose(out["tau_c"], tau, rtol=0.01)


def test_bad_input_raises_value_error_with_the_reason():
    f = frames_u16(n=1)
    with pytest.raises(ValueError, match="window 6 is even"):
        speckle.contrast(f, 6)
    with pytest.raises(ValueError, match="uint8, uint16 or float32"):
        speckle.contrast(f.astype(np.int32))
    with pytest.raises(ValueError, match="dimensions"):
        speckle.contrast(np.zeros(5, np.uint16))
    with pytest.raises(ValueError, match="mode"):
        speckle.contrast(f, mode="sideways")
    with pytest.raises(ValueError, match="unknown device `tpu`"):
        speckle.contrast(f, device="tpu")
    with pytest.raises(ValueError, match="several devices"):
        speckle.contrast(f, device="cuda:0,cuda:1")
    with pytest.raises(ValueError, match="flow model"):
        speckle.tau_c(np.ones((2, 2), np.float32), 5e-3, 0.5, model="parabolic")


def test_devices_lists_the_cpu_and_auto_pick():
    devs = biogpu.devices()
    assert devs[-1]["id"] == "cpu" and devs[-1]["f64"] is True
    assert sum(d["auto"] for d in devs) == 1


def test_gpu_contrast_equals_the_cpu(gpu_device):
    f = frames_u16(n=2, h=64, w=48)
    cpu = speckle.contrast(f, 7, exposure=5e-3, device="cpu")
    gpu = speckle.contrast(f, 7, exposure=5e-3, device=gpu_device)
    assert gpu["backend"] != "cpu"
    # Exact integer sums on both paths; f32 division on the GPU (docs: GPU = CPU to 1e-6).
    np.testing.assert_allclose(gpu["k"], cpu["k"], rtol=1e-6, atol=1e-7)
    np.testing.assert_array_equal(gpu["flags"], cpu["flags"])


def test_contrast_of_a_raw_stack_equals_the_cli(cli, tmp_path):
    """The same frames through `biogpu speckle contrast --raw` and speckle.contrast: every K
    of every frame equal (one library, one path: the CPU)."""
    Image = pytest.importorskip("PIL.Image", reason="pillow reads the CLI's TIFF (pip install pillow)")
    import json
    import subprocess

    f = frames_u16(n=4, h=33, w=47, seed=3)
    raw = tmp_path / "frames.raw"
    f.astype("<u2").tofile(raw)
    out = tmp_path / "out"
    subprocess.run(
        [str(cli), "--device", "cpu", "speckle", "contrast", str(raw), "--raw",
         "width=47,height=33,dtype=u16,order=le", "--window", "5", "--no-png", "--out", str(out)],
        check=True,
        capture_output=True,
    )
    tif = Image.open(out / "k.tif")
    cli_k = []
    for i in range(tif.n_frames):
        tif.seek(i)
        cli_k.append(np.array(tif, dtype=np.float32))
    cli_k = np.stack(cli_k)
    got = speckle.contrast(f, 5, device="cpu")
    assert cli_k.shape == got["k"].shape
    np.testing.assert_array_equal(got["k"], cli_k)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["frames"] == 4


def test_read_returns_the_frames_the_cli_reads():
    """speckle.read of the ImageJ test stack: uint16 frames whose K equals numpy's; a 12-bit
    depth sets the saturation; a missing file raises OSError naming it."""
    from pathlib import Path

    tif = Path(__file__).resolve().parents[2] / "crates/speckle-core/tests/data/imagej_frames.tif"
    frames, meta = speckle.read(tif)
    assert frames.ndim == 3 and frames.dtype == np.uint16
    out = speckle.contrast(frames, 5, border="valid", device="cpu")
    np.testing.assert_allclose(out["k"], numpy_spatial_k(frames, 5), rtol=K_TOLERANCE)
    frames12, meta12 = speckle.read(tif, bit_depth=16)
    assert meta12["saturation"] == 65535 and np.array_equal(frames12, frames)
    with pytest.raises(OSError, match="nothere.tif"):
        speckle.read(tif.parent / "nothere.tif")
