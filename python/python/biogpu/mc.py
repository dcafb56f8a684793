"""Monte Carlo light transport in tetrahedral meshes, with pmmc's argument names.

A pmmc/iso2mesh script ports directly: ``node`` (N x 3), ``elem`` (M x 4, or M x 5 with
the region label last; 1-based node indices), ``prop`` (one row per region plus row 0 for
the outside: ``mua, mus, g, n``), ``srctype``, ``srcpos``, ``srcdir``, ``srcparam1``,
``nphoton``, ``seed``; either as keyword arguments or as one ``cfg`` dict
(``biogpu.mc.run(cfg)`` as ``pmmc.run(cfg)``).

Units: lengths in mm (any unit if ``mua``, ``mus`` are per that unit), ``mua``/``mus`` in
1/mm, time limits in ns. Results are per launched photon: fluence in 1/mm^2, absorbed
energy as a fraction of the launched weight.
"""

import json
from typing import Any, Dict, List, Mapping, Optional, Sequence

import numpy as np

from . import _biogpu
from ._devices import check_device

#: pmmc ``srctype`` values and what they become (``srcparam1[0]`` is the radius, waist or
#: numerical aperture; a line source's end point is ``srcparam1[0:3]``).
SRCTYPES = ("pencil", "isotropic", "disk", "gaussian", "cone", "line")


def _source(srctype: str, srcpos: Any, srcdir: Any, srcparam1: Any, power: float = 1.0) -> Dict[str, Any]:
    pos = [float(v) for v in np.asarray(srcpos, dtype=float).ravel()[:3]]
    d = None if srcdir is None else [float(v) for v in np.asarray(srcdir, dtype=float).ravel()[:3]]
    p = None if srcparam1 is None else [float(v) for v in np.asarray(srcparam1, dtype=float).ravel()]
    kind = str(srctype).lower()
    if kind not in SRCTYPES:
        raise ValueError(f"unknown srctype {srctype!r}: expected one of {', '.join(SRCTYPES)}")
    if kind == "isotropic":
        return {"type": kind, "pos": pos, "power": power}
    if kind == "line":
        if not p or len(p) < 3:
            raise ValueError("a line source needs srcparam1 = its end point (x, y, z)")
        return {"type": kind, "pos": pos, "end": p[:3], "power": power}
    if d is None:
        raise ValueError(f"a {kind} source needs srcdir")
    out: Dict[str, Any] = {"type": kind, "pos": pos, "dir": d, "power": power}
    extra = {"disk": "radius", "gaussian": "waist", "cone": "na"}.get(kind)
    if extra:
        if not p:
            raise ValueError(f"a {kind} source needs srcparam1[0] = its {extra}")
        out[extra] = p[0]
    return out


def box_mesh(size: Sequence[float] = (10.0, 10.0, 10.0), cell: float = 1.0, *, origin: Sequence[float] = (0.0, 0.0, 0.0), per_cell: int = 5) -> Dict[str, np.ndarray]:
    """A box from ``origin`` with edges ``size`` (mm) of ``cell``-sized cubes, each cut into
    ``per_cell`` (5 or 6) tetrahedra, one region: ``{"node": (N, 3), "elem": (M, 5)}`` with
    1-based node indices and the region label last, as iso2mesh returns them."""
    return _biogpu.mc_box_mesh(
        tuple(float(v) for v in origin), tuple(float(v) for v in size), float(cell), int(per_cell)
    )


