"""Fluorescence lifetime imaging (FLIM): read TCSPC files, phasor, lifetimes, fits.

Units: time in nanoseconds (bin width, laser period, lifetimes, IRF shift in bins), counts in
photons, phasor coordinates g and s dimensionless. Decay arrays are (y, x, bin): a single
decay (bin,) or a list of decays (n, bin) works too, and maps then have the shape of the
leading axes.
"""

import os
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from . import _biogpu
from ._devices import check_device

#: Status codes of :func:`fit` (``status`` maps), in code order.
FIT_STATUS = ("converged", "masked", "failed")


def _decays(decays: Any) -> "tuple[np.ndarray, tuple]":
    a = np.asarray(decays)
    if a.ndim not in (1, 2, 3):
        raise ValueError(
            f"decays must be (bin,), (n, bin) or (y, x, bin); got shape {a.shape}"
        )
    lead = a.shape[:-1]
    if a.dtype == np.float64:
        a = a.astype(np.float32)
    elif a.dtype.kind in "iub" and a.dtype not in (np.uint16, np.uint32):
        if a.size and (a.min() < 0 or a.max() > np.iinfo(np.uint32).max):
            raise ValueError("integer decays must be photon counts in 0 .. 2^32 - 1")
        a = a.astype(np.uint32)
    if a.dtype not in (np.uint16, np.uint32, np.float32):
        raise ValueError(
            f"decays must be photon counts (uint16, uint32, other integers, float32 or "
            f"float64); got {a.dtype}"
        )
    a = a.reshape((1,) * (3 - a.ndim) + a.shape)
    return np.ascontiguousarray(a), lead


def _peak(a: np.ndarray) -> int:
    """The bin of the summed decay's maximum: where a tail (no IRF) starts, as the CLI's
    default range."""
    return int(np.argmax(a.reshape(-1, a.shape[-1]).sum(axis=0, dtype=np.float64)))


def _maps(out: Dict[str, Any], lead: tuple, stacked: Sequence[str] = ()) -> Dict[str, Any]:
    for key, value in out.items():
        if isinstance(value, np.ndarray):
            if key in stacked:
                out[key] = value.reshape((value.shape[0],) + lead)
            else:
                out[key] = value.reshape(lead)
    return out


def read(
    path: Union[str, "os.PathLike[str]"],
    *,
    image: int = 0,
    bin_ns: Optional[float] = None,
    period_ns: Optional[float] = None,
    channel: Optional[int] = None,
    block: Optional[int] = None,
    sum_frames: bool = False,
    binning: int = 1,
) -> Tuple[np.ndarray, Dict[str, Any]]:
    """Read a TCSPC recording: Becker & Hickl ``.sdt`` and ``.spc``, PicoQuant ``.ptu``,
    ``.pt3``, ``.ht3``, ``.phu``, multi-page TIFF (one page per bin) or ``.npy``.

    Args:
        path: the file; its extension names the format.
        image: which image to return when the file holds several (blocks, frames,
            channels, in file order); see ``meta["images"]``.
        bin_ns: bin width in ns: required for TIFF and ``.npy``, overrides a header.
        period_ns: laser period in ns, overriding the header.
        channel, block: read only this detector channel / data block.
        sum_frames: sum the frames of a time series into one image.
        binning: sum ``binning x binning`` pixels.

    Returns:
        ``(counts, meta)``: counts (y, x, bin) in the file's count type (uint16, uint32 or
        float32), and a dict with ``bin_ns``, ``period_ns``, ``format``, ``block``,
        ``frame``, ``channel``, ``images`` (how many the file holds) and ``header`` (the
        file's facts as strings).
    """
    out = _biogpu.flim_read(
        os.fspath(path),
        None if bin_ns is None else float(bin_ns),
        None if period_ns is None else float(period_ns),
        channel,
        block,
        bool(sum_frames),
        int(binning),
    )
    images = out["images"]
    if not 0 <= image < len(images):
        raise ValueError(f"image {image} does not exist: {os.fspath(path)} holds {len(images)}")
    chosen = images[image]
    meta = {k: v for k, v in chosen.items() if k != "counts"}
    meta.update(format=out["format"], images=len(images), header=out["header"])
    return chosen["counts"], meta


def read_all(path: Union[str, "os.PathLike[str]"], **kwargs: Any) -> List[Tuple[np.ndarray, Dict[str, Any]]]:
    """Every image of a file, as ``(counts, meta)`` pairs; arguments as :func:`read`."""
    first, meta = read(path, **kwargs)
    return [(first, meta)] + [read(path, image=i, **kwargs) for i in range(1, meta["images"])]


