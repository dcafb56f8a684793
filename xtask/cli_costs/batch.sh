#!/usr/bin/env bash
# Batch throughput (issue 28): N copies of one recording through one `flim fit` on each
# device, the kernel cache warm (one run first). Prints files/s per device.
# usage: batch.sh BIOGPU RECORDING N OUT_DIR [devices...]   (devices default: cuda cpu auto)
set -u
BIN=$(readlink -f "$1"); REC=$(readlink -f "$2"); N=$3; OUT=$4; shift 4
DEVICES=${*:-cuda cpu auto}
mkdir -p "$OUT"; OUT=$(readlink -f "$OUT"); WORK=$(mktemp -d); cd "$WORK"
mkdir in
for i in $(seq -w "$N"); do cp "$REC" "in/r$i.${REC##*.}"; done
"$BIN" --device cuda flim fit "in/r$(printf "%0${#N}d" 1).${REC##*.}" --method mle --out warm --force >/dev/null 2>&1
for dev in $DEVICES; do
  t0=$(date +%s.%N)
  "$BIN" --device "$dev" -v flim fit in --method mle --out "o-$dev" --force >"$OUT/batch.$dev.stdout" 2>"$OUT/batch.$dev.stderr"; rc=$?
  t1=$(date +%s.%N)
  awk -v a="$t0" -v b="$t1" -v n="$N" -v d="$dev" -v rc="$rc" \
    'BEGIN{printf "batch %-5s %d files in %.2f s: %.1f files/s (rc %d)\n", d, n, b-a, n/(b-a), rc}' | tee -a "$OUT/batch.txt"
  grep -c "auto chose the CPU" "$OUT/batch.$dev.stderr" | xargs echo "  auto chose the CPU for files:" | tee -a "$OUT/batch.txt"
done
rm -rf "$WORK"
