#!/usr/bin/env bash
# Session 2, run 2: tests after the pipeline/fit-chunk/kernel-cache changes, FLIM and
# perfusion benches (perfusion cube sweep to 1024), a traced FLIM bench, kernel cache timing.
set -u
R=$PWD; B=/tmp/d2; rm -rf $B; mkdir -p $B && tar -C $B -xJf .gpu-xz/bundle.tar.xz; cd $B
export BIOGPU_KERNEL_CACHE=/tmp/kc
SDT=$R/.gpu-data/flim/seminal_receptacle_FLIM_single_image.sdt
BIOGPU_REQUIRE_GPU=1 BIOGPU_DEVICE=cuda timeout 200 ./tests/gpu_vs_cpu --test-threads 1 base_kernels flim speckle:: > $OUT/tests.log 2>&1; echo "tests rc=$?" >> $OUT/tests.log
BIOGPU_FLIM_DATA=$R/.gpu-data/flim timeout 150 ./biogpu-bench --device cuda --filter flim --out $OUT/bench-flim.json > $OUT/bench-flim.log 2>&1; echo "rc=$?" >> $OUT/bench-flim.log
timeout 200 ./biogpu-bench --device cuda --filter perfusion --out $OUT/bench-perf.json > $OUT/bench-perf.log 2>&1; echo "rc=$?" >> $OUT/bench-perf.log
BIOGPU_TRACE="flim_core=debug,gpu_runtime=debug" BIOGPU_FLIM_DATA=$R/.gpu-data/flim timeout 100 ./biogpu-bench --device cuda --filter flim --quick --out /tmp/t.json > /dev/null 2> $OUT/trace-flim.log
{
./biogpu --device cpu perfusion simulate --voxels 65536 --cnr 20 --out /tmp/psim > /dev/null 2>&1
P="perfusion fit --model dual-input --curves /tmp/psim/curves.csv --aif /tmp/psim/inputs.csv:aif --pv /tmp/psim/inputs.csv:pv"
rm -rf /tmp/kc
for i in 1 2; do
  echo "== run $i (cache $(ls /tmp/kc 2>/dev/null | wc -l) folders)"
  /usr/bin/time -f "perfusion nm: %e s wall" ./biogpu --device cuda $P --method nm --out /tmp/pa$i > /dev/null
  /usr/bin/time -f "flim mle: %e s wall" ./biogpu --device cuda flim fit $SDT --method mle --bin 1 --offset auto --out /tmp/fa$i > /dev/null
  /usr/bin/time -f "flim iem: %e s wall" ./biogpu --device cuda flim fit $SDT --method iem --out /tmp/fb$i > /dev/null
done
find /tmp/kc | head; du -sh /tmp/kc
BIOGPU_KERNEL_CACHE=off /usr/bin/time -f "flim mle, cache off: %e s wall" ./biogpu --device cuda flim fit $SDT --method mle --bin 1 --offset auto --out /tmp/fc > /dev/null
} > $OUT/cache.log 2>&1
