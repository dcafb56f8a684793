"""Ctrl-C stops long work: a Monte Carlo run and a perfusion fit raise KeyboardInterrupt
soon after SIGINT instead of running to the end."""

import _thread
import signal
import threading
import time

import numpy as np
import pytest

from biogpu import mc, perfusion

#: From SIGINT to the exception: the check runs every 0.1 s, the work stops between batches.
STOP_SECONDS = 10.0


def interrupted_after(seconds, work):
    # A process started in the background by a non-interactive shell inherits SIGINT as
    # ignored, and then `interrupt_main` does nothing and the work runs for minutes: install
    # Python's own handler for the test, as an interactive session has it.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    timer = threading.Timer(seconds, _thread.interrupt_main)
    timer.start()
    start = time.monotonic()
    try:
        with pytest.raises(KeyboardInterrupt):
            work()
    finally:
        timer.cancel()
        signal.signal(signal.SIGINT, previous)
    return time.monotonic() - start


def test_ctrl_c_stops_a_monte_carlo_run():
    mesh = mc.box_mesh((20.0, 20.0, 20.0), 2.0)
    # 50 million photons: minutes on 2 cores; the interrupt comes after 0.5 s.
    took = interrupted_after(0.5, lambda: mc.run(
        node=mesh["node"], elem=mesh["elem"], prop=[[0, 0, 1, 1], [0.01, 10.0, 0.9, 1.0]],
        srcpos=[10, 10, 0], srcdir=[0, 0, 1], nphoton=50_000_000, device="cpu"))
    assert took < STOP_SECONDS, took


def test_ctrl_c_stops_a_perfusion_fit():
    sim = perfusion.simulate(voxels=1, nt=64)
    curves = np.repeat(sim["curves"], 200_000, axis=0)  # minutes of liver fits on 2 cores
    took = interrupted_after(0.5, lambda: perfusion.fit(
        curves, sim["t"], sim["aif"], sim["pif"], model="dual-input", method="nm", device="cpu"))
    assert took < STOP_SECONDS, took
