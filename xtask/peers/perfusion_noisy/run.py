"""Driver of the issue-22 noisy-curve comparison: simulate, fit with every fitter, tabulate.

Called by run.sh (which makes the venv and compiles the C reference); by hand:
  python run.py --out DIR --biogpu PATH --fminsearch PATH --dcmri-python PATH [--n N]

Fitters, on the same curves of each setting:
  biogpu          `biogpu --device cpu perfusion fit --model M --curves ... --aif ...:aif
                  [--pv ...:pv]`: the default fit (LM from the start search), no options
  biogpu-fix      the same with the delay(s) dcmri does not fit fixed at their truth 0
                  (`--fix tau_p=0` / `--fix tau=0`): dcmri's parameter set (only where dcmri runs)
  biogpu-grid-none  diagnostic, dual-input only: `--delay-grid none` (LM from the model's
                  start values, no start search): not the default
  fminsearch      fminsearch.c, MATLAB defaults (MaxIter = MaxFunEvals = 200 n)
  fminsearch-x10  fminsearch.c with MaxIter = MaxFunEvals = 2000 n
  dcmri           fit_dcmri.py (dcmri's kinetic functions + curve_fit as its train())
Each fitter also fits the noise-free curve (column `nf` of the table: the estimate without
noise, i.e. the floor set by the model's discretisation and by identifiability).

Statistics per (setting, SNR, fitter, parameter) over all N curves (failed fits included;
non-finite estimates dropped and counted as failed): median and mean of the error (rates and
volumes: relative to the truth, in %; delays: in s), SD and robust SD (1.4826 MAD) of the
estimates (same units), the share of fits failed (biogpu: status failed / max-iterations /
invalid-input; fminsearch: MaxIter or MaxFunEvals reached; dcmri: curve_fit raised), at a
bound (biogpu: status or flag at-bound; others: a free parameter within 1e-4 of its range
from one of the fitter's bounds) and, for delays, the share of estimates within 0.01 s of a
multiple of the frame interval (the delay cost has kinks there), and `worse SSE %`: the share
of curves whose SSE exceeds by more than 0.1% the lowest SSE that any fitter with the same
free parameters reached on that curve (biogpu, biogpu-grid-none, fminsearch, fminsearch-x10;
or biogpu-fix and dcmri): a fit that missed the best minimum found, whatever the truth.
"""

import argparse
import csv
import json
import math
import os
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))

PARAMS = {
    "dual-input": ["ka", "kp", "kl", "tau_a", "tau_p"],
    "extended-tofts": ["ktrans", "ve", "vp", "tau"],
    "tofts": ["ktrans", "ve", "tau"],
}
# biogpu's default bounds (`biogpu perfusion models`), used for fminsearch's barrier
BOUNDS = {
    "dual-input": [(0, 2000), (0, 2000), (0, 10000), (-30, 30), (-30, 30)],
    "extended-tofts": [(0, 5), (0.001, 1), (0, 1), (-30, 30)],
    "tofts": [(0, 5), (0.001, 1), (-30, 30)],
}
DCMRI = {"di_dcmri", "etm"}  # settings where dcmri's default model is the simulated one
FIX = {"di_dcmri": "tau_p=0", "etm": "tau=0"}
WORSE = 1e-3  # relative SSE excess over the best fit of the same curve counted as a miss
REDUCED = ["biogpu-fix", "dcmri"]  # fitters with the delays dcmri does not fit fixed


def is_delay(p):
    return p.startswith("tau")


def run(cmd, log):
    t0 = time.perf_counter()
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    dt = time.perf_counter() - t0
    with open(log, "a") as fh:
        fh.write(" ".join(cmd) + f"\n[{dt:.3f} s, rc {r.returncode}]\n" + r.stdout + "\n")
    if r.returncode != 0:
        sys.exit(f"failed ({r.returncode}): {' '.join(cmd)}\n{r.stdout[-3000:]}")
    return dt


def read_rows(path):
    with open(path) as fh:
        return list(csv.DictReader(fh))


def biogpu_results(path, model):
    rows = read_rows(path)
    out = []
    for r in rows:
        vals = {}
        for k, v in r.items():
            base = k.split(" (")[0]
            if base in PARAMS[model]:
                vals[base] = float(v)
        st = r["status"]
        flags = r.get("flags", "") or ""
        out.append({
            "curve": r["curve"], **vals, "sse": float(r["sse"]),
            "failed": st in ("failed", "max-iterations", "invalid-input", "not-fitted"),
            "at_bound": st == "at-bound" or "at-bound" in flags,
        })
    return out


