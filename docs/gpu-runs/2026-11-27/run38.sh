#!/usr/bin/env bash
# 2026-11-27, run 38: units waiting for their voxel's piece read the ready count every
# ~40 us (16384 dependent integer steps) from a word a cache line away from the voxel
# counter (run 37's span timings: some streamed LM launches took 33 ms instead of 18 while
# the upload kept its pace). Perfusion GPU-vs-CPU tests on CUDA and the end-to-end bench.
set -u
B=/tmp/r38; rm -rf $B; mkdir -p $B && tar -C $B -xJf .gpu-xz/bundle.tar.xz; cd $B
export BIOGPU_KERNEL_CACHE=/tmp/kc38
BIOGPU_REQUIRE_GPU=1 BIOGPU_DEVICE=cuda timeout 200 ./tests/gpu_vs_cpu --test-threads 4 perfusion > $OUT/tests.log 2>&1; echo "tests rc=$?" >> $OUT/tests.log
grep -E "test result|FAILED|panicked|rc=" $OUT/tests.log
timeout 150 ./biogpu-bench --device cuda --filter perfusion-end-to-end --out $OUT/e2e.json > $OUT/e2e.log 2>&1
grep -E "^perfusion" $OUT/e2e.log | cut -c1-130
