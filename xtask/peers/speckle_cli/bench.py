"""Paired, interleaved end-to-end timing of `biogpu speckle contrast` (--device cpu) against
the OpenCV and numpy peers in this folder: same input file, outputs to a fresh folder under
/tmp (removed before every run, so neither side pays for replacing files), each command run
REPS times alternately after one warm-up each; prints the medians and ratios as JSON.

Usage: bench.py BIOGPU SPATIAL.tif TEMPORAL.tif [REPS [OLD_BIOGPU]]
(TEMPORAL "-": spatial cases only; OLD_BIOGPU: also time an older build against BIOGPU,
default outputs, as "peer")
"""
import json
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
PY = sys.executable


def run(cmd, out):
    shutil.rmtree(out, ignore_errors=True)
    Path(out).mkdir(parents=True)
    t = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t


def pair(name, ours, peer, reps):
    run(ours[0], ours[1])
    run(peer[0], peer[1])
    a, b = [], []
    for _ in range(reps):
        a.append(run(ours[0], ours[1]))
        b.append(run(peer[0], peer[1]))
    ma, mb = statistics.median(a), statistics.median(b)
    return {"case": name, "biogpu_s": round(ma, 4), "peer_s": round(mb, 4),
            "ratio": round(mb / ma, 2), "biogpu_all": [round(x, 4) for x in a],
            "peer_all": [round(x, 4) for x in b]}


def main():
    biogpu, spatial, temporal = sys.argv[1], sys.argv[2], sys.argv[3]
    reps = int(sys.argv[4]) if len(sys.argv) > 4 else 5
    o = "/tmp/spk-bench-out"
    res = []
    for win in (5, 7):
        for extra, label in (([], "default outputs (k.tif, k.png, summary)"),
                             (["--no-png"], "--no-png (k.tif, summary)")):
            ours = ([biogpu, "--device", "cpu", "speckle", "contrast", spatial, "--window",
                     str(win), "--out", f"{o}/b", *extra], f"{o}/b")
            peer = ([PY, str(HERE / "opencv_contrast.py"), spatial, f"{o}/p/k.tif", str(win)],
                    f"{o}/p")
            res.append(pair(f"spatial {win}x{win} {Path(spatial).name}, {label}", ours, peer, reps))
    for extra, label in (() if temporal == "-" else
                         (([], "default outputs"), (["--no-png"], "--no-png"))):
        ours = ([biogpu, "--device", "cpu", "speckle", "contrast", temporal, "--mode", "temporal",
                 "--frames", "25", "--out", f"{o}/b", *extra], f"{o}/b")
        peer = ([PY, str(HERE / "numpy_temporal.py"), temporal, f"{o}/p/k.tif", "25"], f"{o}/p")
        res.append(pair(f"temporal 25 frames {Path(temporal).name}, {label}", ours, peer, reps))
    if len(sys.argv) > 5:
        old = sys.argv[5]
        for args, name in (([spatial, "--window", "5"], f"spatial 5x5 {Path(spatial).name}"),
                           ([temporal, "--mode", "temporal", "--frames", "25"],
                            f"temporal 25 frames {Path(temporal).name}")):
            if args[0] == "-":
                continue
            cmd = lambda b: ([b, "--device", "cpu", "speckle", "contrast", *args, "--out",
                              f"{o}/b"], f"{o}/b")
            res.append(pair(f"{name}, default outputs: this build vs {old}", cmd(biogpu),
                            cmd(old), reps))
    print(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
