"""Recommendation stability: the same search run with different ``search.seed``s, compared.

Runs ``python -m tune_batch search CONFIG --set search.seed=N --output DIR/seedN`` for each
seed (or reads run directories that exist already, with --reuse), then compares the
recommendations: same batch size with learning rates within a factor of 2, or within the
noise of each other in every objective (each run's means and 95 % half-widths, combined).

Runs made minutes apart on a shared machine differ by its drift as much as by their configs, so
the recommendations are also re-measured side by side (--remeasure K rounds: in each round every
recommended config once, with the round's seed, interleaved) and compared on those runs: within
noise when every objective's difference is inside the two configs' 95 % half-widths combined.
When the searches recommended by time to target (confirmation on, the default), the side-by-side
runs are confirmation runs and the comparison is of their time to one common target.

Usage: python scripts/bench_stability.py [--config configs/quickstart.yaml] [--seeds 1 2 3] [--out DIR] [--reuse]
                                         [--remeasure 5]
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def _recommended(run: Path) -> dict:
    pareto = json.loads((run / "pareto.json").read_text())
    rec_id = pareto["recommended_trial_id"]
    rec = pareto.get("recommended") or next(t for t in pareto["trials"] if t["trial_id"] == rec_id)
    conf = pareto.get("confirmation") or {}
    by_time = str(pareto.get("recommendation_method", "")).startswith("time_to_target")
    return {"params": rec["params"], "metrics": rec["metrics"], "objectives": [o["metric"] for o in pareto["objectives"]],
            "target": conf.get("target") if by_time else None}


def remeasure_time(config_path: str, recs: dict, rounds: int) -> dict:
    """When the searches recommended by time to target: each distinct recommended config trained
    as a confirmation run ``rounds`` times, interleaved (round k: every config once, seed 100 + k),
    and its time to one common target (the median of the searches' targets) read from each run;
    per config the mean and 95 % half-width (a run that never reaches it makes the mean inf)."""
    import statistics

    from tune_batch.config import load_config
    from tune_batch.confirm import first_reach
    from tune_batch.noise import mean_ci
    from tune_batch.repeats import seeded
    from tune_batch.trial.curve import confirm_run

    cfg = load_config(config_path)
    target = statistics.median(r["target"] for r in recs.values())
    print(f"  common target val_acc {target:.3f} (median of the searches' targets)")
    configs = sorted({(r["params"]["batch_size"], r["params"]["lr"]) for r in recs.values()})
    times: dict[tuple, list[float]] = {c: [] for c in configs}
    for k in range(rounds):
        for b, lr in configs:
            res = confirm_run(seeded(cfg, 100 + k), {"batch_size": b, "lr": lr, "num_gpus": 1}, trial_id=f"r{k}")
            hit = first_reach(res.info.curve or [], target) if res.status.value == "ok" else None
            times[(b, lr)].append(hit[0] if hit else math.inf)
            print(f"  round {k + 1}/{rounds}: batch_size {b} lr {lr:.3g}: {res.status.value}, time to target "
                  f"{times[(b, lr)][-1]:.3g} s", flush=True)
    out = {}
    for c, ts in times.items():
        mean, ci = mean_ci(ts) if all(math.isfinite(t) for t in ts) else (math.inf, None)
        out[c] = {"params": {"batch_size": c[0], "lr": c[1]}, "metrics": {"time_to_target_s": mean,
                  "time_to_target_s_ci": ci}, "objectives": ["time_to_target_s"]}
    return out


def _within_noise(a: dict, b: dict) -> bool:
    for m in a["objectives"]:
        tol = math.hypot(a["metrics"].get(f"{m}_ci") or 0.0, b["metrics"].get(f"{m}_ci") or 0.0)
        if not (math.isfinite(a["metrics"][m]) and math.isfinite(b["metrics"][m])) or \
                abs(a["metrics"][m] - b["metrics"][m]) > tol:
            return False
    return True


def remeasure(config_path: str, recs: dict, rounds: int) -> dict:
    """Each distinct recommended config trained ``rounds`` times, interleaved (round k: every
    config once with seed k); per config, each objective's mean and 95 % half-width."""
    from tune_batch.config import load_config
    from tune_batch.noise import mean_ci
    from tune_batch.repeats import seeded
    from tune_batch.trial import run_trial

    cfg = load_config(config_path)
    objectives = cfg.metric_names
    configs = {(r["params"]["batch_size"], r["params"]["lr"]) for r in recs.values()}
    runs: dict[tuple, list] = {c: [] for c in configs}
    for k in range(rounds):
        for b, lr in sorted(configs):
            res = run_trial(seeded(cfg, k), {"batch_size": b, "lr": lr, "num_gpus": 1})
            runs[(b, lr)].append(res)
            shown = ", ".join(f"{m} {res.metrics.value(m) or float('nan'):.4g}" for m in objectives)
            print(f"  round {k + 1}/{rounds}: batch_size {b} lr {lr:.3g}: {res.status.value} {shown}", flush=True)
    out = {}
    for c, rs in runs.items():
        ok = [r for r in rs if r.status.value == "ok"]
        stats = {}
        for m in objectives:
            mean, ci = mean_ci([r.metrics.value(m) for r in ok]) if ok else (float("nan"), None)
            stats[m], stats[f"{m}_ci"] = mean, ci
        out[c] = {"params": {"batch_size": c[0], "lr": c[1]}, "metrics": stats, "objectives": objectives}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default=str(REPO / "configs" / "quickstart.yaml"))
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--out", default=None, help="where the run directories go (default: a temp dir)")
    ap.add_argument("--reuse", action="store_true", help="read OUT/seedN that exist instead of running them")
    ap.add_argument("--remeasure", type=int, default=5, help="side-by-side rounds of the recommended configs (0: none)")
    args = ap.parse_args()
    out = Path(args.out or tempfile.mkdtemp(prefix="tb-stability-"))
    recs = {}
    for seed in args.seeds:
        run = out / f"seed{seed}"
        if not (args.reuse and (run / "pareto.json").exists()):
            t0 = time.time()
            p = subprocess.run([sys.executable, "-m", "tune_batch", "search", args.config, "--set", f"search.seed={seed}",
                                "--output", str(run), "--quiet"], capture_output=True, text=True, cwd=REPO)
            if p.returncode != 0:
                raise SystemExit(f"seed {seed}: exit {p.returncode}: {p.stderr[-2000:]}")
            print(f"seed {seed}: searched in {time.time() - t0:.0f} s")
        recs[seed] = _recommended(run)
        r = recs[seed]
        shown = ", ".join(f"{m} {r['metrics'][m]:.4g} +- {r['metrics'].get(f'{m}_ci') or 0:.3g}" for m in r["objectives"])
        print(f"seed {seed}: recommended batch_size {r['params']['batch_size']} lr {r['params']['lr']:.3g} ({shown})")
    same_batch = max(sum(1 for r in recs.values() if r["params"]["batch_size"] == b)
                     for b in {r["params"]["batch_size"] for r in recs.values()})
    pairs = list(itertools.combinations(args.seeds, 2))
    lr_ok = all(max(recs[a]["params"]["lr"], recs[b]["params"]["lr"]) / min(recs[a]["params"]["lr"], recs[b]["params"]["lr"]) <= 2
                for a, b in pairs if recs[a]["params"]["batch_size"] == recs[b]["params"]["batch_size"])
    noise_ok = [(a, b, _within_noise(recs[a], recs[b])) for a, b in pairs]
    for a, b, ok in noise_ok:
        print(f"seeds {a} and {b}: recommendations {'within' if ok else 'NOT within'} noise of each other in every objective")
    agree = same_batch >= 2 and lr_ok
    within = all(ok for *_, ok in noise_ok)
    if args.remeasure > 0 and len({(r["params"]["batch_size"], r["params"]["lr"]) for r in recs.values()}) > 1:
        print(f"re-measuring the recommended configs side by side, {args.remeasure} interleaved rounds:")
        by_time = all(r["target"] is not None for r in recs.values())
        side = (remeasure_time if by_time else remeasure)(args.config, recs, args.remeasure)
        for c, st in sorted(side.items()):
            shown = ", ".join(f"{m} {st['metrics'][m]:.4g} +- {st['metrics'][f'{m}_ci'] or 0:.3g}" for m in st["objectives"])
            print(f"  batch_size {c[0]} lr {c[1]:.3g}: {shown}")
        keyed = {seed: side[(r["params"]["batch_size"], r["params"]["lr"])] for seed, r in recs.items()}
        side_ok = [(a, b, _within_noise(keyed[a], keyed[b])) for a, b in pairs]
        for a, b, ok in side_ok:
            print(f"seeds {a} and {b}, side by side: {'within' if ok else 'NOT within'} noise of each other in every objective")
        within = all(ok for *_, ok in side_ok)
    print(f"same batch size in {same_batch} of {len(recs)} runs (learning rates within 2x: {lr_ok}); "
          f"all recommendations within noise of each other: {within}")
    print(f"RESULT same_batch={same_batch} runs={len(recs)} lr_within_2x={int(lr_ok)} within_noise={int(within)} "
          f"stable={int(agree or within)} remeasure_rounds={args.remeasure}")


if __name__ == "__main__":
    main()
