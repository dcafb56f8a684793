"""DCE perfusion: per-voxel pharmacokinetic model fits, model curves, simulated curves.

Models: ``"tofts"`` (Ktrans, ve), ``"extended-tofts"`` (+ vp), ``"patlak"`` (Ktrans, vp),
``"2cxm"`` (two-compartment exchange: Fp, PS, ve, vp) and ``"dual-input"`` (the liver model of
Wang & Cao 2012: ka, kp, kl, with arterial and portal delays); each with a bolus-arrival
delay where the model has one. :func:`models` lists each parameter with its unit and default
bounds.

Units: time in s; concentrations (curves, ``aif``, ``pif``) in the same units, e.g. mM;
dual-input rates in ml/100g/min, other rates in 1/min, volume fractions unitless, delays in
s.
"""

from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from . import _biogpu
from ._devices import check_device


def models() -> Dict[str, List[Dict[str, Any]]]:
    """Every model's parameters, in order: ``name``, ``unit``, default ``lower``, ``upper``
    and ``start``, whether it is a ``delay``, and a ``description``."""
    return _biogpu.perfusion_models()


def _vector(name: str, v: Any) -> List[float]:
    a = np.asarray(v, dtype=np.float64)
    if a.ndim != 1:
        raise ValueError(f"{name} must be 1-D (one value per time point); got shape {a.shape}")
    return a.tolist()


def fit(
    curves: Any,
    t: Any,
    aif: Any,
    pif: Any = None,
    *,
    model: str = "tofts",
    method: str = "lm",
    time_axis: int = -1,
    fixed: Optional[Mapping[str, float]] = None,
    bounds: Optional[Mapping[str, Tuple[float, float]]] = None,
    start: Optional[Mapping[str, float]] = None,
    max_iterations: Optional[int] = None,
    precision: str = "auto",
    standard_errors: bool = True,
    device: str = "auto",
) -> Dict[str, Any]:
    """Fit a pharmacokinetic model to every tissue curve.

    Args:
        curves: tissue concentration curves: one curve (time,), (voxels, time), or a volume
            such as (x, y, z, time); see ``time_axis``.
        t: sample times in s (increasing; need not be uniform).
        aif: arterial input function at ``t`` (concentration).
        pif: portal-venous input function (the dual-input model only).
        model: ``"tofts"``, ``"extended-tofts"``, ``"patlak"``, ``"2cxm"`` or
            ``"dual-input"``.
        method: ``"lm"`` (bounded Levenberg-Marquardt, analytic Jacobian) or ``"nm"``
            (Nelder-Mead as ``fminsearch``).
        time_axis: the axis of ``curves`` that is time.
        fixed: parameters held at a value, e.g. ``{"ve": 0.3}``.
        bounds: parameter bounds, e.g. ``{"ktrans": (0, 2)}``.
        start: starting values.
        max_iterations: iteration cap (default 100 LM steps, 600 simplex updates).
        precision: GPU arithmetic: ``"auto"`` (f64 where the device has it), ``"f64"``,
            ``"f32"``; the CPU is always f64.
        standard_errors: compute asymptotic standard errors (one extra CPU pass).
        device: see :mod:`biogpu`.

    Returns:
        dict: ``params`` and ``se`` (dicts name -> map of the curves' leading shape, in the
        units of ``units``), ``param_names``, ``units``, maps ``sse`` (concentration^2),
        ``r2``, ``iterations``, ``status`` (uint8 codes; ``status_names[code]``),
        ``flags`` (uint8 bits; ``flag_bits`` name -> bit), ``model``, ``method``,
        ``precision``, ``device``. Ctrl-C stops the fit and raises KeyboardInterrupt.
    """
    c = np.asarray(curves, dtype=np.float32)
    if c.ndim == 0:
        raise ValueError("curves must have a time axis")
    c = np.moveaxis(c, time_axis, -1)
    lead = c.shape[:-1]
    flat = np.ascontiguousarray(c.reshape(-1, c.shape[-1]))
    out = _biogpu.perfusion_fit(
        flat,
        _vector("t", t),
        _vector("aif", aif),
        None if pif is None else _vector("pif", pif),
        str(model),
        str(method),
        {str(k): float(v) for k, v in (fixed or {}).items()},
        {str(k): (float(v[0]), float(v[1])) for k, v in (bounds or {}).items()},
        {str(k): float(v) for k, v in (start or {}).items()},
        None if max_iterations is None else int(max_iterations),
        str(precision),
        bool(standard_errors),
        check_device(device),
    )
    for group in ("params", "se"):
        out[group] = {k: v.reshape(lead) for k, v in out[group].items()}
    for key in ("sse", "r2", "iterations", "status", "flags"):
        out[key] = out[key].reshape(lead)
    return out


