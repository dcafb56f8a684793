#!/usr/bin/env bash
# 2026-11-26, run 4 (same bundle as run 3): where the FLIM end-to-end time goes on a
# page-locked cube. Flim bench with 3 and with 8 (default) workers on the same host, then
# with span timings (BIOGPU_TRACE) on stderr.
set -u
R=$PWD; B=/tmp/r3; [ -d $B ] || { mkdir -p $B && tar -C $B -xJf .gpu-xz/bundle.tar.xz; }; cd $B
export BIOGPU_KERNEL_CACHE=/tmp/kc BIOGPU_FLIM_DATA=$R/.gpu-data/flim
{ which nsys ncu; ls /opt/nvidia /usr/local/cuda/bin | head -50; } > $OUT/tools.log 2>&1
BIOGPU_FLIM_WORKERS=3 timeout 150 ./biogpu-bench --device cuda --filter flim --out $OUT/w3.json > $OUT/w3.log 2>&1
timeout 150 ./biogpu-bench --device cuda --filter flim --out $OUT/w8.json > $OUT/w8.log 2>&1
BIOGPU_TRACE=flim_core=debug,gpu_runtime=debug timeout 150 ./biogpu-bench --device cuda --filter flim --out $OUT/tr.json > $OUT/tr.log 2> $OUT/trace.log
xz -T4 $OUT/trace.log
for f in w3 w8; do echo "== $f"; grep -E "page-locked|kernel only|pageable" $OUT/$f.log | grep -v "^ *flim |" | cut -c1-100; done
