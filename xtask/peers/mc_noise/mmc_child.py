"""One MMC (pmmc) run on the cube60 mesh, in its own process so that OMP_NUM_THREADS applies.

    python mmc_child.py MESH.npz PHOTONS SEED OUT.npy [TEND_NS]

MMC_COMPUTE=opencl in the environment runs MMC's OpenCL code on the first GPU (`gpuid` 1)
instead of its native CPU code (gpu_noise.py).

Runs pmmc three times in this process: 1,000 photons twice (a warm-up, then the fixed cost of
a call: face neighbours, source element search, ray-tracer set-up, normalisation, copy-out) and
then PHOTONS photons.
Saves the per-element fluence of the last call (1/mm^2 per launched photon, one time gate
0-5 ns) to OUT.npy and prints one JSON line with wall and CPU (process, all threads) seconds of
the last two calls. Python start-up, imports and mesh loading are outside the timings.

Physics as biogpu's `mc example` (MCX's cube60) with `specular: false`: mua 0.005/mm, mus 1/mm,
g 0.01, n 1.37 inside and outside (no Fresnel: isreflect 0, nout 1.37), pencil at
(30.1, 30.2, 0) along +z, time window 0-5 ns (or 0-TEND_NS) as one gate. MMC's defaults otherwise (its
track-length "mcmethod" mmMCX, minenergy 1e-6 roulette). compute 'sse' is MMC's native
OpenMP CPU code (pmmc still needs an OpenCL platform to be listed, e.g. pocl); method 'elem'
(branch-less Badouel), the fastest of elem/havel/plucker/badouel here.
"""

import json
import os
import sys
import time

import numpy as np
import pmmc

MMC_METHOD = "elem"
COMPUTE = os.environ.get("MMC_COMPUTE", "sse")


def cfg_for(mesh, photons, seed, tend_ns=5.0):
    return dict(
        nphoton=int(photons),
        node=mesh["node"],
        elem=mesh["elem"],
        elemprop=np.ones(len(mesh["elem"]), dtype=np.int32),
        prop=np.array([[0.0, 0.0, 1.0, 1.37], [0.005, 1.0, 0.01, 1.37]]),
        srcpos=[30.1, 30.2, 0.0],
        srcdir=[0.0, 0.0, 1.0],
        tstart=0.0,
        tend=tend_ns * 1e-9,
        tstep=tend_ns * 1e-9,
        isreflect=0,
        isspecular=0,
        nout=1.37,
        basisorder=0,
        outputtype="fluence",
        compute=COMPUTE,
        method=MMC_METHOD,
        seed=int(seed),
        **({"gpuid": 1} if COMPUTE == "opencl" else {}),
    )


def timed(cfg):
    w, c = time.perf_counter(), time.process_time()
    r = pmmc.run(cfg)
    return r, time.perf_counter() - w, time.process_time() - c


def main():
    mesh_path, photons, seed, out = sys.argv[1], int(float(sys.argv[2])), int(sys.argv[3]), sys.argv[4]
    tend = float(sys.argv[5]) if len(sys.argv) > 5 else 5.0
    z = np.load(mesh_path)
    mesh = {"node": z["node"], "elem": z["elem"]}
    timed(cfg_for(mesh, 1000, seed + 7919, tend))  # warm-up: first-call costs (OpenCL listing, page faults)
    _, w0, c0 = timed(cfg_for(mesh, 1000, seed + 7907, tend))
    r, w, c = timed(cfg_for(mesh, photons, seed, tend))
    flu = np.asarray(r["flux"], dtype=np.float64).reshape(len(mesh["elem"]), -1)[:, 0]
    np.save(out, flu)
    print("MMC_CHILD " + json.dumps({"wall": w, "cpu": c, "wall_1000": w0, "cpu_1000": c0,
                                     "method": MMC_METHOD, "compute": COMPUTE,
                                     "pmmc": pmmc.__version__}), flush=True)


if __name__ == "__main__":
    main()