def predict(t: Any, aif: Any, params: Sequence[float], pif: Any = None, *, model: str = "tofts") -> np.ndarray:
    """The model's tissue curve at ``t`` for ``params`` (in the order and units of
    :func:`models`), e.g. Tofts ``[ktrans (1/min), ve, delay (s)]``."""
    return _biogpu.perfusion_predict(
        _vector("t", t),
        _vector("aif", aif),
        None if pif is None else _vector("pif", pif),
        str(model),
        [float(p) for p in params],
    )


def simulate(
    model: str = "dual-input",
    truth: Optional[Sequence[float]] = None,
    *,
    nt: int = 64,
    duration: float = 120.0,
    cnr: Optional[float] = None,
    voxels: int = 1,
    seed: int = 1,
) -> Dict[str, np.ndarray]:
    """Simulated tissue curves with known parameters (the project's phantom: a Parker
    population AIF and, for the liver, a portal-venous input).

    Args:
        model: as :func:`fit`.
        truth: the parameters (order and units of :func:`models`); default the paper's liver
            ``[20, 100, 400, 1, 2]`` for ``dual-input``, else each parameter's start.
        nt: samples; duration: s, from 0.
        cnr: contrast-to-noise ratio of the Gaussian noise added (None: noise-free).
        voxels: curves, each with its own noise; seed: noise seed.

    Returns:
        dict with ``t`` (s), ``aif``, ``pif`` (dual-input), ``curves`` (voxels, nt) float32,
        ``clean`` (the noise-free curve).
    """
    if truth is None:
        if model in ("dual-input", "dualinput", "liver"):
            truth = [20.0, 100.0, 400.0, 1.0, 2.0]
        else:
            truth = [p["start"] for p in models()[model]]
    return _biogpu.perfusion_simulate(
        str(model), [float(v) for v in truth], int(nt), float(duration),
        None if cnr is None else float(cnr), int(voxels), int(seed),
    )


def population_input(t: Any, name: str = "parker", *, arrival_s: Optional[float] = None) -> np.ndarray:
    """A published population input function sampled at ``t`` (s), in mM, as ``perfusion
    fit --aif parker`` uses it.

    Args:
        t: sample times in s (finite, increasing).
        name: ``"parker"`` (Parker et al. 2006, whole blood), ``"georgiou"`` (Georgiou et al.
            2019, whole blood), ``"weinmann"`` (Weinmann 1984 bi-exponential, plasma, 0.1
            mmol/kg) or ``"portal"`` (Parker's AIF through the gut, portal-venous blood).
        arrival_s: bolus arrival time in s (default the first sample).

    Returns:
        the curve (mM). Whole-blood curves (all but ``weinmann``) are divided by
        ``1 - hematocrit`` for the plasma input the models take: ``aif / (1 - 0.42)``.
    """
    curve, _compartment = _biogpu.perfusion_population(
        _vector("t", t), str(name), None if arrival_s is None else float(arrival_s)
    )
    return curve


def read_dce(path: Any, *, series: Optional[str] = None) -> Dict[str, Any]:
    """A DCE series as ``perfusion fit --dce`` reads it: a 4-D NIfTI file (``.nii``,
    ``.nii.gz``; NIfTI-1 or -2) or DICOM (a folder of one series, read recursively, or one
    file of it; classic single-frame, uncompressed).

    Args:
        path: the file or folder.
        series: which DICOM series where the folder holds several: its number in the list
            the error for such a folder prints (``"1"``, ``"2"``, ...) or its
            SeriesInstanceUID.

    Returns:
        dict: ``data`` (x, y, z, t) float32 signal (scaled as the header says), ``times``
        (s from the first frame: DICOM acquisition times, or the NIfTI frame interval; None
        where the header has none), ``voxel_size`` (mm), ``flip_angle_deg``, ``tr_s`` and
        ``field_t`` from DICOM headers (None for NIfTI). Pass ``data`` to :func:`fit` with
        ``t=times`` (time is the last axis) after converting signal to concentration.
    """
    return _biogpu.perfusion_read_dce(str(path), None if series is None else str(series))