def fms_results(path, model):
    out = []
    for r in read_rows(path):
        vals = {p: float(r[p]) for p in PARAMS[model]}
        ab = False
        for p, (lo, hi) in zip(PARAMS[model], BOUNDS[model]):
            span = hi - lo
            if vals[p] - lo <= 1e-4 * span or hi - vals[p] <= 1e-4 * span:
                ab = True
        out.append({"curve": r["curve"], **vals, "sse": float(r["sse"]), "failed": r["exitflag"] == "0",
                    "at_bound": ab})
    return out


def dcmri_results(path, model):
    out = []
    for r in read_rows(path):
        vals = {p: float(r[p]) for p in PARAMS[model]}
        out.append({"curve": r["curve"], **vals, "sse": float(r["sse"]), "failed": r["failed"] == "1",
                    "at_bound": r["at_bound"] == "1"})
    return out


def stats(res, model, truth, dt_frame):
    n = len(res)
    rows = {}
    for p in PARAMS[model]:
        x = np.array([r[p] for r in res], float)
        ok = np.isfinite(x)
        x = x[ok]
        tv = truth[p]
        if is_delay(p):
            err = x - tv
            scale = 1.0
        else:
            err = (x - tv) / tv * 100.0
            scale = 100.0 / tv
        med = float(np.median(x))
        rs = 1.4826 * float(np.median(np.abs(x - med))) * scale
        row = {
            "truth": tv, "median": float(np.median(err)), "mean": float(np.mean(err)),
            "sd": float(np.std(x, ddof=1)) * scale if len(x) > 1 else float("nan"), "rsd": rs,
            "nonfinite": int((~ok).sum()),
        }
        if is_delay(p):
            q = x / dt_frame
            row["on_frame"] = float(np.mean(np.abs(q - np.round(q)) * dt_frame <= 0.01)) * 100
        rows[p] = row
    failed = sum(1 for r in res if r["failed"]) + max(v["nonfinite"] for v in rows.values())
    return rows, failed / n * 100, sum(1 for r in res if r["at_bound"]) / n * 100


