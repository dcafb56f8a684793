#!/usr/bin/env bash
# Session 2, run 3: persistent FLIM pipeline, staging on the calling thread, parallel fit maps.
set -u
R=$PWD; B=/tmp/d3; rm -rf $B; mkdir -p $B && tar -C $B -xJf .gpu-xz/bundle.tar.xz; cd $B
BIOGPU_REQUIRE_GPU=1 BIOGPU_DEVICE=cuda timeout 200 ./tests/gpu_vs_cpu --test-threads 4 flim base_kernels > $OUT/tests.log 2>&1; echo "tests rc=$?" >> $OUT/tests.log
timeout 60 ./biogpu-bench --device cuda --filter runtime --out $OUT/bench-runtime.json > $OUT/bench-runtime.log 2>&1
BIOGPU_FLIM_DATA=$R/.gpu-data/flim timeout 150 ./biogpu-bench --device cuda --filter flim --out $OUT/bench-flim.json > $OUT/bench-flim.log 2>&1; echo "rc=$?" >> $OUT/bench-flim.log
BIOGPU_TRACE="flim_core=debug,gpu_runtime=debug" BIOGPU_FLIM_DATA=$R/.gpu-data/flim timeout 100 ./biogpu-bench --device cuda --filter flim --quick --out /tmp/t.json > /dev/null 2> $OUT/trace-flim.log
for w in 2 4 6; do
  echo "== workers $w"
  BIOGPU_FLIM_WORKERS=$w BIOGPU_FLIM_DATA=$R/.gpu-data/flim timeout 60 ./biogpu-bench --device cuda --filter flim --out /tmp/x.json 2>&1 | grep -E "^  flim \| (kernel|IEM\+CMM|MLE|LSQ mono)" | cut -c1-130
done > $OUT/sweep.log 2>&1
timeout 200 ./biogpu-bench --device cuda --filter perfusion --out $OUT/bench-perf.json > $OUT/bench-perf.log 2>&1; echo "rc=$?" >> $OUT/bench-perf.log
