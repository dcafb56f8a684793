#!/usr/bin/env bash
# Step 2b: flim and montecarlo benchmarks on the GPU.
set -u
R=$PWD; B=/tmp/b; [ -x $B/biogpu-bench ] || { mkdir -p $B && tar -C $B -xJf .gpu-xz/bundle.tar.xz; }
cd $B
BIOGPU_MC_DATA=$R/.gpu-data/montecarlo timeout 200 ./biogpu-bench --device cuda --filter montecarlo --out $OUT/bench-mc.json > $OUT/bench.log 2>&1; echo "mc bench rc=$?" >> $OUT/bench.log
BIOGPU_FLIM_DATA=$R/.gpu-data/flim timeout 200 ./biogpu-bench --device cuda --filter flim --out $OUT/bench-flim.json >> $OUT/bench.log 2>&1; echo "flim bench rc=$?" >> $OUT/bench.log
