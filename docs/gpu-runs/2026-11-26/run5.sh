#!/usr/bin/env bash
# 2026-11-26, run 5: FLIM maps made on all cores while the link is busy, FRET maps chunk by
# chunk, default workers for page-locked cubes. FLIM tests and demo on CUDA, the FLIM bench
# twice (run-to-run spread), and span timings of the perfusion bench (where its end-to-end
# time goes beyond the kernel).
set -u
R=$PWD; B=/tmp/r5; rm -rf $B; mkdir -p $B && tar -C $B -xJf .gpu-xz/bundle.tar.xz; cd $B
export BIOGPU_KERNEL_CACHE=/tmp/kc BIOGPU_FLIM_DATA=$R/.gpu-data/flim
BIOGPU_REQUIRE_GPU=1 BIOGPU_DEVICE=cuda timeout 200 ./tests/gpu_vs_cpu --test-threads 4 flim > $OUT/tests.log 2>&1; echo "tests rc=$?" >> $OUT/tests.log
timeout 60 ./biogpu --device cuda demo --out /tmp/demo > $OUT/demo.log 2>&1; echo "demo rc=$?" >> $OUT/demo.log
timeout 150 ./biogpu-bench --device cuda --filter flim --out $OUT/bench-flim.json > $OUT/bench-flim.log 2>&1; echo "bench rc=$?" >> $OUT/bench-flim.log
timeout 150 ./biogpu-bench --device cuda --filter flim --out $OUT/bench-flim2.json > $OUT/bench-flim2.log 2>&1; echo "bench rc=$?" >> $OUT/bench-flim2.log
BIOGPU_TRACE=perfusion_core=debug,gpu_runtime=debug timeout 200 ./biogpu-bench --device cuda --filter perfusion --out $OUT/tr-perf.json > $OUT/tr-perf.log 2> $OUT/trace-perf.log
xz -T4 $OUT/trace-perf.log
grep -E "test result|FAILED|panicked|rc=" $OUT/tests.log $OUT/demo.log | head
for f in bench-flim bench-flim2; do echo "== $f"; grep -E "page-locked|kernel only|pageable|global" $OUT/$f.log | grep -v "^ *flim |" | cut -c1-100; done
