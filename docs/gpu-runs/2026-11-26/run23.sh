#!/usr/bin/env bash
# 2026-11-27, run 23 (bundle of run 22): Nsight Compute source counters on the first
# Nelder-Mead f64 launch of the perfusion bench after run 22's changes (shared inputs, leaner
# step, partial sort), with the SASS and per-instruction executed counts exported.
exec bash "$(dirname "$0")/ncu-nm.sh" 23
