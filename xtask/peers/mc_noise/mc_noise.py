"""Per-tetrahedron fluence noise and speed: biogpu's CPU Monte Carlo against MMC (pmmc).

Called by run.sh (which makes the venv and the mesh); see docs/montecarlo.md, section
"Noise per photon against MMC (pmmc)".

    python mc_noise.py --biogpu BIN --vtu cube60.vtu --out DIR [--photons 1e6] [--seeds 4]
                       [--ref-photons 1e7] [--threads 2] [--one-thread-photons 1e6]

Both codes run the same 135,000-tet mesh: biogpu's own cube60 (`biogpu mc mesh cube60 --vtu`),
given to MMC node for node and element for element, so per-tet results compare by index
(volumes are checked equal to biogpu's tets.csv). Every run is a separate process.

Noise: L1 = sum|A - B| / sum|A| over all 135,000 tets (A the first run or the reference).
Speed: photons/ms of the transport, "marginal" = (N - 1000) / (t(N) - t(1000)) so that the
fixed cost of a call (biogpu: packing the mesh; MMC: its set-up) is left out; also the raw
figure (biogpu: summary.json `seconds`, the run without mesh generation and output writing;
MMC: the wall time of pmmc.run) and the CPU-time figure (photons per CPU-ms, all threads,
marginal as above: robust to other load on the machine).
"""

import argparse
import itertools
import json
import os
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path

import meshio
import numpy as np

MUA = 0.005
HERE = Path(__file__).resolve().parent


def l1(a, b, mask=None):
    if mask is not None:
        a, b = a[mask], b[mask]
    return float(np.abs(a - b).sum() / np.abs(a).sum())


def children_cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


