#!/usr/bin/env bash
# 2026-11-27, run 31: run 30's streaming with the curves' time rows padded to whole 32-voxel
# groups (run 30's chunked test read samples of a voxel whose piece had not landed through
# a cache line shared with the previous piece). Every GPU-vs-CPU test on CUDA, span timings
# of NM f64 end to end, the perfusion kernels alone and end to end.
set -u
B=/tmp/r31; rm -rf $B; mkdir -p $B && tar -C $B -xJf .gpu-xz/bundle.tar.xz; cd $B
export BIOGPU_KERNEL_CACHE=/tmp/kc31
BIOGPU_REQUIRE_GPU=1 BIOGPU_DEVICE=cuda timeout 240 ./tests/gpu_vs_cpu --test-threads 4 > $OUT/tests.log 2>&1; echo "tests rc=$?" >> $OUT/tests.log
grep -E "test result|FAILED|panicked|rc=" $OUT/tests.log
BIOGPU_TRACE=perfusion_core=debug,gpu_runtime=debug timeout 25 ./biogpu-bench --device cuda --filter perfusion-end-to-end --out /tmp/tr.json > /dev/null 2> $OUT/trace.log
timeout 100 ./biogpu-bench --device cuda --filter perfusion-kernels --out $OUT/kernels.json > $OUT/kernels.log 2>&1
timeout 150 ./biogpu-bench --device cuda --filter perfusion-end-to-end --out $OUT/e2e.json > $OUT/e2e.log 2>&1
grep -E "^perfusion" $OUT/kernels.log $OUT/e2e.log | cut -c1-150
xz -T4 $OUT/trace.log
