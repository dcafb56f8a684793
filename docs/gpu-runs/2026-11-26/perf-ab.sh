#!/usr/bin/env bash
# The body of runs 22, 24, 25 and 26 (2026-11-27): `perf-ab.sh N` unpacks .gpu-xz into
# /tmp/rN, runs every GPU-vs-CPU test on CUDA, the demo and the perfusion bench, then benches
# run 20's bundle (.gpu-old) on the same machine as the baseline. Run from the repository root.
set -u
R=$PWD; B=/tmp/r$1; rm -rf $B; mkdir -p $B && tar -C $B -xJf .gpu-xz/bundle.tar.xz; cd $B
export BIOGPU_KERNEL_CACHE=/tmp/kc$1
BIOGPU_REQUIRE_GPU=1 BIOGPU_DEVICE=cuda timeout 240 ./tests/gpu_vs_cpu --test-threads 4 > $OUT/tests.log 2>&1; echo "tests rc=$?" >> $OUT/tests.log
timeout 60 ./biogpu --device cuda demo --out /tmp/demo > $OUT/demo.log 2>&1; echo "demo rc=$?" >> $OUT/demo.log
timeout 200 ./biogpu-bench --device cuda --filter perfusion --out $OUT/bench-perf.json > $OUT/bench-perf.log 2>&1
O=/tmp/r20; rm -rf $O; mkdir -p $O && tar -C $O -xJf $R/.gpu-old/bundle.tar.xz; cd $O
BIOGPU_KERNEL_CACHE=/tmp/kc20 timeout 200 ./biogpu-bench --device cuda --filter perfusion --out $OUT/bench-perf-old.json > $OUT/bench-perf-old.log 2>&1
grep -E "test result|FAILED|panicked|rc=" $OUT/tests.log $OUT/demo.log
for f in bench-perf bench-perf-old; do echo "== $f"; grep -E "f64|f32" $OUT/$f.log | grep -v "| " | cut -c1-160 | head -40; done
