#!/usr/bin/env bash
# 2026-11-26, run 3: after merging GPU global analysis, BCMM by analytic window sums and
# bracketed Newton, and perfusion uploads overlapped with the kernels (padded input blocks).
# All GPU-vs-CPU tests on CUDA, the link, FLIM and perfusion benches, the demo.
set -u
R=$PWD; B=/tmp/r3; rm -rf $B; mkdir -p $B && tar -C $B -xJf .gpu-xz/bundle.tar.xz; cd $B
export BIOGPU_KERNEL_CACHE=/tmp/kc PATH=$PATH:/usr/local/cuda/bin
{ nvidia-smi; nproc; } > $OUT/env.log 2>&1
export BIOGPU_REQUIRE_GPU=1 BIOGPU_DEVICE=cuda
timeout 240 ./tests/gpu_vs_cpu --test-threads 4 > $OUT/tests.log 2>&1; echo "tests rc=$?" >> $OUT/tests.log
PROPTEST_CASES=64 timeout 90 ./tests/gpu_vs_cpu flim::flim_fits flim::flim_lifetimes flim::flim_fret > $OUT/tests-64.log 2>&1; echo "rc=$?" >> $OUT/tests-64.log
unset BIOGPU_REQUIRE_GPU BIOGPU_DEVICE
timeout 60 ./biogpu --device cuda demo --out /tmp/demo > $OUT/demo.log 2>&1; echo "demo rc=$?" >> $OUT/demo.log
timeout 60 ./biogpu-bench --device cuda --filter runtime --out $OUT/bench-runtime.json > $OUT/bench-runtime.log 2>&1; echo "bench rc=$?" >> $OUT/bench-runtime.log
BIOGPU_FLIM_DATA=$R/.gpu-data/flim timeout 200 ./biogpu-bench --device cuda --filter flim --out $OUT/bench-flim.json > $OUT/bench-flim.log 2>&1; echo "bench rc=$?" >> $OUT/bench-flim.log
timeout 200 ./biogpu-bench --device cuda --filter perfusion --out $OUT/bench-perf.json > $OUT/bench-perf.log 2>&1; echo "bench rc=$?" >> $OUT/bench-perf.log
grep -E "^ *(runtime|flim|perfusion) \|" $OUT/bench-*.log | cut -c1-200
grep -E "test result|FAILED|panicked|rc=" $OUT/tests.log $OUT/tests-64.log $OUT/demo.log | head -20