def sha256(path):
    import hashlib
    with open(path, "rb") as fh:
        return hashlib.sha256(fh.read()).hexdigest()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--biogpu", required=True)
    ap.add_argument("--fminsearch", required=True)
    ap.add_argument("--dcmri-python", required=True)
    ap.add_argument("--n", type=int, default=500)
    ap.add_argument("--seed", type=int, default=20261128)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    log = os.path.join(a.out, "run.log")
    open(log, "w").close()
    bin_hash = sha256(a.biogpu)
    bin_mtime = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(os.path.getmtime(a.biogpu)))
    run([sys.executable, os.path.join(HERE, "simulate.py"), a.out, "--n", str(a.n), "--seed", str(a.seed)], log)
    with open(os.path.join(a.out, "settings.json")) as fh:
        settings = json.load(fh)

    table = []
    pairs = []
    for s in settings:
        d = os.path.join(a.out, s["dir"])
        model, name = s["model"], s["setting"]
        curves, inputs = os.path.join(d, "curves.csv"), os.path.join(d, "inputs.csv")
        nf = os.path.join(d, "noise_free_curve.csv")
        with open(os.path.join(d, "noise_free.csv")) as fi, open(nf, "w") as fo:
            for i, line in enumerate(fi):
                fo.write("time,nf\n" if i == 0 else line)
        fitters = ["biogpu"] + (["biogpu-fix"] if name in DCMRI else [])
        fitters += (["biogpu-grid-none"] if model == "dual-input" else []) + ["fminsearch", "fminsearch-x10"]
        fitters += ["dcmri"] if name in DCMRI else []
        sse_by = {}
        row0 = len(table)
        for f in fitters:
            outs = {}
            wall = None
            for tag, cfile in (("noisy", curves), ("nf", nf)):
                o = os.path.join(d, f"{f}_{tag}")
                if f.startswith("biogpu"):
                    cmd = [a.biogpu, "--device", "cpu", "perfusion", "fit", "--model", model,
                           "--curves", cfile, "--aif", inputs + ":aif", "--out", o, "--force"]
                    if model == "dual-input":
                        cmd += ["--pv", inputs + ":pv"]
                    if f == "biogpu-fix":
                        cmd += ["--fix", FIX[name]]
                    if f == "biogpu-grid-none":
                        cmd += ["--delay-grid", "none"]
                    t = run(cmd, log)
                    res = biogpu_results(os.path.join(o, "results.csv"), model)
                elif f.startswith("fminsearch"):
                    cmd = [a.fminsearch, model, cfile, inputs, o + ".csv"]
                    if f == "fminsearch-x10":
                        cmd += ["--maxfac", "2000"]
                    t = run(cmd, log)
                    res = fms_results(o + ".csv", model)
                else:
                    cmd = [a.dcmri_python, os.path.join(HERE, "fit_dcmri.py"), model, cfile, inputs, o + ".csv"]
                    t = run(cmd, log)
                    res = dcmri_results(o + ".csv", model)
                outs[tag] = res
                if tag == "noisy":
                    wall = t
            st, failed, atb = stats(outs["noisy"], model, s["truth"], s["dt"])
            sse_by[f] = np.array([r["sse"] for r in outs["noisy"]])
            nfv = outs["nf"][0]
            table.append({
                "setting": name, "model": model, "snr": s["snr"], "fitter": f, "n": len(outs["noisy"]),
                "wall_s": wall, "failed_pct": failed, "at_bound_pct": atb, "params": st,
                "noise_free": {p: nfv[p] for p in PARAMS[model]},
            })
            print(f"{name} SNR {s['snr']} {f}: {wall:.2f} s", file=sys.stderr)
        for f in fitters:
            if f in ("biogpu", "biogpu-fix"):
                continue
            peer = "biogpu-fix" if f in REDUCED and f != "biogpu-fix" else "biogpu"
            if f == peer:
                continue
            x, y = sse_by[peer], sse_by[f]
            pairs.append({
                "setting": name, "snr": s["snr"], "biogpu": peer, "peer": f,
                "lower": float(np.mean(x < (1 - WORSE) * y) * 100),
                "higher": float(np.mean(x > (1 + WORSE) * y) * 100),
                "median_ratio": float(np.median(x / y)),
            })
        for r in table[row0:]:
            group = REDUCED if r["fitter"] in REDUCED else [f for f in fitters if f not in REDUCED]
            best = np.min(np.stack([sse_by[f] for f in group if f in sse_by]), axis=0)
            r["worse_sse_pct"] = float(np.mean(sse_by[r["fitter"]] > (1 + WORSE) * best) * 100)
    changed = sha256(a.biogpu) != bin_hash
    meta = {"biogpu": a.biogpu, "sha256": bin_hash, "mtime_utc": bin_mtime, "changed_during_run": changed,
            "n": a.n, "seed": a.seed}
    with open(os.path.join(a.out, "summary.json"), "w") as fh:
        json.dump({"meta": meta, "rows": table, "sse_pairs": pairs}, fh, indent=1)
    print(f"biogpu binary: {a.biogpu}, sha256 {bin_hash[:16]}, modified {bin_mtime} UTC; N = {a.n}, seed {a.seed}")
    if changed:
        print("WARNING: the biogpu binary changed during the run: results mix two builds; run again")
        print("WARNING: the biogpu binary changed during the run", file=sys.stderr)
    print()
    print_table(table)
    print()
    print_compact(table)
    print()
    print_verdict(table)
    print()
    print(f"SSE of the same curve, biogpu (default, or -fix against dcmri) against each other fitter: "
          f"% of curves where biogpu's is lower / higher by more than {WORSE:g} relative, median ratio.")
    print()
    print("| setting | SNR | biogpu | peer | biogpu lower % | biogpu higher % | median SSE ratio |")
    print("|---|---|---|---|---|---|---|")
    for p in pairs:
        print(f"| {p['setting']} | {p['snr']} | {p['biogpu']} | {p['peer']} | {p['lower']:.1f} | {p['higher']:.1f} | "
              f"{p['median_ratio']:.6f} |")


def fmt(v, nd=1):
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    return f"{v:.{nd}f}"


