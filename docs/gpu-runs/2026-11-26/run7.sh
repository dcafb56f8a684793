#!/usr/bin/env bash
# 2026-11-26, run 7 (bundle of run 6): span timings of the perfusion bench on the H100, to see
# where the end-to-end time goes beyond the kernels. (Right after run 6 on the same lease:
# `biogpu-bench --device cuda --filter runtime`, the link for the FLIM transfer bound.)
set -u
B=/tmp/r6; [ -d $B ] || { mkdir -p $B && tar -C $B -xJf .gpu-xz/bundle.tar.xz; }; cd $B
export BIOGPU_KERNEL_CACHE=/tmp/kc
BIOGPU_TRACE=perfusion_core=debug,gpu_runtime=debug timeout 250 ./biogpu-bench --device cuda \
  --filter perfusion --out /tmp/trp.json > $OUT/trp.log 2> /tmp/tp.log
grep -v upload_unsynced /tmp/tp.log | xz -T8 > $OUT/trace-perf.log.xz
