#!/usr/bin/env bash
# Step 4: FLIM pipeline configuration sweep (workers x chunk MiB) on the real file.
set -u
R=$PWD; B=/tmp/b5; mkdir -p $B && tar -C $B -xJf .gpu-xz/bundle.tar.xz; cd $B
for w in 1 3 6; do for c in 8 32; do
  echo "== workers $w chunk $c MiB"
  BIOGPU_FLIM_WORKERS=$w BIOGPU_FLIM_CHUNK_MIB=$c BIOGPU_FLIM_DATA=$R/.gpu-data/flim timeout 60 ./biogpu-bench --device cuda --filter flim --out /tmp/x.json 2>&1 | grep -E "^  flim \| (IEM\+CMM|MLE mono|LSQ mono|phasor)" | cut -c1-160
done; done