def print_table(table):
    print("Rates and volumes: error in % of the truth; delays (tau*): error in s. "
          "SD / rSD (1.4826 MAD) of the estimates in the same units. nf: noise-free estimate.")
    print()
    print("| setting | SNR | fitter | param | truth | nf | median err | mean err | SD | rSD | on frame % | failed % | at bound % | worse SSE % | wall s (N) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in table:
        first = True
        for p, v in r["params"].items():
            d = 2 if p.startswith("tau") else 1
            nfv = r["noise_free"][p]
            print("| " + " | ".join([
                r["setting"], str(r["snr"]), r["fitter"], p, f"{v['truth']:g}", f"{nfv:.4g}",
                fmt(v["median"], d), fmt(v["mean"], d), fmt(v["sd"], d), fmt(v["rsd"], d),
                fmt(v.get("on_frame"), 0) if p.startswith("tau") else "",
                fmt(r["failed_pct"]) if first else "", fmt(r["at_bound_pct"]) if first else "",
                fmt(r["worse_sse_pct"]) if first else "",
                f"{r['wall_s']:.2f} ({r['n']})" if first else "",
            ]) + " |")
            first = False


COMPACT = ["biogpu", "fminsearch", "fminsearch-x10", "biogpu-fix", "dcmri", "biogpu-grid-none"]


def print_compact(table):
    print('Median error / SD per fitter (rates and volumes in % of the truth, delays in s; "-": not run on that setting; "fixed": the delay is held at its true 0).')
    print()
    print("| setting | SNR | param | truth | " + " | ".join(COMPACT) + " |")
    print("|---|---|---|---|" + "---|" * len(COMPACT))
    keys = []
    for r in table:
        k = (r["setting"], r["snr"])
        if k not in keys:
            keys.append(k)
    for k in keys:
        rows = {r["fitter"]: r for r in table if (r["setting"], r["snr"]) == k}
        for p in next(iter(rows.values()))["params"]:
            d = 2 if p.startswith("tau") else 1
            cells = []
            for f in COMPACT:
                if f not in rows:
                    cells.append("-")
                    continue
                v = rows[f]["params"][p]
                cells.append("fixed" if v["sd"] == 0 and f in ("biogpu-fix", "dcmri") and p.startswith("tau")
                             else f"{fmt(v['median'], d)} / {fmt(v['sd'], d)}")
            truth = next(iter(rows.values()))["params"][p]["truth"]
            print(f"| {k[0]} | {k[1]} | {p} | {truth:g} | " + " | ".join(cells) + " |")


def judge(x, y, sd_x, sd_y):
    """biogpu's |median error| x and SD sd_x against a peer's (y, sd_y): better / worse / same."""
    tol = 0.15 * max(sd_x, sd_y, 1e-12)  # ~2 standard errors of a median difference at N = 500
    bias = "same" if abs(abs(x) - abs(y)) <= tol else ("better" if abs(x) < abs(y) else "worse")
    sd = "same" if abs(sd_x - sd_y) <= 0.1 * max(sd_x, sd_y) else ("better" if sd_x < sd_y else "worse")
    return bias, sd


def print_verdict(table):
    print("Verdict, biogpu default against each peer (bias: |median error| differs by more than 0.15 SD;")
    print("SD: differs by more than 10%); cells 'bias/SD'. dcmri fits the delays only where marked:")
    print("against dcmri, `default` is biogpu's default and `fix` biogpu with dcmri's parameter set.")
    print()
    print("| setting | SNR | param | vs fminsearch | vs fminsearch-x10 | vs dcmri (default) | vs dcmri (fix) |")
    print("|---|---|---|---|---|---|---|")
    keys = []
    for r in table:
        k = (r["setting"], r["snr"])
        if k not in keys:
            keys.append(k)
    for k in keys:
        rows = {r["fitter"]: r for r in table if (r["setting"], r["snr"]) == k}
        for p, b in rows["biogpu"]["params"].items():
            cells = []
            for me, peer in (("biogpu", "fminsearch"), ("biogpu", "fminsearch-x10"), ("biogpu", "dcmri"),
                             ("biogpu-fix", "dcmri")):
                if peer not in rows or me not in rows:
                    cells.append("-")
                    continue
                x, y = rows[me]["params"][p], rows[peer]["params"][p]
                if y["sd"] == 0 and p.startswith("tau"):
                    cells.append("(fixed)")
                    continue
                cells.append("/".join(judge(x["median"], y["median"], x["sd"], y["sd"])))
            print(f"| {k[0]} | {k[1]} | {p} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
