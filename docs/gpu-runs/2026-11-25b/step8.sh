#!/usr/bin/env bash
# Session 2, run 8: A/B on one lease: the FLIM bench of commit 7c7da96 (step5's build) against
# the clean-up build, twice each, interleaved.
set -u
R=$PWD; B=/tmp/d8; rm -rf $B; mkdir -p $B && tar -C $B -xJf .gpu-xz/bundle.tar.xz
xz -dc .gpu-xz/ab/biogpu-bench-7c7da96.xz > $B/bench-old && chmod +x $B/bench-old; cd $B
for i in 1 2; do
  for b in bench-old biogpu-bench; do
    echo "== $b round $i"
    BIOGPU_FLIM_DATA=$R/.gpu-data/flim timeout 100 ./$b --device cuda --filter flim --out /tmp/f.json 2>&1 | grep -E "^flim" | cut -c1-100
  done
done > $OUT/ab.log 2>&1