class Runner:
    def __init__(self, args):
        self.args = args
        self.out = Path(args.out)
        self.out.mkdir(parents=True, exist_ok=True)
        self.runs = []
        self.log = open(self.out / "run.log", "a")
        ex = subprocess.run([args.biogpu, "mc", "example"], check=True, capture_output=True, text=True)
        self.example = json.loads(ex.stdout)

    def say(self, msg):
        print(msg, file=sys.stderr, flush=True)
        self.log.write(msg + "\n")
        self.log.flush()

    def biogpu(self, estimator, photons, seed, threads, tag, tend_ns=5.0):
        sim = dict(self.example)
        sim.update(photons=int(photons), seed=int(seed), estimator=estimator, specular=False, time_limit_ns=tend_ns,
                   outputs={"vtk": False, "vtk_legacy": False, "csv": True})
        d = self.out / "runs" / tag
        d.mkdir(parents=True, exist_ok=True)
        (d / "sim.json").write_text(json.dumps(sim, indent=1))
        env = dict(os.environ, RAYON_NUM_THREADS=str(threads))
        load0 = os.getloadavg()[0]
        c0, w0 = children_cpu(), time.perf_counter()
        p = subprocess.run([self.args.biogpu, "--device", "cpu", "mc", "run", str(d / "sim.json"),
                            "--out", str(d), "--force"], env=env, capture_output=True, text=True)
        wall, cpu = time.perf_counter() - w0, children_cpu() - c0
        if p.returncode != 0:
            raise SystemExit(f"biogpu failed: {p.stderr}")
        s = json.loads((d / "summary.json").read_text())
        assert s["photons"] == int(photons), s
        flu = np.loadtxt(d / "tets.csv", delimiter=",", skiprows=1, usecols=4)
        vol = np.loadtxt(d / "tets.csv", delimiter=",", skiprows=1, usecols=2)
        rec = dict(code="biogpu", estimator=estimator, photons=int(photons), seed=int(seed),
                   threads=threads, tag=tag, seconds=s["seconds"], process_wall=wall, process_cpu=cpu,
                   absorbed_summary=s["absorbed"], device=s["device"], load=load0)
        return rec, flu, vol

    def mmc(self, photons, seed, threads, tag, tend_ns=5.0):
        d = self.out / "runs" / tag
        d.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ, OMP_NUM_THREADS=str(threads), OMP_WAIT_POLICY="passive")
        load0 = os.getloadavg()[0]
        p = subprocess.run([sys.executable, str(HERE / "mmc_child.py"), str(self.out / "mesh.npz"),
                            str(int(photons)), str(int(seed)), str(d / "fluence.npy"), str(tend_ns)],
                           env=env, capture_output=True, text=True)
        (d / "mmc.log").write_text(p.stdout + p.stderr)
        if p.returncode != 0:
            raise SystemExit(f"pmmc failed: {p.stdout[-2000:]} {p.stderr[-2000:]}")
        line = [x for x in p.stdout.splitlines() if x.startswith("MMC_CHILD ")][-1]
        t = json.loads(line[len("MMC_CHILD "):])
        rec = dict(code="MMC", estimator="track-length (mmMCX)", photons=int(photons), seed=int(seed),
                   threads=threads, tag=tag, seconds=t["wall"], cpu=t["cpu"], wall_1000=t["wall_1000"],
                   cpu_1000=t["cpu_1000"], method=t["method"], pmmc=t["pmmc"], load=load0)
        return rec, np.load(d / "fluence.npy")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--biogpu", required=True)
    ap.add_argument("--vtu", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--photons", type=float, default=1e6)
    ap.add_argument("--seeds", type=int, default=4)
    ap.add_argument("--ref-photons", type=float, default=1e7)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--one-thread-photons", type=float, default=1e6)
    args = ap.parse_args()
    R = Runner(args)
    N, S, NREF, T = int(args.photons), args.seeds, int(args.ref_photons), args.threads
    N1 = int(args.one_thread_photons)

    # mesh for MMC: biogpu's own cube60, same node and element order
    m = meshio.read(args.vtu)
    node = np.ascontiguousarray(m.points, dtype=np.float64)
    elem = np.ascontiguousarray(m.cells_dict["tetra"], dtype=np.int32) + 1
    np.savez(R.out / "mesh.npz", node=node, elem=elem)
    p = node[elem - 1]
    vol = np.abs(np.einsum("ij,ij->i", np.cross(p[:, 1] - p[:, 0], p[:, 2] - p[:, 0]), p[:, 3] - p[:, 0])) / 6
    cen = p.mean(axis=1)

    flu = {}
    recs = []

    def bg(est, n, seed, threads, tag):
        rec, f, v = R.biogpu(est, n, seed, threads, tag)
        assert np.allclose(v, vol, rtol=1e-9, atol=1e-12), "biogpu tet order differs from the exported mesh"
        rec["absorbed"] = float((MUA * f * vol).sum())
        R.say(f"{tag}: {rec['seconds']:.3f} s, absorbed {rec['absorbed']:.5f}, load {rec['load']:.2f}")
        recs.append(rec)
        flu[tag] = f

    def mm(n, seed, threads, tag):
        rec, f = R.mmc(n, seed, threads, tag)
        rec["absorbed"] = float((MUA * f * vol).sum())
        R.say(f"{tag}: {rec['seconds']:.3f} s (1000 photons: {rec['wall_1000']:.3f} s), "
              f"absorbed {rec['absorbed']:.5f}, load {rec['load']:.2f}")
        recs.append(rec)
        flu[tag] = f

    ests = [("tl", "track-length"), ("int", "interaction")]
    # fixed cost of a biogpu call (per estimator and thread count)
    for th in sorted({T, 1}):
        for short, est in ests:
            bg(est, 1000, 99, th, f"bg-{short}-t{th}-n1000")
    # equal-photon runs, interleaved so that the codes share the machine's conditions
    for s in range(1, S + 1):
        for short, est in ests:
            bg(est, N, s, T, f"bg-{short}-t{T}-s{s}")
        mm(N, s, T, f"mmc-t{T}-s{s}")
    # long references
    bg("track-length", NREF, 1000, T, "ref-bg-tl")
    mm(NREF, 1000, T, "ref-mmc")
    # one thread
    if T != 1 and N1 > 0:
        for short, est in ests:
            bg(est, N1, 101, 1, f"bg-{short}-t1-s101")
        mm(N1, 101, 1, "mmc-t1-s101")

    # ---- analysis
    by = {r["tag"]: r for r in recs}
    ref_b, ref_m = flu["ref-bg-tl"], flu["ref-mmc"]
    nz = ref_b > 0
    groups = {"biogpu track-length": [f"bg-tl-t{T}-s{s}" for s in range(1, S + 1)],
              "biogpu interaction": [f"bg-int-t{T}-s{s}" for s in range(1, S + 1)],
              "MMC": [f"mmc-t{T}-s{s}" for s in range(1, S + 1)]}
    noise = {}
    for g, tags in groups.items():
        pairs = [l1(flu[a], flu[b]) for a, b in itertools.combinations(tags, 2)]
        pairs_nz = [l1(flu[a], flu[b], nz) for a, b in itertools.combinations(tags, 2)]
        own = ref_m if g == "MMC" else ref_b
        other = ref_b if g == "MMC" else ref_m
        noise[g] = dict(
            seed_to_seed=float(np.mean(pairs)), seed_to_seed_sd=float(np.std(pairs, ddof=1)) if len(pairs) > 1 else 0.0,
            seed_to_seed_nonzero=float(np.mean(pairs_nz)),
            vs_own_ref=float(np.mean([l1(own, flu[t]) for t in tags])),
            vs_other_ref=float(np.mean([l1(other, flu[t]) for t in tags])),
            vs_mean_ref=float(np.mean([l1(0.5 * (ref_b + ref_m), flu[t]) for t in tags])),
            absorbed=[by[t]["absorbed"] for t in tags])

    def speed(tags, fixed_tag=None):
        """photons/ms: raw (wall of the run), marginal (fixed cost of a call subtracted), per CPU-ms."""
        out = dict(raw=[], marginal=[], cpu_marginal=[])
        for t in tags:
            r = by[t]
            n = r["photons"]
            out["raw"].append(n / (r["seconds"] * 1e3))
            if r["code"] == "MMC":
                out["marginal"].append((n - 1000) / ((r["seconds"] - r["wall_1000"]) * 1e3))
                out["cpu_marginal"].append((n - 1000) / ((r["cpu"] - r["cpu_1000"]) * 1e3))
            else:
                f = by[fixed_tag]
                out["marginal"].append((n - 1000) / ((r["seconds"] - f["seconds"]) * 1e3))
                out["cpu_marginal"].append((n - 1000) / ((r["process_cpu"] - f["process_cpu"]) * 1e3))
        return {k: float(np.median(v)) for k, v in out.items()}

    rows = []
    for th in ([T, 1] if (T != 1 and N1 > 0) else [T]):
        for g, code, est, short in [("biogpu track-length", "biogpu", "track-length", "tl"),
                                    ("biogpu interaction", "biogpu", "interaction", "int"),
                                    ("MMC", "MMC (pmmc %s, sse, elem)" % by["ref-mmc"]["pmmc"],
                                     "track-length (mmMCX)", None)]:
            if th == T:
                tags = groups[g]
            else:
                tags = ["mmc-t1-s101"] if short is None else [f"bg-{short}-t1-s101"]
            fixed = None if short is None else f"bg-{short}-t{th}-n1000"
            sp = speed(tags, fixed)
            rows.append(dict(group=g, code=code, estimator=est, photons=by[tags[0]]["photons"], threads=th,
                             runs=len(tags), **sp, l1=noise[g]["seed_to_seed"]))
    for r in rows:
        mref = [x for x in rows if x["group"] == "MMC" and x["threads"] == r["threads"]][0]
        r["speed_ratio"] = r["marginal"] / mref["marginal"]
        r["equal_noise_ratio"] = r["speed_ratio"] * (mref["l1"] / r["l1"]) ** 2
        r["cpu_speed_ratio"] = r["cpu_marginal"] / mref["cpu_marginal"]
        r["cpu_equal_noise_ratio"] = r["cpu_speed_ratio"] * (mref["l1"] / r["l1"]) ** 2

    # ---- physics: absorbed fraction and profiles at the reference photon counts
    r_ax = np.hypot(cen[:, 0] - 30.1, cen[:, 1] - 30.2)
    onaxis = r_ax < 2.0
    zbin = np.floor(cen[:, 2] / 2.0).astype(int)
    dist = np.linalg.norm(cen - np.array([30.1, 30.2, 0.0]), axis=1)
    shell = np.floor(dist / 5.0).astype(int)

    def prof(f, mask, b, nb):
        w = np.bincount(b[mask], weights=(f * vol)[mask], minlength=nb)
        v = np.bincount(b[mask], weights=vol[mask], minlength=nb)
        return w / np.where(v > 0, v, 1)

    # spread of the 1e6 runs per bin -> standard error of the reference's bin (scaled by sqrt(N/NREF))
    def prof_se(tags, mask, b, nb):
        ps = np.array([prof(flu[t], mask, b, nb) for t in tags])
        return ps.std(axis=0, ddof=1) * np.sqrt(N / NREF)

    depth = []
    pb, pm = prof(ref_b, onaxis, zbin, 30), prof(ref_m, onaxis, zbin, 30)
    sb, sm = prof_se(groups["biogpu track-length"], onaxis, zbin, 30), prof_se(groups["MMC"], onaxis, zbin, 30)
    for i in range(30):
        ratio = pm[i] / pb[i]
        se = ratio * np.hypot(sb[i] / pb[i], sm[i] / pm[i])
        depth.append(dict(z_mm=2 * i + 1, biogpu=pb[i], mmc=pm[i], ratio=ratio, ratio_se=se))
    shells = []
    nsh = int(shell.max()) + 1
    qb, qm = prof(ref_b, np.ones_like(nz), shell, nsh), prof(ref_m, np.ones_like(nz), shell, nsh)
    tb, tm = (prof_se(groups["biogpu track-length"], np.ones_like(nz), shell, nsh),
              prof_se(groups["MMC"], np.ones_like(nz), shell, nsh))
    for i in range(nsh):
        ratio = qm[i] / qb[i]
        shells.append(dict(r_mm=f"{5 * i}-{5 * i + 5}", biogpu=qb[i], mmc=qm[i], ratio=ratio,
                           ratio_se=ratio * np.hypot(tb[i] / qb[i], tm[i] / qm[i])))
    physics = dict(
        absorbed_ref_biogpu=by["ref-bg-tl"]["absorbed"], absorbed_ref_mmc=by["ref-mmc"]["absorbed"],
        absorbed_summary_ref_biogpu=by["ref-bg-tl"]["absorbed_summary"],
        l1_ref_biogpu_vs_ref_mmc=l1(ref_b, ref_m),
        tets_nonzero_in_ref_biogpu=int(nz.sum()), tets_nonzero_in_ref_mmc=int((ref_m > 0).sum()),
        depth=depth, shells=shells)

    loads = [r["load"] for r in recs]
    res = dict(date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), machine=platform.processor() or platform.machine(),
               nproc=os.cpu_count(), photons=N, seeds=S, ref_photons=NREF, threads=T, one_thread_photons=N1,
               loadavg_1min_before_runs=dict(min=min(loads), max=max(loads), median=float(np.median(loads))),
               rows=rows, noise=noise, physics=physics, runs=recs)
    (R.out / "results.json").write_text(json.dumps(res, indent=1))
    md = table(res)
    (R.out / "results.md").write_text(md)
    print(md)


