#!/usr/bin/env bash
# 2026-11-27, run 28: after the review clean-up (the decays in the per-evaluation mix, one
# datum reader, rho2 only for the 2CXM; same arithmetic): every GPU-vs-CPU test on CUDA, the
# demo and the perfusion bench, without the old-bundle baseline (device time).
set -u
B=/tmp/r28; rm -rf $B; mkdir -p $B && tar -C $B -xJf .gpu-xz/bundle.tar.xz; cd $B
export BIOGPU_KERNEL_CACHE=/tmp/kc28
BIOGPU_REQUIRE_GPU=1 BIOGPU_DEVICE=cuda timeout 240 ./tests/gpu_vs_cpu --test-threads 4 > $OUT/tests.log 2>&1; echo "tests rc=$?" >> $OUT/tests.log
timeout 60 ./biogpu --device cuda demo --out /tmp/demo > $OUT/demo.log 2>&1; echo "demo rc=$?" >> $OUT/demo.log
timeout 200 ./biogpu-bench --device cuda --filter perfusion --out $OUT/bench-perf.json > $OUT/bench-perf.log 2>&1
grep -E "test result|FAILED|panicked|rc=" $OUT/tests.log $OUT/demo.log
grep -E "nm f64|lm f64" $OUT/bench-perf.log | grep -v "| " | cut -c1-110
