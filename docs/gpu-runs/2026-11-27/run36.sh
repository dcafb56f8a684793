#!/usr/bin/env bash
# 2026-11-27, run 36: each piece's ready count queued behind its 2-D copy on the same stream, one
# synchronisation for both (was a separate synchronised copy): the perfusion GPU-vs-CPU tests on CUDA,
# the demo, and the perfusion end-to-end bench.
set -u
B=/tmp/r36; rm -rf $B; mkdir -p $B && tar -C $B -xJf .gpu-xz/bundle.tar.xz; cd $B
export BIOGPU_KERNEL_CACHE=/tmp/kc36
BIOGPU_REQUIRE_GPU=1 BIOGPU_DEVICE=cuda timeout 200 ./tests/gpu_vs_cpu --test-threads 4 perfusion > $OUT/tests.log 2>&1; echo "tests rc=$?" >> $OUT/tests.log
timeout 60 ./biogpu --device cuda demo --out /tmp/demo > $OUT/demo.log 2>&1; echo "demo rc=$?" >> $OUT/demo.log
grep -E "test result|FAILED|panicked|rc=" $OUT/tests.log $OUT/demo.log; grep perfusion $OUT/demo.log
timeout 150 ./biogpu-bench --device cuda --filter perfusion-end-to-end --out $OUT/e2e.json > $OUT/e2e.log 2>&1
grep -E "^perfusion" $OUT/e2e.log | cut -c1-130
grep -E "end to end \|" $OUT/e2e.log | grep -oE "[0-9.]+% converged.*"
