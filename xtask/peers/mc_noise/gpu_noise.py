"""Per-tetrahedron fluence noise and speed on one GPU: biogpu (`--device cuda`) against MMC's
OpenCL code (pmmc, `compute: "opencl"`), same mesh, same physics, same machine.

    python gpu_noise.py --biogpu BIN --mesh mesh.npz --out DIR [--photons 1e7] [--seeds 3]
                        [--big 1e8] [--small 1e5]

The mesh is biogpu's cube60 exported node for node and element for element (`biogpu mc mesh
cube60 --vtu`, converted to mesh.npz by mc_noise.py or by hand: `node` float64, `elem` int32
1-based), so per-tet results compare by index. Physics as mc_noise.py (`mc example`,
`specular: false`; MMC `isreflect` 0, `nout` 1.37, one 0-5 ns gate, `basisorder` 0).

Noise: L1 = sum|A - B| / sum|A| over all tets, mean over the pairs of SEEDS runs of PHOTONS.
Speed: marginal photons/ms = (BIG - SMALL) / (t(BIG) - t(SMALL)), which leaves out each call's
fixed cost (biogpu: summary.json `seconds`, packing, upload, transport and read-back; MMC: the
wall time of pmmc.run, whose OpenCL set-up and kernel build are in both calls), and the raw
BIG / t(BIG); the L1 between the two codes' BIG runs (the same physics: about the noise at
BIG photons). Equal-noise ratio = speed ratio x (L1_MMC / L1_biogpu)^2. Each run is its own
process; one warm-up run per code first (kernel caches).
MMC finds the GPU through an OpenCL ICD: where only pocl is registered (the GPU machine
here), point OCL_ICD_VENDORS at a folder holding `nvidia.icd` (one line:
libnvidia-opencl.so.1). Writes DIR/gpu_noise.json and prints it.
"""

import argparse
import itertools
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent


def l1(a, b):
    return float(np.abs(a - b).sum() / np.abs(a).sum())


def biogpu(args, example, photons, seed, tag):
    sim = dict(example)
    sim.update(photons=int(photons), seed=int(seed), specular=False, time_limit_ns=5.0,
               outputs={"vtk": False, "vtk_legacy": False, "csv": True})
    d = Path(args.out) / "runs" / tag
    d.mkdir(parents=True, exist_ok=True)
    (d / "sim.json").write_text(json.dumps(sim, indent=1))
    w0 = time.perf_counter()
    p = subprocess.run([args.biogpu, "--device", "cuda", "mc", "run", str(d / "sim.json"), "--out", str(d),
                        "--force"], capture_output=True, text=True)
    wall = time.perf_counter() - w0
    if p.returncode != 0:
        raise SystemExit(f"biogpu failed: {p.stderr[-2000:]}")
    s = json.loads((d / "summary.json").read_text())
    flu = np.loadtxt(d / "tets.csv", delimiter=",", skiprows=1, usecols=4)
    return dict(code="biogpu", photons=int(photons), seed=int(seed), seconds=s["seconds"], process_wall=wall,
                device=s["device"]), flu


def mmc(args, photons, seed, tag):
    d = Path(args.out) / "runs" / tag
    d.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, MMC_COMPUTE="opencl")
    p = subprocess.run([sys.executable, str(HERE / "mmc_child.py"), args.mesh, str(int(photons)), str(int(seed)),
                        str(d / "fluence.npy")], env=env, capture_output=True, text=True)
    (d / "mmc.log").write_text(p.stdout + p.stderr)
    # MMC's OpenCL code prints "nphoton: " without a newline before the child's line.
    lines = [x.split("MMC_CHILD ", 1)[1] for x in p.stdout.splitlines() if "MMC_CHILD " in x]
    if p.returncode != 0 or not lines:
        raise SystemExit(f"pmmc failed: {p.stdout[-2000:]} {p.stderr[-2000:]}")
    t = json.loads(lines[-1])
    return dict(code="MMC", photons=int(photons), seed=int(seed), seconds=t["wall"], compute=t["compute"],
                method=t["method"], pmmc=t["pmmc"]), np.load(d / "fluence.npy")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--biogpu", required=True)
    ap.add_argument("--mesh", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--photons", type=float, default=1e7)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--big", type=float, default=1e8)
    ap.add_argument("--small", type=float, default=1e5)
    args = ap.parse_args()
    Path(args.out).mkdir(parents=True, exist_ok=True)
    example = json.loads(subprocess.run([args.biogpu, "mc", "example"], check=True, capture_output=True,
                                        text=True).stdout)
    runs = {"biogpu": lambda n, s, tag: biogpu(args, example, n, s, tag),
            "MMC": lambda n, s, tag: mmc(args, n, s, tag)}
    res = {"photons": int(args.photons), "seeds": args.seeds, "big": int(args.big), "small": int(args.small),
           "codes": {}}
    bigs = {}
    for code, run in runs.items():
        run(args.small, 99, f"{code}-warm")
        recs, flus = [], []
        for s in range(1, args.seeds + 1):
            r, f = run(args.photons, s, f"{code}-n{s}")
            recs.append(r)
            flus.append(f)
            print(f"{code} seed {s}: {r['seconds']:.3f} s", file=sys.stderr, flush=True)
        pairs = [l1(a, b) for a, b in itertools.combinations(flus, 2)]
        small, _ = run(args.small, 101, f"{code}-small")
        big, bigs[code] = run(args.big, 102, f"{code}-big")
        marginal = (args.big - args.small) / (big["seconds"] - small["seconds"]) / 1e3
        res["codes"][code] = dict(l1_seed_to_seed=float(np.mean(pairs)), l1_pairs=pairs,
                                  photons_per_ms=marginal, photons_per_ms_raw=args.big / big["seconds"] / 1e3,
                                  runs=recs + [small, big])
        print(f"{code}: L1 {np.mean(pairs):.4f}, {marginal:,.0f} photons/ms marginal", file=sys.stderr, flush=True)
    b, m = res["codes"]["biogpu"], res["codes"]["MMC"]
    speed = b["photons_per_ms"] / m["photons_per_ms"]
    res["speed_ratio"] = speed
    res["equal_noise_ratio"] = speed * (m["l1_seed_to_seed"] / b["l1_seed_to_seed"]) ** 2
    # The same physics: the two codes' BIG runs differ by about their own noise at BIG photons.
    res["l1_between_codes_big"] = l1(bigs["MMC"], bigs["biogpu"])
    out = json.dumps(res, indent=1)
    (Path(args.out) / "gpu_noise.json").write_text(out)
    print(out)


if __name__ == "__main__":
    main()
