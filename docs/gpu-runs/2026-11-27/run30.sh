#!/usr/bin/env bash
# 2026-11-27, run 30: one launch per round on CUDA, started after the first piece of curves;
# the other pieces (blocks of voxels of every time row, 2-D copies) stream in while it runs
# and units wait for their voxel's piece (counter word 1). Every GPU-vs-CPU test on CUDA
# (each launch now streams in at least 8 pieces), then the perfusion end-to-end bench.
set -u
B=/tmp/r30; rm -rf $B; mkdir -p $B && tar -C $B -xJf .gpu-xz/bundle.tar.xz; cd $B
export BIOGPU_KERNEL_CACHE=/tmp/kc30
BIOGPU_REQUIRE_GPU=1 BIOGPU_DEVICE=cuda timeout 240 ./tests/gpu_vs_cpu --test-threads 4 > $OUT/tests.log 2>&1; echo "tests rc=$?" >> $OUT/tests.log
grep -E "test result|FAILED|panicked|rc=" $OUT/tests.log
timeout 150 ./biogpu-bench --device cuda --filter perfusion-end-to-end --out $OUT/e2e.json > $OUT/e2e.log 2>&1
grep -E "^perfusion" $OUT/e2e.log | cut -c1-130
grep -E "nm f64 626400 voxels Nt 128 end to end \||lm f64 626400 voxels Nt 128 end to end \|" $OUT/e2e.log | grep -oE "[0-9.]+% converged.*"
