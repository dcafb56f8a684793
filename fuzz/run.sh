#!/usr/bin/env bash
# Fuzz every reader: each target from its seeds (seeds/<target>) into corpus/<target>, to
# RUNS executions or SECONDS, whichever comes first; findings land in artifacts/<target>/.
# Usage: [TARGETS="a b"] fuzz/run.sh [RUNS] [SECONDS] [BIN_DIR] (BIN_DIR: prebuilt targets, e.g. on a
# machine without Rust; default: build them with `cargo +nightly fuzz build -O -s none`).
# Runs targets in parallel, one per core. Logs: logs/<target>.log; summary on stdout.
set -euo pipefail
cd "$(dirname "$0")"
RUNS=${1:-1000000}
SECONDS_MAX=${2:-600}
BIN=${3:-}
if [ -z "$BIN" ]; then
  cargo +nightly fuzz build -O -s none
  BIN=target/x86_64-unknown-linux-gnu/release
fi
TARGETS=${TARGETS:-$(ls fuzz_targets | sed 's/\.rs$//' | grep -vx all)}
mkdir -p logs
for t in $TARGETS; do
  mkdir -p "corpus/$t" "artifacts/$t"
  echo "$t"
done | xargs -P "$(nproc)" -I{} sh -c \
  "b='$BIN/{}'; [ -x \$b ] || { b='$BIN/all'; export BIOGPU_FUZZ_TARGET={}; }; \$b -runs=$RUNS -max_total_time=$SECONDS_MAX -timeout=10 -rss_limit_mb=4096 \
     -print_final_stats=1 -artifact_prefix=artifacts/{}/ corpus/{} seeds/{} > logs/{}.log 2>&1 || true"
printf '%-14s %12s %8s %8s %10s %s\n' target executions cov ft seconds findings
for t in $TARGETS; do
  log=logs/$t.log
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo '?')
  last=$(grep -E '^#[0-9]+' "$log" | tail -1)
  cov=$(echo "$last" | grep -o 'cov: [0-9]*' | grep -o '[0-9]*' || echo '?')
  ft=$(echo "$last" | grep -o 'ft: [0-9]*' | grep -o '[0-9]*' || echo '?')
  secs=$(grep -o 'Done [0-9]* runs in [0-9]* second' "$log" | grep -o 'in [0-9]*' | grep -o '[0-9]*' || echo '?')
  found=$(ls "artifacts/$t" | wc -l)
  printf '%-14s %12s %8s %8s %10s %s\n' "$t" "$execs" "$cov" "$ft" "$secs" "$found"
done
