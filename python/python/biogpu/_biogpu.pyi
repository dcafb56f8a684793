"""Type stubs of the native module ``biogpu._biogpu`` (Rust, PyO3).

Use the wrappers in :mod:`biogpu.speckle`, :mod:`biogpu.flim`, :mod:`biogpu.mc` and
:mod:`biogpu.perfusion`: they hold the defaults, the docstrings with units and the reshaping;
these functions take every argument explicitly and expect C-contiguous arrays of the stated
dtypes. Errors: ValueError (bad input), OSError (files), RuntimeError (devices),
KeyboardInterrupt (Ctrl-C during a fit or simulation).
"""

from typing import Any, Dict, List, Optional, Tuple

import numpy as np

__version__: str

def devices() -> List[Dict[str, Any]]:
    """Every device (GPUs, then the CPU) as dicts; see biogpu.devices."""

def device_notes() -> List[str]:
    """One line per missing backend, with the reason."""

def speckle_contrast(
    frames: np.ndarray, window: int, mode: str, temporal_frames: int, border: str,
    exposure: Optional[float], saturation: Optional[float], device: str,
) -> Dict[str, Any]:
    """K (dimensionless), flags, SFI (1/s, with exposure in s) of (frame, row, column)
    uint8/uint16/float32 frames."""

def speckle_flow(k: np.ndarray, exposure: float, beta: float, model: str, device: str) -> Dict[str, Any]:
    """tau_c (s) and flags of one float32 K map; exposure in s."""

def speckle_mesi(
    k: np.ndarray, exposures: List[float], beta: Optional[float], max_iterations: int,
    tolerance: float, max_residual: Optional[float], device: str,
) -> Dict[str, Any]:
    """MESI fit of (exposure, row, column) float32 K; exposures in s; tau_c in s."""

def speckle_read(
    path: str, bit_depth: Optional[int], frame_height: Optional[int], channel: Optional[int],
    slice: Optional[int],
) -> Dict[str, Any]:
    """Frames of a TIFF or PNG file (frames in the stored dtype), bit_depth, saturation."""

def flim_estimate_irf(decays: np.ndarray, bin_ns: float) -> Dict[str, Any]:
    """The IRF estimated from (y, x, bin) decays: irf (bin,) summing to 1, centroid_ns,
    fwhm_ns."""

def flim_read(
    path: str, bin_ns: Optional[float], period_ns: Optional[float], channel: Optional[int],
    block: Optional[int], sum_frames: bool, binning: int,
) -> Dict[str, Any]:
    """Every image of a TCSPC file: counts (y, x, bin), bin width and period in ns."""

def flim_lifetimes(
    decays: np.ndarray, bin_ns: float, period_ns: Optional[float], methods: List[str],
    first: int, bins: Optional[int], threshold: float, offset: float, harmonic: int,
    calibration: Optional[Tuple[float, float]], reference: Optional[np.ndarray],
    reference_tau_ns: float, device: str,
) -> Dict[str, Any]:
    """RLD/IEM/CMM/phasor maps (lifetimes in ns) of (y, x, bin) uint16/uint32/float32 counts."""

def flim_fit(
    decays: np.ndarray, bin_ns: float, period_ns: Optional[float], model: str, estimator: str,
    irf: Optional[np.ndarray], irf_shift: float, fit_shift: bool, offset: float,
    fit_offset: bool, first: int, bins: Optional[int], threshold: float,
    mask: Optional[np.ndarray], max_iterations: int, tolerance: float,
    initial_tau_ns: Optional[List[float]], segments: Optional[str], device: str,
) -> Dict[str, Any]:
    """Per-pixel or global multi-exponential fit; tau (component, y, x) in ns."""

def perfusion_models() -> Dict[str, List[Dict[str, Any]]]:
    """Each model's parameters with units and default bounds."""

def perfusion_fit(
    curves: np.ndarray, t: List[float], aif: List[float], pif: Optional[List[float]],
    model: str, method: str, fixed: Dict[str, float], bounds: Dict[str, Tuple[float, float]],
    start: Dict[str, float], max_iterations: Optional[int], precision: str,
    standard_errors: bool, device: str,
) -> Dict[str, Any]:
    """Fit (voxels, time) float32 curves; t in s; parameters in each model's units."""

def perfusion_predict(
    t: List[float], aif: List[float], pif: Optional[List[float]], model: str, theta: List[float],
) -> np.ndarray:
    """The model curve of theta on the time grid t (s)."""

def perfusion_simulate(
    model: str, truth: List[float], nt: int, duration: float, cnr: Optional[float],
    voxels: int, seed: int,
) -> Dict[str, np.ndarray]:
    """Simulated curves: t (s), aif, pif, curves (voxels, nt), clean."""

def perfusion_population(
    t: List[float], name: str, arrival_s: Optional[float],
) -> Tuple[np.ndarray, str]:
    """A population input function at t (s), mM, and its compartment (blood or plasma)."""

def perfusion_read_dce(path: str, series: Optional[str]) -> Dict[str, Any]:
    """A DCE series: data (x, y, z, t) float32, times (s) or None, voxel_size, DICOM
    acquisition parameters."""

def mc_run(
    node: np.ndarray, elem: np.ndarray, region: np.ndarray, materials: np.ndarray,
    n_outside: float, sources: str, photons: int, seed: int, time_limit_ns: Optional[float],
    specular: bool, detectors: Optional[np.ndarray], max_detected: int, device: str,
    jacobian: Optional[int] = None,
) -> Dict[str, Any]:
    """Monte Carlo run: node (N, 3) float64 mm, elem (M, 4) int64 0-based, region (M,)
    int64 from 1, materials (R, 4) mua, mus (1/mm), g, n; sources as JSON; detectors
    (K, 4) x, y, z, radius (mm) or None; jacobian: a detector (1-based) to replay."""

def mc_box_mesh(origin: Tuple[float, float, float], size: Tuple[float, float, float], cell: float, per_cell: int) -> Dict[str, np.ndarray]:
    """A box mesh: node (N, 3) mm, elem (M, 5) 1-based with the region last."""
