#!/usr/bin/env bash
# 2026-11-27, run 37 (bundle of run 36): span timings of the perfusion end-to-end bench's
# first cases (NM, then LM f64), to see why some LM repetitions take 36-45 ms instead of 23.
set -u
B=/tmp/r37; rm -rf $B; mkdir -p $B && tar -C $B -xJf .gpu-xz/bundle.tar.xz; cd $B
export BIOGPU_KERNEL_CACHE=/tmp/kc37
BIOGPU_TRACE=perfusion_core=debug,gpu_runtime=debug timeout 45 ./biogpu-bench --device cuda --filter perfusion-end-to-end --out /tmp/tr.json > $OUT/bench.log 2> $OUT/trace.log
grep -E "^  perfusion" $OUT/bench.log | cut -c1-120
xz -T4 $OUT/trace.log
