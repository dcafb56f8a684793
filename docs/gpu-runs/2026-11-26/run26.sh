#!/usr/bin/env bash
# 2026-11-27, run 26: run 25's code (committed as df6b5d3) plus 8 time steps per turn of
# the uniform-grid cost loop (then 4, then single steps). Every GPU-vs-CPU test on CUDA, the
# demo, the perfusion bench; run 20's bundle (.gpu-old) benched again on the same machine.
exec bash "$(dirname "$0")/perf-ab.sh" 26
