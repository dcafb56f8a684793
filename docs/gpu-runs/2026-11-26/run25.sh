#!/usr/bin/env bash
# 2026-11-27, run 25: run 24's code plus the time loop's indices computed once per turn,
# its steps at constant offsets from them (so that NVRTC can fold them into the loads).
# Every GPU-vs-CPU test on CUDA, the demo, the perfusion bench; run 20's bundle (.gpu-old)
# benched again on the same machine.
exec bash "$(dirname "$0")/perf-ab.sh" 25
