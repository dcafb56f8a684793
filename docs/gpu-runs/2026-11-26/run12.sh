#!/usr/bin/env bash
# 2026-11-26, final check of the submitted code: every GPU-vs-CPU test on CUDA and the demo
# (then, in the same call: biogpu-bench --device cuda --filter flim).
set -u
B=/tmp/r12; rm -rf $B; mkdir -p $B && tar -C $B -xJf .gpu-xz/bundle.tar.xz; cd $B
export BIOGPU_KERNEL_CACHE=/tmp/kc
BIOGPU_REQUIRE_GPU=1 BIOGPU_DEVICE=cuda timeout 300 ./tests/gpu_vs_cpu --test-threads 4 > $OUT/tests.log 2>&1; echo "tests rc=$?" >> $OUT/tests.log
timeout 90 ./biogpu --device cuda demo --out /tmp/demo > $OUT/demo.log 2>&1; echo "demo rc=$?" >> $OUT/demo.log
grep -E "test result|FAILED|panicked|rc=" $OUT/tests.log $OUT/demo.log
