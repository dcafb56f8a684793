#!/usr/bin/env bash
# Step 3: re-run the tests fixed after step 2, a wider flim fit proptest, FLIM fits on the real file.
set -u
R=$PWD; B=/tmp/b3; rm -rf $B; mkdir -p $B && tar -C $B -xJf .gpu-xz/bundle.tar.xz
cd $B
export BIOGPU_REQUIRE_GPU=1 BIOGPU_DEVICE=cuda
timeout 200 ./tests/gpu_vs_cpu --test-threads 1 flim montecarlo perfusion > $OUT/tests.log 2>&1; echo "tests rc=$?" >> $OUT/tests.log
PROPTEST_CASES=48 timeout 120 ./tests/gpu_vs_cpu flim_fits_match > $OUT/tests-wide.log 2>&1; echo "wide rc=$?" >> $OUT/tests-wide.log
SDT=$R/.gpu-data/flim/seminal_receptacle_FLIM_single_image.sdt
{
i=0
for dev in cuda cpu; do
  for m in "--method mle" "--method lsq" "--method mle --model bi --irf auto --irf-shift auto" "--method bcmm"; do
    i=$((i+1)); echo "== $dev flim fit $m"
    /usr/bin/time -f "%e s wall" timeout 60 ./biogpu --device $dev flim fit $SDT $m --bin 1 --offset auto --out /tmp/f$i 2>&1 | tail -3
  done
done
} > $OUT/cli.log 2>&1
