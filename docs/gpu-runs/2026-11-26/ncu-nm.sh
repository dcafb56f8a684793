#!/usr/bin/env bash
# The body of runs 21 and 23 (2026-11-27): `ncu-nm.sh N` unpacks .gpu-xz into /tmp/rN and
# takes Nsight Compute source counters of the first Nelder-Mead launch of the perfusion bench,
# exporting the SASS with per-instruction counts. Run from the repository root.
set -u
B=/tmp/r$1; rm -rf $B; mkdir -p $B && tar -C $B -xJf .gpu-xz/bundle.tar.xz; cd $B
export BIOGPU_KERNEL_CACHE=/tmp/kc PATH=$PATH:/usr/local/cuda/bin
S="--section LaunchStats --section Occupancy --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section InstructionStats --section SourceCounters"
timeout 400 ncu --clock-control none $S --kernel-name regex:nelder --launch-count 1 -o /tmp/nm \
  ./biogpu-bench --device cuda --filter perfusion --out /tmp/x.json > $OUT/ncu.log 2>&1
echo "ncu rc=$?" >> $OUT/ncu.log
ncu --import /tmp/nm.ncu-rep --page details > $OUT/details.txt 2>&1
ncu --import /tmp/nm.ncu-rep --page source --csv --print-source sass > $OUT/sass.csv 2>&1
xz -k -T0 $OUT/sass.csv; rm -f $OUT/sass.csv
ls -la $OUT; tail -3 $OUT/ncu.log; head -c 3000 $OUT/details.txt
