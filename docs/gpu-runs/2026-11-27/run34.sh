#!/usr/bin/env bash
# 2026-11-27, run 34: after the review clean-up (Nelder-Mead and LM take their next valid
# voxel through one helper, `take_valid_voxel`; same operations): the perfusion GPU-vs-CPU
# tests on CUDA and the perfusion end-to-end bench.
set -u
B=/tmp/r34; rm -rf $B; mkdir -p $B && tar -C $B -xJf .gpu-xz/bundle.tar.xz; cd $B
export BIOGPU_KERNEL_CACHE=/tmp/kc34
BIOGPU_REQUIRE_GPU=1 BIOGPU_DEVICE=cuda timeout 200 ./tests/gpu_vs_cpu --test-threads 4 perfusion > $OUT/tests.log 2>&1; echo "tests rc=$?" >> $OUT/tests.log
grep -E "test result|FAILED|panicked|rc=" $OUT/tests.log
timeout 150 ./biogpu-bench --device cuda --filter perfusion-end-to-end --out $OUT/e2e.json > $OUT/e2e.log 2>&1
grep -E "^perfusion" $OUT/e2e.log | cut -c1-130
grep -E "end to end \|" $OUT/e2e.log | grep -oE "[0-9.]+% converged.*"
