#!/usr/bin/env bash
# 2026-11-26, run 11 (bundle of run 6): Nsight Compute on the FRET kernel (the 31st and 32nd
# kernel launches of the FLIM bench are the 512x512 BCMM2 kernel-only launches).
set -u
B=/tmp/r8; [ -d $B ] || { mkdir -p $B && tar -C $B -xJf .gpu-xz/bundle.tar.xz; }; cd $B
export BIOGPU_KERNEL_CACHE=/tmp/kc PATH=$PATH:/usr/local/cuda/bin
S="--section LaunchStats --section Occupancy --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section ComputeWorkloadAnalysis --section InstructionStats --section SourceCounters"
timeout 200 ncu --clock-control none $S --launch-skip 30 --launch-count 2 ./biogpu-bench \
  --device cuda --filter flim --out /tmp/x.json > $OUT/ncu-b2.log 2>&1
