#!/usr/bin/env bash
# 2026-11-26, run 17 (third session): FRET kernel's solver with CUDA's fast intrinsics
# (divisions, exp, ln) and `Gpu::launch` without CubeCL's per-launch flush (a round trip to
# the device thread instead). Every GPU-vs-CPU test on CUDA, FRET with 64 cases, the FLIM
# and perfusion benches, the link.
set -u
R=$PWD; B=/tmp/r17; rm -rf $B; mkdir -p $B && tar -C $B -xJf .gpu-xz/bundle.tar.xz; cd $B
export BIOGPU_KERNEL_CACHE=/tmp/kc BIOGPU_FLIM_DATA=$R/.gpu-data/flim
BIOGPU_REQUIRE_GPU=1 BIOGPU_DEVICE=cuda timeout 240 ./tests/gpu_vs_cpu --test-threads 4 > $OUT/tests.log 2>&1; echo "tests rc=$?" >> $OUT/tests.log
PROPTEST_CASES=64 BIOGPU_REQUIRE_GPU=1 BIOGPU_DEVICE=cuda timeout 100 ./tests/gpu_vs_cpu flim::flim_fret flim::fret_phantom > $OUT/tests-64.log 2>&1; echo "rc=$?" >> $OUT/tests-64.log
timeout 60 ./biogpu-bench --device cuda --filter runtime --out $OUT/bench-runtime.json > $OUT/bench-runtime.log 2>&1
timeout 150 ./biogpu-bench --device cuda --filter flim --out $OUT/bench-flim.json > $OUT/bench-flim.log 2>&1
timeout 200 ./biogpu-bench --device cuda --filter perfusion --out $OUT/bench-perf.json > $OUT/bench-perf.log 2>&1
grep -E "test result|FAILED|panicked|rc=" $OUT/tests.log $OUT/tests-64.log
grep -E "page-locked|kernel only|128 MiB pinned|pageable" $OUT/bench-flim.log $OUT/bench-runtime.log | grep -v "| " | cut -c1-120
grep -E "f64|f32" $OUT/bench-perf.log | grep -v "| " | cut -c1-140 | head -40
