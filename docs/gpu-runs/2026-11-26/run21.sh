#!/usr/bin/env bash
# 2026-11-27, run 21 (bundle of run 20): Nsight Compute source counters on the first
# Nelder-Mead f64 launch of the perfusion bench (persistent units, 626,400 voxels), with the
# SASS and per-instruction executed counts exported, to see where NM's instructions go.
exec bash "$(dirname "$0")/ncu-nm.sh" 21
