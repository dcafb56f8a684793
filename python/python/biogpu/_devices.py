"""Device listing and the ``device=`` argument."""

from typing import Any, Dict, List

from . import _biogpu


def devices() -> List[Dict[str, Any]]:
    """Every device on this machine, GPUs first, the CPU last.

    Each is a dict with ``id`` (the name to pass as ``device=``, e.g. ``"cuda:0"``),
    ``name``, ``backend`` (``"cuda"``, ``"wgpu"`` or ``"cpu"``), ``memory`` and
    ``free_memory`` (bytes, or None where the backend does not say), ``compute_capability``
    (CUDA (major, minor) or None), ``compute_units`` (SMs or CPU threads),
    ``max_buffer_bytes``, ``f64`` (whether kernels may use double precision), ``software``
    (a software adapter such as lavapipe), ``driver`` and ``auto`` (True for the device
    ``device="auto"`` picks).
    """
    return _biogpu.devices()


def device_notes() -> List[str]:
    """One line per backend that is not available here, with the reason."""
    return _biogpu.device_notes()


def check_device(device: str) -> str:
    """``device`` as a string, or a ValueError naming what is accepted."""
    if not isinstance(device, str):
        raise ValueError(
            f"device must be a string such as 'auto', 'cpu', 'cuda:0' or 'wgpu:software', "
            f"not {type(device).__name__}"
        )
    return device
