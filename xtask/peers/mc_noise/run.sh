#!/usr/bin/env bash
# Per-tetrahedron fluence noise and CPU speed of biogpu's Monte Carlo against MMC (pmmc from
# PyPI) on MCX's cube60 problem as biogpu's 135,000-tet mesh (docs/montecarlo.md, "Noise per
# photon against MMC (pmmc)"). One command, from scratch:
#
#   xtask/peers/mc_noise/run.sh [OUTDIR]        (default /tmp/mc_noise)
#
# Environment: BIOGPU (default target/release/biogpu of this repository; never built here),
# VENV (default /tmp/mcvenv: made with pmmc 0.3.12, numpy, meshio from PyPI if missing),
# N (photons per equal-photon run, default 1e6), SEEDS (runs per code, default 4),
# NREF (photons of each reference run, default 1e7), THREADS (default 2),
# N1 (photons of the one-thread runs, 0 to skip; default 1e6), PHYS_RUNS (runs per code and time
# limit of the physics check, 0 to skip; default 8 of PHYS_N = 1.25e6 photons at 5 and 50 ns).
# pmmc lists OpenCL platforms even for its native CPU path ('sse'), so an OpenCL ICD must be
# installed: pocl's CPU driver from Debian (apt-get install pocl-opencl-icd) is installed here
# when none is. About 10 minutes on 2 quiet cores with the defaults (noise and speed ~6, physics ~4).
# results-2026-11-28/ holds the tables and log of the run quoted in docs/montecarlo.md.
# Writes OUTDIR/results.{json,md} (noise, speed, first physics check; printed),
# OUTDIR/physics.{json,md} (physics with error bars; printed), OUTDIR/run.log, OUTDIR/runs/*.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../../.." && pwd)"
out="${1:-/tmp/mc_noise}"
biogpu="${BIOGPU:-$root/target/release/biogpu}"
venv="${VENV:-/tmp/mcvenv}"

[ -x "$biogpu" ] || { echo "no biogpu binary at $biogpu (build it with cargo build --release first)" >&2; exit 1; }
if ! ls /etc/OpenCL/vendors/*.icd >/dev/null 2>&1; then
    echo "no OpenCL ICD: installing pocl-opencl-icd (pmmc needs one to start, even on its CPU path)" >&2
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq pocl-opencl-icd
fi
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c "import pmmc, numpy, meshio" 2>/dev/null; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q "pmmc==0.3.12" numpy meshio
fi
mkdir -p "$out"
"$biogpu" --device cpu mc mesh cube60 --vtu "$out/cube60.vtu" --force > "$out/mesh.json"
{
    echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo "nproc: $(nproc)"
    lscpu | head -20 | grep -v "^Flags"
    echo "biogpu: $biogpu ($("$biogpu" --version 2>/dev/null || echo '?'))"
    echo "pmmc: $("$venv/bin/pip" show pmmc 2>/dev/null | grep '^Version' || true)"
} > "$out/machine.txt"
cat "$out/machine.txt" >&2
"$venv/bin/python" "$here/mc_noise.py" --biogpu "$biogpu" --vtu "$out/cube60.vtu" --out "$out" \
    --photons "${N:-1e6}" --seeds "${SEEDS:-4}" --ref-photons "${NREF:-1e7}" --threads "${THREADS:-2}" \
    --one-thread-photons "${N1:-1e6}"
if [ "${PHYS_RUNS:-8}" -gt 0 ]; then
    "$venv/bin/python" "$here/physics_check.py" --biogpu "$biogpu" --out "$out" --photons "${PHYS_N:-1.25e6}" \
        --runs "${PHYS_RUNS:-8}" --threads "${THREADS:-2}" --tend 5 50
fi
