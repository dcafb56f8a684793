#!/usr/bin/env bash
# Wall clock of whole `biogpu` commands (issue 28's table): each command REPEAT times on each
# device, the first run on an empty kernel cache, then warm; -vv span log of the last warm run.
# usage: run.sh BIOGPU DATA_DIR OUT_DIR [devices...]   (devices default: cpu cuda auto)
# DATA_DIR holds seminal_receptacle_FLIM_single_image.sdt and spatial.tif (shared/data).
set -u
BIN=$(readlink -f "$1"); DATA=$(readlink -f "$2"); OUT=$3; shift 3
DEVICES=${*:-cpu cuda auto}
REPEAT=${REPEAT:-3}
mkdir -p "$OUT"; OUT=$(readlink -f "$OUT"); WORK=$(mktemp -d); cd "$WORK"
export BIOGPU_KERNEL_CACHE=$WORK/cache CUDA_CACHE_PATH=$WORK/nvcache
"$BIN" --device cpu perfusion simulate --liver --out liver >/dev/null 2>&1
"$BIN" mc example > cube60.json 2>/dev/null
now() { date +%s.%N; }
declare -A CMD=(
  [flim-mle]="flim fit $DATA/seminal_receptacle_FLIM_single_image.sdt --method mle --out o-flim --force"
  [perf-lm]="perfusion fit --dce liver/dce.nii.gz --mask liver/mask.nii.gz --aif liver/inputs.csv:aif --pv liver/inputs.csv:pv --method lm --out o-perf --force"
  [perf-nm]="perfusion fit --dce liver/dce.nii.gz --mask liver/mask.nii.gz --aif liver/inputs.csv:aif --pv liver/inputs.csv:pv --method nm --out o-perf --force"
  [speckle-7]="speckle contrast $DATA/spatial.tif --window 7 --out o-spk --force"
  [mc-1e6]="mc run cube60.json --photons 1000000 --out o-mc --force"
  [devices]="devices"
)
printf '%-10s %-6s %s\n' command device "wall seconds (run 1 = empty cache, then warm)" | tee "$OUT/wall.txt"
for dev in $DEVICES; do
  rm -rf "$BIOGPU_KERNEL_CACHE" "$CUDA_CACHE_PATH"
  for name in devices speckle-7 flim-mle perf-lm perf-nm mc-1e6; do
    times=""
    for i in $(seq "$REPEAT"); do
      t0=$(now); "$BIN" --device "$dev" ${CMD[$name]} >"$OUT/$name.$dev.stdout" 2>"$OUT/$name.$dev.stderr"; rc=$?; t1=$(now)
      times="$times $(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.3f", b-a}')"; [ $rc -ne 0 ] && times="$times(rc=$rc)"
    done
    "$BIN" -vv --device "$dev" ${CMD[$name]} >/dev/null 2>"$OUT/$name.$dev.spans.log"
    printf '%-10s %-6s%s\n' "$name" "$dev" "$times" | tee -a "$OUT/wall.txt"
  done
done
rm -rf "$WORK"
