#!/usr/bin/env bash
# 2026-11-27, run 22: Nelder-Mead's time loop reads both inputs from a shared copy (no
# global loads or 64-bit address arithmetic per step), a step one multiplication leaner
# (inputs pre-weighted by wb, CPU mirrored), the simplex sort's earlier passes skipped when
# only the worst vertex changed, the centroid by a multiplication (CPU mirrored). Every
# GPU-vs-CPU test on CUDA, the demo, the perfusion bench; then run 20's bundle
# (.gpu-old) benched on the same machine as the baseline.
exec bash "$(dirname "$0")/perf-ab.sh" 22
