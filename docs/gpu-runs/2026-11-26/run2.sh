#!/usr/bin/env bash
# 2026-11-26, run 2: perfusion speed (uniform-grid shift walk, per-model LM Jacobian, leaner
# and persistent Nelder-Mead, pipelined chunks), FLIM prefetching tiles and maps built per
# chunk. Tests, benches, Nsight Compute on the perfusion kernels.
set -u
R=$PWD; B=/tmp/r2; rm -rf $B; mkdir -p $B && tar -C $B -xJf .gpu-xz/bundle.tar.xz; cd $B
export BIOGPU_KERNEL_CACHE=/tmp/kc PATH=$PATH:/usr/local/cuda/bin:$(ls -d /opt/nvidia/nsight-compute/*/ 2>/dev/null | tail -1)
{ nvidia-smi; nproc; } > $OUT/env.log 2>&1
export BIOGPU_REQUIRE_GPU=1 BIOGPU_DEVICE=cuda
timeout 300 ./tests/gpu_vs_cpu --test-threads 4 perfusion flim > $OUT/tests.log 2>&1; echo "tests rc=$?" >> $OUT/tests.log
BIOGPU_PERFUSION_PERSISTENT=0 timeout 120 ./tests/gpu_vs_cpu perfusion::f64 > $OUT/tests-one.log 2>&1; echo "rc=$?" >> $OUT/tests-one.log
unset BIOGPU_REQUIRE_GPU BIOGPU_DEVICE
timeout 300 ./biogpu-bench --device cuda --filter perfusion --out $OUT/bench-perf.json > $OUT/bench-perf.log 2>&1; echo "bench rc=$?" >> $OUT/bench-perf.log
BIOGPU_FLIM_DATA=$R/.gpu-data/flim timeout 200 ./biogpu-bench --device cuda --filter flim --out $OUT/bench-flim.json > $OUT/bench-flim.log 2>&1; echo "bench rc=$?" >> $OUT/bench-flim.log
./biogpu --device cpu perfusion simulate --voxels 65536 --cnr 20 --out /tmp/psim > /dev/null 2>&1
P="perfusion fit --model dual-input --curves /tmp/psim/curves.csv --aif /tmp/psim/inputs.csv:aif --pv /tmp/psim/inputs.csv:pv"
S="--section LaunchStats --section Occupancy --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section ComputeWorkloadAnalysis"
N="timeout 150 ncu --clock-control none $S --launch-count 1"
{
$N -k regex:nelder_mead ./biogpu --device cuda $P --method nm --out /tmp/pb
$N -k regex:levenberg ./biogpu --device cuda $P --method lm --out /tmp/pc
} > $OUT/ncu-perf.log 2>&1
grep -E "^ *(perfusion|flim) \|" $OUT/bench-perf.log $OUT/bench-flim.log | cut -c1-190
grep -E "test result|FAILED|panicked" $OUT/tests.log $OUT/tests-one.log | head
