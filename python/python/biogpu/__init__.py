"""biogpu: GPU biomedical imaging from numpy.

Four modalities, each a submodule whose functions take numpy arrays and return dicts of
numpy arrays:

- :mod:`biogpu.speckle`: laser speckle contrast (K, SFI), tau_c, MESI fits
- :mod:`biogpu.flim`: FLIM readers (.sdt, .ptu, ...), phasor, lifetimes, per-pixel fits
- :mod:`biogpu.mc`: Monte Carlo light transport in tetrahedral meshes (pmmc-style arguments)
- :mod:`biogpu.perfusion`: DCE perfusion fits (Tofts, extended Tofts, Patlak, 2CXM, liver)

Every compute function takes ``device="auto"``: ``"auto"``, ``"cpu"``, ``"cuda"``,
``"cuda:N"``, ``"wgpu"``, ``"wgpu:N"`` or ``"wgpu:software"``, as the ``biogpu`` CLI's
``--device``. ``auto`` picks a CUDA GPU, else a hardware wgpu GPU, else the CPU, and then
runs a job on the CPU where its cores are expected to finish first. The CPU path is the f64
reference; GPU results agree with it to the tolerances stated in the project's docs.

Errors raise ``ValueError`` (bad input or parameters, unknown device names), ``OSError``
(unreadable files), ``RuntimeError`` (device failures) or ``KeyboardInterrupt`` (Ctrl-C
during a long fit or simulation), with the Rust library's message.
"""

from ._biogpu import __version__
from ._devices import devices
from . import speckle, flim, mc, perfusion

__all__ = ["__version__", "devices", "speckle", "flim", "mc", "perfusion"]
