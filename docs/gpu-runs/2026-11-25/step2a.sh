#!/usr/bin/env bash
# Step 2a: GPU-vs-CPU tests (flim, montecarlo, perfusion), demo, CLI runs on real data.
set -u
R=$PWD; B=/tmp/b; rm -rf $B; mkdir -p $B && tar -C $B -xJf .gpu-xz/bundle.tar.xz
cd $B
export BIOGPU_REQUIRE_GPU=1
BIOGPU_DEVICE=cuda timeout 240 ./tests/gpu_vs_cpu --test-threads 1 flim montecarlo perfusion > $OUT/tests.log 2>&1; echo "tests rc=$?" >> $OUT/tests.log
(time timeout 60 ./biogpu --device cuda demo --out /tmp/demo) > $OUT/demo.log 2>&1; echo "demo rc=$?" >> $OUT/demo.log
SDT=$R/.gpu-data/flim/seminal_receptacle_FLIM_single_image.sdt
{
for dev in cuda cpu; do
  for m in "--method mle" "--method lsq" "--method mle --model bi --irf auto --irf-shift auto" "--method bcmm"; do
    echo "== $dev flim fit $m"
    /usr/bin/time -f "%e s wall" timeout 60 ./biogpu --device $dev flim fit $SDT $m --bin 1 --offset auto --out /tmp/f-$dev 2>&1 | tail -6
  done
done
./biogpu mc example > /tmp/sim.json
for dev in cuda cpu; do
  echo "== $dev mc run"
  /usr/bin/time -f "%e s wall" timeout 60 ./biogpu --device $dev mc run /tmp/sim.json --photons 1000000 --plane 30,30,30,0,0,1 --gates 0.1,50 --out /tmp/mc-$dev 2>&1 | tail -4
  cp /tmp/mc-$dev/summary.json $OUT/mc-summary-$dev.json
done
} > $OUT/cli.log 2>&1