def run(
    cfg: Optional[Mapping[str, Any]] = None,
    *,
    node: Any = None,
    elem: Any = None,
    prop: Any = None,
    elemprop: Any = None,
    srctype: str = "pencil",
    srcpos: Any = None,
    srcdir: Any = None,
    srcparam1: Any = None,
    sources: Optional[List[Dict[str, Any]]] = None,
    nphoton: int = 100_000,
    seed: int = 1,
    tend_ns: Optional[float] = None,
    specular: bool = True,
    detpos: Any = None,
    maxdetphoton: int = 1_000_000,
    device: str = "auto",
    jacobian: Optional[int] = None,
) -> Dict[str, Any]:
    """Simulate ``nphoton`` photon packets and tally absorbed energy and exitance.

    Args:
        cfg: a pmmc-style dict with any of the keyword arguments below (keywords win).
        node: (N, 3) node coordinates, mm.
        elem: (M, 4) or (M, 5) elements, 1-based node indices; a 5th column is the region.
        prop: (R + 1, 4) optical properties ``mua (1/mm), mus (1/mm), g, n``; row 0 is the
            outside medium (only its ``n`` is used), row r region r.
        elemprop: (M,) region labels (1-based), instead of elem's 5th column.
        srctype, srcpos, srcdir, srcparam1: one source, as pmmc (see :data:`SRCTYPES`).
        sources: instead, a list of sources in biogpu's form, e.g.
            ``{"type": "disk", "pos": [...], "dir": [...], "radius": 2.0, "power": 1.0}``
            (also ``volume`` with ``region`` or ``tet``, and ``surface``).
        nphoton: photon packets; seed: the random seed (results are reproducible).
        tend_ns: time limit of a photon's flight, ns (None: no limit).
        specular: count the specular reflection at entry.
        detpos: (K, 4) disk detectors on the surface, ``x, y, z, radius`` (mm), as pmmc.
        maxdetphoton: records kept at most (further detections still count in the totals).
        device: see :mod:`biogpu`.
        jacobian: a detector (1-based) whose absorption Jacobian to compute: its detected
            photons are replayed with their path through every element (track-length
            estimator; the run is then on the CPU, whose f64 paths a replay repeats, and must
            keep every record).

    Returns:
        dict: ``fluence`` (M,) per element (1/mm^2 per photon), ``fluence_node`` (N,) the
        volume-weighted mean of each node's elements, ``absorbed`` (M,) per element,
        ``volume`` (M,) mm^3, ``exitance`` per boundary triangle (1/mm^2 per photon) with
        ``boundary`` (its 0-based node triples), ``summary`` (energy ledger: ``absorbed``,
        ``escaped``, ``specular``, ``roulette``, ``expired``, ``lost``,
        ``balance_error``, ``photons``, ``seconds``, ``photons_per_ms``,
        ``interrupted``), ``device``; with ``detpos``, ``detp``: pmmc's detected-photon
        records, one row per photon (sorted by photon index): ``detid`` (1-based), ``photon``
        (its index: with the seed it replays the path), ``weight`` at exit, ``time_ns``,
        ``nscat``, ``p`` exit point (mm), ``v`` exit direction, ``ppath`` (photons, regions)
        path length per region (mm); and per detector ``count``, ``detected_weight``, with
        ``dropped`` records beyond ``maxdetphoton``; with ``jacobian``, ``jacobian`` (M,)
        dW/dmua per element (W the detector's weight per launched photon; mm) and
        ``mean_path`` (M,) the detected light's mean path length in each element (mm,
        -d ln W / d mua). Ctrl-C stops the run and raises KeyboardInterrupt.
    """
    merged: Dict[str, Any] = dict(cfg or {})
    given = dict(node=node, elem=elem, prop=prop, elemprop=elemprop, srcpos=srcpos, srcdir=srcdir,
                 srcparam1=srcparam1, sources=sources, detpos=detpos)
    merged.update({k: v for k, v in given.items() if v is not None})
    # Keywords left at their defaults do not override cfg.
    keywords = dict(srctype=srctype, nphoton=nphoton, seed=seed, tend_ns=tend_ns, specular=specular,
                    maxdetphoton=maxdetphoton, device=device)
    defaults = dict(srctype="pencil", nphoton=100_000, seed=1, tend_ns=None, specular=True,
                    maxdetphoton=1_000_000, device="auto")
    for key, value in keywords.items():
        if value != defaults[key] or key not in merged:
            merged[key] = value
    for key in ("node", "elem", "prop"):
        if merged.get(key) is None:
            raise ValueError(f"{key} is required")
    nodes = np.ascontiguousarray(np.asarray(merged["node"], dtype=np.float64)[:, :3])
    e = np.asarray(merged["elem"])
    if e.ndim != 2 or e.shape[1] not in (4, 5):
        raise ValueError(f"elem must be (M, 4) or (M, 5); got shape {e.shape}")
    if np.issubdtype(e.dtype, np.floating) and not np.all(e == np.round(e)):
        raise ValueError("elem must hold integer node indices")
    e = e.astype(np.int64)
    if merged.get("elemprop") is not None:
        region = np.asarray(merged["elemprop"], dtype=np.int64).ravel()
    elif e.shape[1] == 5:
        region = e[:, 4]
    else:
        region = np.ones(len(e), dtype=np.int64)
    if e[:, :4].size and e[:, :4].min() < 1:
        raise ValueError("elem holds node index 0 or less: pmmc/iso2mesh elements are 1-based")
    tets = np.ascontiguousarray(e[:, :4] - 1)
    prop_a = np.asarray(merged["prop"], dtype=np.float64)
    if prop_a.ndim != 2 or prop_a.shape[1] != 4 or len(prop_a) < 2:
        raise ValueError(
            f"prop must be (regions + 1, 4): row 0 the outside, then mua, mus, g, n per region; "
            f"got shape {prop_a.shape}"
        )
    if merged.get("sources") is not None:
        srcs = list(merged["sources"])
    else:
        if merged.get("srcpos") is None:
            raise ValueError("srcpos is required (or give sources=[...])")
        srcs = [_source(merged["srctype"], merged["srcpos"], merged.get("srcdir"), merged.get("srcparam1"))]
    out = _biogpu.mc_run(
        nodes,
        tets,
        np.ascontiguousarray(region),
        np.ascontiguousarray(prop_a[1:]),
        float(max(prop_a[0, 3], 1.0)),
        json.dumps(srcs),
        int(merged["nphoton"]),
        int(merged["seed"]),
        None if merged["tend_ns"] is None else float(merged["tend_ns"]),
        bool(merged["specular"]),
        None if merged.get("detpos") is None else np.ascontiguousarray(np.asarray(merged["detpos"], dtype=np.float64).reshape(-1, 4)),
        int(merged["maxdetphoton"]),
        check_device(merged["device"]),
        _detector(jacobian if jacobian is not None else merged.get("jacobian")),
    )
    out["fluence_node"] = node_fluence(out["fluence"], out["volume"], tets, len(nodes))
    return out


def _detector(k: Any) -> Optional[int]:
    return None if k is None else int(k)


def node_fluence(fluence: np.ndarray, volume: np.ndarray, tets: np.ndarray, n_nodes: int) -> np.ndarray:
    """Per-node fluence: the volume-weighted mean over the elements that share each node
    (``tets`` 0-based)."""
    num = np.zeros(n_nodes)
    den = np.zeros(n_nodes)
    w = np.repeat((fluence * volume)[:, None], 4, axis=1)
    np.add.at(num, tets, w)
    np.add.at(den, tets, np.repeat(volume[:, None], 4, axis=1))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, num / den, 0.0)