def lifetimes(
    decays: Any,
    bin_ns: float,
    *,
    period_ns: Optional[float] = None,
    methods: Sequence[str] = ("rld", "iem", "cmm", "phasor"),
    first: Optional[int] = None,
    bins: Optional[int] = None,
    threshold: float = 1.0,
    offset: float = 0.0,
    harmonic: int = 1,
    calibration: Optional[Tuple[float, float]] = None,
    reference: Any = None,
    reference_tau_ns: float = 0.0,
    device: str = "auto",
) -> Dict[str, Any]:
    """Non-iterative lifetimes of every pixel: RLD, IEM, CMM and the phasor.

    Args:
        decays: photon counts, (y, x, bin), (n, bin) or (bin,).
        bin_ns: bin width in ns.
        period_ns: laser period in ns (phasor base frequency); default bins x bin_ns.
        methods: any of ``"rld"``, ``"iem"``, ``"cmm"``, ``"phasor"``.
        first, bins: analysis range, bins ``first .. first + bins``. Default as the CLI's:
            for the phasor alone the bins that start within one laser period from bin 0;
            otherwise from the summed decay's peak to the end (RLD, IEM and CMM assume the
            window starts on the tail: from bin 0 the rise would bias them).
        threshold: photons below which a pixel is masked (NaN, status 1).
        offset: background subtracted, counts per bin.
        harmonic: phasor harmonic (1 = the laser frequency).
        calibration: phasor correction ``(phase_rad, modulation)``.
        reference: a reference decay (bin,) recorded with the same bins, e.g. an IRF
            (``reference_tau_ns=0``) or a dye of known lifetime; sets the calibration.
        device: see :mod:`biogpu`.

    Returns:
        dict of maps: ``intensity`` (photons), ``tau_rld``, ``tau_iem``, ``tau_cmm``,
        ``tau_phase``, ``tau_mod`` (ns), ``g``, ``s`` (the methods asked for), ``status``
        (0 ok, 1 masked), plus ``bin_ns``, ``period_ns``, ``backend``, ``device``.
    """
    a, lead = _decays(decays)
    if first is None:
        if set(methods) == {"phasor"}:
            first = 0
            if bins is None and period_ns is not None:
                bins = min(a.shape[-1], int(np.ceil(period_ns / bin_ns - 1e-9)))
        else:
            first = _peak(a)
    ref = None if reference is None else np.ascontiguousarray(np.asarray(reference, dtype=np.float64).ravel())
    out = _biogpu.flim_lifetimes(
        a,
        float(bin_ns),
        None if period_ns is None else float(period_ns),
        [str(m) for m in methods],
        int(first),
        None if bins is None else int(bins),
        float(threshold),
        float(offset),
        int(harmonic),
        None if calibration is None else (float(calibration[0]), float(calibration[1])),
        ref,
        float(reference_tau_ns),
        check_device(device),
    )
    return _maps(out, lead)


def phasor(decays: Any, bin_ns: float, **kwargs: Any) -> Dict[str, Any]:
    """Phasor coordinates of every pixel: ``g``, ``s`` (dimensionless), the phase and
    modulation lifetimes ``tau_phase``, ``tau_mod`` (ns), ``intensity`` and ``status``.

    ``g = sum N_j cos(w t_j) / sum N_j``, ``s`` likewise with sin, ``t_j`` the bin centres
    ``(j + 1/2) bin_ns`` from the range start, ``w = 2 pi harmonic / period_ns``; then the
    calibration. Keyword arguments as :func:`lifetimes` (except ``methods``); the default
    range is one laser period from bin 0, as ``biogpu flim phasor``.
    """
    return lifetimes(decays, bin_ns, methods=("phasor",), **kwargs)


def estimate_irf(decays: Any, bin_ns: float) -> Dict[str, Any]:
    """The instrument response estimated from the data where none was measured (as the CLI's
    ``--irf auto`` and ``--calibrate auto``).

    The summed decay ``D`` (less the pre-rise background) is ``IRF * exp(-t / tau)`` for one
    lifetime, so ``IRF = dD/dt + D / tau`` with ``tau`` from a log-linear fit of the tail:
    exact for one lifetime, slightly too wide for several; the main lobe is kept.

    Args:
        decays: photon counts, (y, x, bin), (n, bin) or (bin,).
        bin_ns: bin width in ns.

    Returns:
        dict: ``irf`` (bin,) normalised to sum 1, ``centroid_ns`` and ``fwhm_ns``. Pass
        ``irf`` to :func:`fit` (``irf=``) or to :func:`phasor` as the calibration reference
        (``reference=irf``, lifetime 0).
    """
    a, _ = _decays(decays)
    return _biogpu.flim_estimate_irf(a, float(bin_ns))


