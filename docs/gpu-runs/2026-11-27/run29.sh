#!/usr/bin/env bash
# 2026-11-27, run 29: each launch of a round on its own CubeCL stream (pipeline lane), NM
# split in 4 launches like LM: every GPU-vs-CPU test on CUDA, then the perfusion end-to-end
# bench at the default cubes and at cube 128.
set -u
B=/tmp/r29; rm -rf $B; mkdir -p $B && tar -C $B -xJf .gpu-xz/bundle.tar.xz; cd $B
export BIOGPU_KERNEL_CACHE=/tmp/kc29
BIOGPU_REQUIRE_GPU=1 BIOGPU_DEVICE=cuda timeout 240 ./tests/gpu_vs_cpu --test-threads 4 > $OUT/tests.log 2>&1; echo "tests rc=$?" >> $OUT/tests.log
grep -E "test result|FAILED|panicked|rc=" $OUT/tests.log
timeout 150 ./biogpu-bench --device cuda --filter perfusion-end-to-end --out $OUT/e2e.json > $OUT/e2e.log 2>&1
BIOGPU_PERFUSION_CUBE=128 timeout 150 ./biogpu-bench --device cuda --filter perfusion-end-to-end --out $OUT/e2e-128.json > $OUT/e2e-128.log 2>&1
for f in e2e e2e-128; do echo "== $f"; grep -E " f64 | f32 " $OUT/$f.log | cut -d'|' -f2,3,4 | cut -c1-120; done
