#!/usr/bin/env bash
# Diagnostics 2026-11-25 (session 2): FLIM kernel-only bench, host transfer costs, kernel profiles.
set -u
R=$PWD; B=/tmp/d1; rm -rf $B; mkdir -p $B && tar -C $B -xJf .gpu-xz/bundle.tar.xz
export PATH=$PATH:/usr/local/cuda/bin:$(ls -d /opt/nvidia/nsight-compute/*/ 2>/dev/null | tail -1)
{ nvidia-smi; which ncu nvcc; cat /sys/kernel/mm/transparent_hugepage/enabled; nproc; } > $OUT/env.log 2>&1
nvcc -O2 -arch=sm_90 -Xcompiler -fopenmp -o /tmp/hostreg .gpu-xz/hostreg.cu > $OUT/hostreg.log 2>&1 && /tmp/hostreg >> $OUT/hostreg.log 2>&1
cd $B
SDT=$R/.gpu-data/flim/seminal_receptacle_FLIM_single_image.sdt
BIOGPU_FLIM_DATA=$R/.gpu-data/flim timeout 200 ./biogpu-bench --device cuda --filter runtime,flim --out $OUT/bench-flim.json > $OUT/bench.log 2>&1; echo "bench rc=$?" >> $OUT/bench.log
./biogpu --device cpu perfusion simulate --voxels 65536 --cnr 20 --out /tmp/psim > /dev/null 2>&1
P="perfusion fit --model dual-input --curves /tmp/psim/curves.csv --aif /tmp/psim/inputs.csv:aif --pv /tmp/psim/inputs.csv:pv"
CUBECL_DEBUG_LOG=$OUT/src-flim-lsq.log timeout 60 ./biogpu --device cuda flim fit $SDT --method lsq --bin 1 --offset auto --out /tmp/fa > /dev/null 2>&1
CUBECL_DEBUG_LOG=$OUT/src-perf-nm.log timeout 60 ./biogpu --device cuda $P --method nm --out /tmp/pa > /dev/null 2>&1
S="--section LaunchStats --section Occupancy --section SpeedOfLight --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis --section WarpStateStats --section SchedulerStats"
N="timeout 150 ncu --clock-control none $S --launch-count 1"
{
$N -k regex:fit_kernel ./biogpu --device cuda flim fit $SDT --method lsq --bin 1 --offset auto --out /tmp/fb
$N -k regex:fit_kernel ./biogpu --device cuda flim fit $SDT --method mle --model bi --irf auto --irf-shift auto --bin 1 --offset auto --out /tmp/fc
$N -k regex:lifetimes_kernel ./biogpu --device cuda flim fit $SDT --method iem --out /tmp/fd
} > $OUT/ncu-flim.log 2>&1
{
$N -k regex:nelder_mead ./biogpu --device cuda $P --method nm --out /tmp/pb
$N -k regex:levenberg ./biogpu --device cuda $P --method lm --out /tmp/pc
} > $OUT/ncu-perf.log 2>&1
ls -la $OUT
