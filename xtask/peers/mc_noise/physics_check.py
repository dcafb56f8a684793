"""Physics agreement of biogpu (track length) and MMC on cube60 with error bars: K independent
runs per code (seeds 2001..), fluence averaged over shells of distance from the source and over
on-axis depth bins; the standard error of each code's mean comes from the spread between its
runs. Run after mc_noise.py (it reuses OUT/mesh.npz).

    python physics_check.py --biogpu BIN --out DIR [--photons 1.25e6] [--runs 8] [--tend 5 50] [--reuse]

--reuse reads the runs already in OUT/runs instead of running them again (analysis only).
Last, all runs of both time limits are pooled (the expired weight is 4e-5 at 5 ns, so the two
differ by little) for 2.5 mm shells beyond 45 mm from the source.
"""

import argparse
import json
import sys

import numpy as np

sys.dont_write_bytecode = True  # no __pycache__ beside the scripts
from mc_noise import MUA, Runner  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--biogpu", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--photons", type=float, default=1.25e6)
    ap.add_argument("--runs", type=int, default=8)
    ap.add_argument("--reuse", action="store_true")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--tend", type=float, nargs="+", default=[5.0, 50.0])
    args = ap.parse_args()
    R = Runner(args)
    z = np.load(R.out / "mesh.npz")
    p = z["node"][z["elem"] - 1]
    vol = np.abs(np.einsum("ij,ij->i", np.cross(p[:, 1] - p[:, 0], p[:, 2] - p[:, 0]), p[:, 3] - p[:, 0])) / 6
    cen = p.mean(axis=1)
    dist = np.linalg.norm(cen - np.array([30.1, 30.2, 0.0]), axis=1)
    shell = np.minimum(np.floor(dist / 5.0).astype(int), 13)  # last bin: 65 mm and beyond
    onaxis = np.hypot(cen[:, 0] - 30.1, cen[:, 1] - 30.2) < 3.0
    zb = np.floor(cen[:, 2] / 5.0).astype(int)

    def prof(f, mask, b, nb):
        w = np.bincount(b[mask], weights=(f * vol)[mask], minlength=nb)
        v = np.bincount(b[mask], weights=vol[mask], minlength=nb)
        return w / np.where(v > 0, v, 1)

    def mean_se(xs):
        xs = np.asarray(xs)
        return xs.mean(axis=0), xs.std(axis=0, ddof=1) / np.sqrt(len(xs))

    allres = {}
    pooled = {}
    N, K, T = int(args.photons), args.runs, args.threads
    every = np.ones(len(vol), dtype=bool)
    for tend in args.tend:
        out = {"biogpu": [], "MMC": []}
        for k in range(K):
            seed = 2001 + k
            tag = f"phys-t{tend:g}-bg-s{seed}"
            d = R.out / "runs" / tag
            if args.reuse and (d / "summary.json").exists():
                rec = dict(tag=tag, seconds=json.loads((d / "summary.json").read_text())["seconds"])
                f = np.loadtxt(d / "tets.csv", delimiter=",", skiprows=1, usecols=4)
            else:
                rec, f, _ = R.biogpu("track-length", N, seed, T, tag, tend_ns=tend)
            out["biogpu"].append((f, rec))
            R.say(f"{tag}: {rec['seconds']:.2f} s, absorbed {(MUA * f * vol).sum():.5f}")
            tag = f"phys-t{tend:g}-mmc-s{seed}"
            d = R.out / "runs" / tag
            if args.reuse and (d / "fluence.npy").exists():
                rec, f = dict(tag=tag, seconds=float("nan")), np.load(d / "fluence.npy")
            else:
                rec, f = R.mmc(N, seed, T, tag, tend_ns=tend)
            out["MMC"].append((f, rec))
            R.say(f"{tag}: {rec['seconds']:.2f} s, absorbed {(MUA * f * vol).sum():.5f}")
        res = {"photons_per_run": N, "runs": K}
        for name, mask, b, nb, labels in [
            ("shells", every, shell, 14, [f"{5 * i}-{5 * i + 5}" if i < 13 else "65+" for i in range(14)]),
            ("depth_r<3mm", onaxis, zb, 12, [f"{5 * i}-{5 * i + 5}" for i in range(12)])]:
            mb, sb = mean_se([prof(f, mask, b, nb) for f, _ in out["biogpu"]])
            mm, sm = mean_se([prof(f, mask, b, nb) for f, _ in out["MMC"]])
            ratio = mm / mb
            se = ratio * np.hypot(sb / mb, sm / mm)
            res[name] = [dict(bin_mm=labels[i], biogpu=mb[i], mmc=mm[i], ratio=ratio[i], ratio_se=se[i],
                              z=(ratio[i] - 1) / se[i]) for i in range(nb)]
        ab, sab = mean_se([(MUA * f * vol).sum() for f, _ in out["biogpu"]])
        am, sam = mean_se([(MUA * f * vol).sum() for f, _ in out["MMC"]])
        res["absorbed"] = dict(biogpu=float(ab), biogpu_se=float(sab), mmc=float(am), mmc_se=float(sam))
        res["biogpu_expired"] = float(np.mean(
            [json.loads((R.out / "runs" / r["tag"] / "summary.json").read_text())["expired"] for _, r in out["biogpu"]]))
        allres[f"{tend:g}"] = res
        pooled.setdefault("biogpu", []).extend(f for f, _ in out["biogpu"])
        pooled.setdefault("MMC", []).extend(f for f, _ in out["MMC"])
    fine = np.where(dist >= 45, np.minimum(np.floor((dist - 45) / 2.5).astype(int), 9), 10)
    labels = [f"{45 + 2.5 * i:g}-{47.5 + 2.5 * i:g}" if i < 9 else "67.5+" for i in range(10)]
    mb, sb = mean_se([prof(f, fine < 10, fine, 10) for f in pooled["biogpu"]])
    mm, sm = mean_se([prof(f, fine < 10, fine, 10) for f in pooled["MMC"]])
    ratio = mm / mb
    se = ratio * np.hypot(sb / mb, sm / mm)
    allres["pooled_far_shells"] = dict(runs=len(pooled["MMC"]), rows=[
        dict(bin_mm=labels[i], biogpu=mb[i], mmc=mm[i], ratio=ratio[i], ratio_se=se[i], z=(ratio[i] - 1) / se[i],
             tets=int((fine == i).sum())) for i in range(10)])
    (R.out / "physics.json").write_text(json.dumps(allres, indent=1, default=float))
    L = []
    for tend, res in allres.items():
        if tend == "pooled_far_shells":
            L.append(f"All {res['runs']} runs per code pooled, 2.5 mm shells beyond 45 mm from the source:")
            L.append("")
            L.append("| distance (mm) | tets | biogpu | MMC | MMC / biogpu | 1 se | z |")
            L.append("|---|---|---|---|---|---|---|")
            for d in res["rows"]:
                L.append(f"| {d['bin_mm']} | {d['tets']} | {d['biogpu']:.4e} | {d['mmc']:.4e} | {d['ratio']:.4f} | "
                         f"{d['ratio_se']:.4f} | {d['z']:+.1f} |")
            L.append("")
            continue
        a = res["absorbed"]
        L.append(f"Time limit {tend} ns, {res['runs']} x {res['photons_per_run']:,} photons per code: absorbed "
                 f"biogpu {a['biogpu']:.5f} +- {a['biogpu_se']:.5f}, MMC {a['mmc']:.5f} +- {a['mmc_se']:.5f}; "
                 f"biogpu expired weight {res['biogpu_expired']:.2e}.")
        L.append("")
        for name in ["shells", "depth_r<3mm"]:
            L.append(f"| {name} (mm) | biogpu | MMC | MMC / biogpu | 1 se | z |")
            L.append("|---|---|---|---|---|---|")
            for d in res[name]:
                L.append(f"| {d['bin_mm']} | {d['biogpu']:.4e} | {d['mmc']:.4e} | {d['ratio']:.4f} | "
                         f"{d['ratio_se']:.4f} | {d['z']:+.1f} |")
            L.append("")
    md = "\n".join(L)
    (R.out / "physics.md").write_text(md)
    print(md)


if __name__ == "__main__":
    main()
