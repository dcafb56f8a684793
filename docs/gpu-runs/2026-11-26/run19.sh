#!/usr/bin/env bash
# 2026-11-26, run 19 (third session): staging copies with streaming (non-temporal) stores.
# Same binary, same lease: FLIM and speckle benches with them and with plain copies
# (ZZ_PLAIN_COPY=1, a switch of this experiment's binary only), the link, and every
# GPU-vs-CPU test on CUDA.
set -u
R=$PWD; B=/tmp/r19; rm -rf $B; mkdir -p $B && tar -C $B -xJf .gpu-xz/bundle.tar.xz; cd $B
export BIOGPU_KERNEL_CACHE=/tmp/kc BIOGPU_FLIM_DATA=$R/.gpu-data/flim
timeout 60 ./biogpu-bench --device cuda --filter runtime --out $OUT/bench-runtime.json > $OUT/bench-runtime.log 2>&1
for mode in stream plain; do
  if [ $mode = plain ]; then export ZZ_PLAIN_COPY=1; else unset ZZ_PLAIN_COPY; fi
  timeout 150 ./biogpu-bench --device cuda --filter flim --out $OUT/flim-$mode.json > $OUT/flim-$mode.log 2>&1
  timeout 150 ./biogpu-bench --device cuda --filter speckle --out $OUT/speckle-$mode.json > $OUT/speckle-$mode.log 2>&1
done
unset ZZ_PLAIN_COPY
BIOGPU_REQUIRE_GPU=1 BIOGPU_DEVICE=cuda timeout 240 ./tests/gpu_vs_cpu --test-threads 4 > $OUT/tests.log 2>&1; echo "tests rc=$?" >> $OUT/tests.log
grep -E "test result|FAILED|panicked|rc=" $OUT/tests.log
grep -E "128 MiB pinned" $OUT/bench-runtime.log | cut -c1-100
for mode in stream plain; do echo "== $mode"; grep -E "pageable|IEM\+CMM\+RLD\+phasor, page-locked|sdt \(512x512x256 u16\) " $OUT/flim-$mode.log | cut -c1-110; grep -E "stream" $OUT/speckle-$mode.log | cut -c1-120; done
