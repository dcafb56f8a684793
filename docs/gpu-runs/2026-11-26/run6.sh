#!/usr/bin/env bash
# 2026-11-26, run 6: FLIM pipeline with two slots per worker for page-locked cubes and map
# planes made one per core; perfusion results allocated during the first round. FLIM and
# perfusion tests and the demo on CUDA, the FLIM bench twice (one traced), the perfusion bench.
set -u
R=$PWD; B=/tmp/r6; rm -rf $B; mkdir -p $B && tar -C $B -xJf .gpu-xz/bundle.tar.xz; cd $B
export BIOGPU_KERNEL_CACHE=/tmp/kc BIOGPU_FLIM_DATA=$R/.gpu-data/flim
{ BIOGPU_REQUIRE_GPU=1 BIOGPU_DEVICE=cuda timeout 200 ./tests/gpu_vs_cpu --test-threads 4 flim perfusion; echo "tests rc=$?"
  timeout 60 ./biogpu --device cuda demo --out /tmp/demo; echo "demo rc=$?"; } > $OUT/tests.log 2>&1
timeout 150 ./biogpu-bench --device cuda --filter flim --out $OUT/bench-flim.json > $OUT/bench-flim.log 2>&1
BIOGPU_TRACE=flim_core=debug,gpu_runtime=debug timeout 150 ./biogpu-bench --device cuda --filter flim --out /tmp/b2.json > $OUT/bench-flim2.log 2> /tmp/trace.log
xz -T8 -c /tmp/trace.log > $OUT/trace-flim.log.xz
timeout 200 ./biogpu-bench --device cuda --filter perfusion --out $OUT/bench-perf.json > $OUT/bench-perf.log 2>&1
grep -E "test result|FAILED|panicked|rc=" $OUT/tests.log | head
grep -E "end to end" $OUT/bench-perf.log | grep -v "^ *perfusion |" | cut -c1-100
for f in bench-flim bench-flim2; do echo "== $f"; grep -E "page-locked|kernel only|pageable|global" $OUT/$f.log | grep -v "^ *flim |" | cut -c1-100; done
