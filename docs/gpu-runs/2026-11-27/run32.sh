#!/usr/bin/env bash
# 2026-11-27, run 32: LM with persistent units (one flat loop, one evaluation of the normal
# equations per turn; curves and inputs in shared memory) and staging buffers reused without
# a page-locked probe allocation per call. Every GPU-vs-CPU test on CUDA, the perfusion
# kernels alone and end to end.
set -u
B=/tmp/r32; rm -rf $B; mkdir -p $B && tar -C $B -xJf .gpu-xz/bundle.tar.xz; cd $B
export BIOGPU_KERNEL_CACHE=/tmp/kc32
BIOGPU_REQUIRE_GPU=1 BIOGPU_DEVICE=cuda timeout 240 ./tests/gpu_vs_cpu --test-threads 4 > $OUT/tests.log 2>&1; echo "tests rc=$?" >> $OUT/tests.log
grep -E "test result|FAILED|panicked|rc=" $OUT/tests.log
timeout 150 ./biogpu-bench --device cuda --filter perfusion-end-to-end --out $OUT/e2e.json > $OUT/e2e.log 2>&1
timeout 120 ./biogpu-bench --device cuda --filter perfusion-kernels --out $OUT/kernels.json > $OUT/kernels.log 2>&1
grep -E "^perfusion" $OUT/e2e.log $OUT/kernels.log | grep -v "f32" | cut -c1-150
grep -E "f64 626400 voxels Nt 128 end to end \|" $OUT/e2e.log | grep -oE "[0-9.]+% converged.*"
