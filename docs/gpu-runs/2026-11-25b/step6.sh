#!/usr/bin/env bash
# Session 2, run 6: after the clean-up (one shared Cholesky solver for the flim, speckle-flow
# and perfusion fit kernels; shared launch checks): tests and the fit benches again.
set -u
R=$PWD; B=/tmp/d6; rm -rf $B; mkdir -p $B && tar -C $B -xJf .gpu-xz/bundle.tar.xz; cd $B
BIOGPU_REQUIRE_GPU=1 BIOGPU_DEVICE=cuda timeout 300 ./tests/gpu_vs_cpu --test-threads 4 flim speckle perfusion base_kernels > $OUT/tests.log 2>&1; echo "tests rc=$?" >> $OUT/tests.log
BIOGPU_FLIM_DATA=$R/.gpu-data/flim timeout 150 ./biogpu-bench --device cuda --filter flim --out $OUT/bench-flim.json > $OUT/bench-flim.log 2>&1; echo "rc=$?" >> $OUT/bench-flim.log
timeout 200 ./biogpu-bench --device cuda --filter perfusion --out $OUT/bench-perf.json > $OUT/bench-perf.log 2>&1; echo "rc=$?" >> $OUT/bench-perf.log
