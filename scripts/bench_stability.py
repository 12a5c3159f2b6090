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
    return {"params": rec["params"], "metrics": rec["metrics"],
            "objectives": [o["metric"] for o in pareto["objectives"]],
            "target": conf.get("target") if by_time else None}


def _within_noise(a: dict, b: dict) -> bool:
    for m in a["objectives"]:
        tol = math.hypot(a["metrics"].get(f"{m}_ci") or 0.0, b["metrics"].get(f"{m}_ci") or 0.0)
        if not (math.isfinite(a["metrics"][m]) and math.isfinite(b["metrics"][m])) or \
                abs(a["metrics"][m] - b["metrics"][m]) > tol:
            return False
    return True


def _side_by_side(configs: list[tuple], rounds: int, objectives: list[str], measure) -> dict:
    """Each config measured ``rounds`` times, interleaved (round k: every config once);
    ``measure(k, batch_size, lr)`` gives (status, {objective: value} or None for a run that does
    not count). Per config, each objective's mean and 95 % half-width (inf when a run read inf)."""
    from tune_batch.analysis.noise import mean_ci

    runs: dict[tuple, list[dict]] = {c: [] for c in configs}
    for k in range(rounds):
        for b, lr in configs:
            status, values = measure(k, b, lr)
            if values is not None:
                runs[(b, lr)].append(values)
            shown = ", ".join(f"{m} {values[m]:.4g}" for m in objectives) if values else ""
            print(f"  round {k + 1}/{rounds}: batch_size {b} lr {lr:.3g}: {status} {shown}", flush=True)
    out = {}
    for c, vs in runs.items():
        stats: dict[str, float | None] = {}
        for m in objectives:
            xs = [v[m] for v in vs]
            mean, ci = ((math.nan, None) if not xs else (math.inf, None) if not all(map(math.isfinite, xs))
                        else mean_ci(xs))
            stats[m], stats[f"{m}_ci"] = mean, ci
        out[c] = {"params": {"batch_size": c[0], "lr": c[1]}, "metrics": stats, "objectives": objectives}
    return out


def remeasure(config_path: str, recs: dict, rounds: int) -> dict:
    """Each distinct recommended config trained ``rounds`` times side by side (round k: seed k),
    compared on the searches' objectives. When the searches recommended by time to target, the
    runs are confirmation runs (seed 100 + k) and the one objective is the time to one common
    target (the median of the searches' targets); a run that never reaches it reads inf."""
    import statistics

    from tune_batch.config import load_config
    from tune_batch.decide.confirm import first_reach
    from tune_batch.store.jobs import seeded
    from tune_batch.trial import run_trial
    from tune_batch.trial.curve import confirm_run

    cfg = load_config(config_path)
    configs = sorted({(r["params"]["batch_size"], r["params"]["lr"]) for r in recs.values()})
    if all(r["target"] is not None for r in recs.values()):
        target = statistics.median(r["target"] for r in recs.values())
        print(f"  common target val_acc {target:.3f} (median of the searches' targets)")

        def by_time(k: int, b: int, lr: float):
            res = confirm_run(seeded(cfg, 100 + k), {"batch_size": b, "lr": lr, "num_gpus": 1}, trial_id=f"r{k}")
            hit = first_reach(res.info.curve or [], target) if res.status.value == "ok" else None
            return res.status.value, {"time_to_target_s": hit[0] if hit else math.inf}

        return _side_by_side(configs, rounds, ["time_to_target_s"], by_time)

    def short(k: int, b: int, lr: float):
        res = run_trial(seeded(cfg, k), {"batch_size": b, "lr": lr, "num_gpus": 1})
        ok = res.status.value == "ok"
        return res.status.value, {m: res.metrics.value(m) for m in cfg.metric_names} if ok else None

    return _side_by_side(configs, rounds, cfg.metric_names, short)


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
            p = subprocess.run([sys.executable, "-m", "tune_batch", "search", args.config,
                                "--set", f"search.seed={seed}", "--output", str(run), "--quiet"],
                               capture_output=True, text=True, cwd=REPO)
            if p.returncode != 0:
                raise SystemExit(f"seed {seed}: exit {p.returncode}: {p.stderr[-2000:]}")
            print(f"seed {seed}: searched in {time.time() - t0:.0f} s")
        recs[seed] = _recommended(run)
        r = recs[seed]
        shown = ", ".join(f"{m} {r['metrics'][m]:.4g} +- {r['metrics'].get(f'{m}_ci') or 0:.3g}"
                          for m in r["objectives"])
        print(f"seed {seed}: recommended batch_size {r['params']['batch_size']} lr {r['params']['lr']:.3g} ({shown})")
    same_batch = max(sum(1 for r in recs.values() if r["params"]["batch_size"] == b)
                     for b in {r["params"]["batch_size"] for r in recs.values()})
    pairs = list(itertools.combinations(args.seeds, 2))
    lr_ok = all(max(recs[a]["params"]["lr"], recs[b]["params"]["lr"])
                / min(recs[a]["params"]["lr"], recs[b]["params"]["lr"]) <= 2
                for a, b in pairs if recs[a]["params"]["batch_size"] == recs[b]["params"]["batch_size"])
    noise_ok = [(a, b, _within_noise(recs[a], recs[b])) for a, b in pairs]
    for a, b, ok in noise_ok:
        print(f"seeds {a} and {b}: recommendations {'within' if ok else 'NOT within'} noise of each other "
              f"in every objective")
    agree = same_batch >= 2 and lr_ok
    within = all(ok for *_, ok in noise_ok)
    if args.remeasure > 0 and len({(r["params"]["batch_size"], r["params"]["lr"]) for r in recs.values()}) > 1:
        print(f"re-measuring the recommended configs side by side, {args.remeasure} interleaved rounds:")
        side = remeasure(args.config, recs, args.remeasure)
        for c, st in sorted(side.items()):
            shown = ", ".join(f"{m} {st['metrics'][m]:.4g} +- {st['metrics'][f'{m}_ci'] or 0:.3g}"
                              for m in st["objectives"])
            print(f"  batch_size {c[0]} lr {c[1]:.3g}: {shown}")
        keyed = {seed: side[(r["params"]["batch_size"], r["params"]["lr"])] for seed, r in recs.items()}
        side_ok = [(a, b, _within_noise(keyed[a], keyed[b])) for a, b in pairs]
        for a, b, ok in side_ok:
            print(f"seeds {a} and {b}, side by side: {'within' if ok else 'NOT within'} noise of each other "
                  f"in every objective")
        within = all(ok for *_, ok in side_ok)
    print(f"same batch size in {same_batch} of {len(recs)} runs (learning rates within 2x: {lr_ok}); "
          f"all recommendations within noise of each other: {within}")
    print(f"RESULT same_batch={same_batch} runs={len(recs)} lr_within_2x={int(lr_ok)} within_noise={int(within)} "
          f"stable={int(agree or within)} remeasure_rounds={args.remeasure}")


if __name__ == "__main__":
    main()
