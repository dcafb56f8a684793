#!/usr/bin/env bash
# Session 2, run 4: where a FLIM call's time goes (spans), and the worker count again.
set -u
R=$PWD; B=/tmp/d4; rm -rf $B; mkdir -p $B && tar -C $B -xJf .gpu-xz/bundle.tar.xz; cd $B
BIOGPU_TRACE="flim_core=debug,gpu_runtime=debug" BIOGPU_FLIM_DATA=$R/.gpu-data/flim timeout 100 ./biogpu-bench --device cuda --filter flim --quick --out /tmp/t.json > /dev/null 2> /tmp/trace.log
sed 's/\x1b\[[0-9;]*m//g' /tmp/trace.log | grep -E "seminal|pixels=262144|flim_fit|flim_analyse" | tail -150 > $OUT/trace-flim.log
for w in 3 6 8; do
  echo "== workers $w"
  BIOGPU_FLIM_WORKERS=$w BIOGPU_FLIM_DATA=$R/.gpu-data/flim timeout 60 ./biogpu-bench --device cuda --filter flim --out $OUT/bench-flim-w$w.json 2>&1 | grep -E "^  flim \| " | cut -c1-130
done > $OUT/sweep.log 2>&1
