#!/usr/bin/env bash
# 2026-11-27, run 24: run 22's code plus the stopping test's vertex spread computed only
# where the cost spread passes (same result). Every GPU-vs-CPU test on CUDA, the demo, the
# perfusion bench; run 20's bundle (.gpu-old) benched again on the same machine.
exec bash "$(dirname "$0")/perf-ab.sh" 24
