#!/usr/bin/env bash
# 2026-11-27, run 27 (bundle of run 26): span timings of the first perfusion bench cases
# (Nelder-Mead f64 end to end, 626,400 voxels), to see where the end-to-end time goes
# beyond the kernel after 2026-11-27's kernel changes. The bench is stopped after 45 s.
set -u
B=/tmp/r27; rm -rf $B; mkdir -p $B && tar -C $B -xJf .gpu-xz/bundle.tar.xz; cd $B
export BIOGPU_KERNEL_CACHE=/tmp/kc27
BIOGPU_TRACE=perfusion_core=debug,gpu_runtime=debug timeout 45 ./biogpu-bench --device cuda --filter perfusion --out /tmp/tr.json > $OUT/tr-perf.log 2> $OUT/trace-perf.log
xz -T4 $OUT/trace-perf.log; ls -la $OUT
