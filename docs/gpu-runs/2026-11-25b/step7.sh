#!/usr/bin/env bash
# Session 2, run 7: after moving the parallel staging copy into gpu-runtime (HostStaging::write_words,
# par_copy) for flim and speckle, and one lock for the FLIM pipeline and its slot cache.
set -u
R=$PWD; B=/tmp/d7; rm -rf $B; mkdir -p $B && tar -C $B -xJf .gpu-xz/bundle.tar.xz; cd $B
BIOGPU_REQUIRE_GPU=1 BIOGPU_DEVICE=cuda timeout 200 ./tests/gpu_vs_cpu --test-threads 4 flim speckle base_kernels > $OUT/tests.log 2>&1; echo "tests rc=$?" >> $OUT/tests.log
BIOGPU_FLIM_DATA=$R/.gpu-data/flim timeout 150 ./biogpu-bench --device cuda --filter flim --out /tmp/f.json 2>&1 | grep -E "^flim" > $OUT/bench-flim.log
