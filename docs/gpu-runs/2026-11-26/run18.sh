#!/usr/bin/env bash
# 2026-11-26, run 18 (third session): the code as submitted: FRET solver with CUDA's fast
# intrinsics, `Gpu::launch` as before (run 17's launch without flush reverted), CPU CMM
# from a tabulated start. Every GPU-vs-CPU test on CUDA, FRET with 64 cases, the demo, the
# FLIM bench, the link.
set -u
R=$PWD; B=/tmp/r18; rm -rf $B; mkdir -p $B && tar -C $B -xJf .gpu-xz/bundle.tar.xz; cd $B
export BIOGPU_KERNEL_CACHE=/tmp/kc BIOGPU_FLIM_DATA=$R/.gpu-data/flim
BIOGPU_REQUIRE_GPU=1 BIOGPU_DEVICE=cuda timeout 240 ./tests/gpu_vs_cpu --test-threads 4 > $OUT/tests.log 2>&1; echo "tests rc=$?" >> $OUT/tests.log
PROPTEST_CASES=64 BIOGPU_REQUIRE_GPU=1 BIOGPU_DEVICE=cuda timeout 100 ./tests/gpu_vs_cpu flim::flim_fret flim::fret_phantom flim::flim_lifetimes > $OUT/tests-64.log 2>&1; echo "rc=$?" >> $OUT/tests-64.log
timeout 90 ./biogpu --device cuda demo --out /tmp/demo > $OUT/demo.log 2>&1; echo "demo rc=$?" >> $OUT/demo.log
timeout 60 ./biogpu-bench --device cuda --filter runtime --out $OUT/bench-runtime.json > $OUT/bench-runtime.log 2>&1
timeout 200 ./biogpu-bench --device cuda --filter flim --out $OUT/bench-flim.json > $OUT/bench-flim.log 2>&1
grep -E "test result|FAILED|panicked|rc=" $OUT/tests.log $OUT/tests-64.log $OUT/demo.log
grep -E "page-locked|kernel only|128 MiB pinned|pageable" $OUT/bench-flim.log $OUT/bench-runtime.log | grep -v "| " | cut -c1-120
