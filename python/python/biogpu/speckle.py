"""Laser speckle contrast imaging: raw frames to speckle contrast K, SFI, tau_c, MESI.

Units: exposure times and tau_c in seconds, SFI in 1/s, K dimensionless; arrays are
(frame, row, column), or (row, column) for a single frame.
"""

from typing import Any, Dict, Optional, Sequence

import numpy as np

from . import _biogpu
from ._devices import check_device

#: Bits of the ``flags`` maps (the same in the CLI's flags.tif).
UNDEFINED = 1  #: K undefined (window mean 0, NaN input): the value is NaN
SATURATED = 2  #: a pixel of the window is at or above ``saturation``: K biased low
NO_MOTION = 4  #: flow: K^2 >= beta, tau_c is +inf
NO_CONTRAST = 8  #: flow: K = 0, tau_c is 0


def _frames(frames: Any) -> "tuple[np.ndarray, bool]":
    a = np.asarray(frames)
    if a.ndim not in (2, 3):
        raise ValueError(
            f"frames must be one frame (rows, columns) or a stack (frames, rows, columns); "
            f"got an array of {a.ndim} dimensions, shape {a.shape}"
        )
    if a.dtype == np.float64:
        a = a.astype(np.float32)
    if a.dtype not in (np.uint8, np.uint16, np.float32):
        raise ValueError(
            f"frames must be uint8, uint16 or float32 (camera counts or floats); got "
            f"{a.dtype}: convert with .astype(np.uint16) or .astype(np.float32)"
        )
    single = a.ndim == 2
    if single:
        a = a[np.newaxis]
    return np.ascontiguousarray(a), single


def contrast(
    frames: Any,
    window: int = 7,
    mode: str = "spatial",
    *,
    temporal_frames: int = 25,
    border: str = "reflect",
    exposure: Optional[float] = None,
    saturation: Optional[float] = None,
    device: str = "auto",
) -> Dict[str, Any]:
    """Speckle contrast K = sigma / mean of each pixel's window.

    Args:
        frames: raw frames, (frames, rows, columns) or one (rows, columns) frame, uint8,
            uint16 (exact integer window sums, GPU = CPU) or float32/float64 (f64 sums, CPU).
        window: spatial window side in pixels, odd, 3 to 31 (spatial and spatiotemporal).
        mode: ``"spatial"`` (window within each frame), ``"temporal"`` (``temporal_frames``
            consecutive frames per pixel) or ``"spatiotemporal"`` (both).
        temporal_frames: frames per temporal window.
        border: ``"reflect"``, ``"zero"`` (as Yang et al. 2011) or ``"valid"`` (output
            shrinks by window - 1).
        exposure: camera exposure T in seconds; when given, SFI = 1 / (2 T K^2) in 1/s.
        saturation: pixel level at or above which a pixel counts as saturated (flags).
        device: see :mod:`biogpu`.

    Returns:
        dict with ``k`` (float32, dimensionless; NaN where undefined), ``flags`` (uint8 bits
        :data:`UNDEFINED`, :data:`SATURATED`), ``sfi`` (float32, 1/s, only with
        ``exposure``), ``backend`` and ``device`` (where it ran). A single frame in gives
        2-D maps out; temporal modes give one map per window position along the stack.
    """
    a, single = _frames(frames)
    out = _biogpu.speckle_contrast(
        a,
        int(window),
        str(mode),
        int(temporal_frames),
        str(border),
        None if exposure is None else float(exposure),
        None if saturation is None else float(saturation),
        check_device(device),
    )
    if single:
        for key in ("k", "sfi", "flags"):
            if key in out and out[key].shape[0] == 1:
                out[key] = out[key][0]
    return out