def table(res):
    L = []
    L.append("| code | estimator | photons | threads | photons/ms | photons per CPU-ms | L1 seed-to-seed | "
             "equal-noise ratio vs MMC (wall / CPU) |")
    L.append("|---|---|---|---|---|---|---|---|")
    for r in res["rows"]:
        L.append(f"| {r['code']} | {r['estimator']} | {r['photons']:,} | {r['threads']} | {r['marginal']:.1f} "
                 f"(raw {r['raw']:.1f}) | {r['cpu_marginal']:.1f} | {r['l1']:.4f} | "
                 f"{r['equal_noise_ratio']:.2f} / {r['cpu_equal_noise_ratio']:.2f} |")
    L.append("")
    L.append("| estimator | L1 seed-to-seed (sd over pairs) | same, tets nonzero in ref | vs own-code ref | "
             "vs other code's ref | vs mean of both refs | absorbed per run |")
    L.append("|---|---|---|---|---|---|---|")
    for g, n in res["noise"].items():
        L.append(f"| {g} | {n['seed_to_seed']:.4f} ({n['seed_to_seed_sd']:.4f}) | {n['seed_to_seed_nonzero']:.4f} | "
                 f"{n['vs_own_ref']:.4f} | {n['vs_other_ref']:.4f} | {n['vs_mean_ref']:.4f} | "
                 + ", ".join(f"{a:.5f}" for a in n["absorbed"]) + " |")
    p = res["physics"]
    L.append("")
    L.append(f"Absorbed at {res['ref_photons']:,} photons: biogpu {p['absorbed_ref_biogpu']:.5f} "
             f"(summary {p['absorbed_summary_ref_biogpu']:.5f}), MMC {p['absorbed_ref_mmc']:.5f}; "
             f"L1 between the two references {p['l1_ref_biogpu_vs_ref_mmc']:.4f}; tets nonzero: "
             f"{p['tets_nonzero_in_ref_biogpu']} / {p['tets_nonzero_in_ref_mmc']}.")
    L.append("")
    L.append("| z (mm), r < 2 mm | biogpu fluence | MMC fluence | MMC / biogpu | +- (1 se) |")
    L.append("|---|---|---|---|---|")
    for d in p["depth"]:
        L.append(f"| {d['z_mm']} | {d['biogpu']:.4e} | {d['mmc']:.4e} | {d['ratio']:.4f} | {d['ratio_se']:.4f} |")
    L.append("")
    L.append("| distance from source (mm) | biogpu mean fluence | MMC | MMC / biogpu | +- (1 se) |")
    L.append("|---|---|---|---|---|")
    for d in p["shells"]:
        L.append(f"| {d['r_mm']} | {d['biogpu']:.4e} | {d['mmc']:.4e} | {d['ratio']:.4f} | {d['ratio_se']:.4f} |")
    L.append("")
    ld = res["loadavg_1min_before_runs"]
    L.append(f"1-minute load average before each run: min {ld['min']:.2f}, median {ld['median']:.2f}, "
             f"max {ld['max']:.2f} (nproc {res['nproc']}).")
    return "\n".join(L) + "\n"


if __name__ == "__main__":
    main()
