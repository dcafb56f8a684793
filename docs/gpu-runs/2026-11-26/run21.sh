#!/usr/bin/env bash
# 2026-11-27, run 21 (bundle of run 20): Nsight Compute source counters on the first
# Nelder-Mead f64 launch of the perfusion bench (persistent units, 626,400 voxels), with the
# SASS and per-instruction executed counts exported, to see where NM's instructions go.
set -u
B=/tmp/r21; rm -rf $B; mkdir -p $B && tar -C $B -xJf .gpu-xz/bundle.tar.xz; cd $B
export BIOGPU_KERNEL_CACHE=/tmp/kc PATH=$PATH:/usr/local/cuda/bin
S="--section LaunchStats --section Occupancy --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section InstructionStats --section SourceCounters"
timeout 400 ncu --clock-control none $S --kernel-name regex:nelder --launch-count 1 -o /tmp/nm \
  ./biogpu-bench --device cuda --filter perfusion --out /tmp/x.json > $OUT/ncu.log 2>&1
echo "ncu rc=$?" >> $OUT/ncu.log
ncu --import /tmp/nm.ncu-rep --page details > $OUT/details.txt 2>&1
ncu --import /tmp/nm.ncu-rep --page source --csv --print-source sass > $OUT/sass.csv 2>&1
xz -k -T0 $OUT/sass.csv; rm -f $OUT/sass.csv
ls -la $OUT; tail -3 $OUT/ncu.log; head -c 3000 $OUT/details.txt
