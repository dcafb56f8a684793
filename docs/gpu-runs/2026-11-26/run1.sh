#!/usr/bin/env bash
# 2026-11-26, run 1: coalesced FLIM kernels, page-locked cubes, demo with fits.
# Tests (flim, base), demo, runtime + flim benches (paper workload 512x512x256), spans,
# Nsight Compute on the lifetimes, fret and MLE+IRF fit kernels.
set -u
R=$PWD; B=/tmp/r1; rm -rf $B; mkdir -p $B && tar -C $B -xJf .gpu-xz/bundle.tar.xz; cd $B
export BIOGPU_KERNEL_CACHE=/tmp/kc PATH=$PATH:/usr/local/cuda/bin:$(ls -d /opt/nvidia/nsight-compute/*/ 2>/dev/null | tail -1)
SDT=$R/.gpu-data/flim/seminal_receptacle_FLIM_single_image.sdt
{ nvidia-smi; nproc; } > $OUT/env.log 2>&1
BIOGPU_REQUIRE_GPU=1 BIOGPU_DEVICE=cuda timeout 240 ./tests/gpu_vs_cpu --test-threads 4 flim base_kernels > $OUT/tests.log 2>&1; echo "tests rc=$?" >> $OUT/tests.log
timeout 60 ./biogpu --device cuda demo --out /tmp/demo > $OUT/demo.log 2>&1; echo "demo rc=$?" >> $OUT/demo.log
BIOGPU_FLIM_DATA=$R/.gpu-data/flim timeout 240 ./biogpu-bench --device cuda --filter runtime,flim --out $OUT/bench-flim.json > $OUT/bench-flim.log 2>&1; echo "bench rc=$?" >> $OUT/bench-flim.log
S="--section LaunchStats --section Occupancy --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats"
N="timeout 100 ncu --clock-control none $S --launch-count 1"
{
$N -k regex:lifetimes_kernel ./biogpu --device cuda flim fit $SDT --method iem --out /tmp/n1
$N -k regex:fret_kernel ./biogpu --device cuda flim fit $SDT --method bcmm --out /tmp/n2
$N -k regex:fit_kernel ./biogpu --device cuda flim fit $SDT --method mle --irf auto --bin 1 --offset auto --out /tmp/n3
} > $OUT/ncu-flim.log 2>&1
BIOGPU_TRACE="flim_core=debug,gpu_runtime=debug" BIOGPU_FLIM_DATA=$R/.gpu-data/flim timeout 120 ./biogpu-bench --device cuda --filter flim --out /tmp/t.json > /dev/null 2> /tmp/trace.log
sed 's/\x1b\[[0-9;]*m//g' /tmp/trace.log | grep -E "pixels=262144|host_pin|flim_fit_maps" | tail -300 > $OUT/trace-flim.log
grep -E "^ *(runtime|flim) \|" $OUT/bench-flim.log | cut -c1-160
tail -3 $OUT/tests.log; tail -4 $OUT/demo.log
