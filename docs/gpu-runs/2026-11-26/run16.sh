#!/usr/bin/env bash
# 2026-11-26, run 16: the submitted code after the review mends (global-analysis kernel's
# pixel geometry from one template): every GPU-vs-CPU test on CUDA, the demo, the FLIM bench.
set -u
R=$PWD; B=/tmp/r16; rm -rf $B; mkdir -p $B && tar -C $B -xJf .gpu-xz/bundle.tar.xz; cd $B
export BIOGPU_KERNEL_CACHE=/tmp/kc BIOGPU_FLIM_DATA=$R/.gpu-data/flim
BIOGPU_REQUIRE_GPU=1 BIOGPU_DEVICE=cuda timeout 300 ./tests/gpu_vs_cpu --test-threads 4 > $OUT/tests.log 2>&1; echo "tests rc=$?" >> $OUT/tests.log
timeout 90 ./biogpu --device cuda demo --out /tmp/demo > $OUT/demo.log 2>&1; echo "demo rc=$?" >> $OUT/demo.log
timeout 150 ./biogpu-bench --device cuda --filter flim --out $OUT/bench-flim.json > $OUT/bench-flim.log 2>&1
grep -E "test result|FAILED|panicked|rc=" $OUT/tests.log $OUT/demo.log
grep -E "global|kernel only|page-locked" $OUT/bench-flim.log | grep -v "| " | cut -c1-110
