#!/usr/bin/env bash
# Issue 22, "noisy curves": biogpu's default perfusion fit against a C fminsearch reference
# and dcmri on the same simulated curves (SNR 20 and 50). One command, from scratch:
#
#   xtask/peers/perfusion_noisy/run.sh [OUTDIR]        (default /tmp/perfusion_noisy)
#
# Environment: BIOGPU (default: target/release/biogpu of this repository; never built here),
# N (curves per setting and SNR, default 500), SEED (default 20261128),
# VENV (default /tmp/perfusion_noisy_venv: created with dcmri 0.6.20 from PyPI if missing).
# Prints the table (markdown) and writes OUTDIR/summary.json, OUTDIR/run.log.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../../.." && pwd)"
out="${1:-/tmp/perfusion_noisy}"
biogpu="${BIOGPU:-$root/target/release/biogpu}"
venv="${VENV:-/tmp/perfusion_noisy_venv}"
n="${N:-500}"
seed="${SEED:-20261128}"

[ -x "$biogpu" ] || { echo "no biogpu binary at $biogpu (build it with cargo build --release first)" >&2; exit 1; }
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c "import dcmri" 2>/dev/null; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q "dcmri==0.6.20"
fi
mkdir -p "$out"
cc -O2 -o "$out/fminsearch" "$here/fminsearch.c" -lm
"$biogpu" --version >&2 || true
"$venv/bin/python" "$here/run.py" --out "$out" --biogpu "$biogpu" --fminsearch "$out/fminsearch" \
    --dcmri-python "$venv/bin/python" --n "$n" --seed "$seed" | tee "$out/table.md"