def fit(
    decays: Any,
    bin_ns: float,
    model: str = "mono",
    *,
    estimator: str = "mle",
    irf: Any = None,
    irf_shift: float = 0.0,
    fit_shift: bool = False,
    offset: Union[float, str] = 0.0,
    period_ns: Optional[float] = None,
    first: Optional[int] = None,
    bins: Optional[int] = None,
    threshold: float = 10.0,
    mask: Any = None,
    max_iterations: int = 100,
    tolerance: float = 1e-6,
    initial_tau_ns: Optional[Sequence[float]] = None,
    segments: Optional[str] = None,
    device: str = "auto",
) -> Dict[str, Any]:
    """Iterative multi-exponential fit of every pixel (Levenberg-Marquardt).

    Model: ``y(t) = sum_k a_k exp(-t / tau_k)`` (convolved with ``irf`` when given) plus the
    offset, per bin.

    Args:
        decays: photon counts, (y, x, bin), (n, bin) or (bin,).
        bin_ns: bin width in ns.
        model: ``"mono"``, ``"bi"`` or ``"tri"``.
        estimator: ``"mle"`` (Poisson maximum likelihood, the most precise), ``"lsq"``
            (Neyman weights 1/max(N,1)), ``"lsq-pearson"`` or ``"lsq-model"``.
        irf: instrument response (bin,), any scale; None fits the tail without one.
        irf_shift: IRF shift in bins (later when positive); with ``fit_shift`` the start.
        fit_shift: fit the shift per pixel.
        offset: background in counts per bin, fixed; ``"fit"`` fits it per pixel.
        period_ns: laser period in ns (default bins x bin_ns).
        first, bins: fit range, bins ``first .. first + bins``. Default as the CLI's: with an
            ``irf`` the whole window (the model has the rise), without one from the summed
            decay's peak (a tail fit from bin 0 would fit the rise as decay).
        threshold: photons in the range below which a pixel is not fitted (masked).
        mask: (y, x) bool array: fit only where True.
        max_iterations, tolerance: Levenberg-Marquardt cap and relative tolerance.
        initial_tau_ns: starting lifetimes (ns), one per component.
        segments: None for per-pixel fits; ``"whole"`` or ``"runs:N"`` for global
            analysis (lifetimes shared per segment, amplitudes per pixel).
        device: see :mod:`biogpu`.

    Returns:
        dict: ``tau``, ``amplitude`` (counts/ns at t = 0), ``fraction`` as (component, ...)
        arrays, shortest lifetime first; maps ``intensity`` (photons), ``offset``
        (counts/bin), ``shift`` (bins), ``tau_amp_mean``, ``tau_int_mean`` (ns),
        ``chi2_red``, ``iterations``, ``status`` (uint8 codes, names in ``status_names``:
        converged, masked, failed); NaN where masked. Also ``estimator``,
        ``goodness_of_fit`` (what chi2_red is), ``backend``, ``device``.
    """
    a, lead = _decays(decays)
    if first is None:
        first = 0 if irf is not None else _peak(a)
    fit_offset = isinstance(offset, str)
    if fit_offset and offset != "fit":
        raise ValueError(f"offset must be a number (counts per bin) or 'fit'; got {offset!r}")
    irf_a = None if irf is None else np.ascontiguousarray(np.asarray(irf, dtype=np.float64).ravel())
    mask_a = None
    if mask is not None:
        mask_a = np.ascontiguousarray(np.asarray(mask, dtype=bool).reshape(a.shape[:2]))
    out = _biogpu.flim_fit(
        a,
        float(bin_ns),
        None if period_ns is None else float(period_ns),
        str(model),
        str(estimator),
        irf_a,
        float(irf_shift),
        bool(fit_shift),
        0.0 if fit_offset else float(offset),  # type: ignore[arg-type]
        fit_offset,
        int(first),
        None if bins is None else int(bins),
        float(threshold),
        mask_a,
        int(max_iterations),
        float(tolerance),
        None if initial_tau_ns is None else [float(t) for t in initial_tau_ns],
        segments,
        check_device(device),
    )
    return _maps(out, lead, stacked=("tau", "amplitude", "fraction"))