def tau_c(
    k: Any,
    exposure: float,
    beta: float,
    model: str = "lorentzian",
    *,
    device: str = "auto",
) -> Dict[str, Any]:
    """Decorrelation time tau_c (seconds) of each pixel from its K.

    Inverts K^2 = beta * f(T / tau_c) (Lorentzian: unordered motion; Gaussian: ordered flow).

    Args:
        k: K maps, (rows, columns) or (frames, rows, columns), float32.
        exposure: exposure T in seconds.
        beta: coherence factor (0, 1], e.g. from a static target's mean K^2.
        model: ``"lorentzian"`` or ``"gaussian"``.
        device: see :mod:`biogpu`.

    Returns:
        dict with ``tau_c`` (float32 seconds; +inf where K^2 >= beta, 0 where K = 0, NaN
        where undefined), ``flags`` (uint8 bits :data:`NO_MOTION`, :data:`NO_CONTRAST`,
        :data:`UNDEFINED`), counts ``no_motion``, ``no_contrast``, ``undefined``, and
        ``backend``, ``device``.
    """
    a = np.ascontiguousarray(np.asarray(k, dtype=np.float32))
    device = check_device(device)
    if a.ndim == 2:
        return _biogpu.speckle_flow(a, float(exposure), float(beta), str(model), device)
    if a.ndim != 3:
        raise ValueError(f"k must be 2-D or 3-D; got shape {a.shape}")
    parts = [_biogpu.speckle_flow(f, float(exposure), float(beta), str(model), device) for f in a]
    out: Dict[str, Any] = {
        "tau_c": np.stack([p["tau_c"] for p in parts]),
        "flags": np.stack([p["flags"] for p in parts]),
    }
    for key in ("no_motion", "no_contrast", "undefined"):
        out[key] = sum(p[key] for p in parts)
    out["backend"] = parts[0]["backend"] if parts else "cpu"
    out["device"] = parts[0]["device"] if parts else "cpu"
    return out


def mesi(
    k: Any,
    exposures: Sequence[float],
    *,
    beta: Optional[float] = None,
    max_iterations: int = 200,
    tolerance: float = 1e-10,
    max_residual: Optional[float] = None,
    device: str = "auto",
) -> Dict[str, Any]:
    """Multi-exposure speckle imaging (MESI) fit of every pixel.

    Args:
        k: K maps, one per exposure: (exposures, rows, columns), float32.
        exposures: exposure times in seconds, one per ``k`` plane.
        beta: known coherence factor (>= 3 exposures), or None to fit it (>= 4).
        max_iterations, tolerance: Levenberg-Marquardt cap and relative tolerance.
        max_residual: largest RMS relative K^2 residual of a kept fit; worse converged fits
            get status PoorFit.
        device: see :mod:`biogpu`.

    Returns:
        dict of (rows, columns) maps ``tau_c`` (s), ``rho``, ``v_noise``, ``beta``, ``rss``,
        ``residual_rms``, ``status`` (uint8 codes, names in ``status_names``),
        ``status_counts``, ``backend``, ``device``.
    """
    a = np.ascontiguousarray(np.asarray(k, dtype=np.float32))
    if a.ndim != 3:
        raise ValueError(f"k must be (exposures, rows, columns); got shape {a.shape}")
    return _biogpu.speckle_mesi(
        a,
        [float(e) for e in exposures],
        None if beta is None else float(beta),
        int(max_iterations),
        float(tolerance),
        None if max_residual is None else float(max_residual),
        check_device(device),
    )


def read(
    path: Any,
    *,
    bit_depth: Optional[int] = None,
    frame_height: Optional[int] = None,
    channel: Optional[int] = None,
    slice: Optional[int] = None,
) -> "tuple[np.ndarray, Dict[str, Any]]":
    """Raw frames of a file as ``biogpu speckle`` reads them: TIFF (8/16-bit or float32,
    multi-page, ImageJ and OME hyperstacks, compressed or not) or PNG.

    Args:
        path: the file. Raw binary frames need no reader: ``np.fromfile(path,
            dtype="<u2").reshape(-1, height, width)``.
        bit_depth: significant bits of integer pixels (e.g. 12 for a 12-bit camera writing
            16-bit files; every pixel is checked); saturation is ``2**bit_depth - 1``.
        frame_height: PNG only: split a vertically stacked image into frames of this many rows.
        channel, slice: TIFF hyperstacks: the channel and slice (Z) read as frames, from 0.

    Returns:
        ``(frames, meta)``: frames (frame, row, column) in the stored type (uint8, uint16 or
        float32), ready for :func:`contrast`; meta ``bit_depth`` and ``saturation`` (counts;
        None for float data), to pass on as ``contrast(..., saturation=meta["saturation"])``.
    """
    out = _biogpu.speckle_read(
        str(path),
        None if bit_depth is None else int(bit_depth),
        None if frame_height is None else int(frame_height),
        None if channel is None else int(channel),
        None if slice is None else int(slice),
    )
    frames = out.pop("frames")
    return frames, out
