#!/usr/bin/env bash
# 2026-11-26, run 8 (bundle of run 6): `biogpu flim fit --method global` from the command line
# on the real .sdt, on the GPU and on the CPU, GA-32 and the whole image.
set -u
B=/tmp/r8; rm -rf $B; mkdir -p $B && tar -C $B -xJf .gpu-xz/bundle.tar.xz
F=$PWD/.gpu-data/flim/seminal_receptacle_FLIM_single_image.sdt; cd $B
export BIOGPU_KERNEL_CACHE=/tmp/kc
for d in cuda cpu; do for seg in 32 whole; do
  /usr/bin/time -f "$d $seg wall %e s" ./biogpu --device $d flim fit $F --method global \
    --model mono --segments $seg --bin 1 --offset auto --out /tmp/ga-$d-$seg > /tmp/log-$d-$seg.txt 2>&1
  echo "$d $seg rc=$?"; tail -1 /tmp/log-$d-$seg.txt; grep tau_global /tmp/ga-$d-$seg/summary.csv
done; done 2>&1 | tee $OUT/ga-cli.log
