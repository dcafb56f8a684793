#!/usr/bin/env bash
# Step 1 on the GPU machine: devices, GPU-vs-CPU tests (base, speckle, perfusion), demo, benches.
set -u
B=/tmp/b; mkdir -p $B && tar -C $B -xJf .gpu-xz/bundle.tar.xz
cd $B
export BIOGPU_REQUIRE_GPU=1
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $OUT/devices.txt 2>&1
./biogpu devices >> $OUT/devices.txt 2>&1
BIOGPU_DEVICE=cuda timeout 240 ./tests/gpu_vs_cpu --test-threads 1 base speckle perfusion > $OUT/tests.log 2>&1; echo "tests rc=$?" >> $OUT/tests.log
(time timeout 90 ./biogpu --device cuda demo --out $OUT/demo-out) > $OUT/demo.log 2>&1; echo "demo rc=$?" >> $OUT/demo.log
rm -rf $OUT/demo-out
timeout 150 ./biogpu-bench --device cuda --filter runtime,speckle --out $OUT/bench-speckle.json > $OUT/bench.log 2>&1; echo "speckle bench rc=$?" >> $OUT/bench.log
timeout 120 ./biogpu-bench --device cuda --filter perfusion --out $OUT/bench-perfusion.json >> $OUT/bench.log 2>&1; echo "perfusion bench rc=$?" >> $OUT/bench.log
