#!/usr/bin/env bash
# 2026-11-26, run 20 (third session): perfusion weights' Taylor series by Horner's rule on
# a shared coefficient table (no chain of 17 f64 divisions per cost evaluation; CPU
# mirrored). Every GPU-vs-CPU test on CUDA, the perfusion bench.
set -u
R=$PWD; B=/tmp/r20; rm -rf $B; mkdir -p $B && tar -C $B -xJf .gpu-xz/bundle.tar.xz; cd $B
export BIOGPU_KERNEL_CACHE=/tmp/kc
BIOGPU_REQUIRE_GPU=1 BIOGPU_DEVICE=cuda timeout 240 ./tests/gpu_vs_cpu --test-threads 4 > $OUT/tests.log 2>&1; echo "tests rc=$?" >> $OUT/tests.log
timeout 60 ./biogpu --device cuda demo --out /tmp/demo > $OUT/demo.log 2>&1; echo "demo rc=$?" >> $OUT/demo.log
timeout 240 ./biogpu-bench --device cuda --filter perfusion --out $OUT/bench-perf.json > $OUT/bench-perf.log 2>&1
grep -E "test result|FAILED|panicked|rc=" $OUT/tests.log $OUT/demo.log
grep -E "f64|f32" $OUT/bench-perf.log | grep -v "| " | cut -c1-150 | head -40
