#!/usr/bin/env bash
# 2026-11-26, run 15: FRET kernel also reusing the evaluated rate in its Newton steps (no
# recomputed exponentials). FLIM GPU-vs-CPU tests on CUDA, the FLIM bench (kernel-only BCMM rows), the link.
set -u
R=$PWD; B=/tmp/r15; rm -rf $B; mkdir -p $B && tar -C $B -xJf .gpu-xz/bundle.tar.xz; cd $B
export BIOGPU_KERNEL_CACHE=/tmp/kc BIOGPU_FLIM_DATA=$R/.gpu-data/flim
BIOGPU_REQUIRE_GPU=1 BIOGPU_DEVICE=cuda timeout 200 ./tests/gpu_vs_cpu --test-threads 4 flim > $OUT/tests.log 2>&1; echo "tests rc=$?" >> $OUT/tests.log
PROPTEST_CASES=64 BIOGPU_REQUIRE_GPU=1 BIOGPU_DEVICE=cuda timeout 100 ./tests/gpu_vs_cpu flim::flim_fret flim::fret_phantom > $OUT/tests-64.log 2>&1; echo "rc=$?" >> $OUT/tests-64.log
timeout 150 ./biogpu-bench --device cuda --filter flim --out $OUT/bench-flim.json > $OUT/bench-flim.log 2>&1
timeout 60 ./biogpu-bench --device cuda --filter runtime --out $OUT/bench-runtime.json > $OUT/bench-runtime.log 2>&1
grep -E "test result|FAILED|panicked|rc=" $OUT/tests.log $OUT/tests-64.log
grep -E "page-locked|kernel only|128 MiB pinned" $OUT/bench-flim.log $OUT/bench-runtime.log | grep -v "| " | cut -c1-120
