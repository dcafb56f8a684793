#!/usr/bin/env bash
# Session 2, run 5: final check of this session's FLIM changes (tests, benches, spans).
set -u
R=$PWD; B=/tmp/d5; rm -rf $B; mkdir -p $B && tar -C $B -xJf .gpu-xz/bundle.tar.xz; cd $B
BIOGPU_REQUIRE_GPU=1 BIOGPU_DEVICE=cuda timeout 240 ./tests/gpu_vs_cpu --test-threads 4 flim base_kernels speckle:: > $OUT/tests.log 2>&1; echo "tests rc=$?" >> $OUT/tests.log
BIOGPU_FLIM_DATA=$R/.gpu-data/flim timeout 200 ./biogpu-bench --device cuda --filter runtime,flim --out $OUT/bench-flim.json > $OUT/bench-flim.log 2>&1; echo "rc=$?" >> $OUT/bench-flim.log
BIOGPU_TRACE="flim_core=debug,gpu_runtime=debug" BIOGPU_FLIM_DATA=$R/.gpu-data/flim timeout 100 ./biogpu-bench --device cuda --filter flim --quick --out /tmp/t.json > /dev/null 2> /tmp/trace.log
sed 's/\x1b\[[0-9;]*m//g' /tmp/trace.log | grep -E "seminal|pixels=262144|flim_fit|flim_analyse" | tail -80 > $OUT/trace-flim.log
