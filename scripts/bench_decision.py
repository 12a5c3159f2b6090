"""Does the recommendation train fastest? Regret of the default search (with confirmation)
against the best config of a fully trained grid, in time to a target accuracy.

--measure   trains every point of a workload's grid (each batch size x a log grid of --lrs
            learning rates) for --length samples, validating --evaluations times along the way
            (the confirmation run of tune_batch, trial.curve.confirm_run), and stores the curves
            with the machine in --table. Minutes here: a script, not a test. Committed:
            benchmarks/decision_{quickstart,synthetic}_fine.json (65536 samples validated every
            512: the default tables), decision_*_long.json (the same, every 2048) and the first,
            shorter decision_{quickstart,synthetic}.json (16384 samples: no longer than the
            quickstart's own confirmation runs).
(default)   for each table and each --seeds seed: runs the default search of that workload as
            it ships (sampler, repeats and confirmation defaults; search.seed = seed) into a temp
            dir, then trains its recommendation and its other confirmed candidates side by side
            with the grid's best config (interleaved, the order rotated each round, so machine
            drift hits all), --runs times each with fresh seeds (not the grid's seed 0: the grid
            best is the argmin of one seed-0 run per config, and re-running that same seed would
            keep its luck), and reads the times to the target. A side-by-side run trains an eighth
            of the table's length at its validation spacing, then a quarter, then the whole length,
            each only when the target was not reached by the one before.
target      --target-fraction x the best val_acc any grid point reached (fixed per workload,
            before any search runs)
regret      median time_to_target(recommended) / median time_to_target(grid best) over the
            side-by-side runs (inf when the recommendation reaches the target in at most half);
            "the best of them": the same for the fastest confirmed candidate (did the confirmation
            hold a good config, whichever it picked)
prediction  the search's predicted time to its own target for each confirmed candidate (leave
            one out, from pareto.json) over the median of the --runs fresh runs at that target,
            read at the search's validation spacing (gns_pred_within_1_5x), and over the search's
            own confirmation runs (..._search_runs: the candidates were ranked on those, so the
            fastest one's time is low by selection)
agree       share of seeds whose recommendation has the modal batch size
compute     the search's trial-seconds (all its records: trials, repeats, confirmation runs,
            validations included) / the grid's training seconds (validations left out, so that
            validating the grid more often does not make the search look cheaper)

regret interval  each search's regret with a 95 % bootstrap interval over its side-by-side
            rounds (run k of every arm resampled together): how much of one search's regret is
            the fresh runs' own noise; and how many searches are above 1.5 beyond it
--reuse DIR no searching: each seed's search read back from an earlier run's --keep folder,
            only the side-by-side runs trained (more --runs for the same recommendations)
--summarize F ...  no training: the figures pooled over earlier runs' --json files or printed
            outputs (a printed output holds only the recommendation's and the grid best's runs)
--json F    also writes every workload's rows to F: per seed the recommendation, and for each arm
            (the grid best, the recommendation, the other confirmed candidates) its params, its
            fresh runs' times to target, their median and the search's prediction

--heldout   the successor: held-out workloads, a late target, a 3-seed oracle and five arms for
            what users do today (scripts/bench_heldout.py; its own options follow --heldout)

Usage: python scripts/bench_decision.py [--measure --config C --table T] [--seeds 1 2 3] [--json F] [--keep DIR]
       [--reuse DIR] [--runs N] [--gns-pairs N] | --summarize F [F ...]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import sys
import tempfile
import time
from collections import Counter
from itertools import combinations
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

REPO = Path(__file__).resolve().parents[1]
# full training 65536 samples (45 epochs of digits, 16 of the synthetic set: 16x / 32x a trial),
# validated every 512 samples (128 times: the targets are reached within the first 2048-8192);
# decision_*_long.json hold the same grids validated every 2048 samples (32 times), and
# decision_quickstart.json / decision_synthetic.json the first grids, at 16384 samples
TABLES = [REPO / "benchmarks" / "decision_quickstart_fine.json", REPO / "benchmarks" / "decision_synthetic_fine.json"]


def lr_grid(low: float, high: float, n: int) -> list[float]:
    return [float(f"{math.exp(math.log(low) + i * (math.log(high) - math.log(low)) / (n - 1)):.6g}") for i in range(n)]


def _full_config(cfg, length: int, evaluations: int):
    confirm = cfg.confirm.model_copy(update={"train_samples": length, "epochs": None, "evaluations": evaluations})
    budget = cfg.budget.model_copy(update={"trial_timeout_s": max(cfg.budget.trial_timeout_s, 1800.0)})
    return cfg.model_copy(update={"confirm": confirm, "budget": budget})


def full_run(cfg, params: dict, seed: int = 0) -> dict:
    """Train ``params`` in full (the confirmation run at the table's length); its record."""
    from tune_batch.store.jobs import seeded
    from tune_batch.trial.curve import confirm_run

    r = confirm_run(seeded(cfg, seed), params, trial_id="full")
    return r.to_record()


def ttt(curve: list, target: float) -> float:
    for _samples, train_s, acc, *_ in curve or []:
        if acc >= target:
            return train_s
    return math.inf


def measure(args: argparse.Namespace) -> None:
    import torch

    from tune_batch.config import load_config

    cfg = _full_config(load_config(args.config), args.length, args.evaluations)
    lrs = lr_grid(cfg.space.lr.low, cfg.space.lr.high, args.lrs)
    points = [(b, lr) for b in cfg.space.batch_choices() for lr in lrs]
    t0, records = time.time(), []
    for i, (b, lr) in enumerate(points, 1):
        rec = full_run(cfg, {"batch_size": b, "lr": lr, "num_gpus": 1})
        records.append(rec)
        best = max((c[2] for c in rec["info"].get("curve") or []), default=float("nan"))
        print(f"[{i}/{len(points)}] batch_size {b} lr {lr:.4g}: {rec['status']}, best val_acc {best:.3f}, "
              f"{rec['info'].get('train_s') or 0:.1f} s of training", flush=True)
    Path(args.table).write_text(json.dumps({
        "config_path": str(Path(args.config).resolve().relative_to(REPO)), "config": cfg.to_dict(),
        "length": args.length, "evaluations": args.evaluations, "lr_grid": lrs,
        "machine": {"host": platform.node(), "cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
                    "torch": torch.__version__, "device": records[0]["info"].get("device") if records else None},
        "measured_at": time.strftime("%Y-%m-%d %H:%M:%S"), "wall_s": time.time() - t0, "records": records}, indent=1))
    print(f"wrote {args.table} ({len(records)} points, {time.time() - t0:.0f} s)")


def _search(config_path: Path, seed: int, out: Path):
    from tune_batch.config import load_config
    from tune_batch.pipeline.search import search

    cfg = load_config(config_path, [f"search.seed={seed}"])
    defaults = type(cfg)()  # the shipped defaults of what the benchmark judges
    cfg = cfg.model_copy(update={"search": cfg.search.model_copy(update={"sampler": defaults.search.sampler}),
                                 "repeats": defaults.repeats,
                                 "confirm": cfg.confirm if "confirm" in _raw_keys(config_path) else defaults.confirm})
    t = time.time()
    res = search(cfg, out, quiet=True)
    spent = sum(r.duration_s for r in _records(out))
    return res, spent, time.time() - t


def _stored_search(out: Path):
    """A search kept by an earlier run (--keep), read back instead of searching again (--reuse):
    its recommendation as today's decision code reads its records, and its trial-seconds. A
    search seed does not fix a search's path on this machine (trial timings steer it), so the
    fresh runs of a stored search can be repeated only this way."""
    from types import SimpleNamespace

    from tune_batch.decide.recommend import decide
    from tune_batch.store.rundir import RunDir

    if not (out / "pareto.json").exists():
        raise SystemExit(f"--reuse: no stored search at {out} (keep one with --keep)")
    run = RunDir(out)
    records = run.records()[0]
    report = decide(run.load_config(), records)
    return SimpleNamespace(recommended=report.recommended, report=report), sum(r.duration_s for r in records), 0.0


def _raw_keys(path: Path) -> set[str]:
    from tune_batch.config.yamlio import read_yaml

    return set(read_yaml(path))


def _records(run: Path):
    from tune_batch.store.records import TrialResult

    return [TrialResult.from_record(json.loads(x)) for x in (run / "trials.jsonl").read_text().splitlines()
            if x.strip()]


def _times(xs: list[float]) -> str:
    return ", ".join(f"{x:.2f}" for x in xs)


def _confirmed(out: Path) -> tuple[list[dict], float | None, dict, list[float]]:
    """From the run's pareto.json: the search's confirmed candidates (trial id, params, curves),
    its own target, its predicted time to target per candidate (the gradient noise scale's, leave
    one out) and predicted / measured against its own confirmation runs."""
    conf = json.loads((out / "pareto.json").read_text()).get("confirmation") or {}
    checked = (conf.get("prediction") or {}).get("confirmed") or []
    predicted = {x["trial_id"]: x["predicted_s"] for x in checked if x.get("predicted_s")}
    return conf.get("candidates") or [], conf.get("target"), predicted, [x["ratio"] for x in checked if x.get("ratio")]


def side_run(cfg, params: dict, seed: int, target: float) -> list:
    """One fresh-seed run of ``params`` side by side with the others: its validation curve, at the
    table's validation spacing. Trains an eighth of the table's length (most targets here are
    reached within its first 2048-8192 samples), then a quarter, then the whole length, each only
    when ``target`` was not reached by the one before: a run's first validations do not depend on
    how long it goes on (the same seed, data order and steps), so a longer run only adds
    validations after the shorter one's."""
    length, evaluations = cfg.confirm.train_samples, cfg.confirm.evaluations
    curve: list = []
    for part in (8, 4, 1):
        n = length // part
        run_cfg = _full_config(cfg, n, max(1, round(evaluations * n / length))) if part > 1 else cfg
        curve = full_run(run_cfg, params, seed)["info"].get("curve") or []
        if math.isfinite(ttt(curve, target)):
            break
    return curve


def at_spacing(curve: list, samples: set[float]) -> list:
    """``curve`` read only at the validations the search's confirmation runs made (their sample
    counts): the search measured and predicted time to target at that spacing, and a finer one
    finds the crossing earlier (by half a spacing on average)."""
    return [c for c in curve if c[0] in samples]


def one_table(path: Path, seeds: list[int], fraction: float, keep: Path | None = None, runs: int = 5,
              reuse: Path | None = None) -> dict:
    from tune_batch.config import config_from_dict

    table = json.loads(path.read_text())
    cfg = config_from_dict(table["config"])
    ok = [r for r in table["records"] if r["status"] == "ok"]
    best_acc = max(c[2] for r in ok for c in r["info"]["curve"])
    target = fraction * best_acc
    times = {(r["params"]["batch_size"], r["params"]["lr"]): ttt(r["info"]["curve"], target) for r in ok}
    best_point = min(times, key=times.get)
    grid_s = sum(r["info"].get("train_s") or r["duration_s"] for r in table["records"])
    print(f"\n{path.name}: {len(table['records'])} grid points trained for {table['length']} samples "
          f"({grid_s:.0f} s of training); target val_acc {target:.3f} ({fraction:g} x best {best_acc:.3f}); "
          f"grid best: batch_size {best_point[0]} lr {best_point[1]:.3g} at {times[best_point]:.2f} s")
    rows = []
    for seed in seeds:
        with tempfile.TemporaryDirectory(prefix="tb-decision-") as tmp:
            if reuse is not None:
                out = reuse / f"{path.stem}-seed{seed}"
                res, spent, wall = _stored_search(out)
            else:
                out = keep / f"{path.stem}-seed{seed}" if keep is not None else Path(tmp) / "run"
                res, spent, wall = _search(REPO / table["config_path"], seed, out)
            candidates, search_target, predicted, ratios = _confirmed(out)
        rec = res.recommended
        if rec is None:
            rows.append({"seed": seed, "batch_size": None, "lr": None, "regret": math.inf, "compute": spent / grid_s,
                         "pred": ratios, "pred_fresh": [], "oracle": math.inf})
            print(f"seed {seed}: no recommendation ({wall:.0f} s)")
            continue
        # side by side, interleaved: the grid's best, the recommendation and the search's other
        # confirmed candidates, each --runs times, run k of all with the same fresh seed (data
        # order and initialisation), the order rotated each round so no config always runs first
        arms = {"best": {"batch_size": best_point[0], "lr": best_point[1], "num_gpus": 1},
                rec.trial_id: {"batch_size": rec.params.batch_size, "lr": rec.params.lr, "num_gpus": 1}}
        for c in candidates:
            arms.setdefault(c["trial_id"], {**c["params"], "num_gpus": 1})
        got: dict = {k: [] for k in arms}
        for k in range(runs):
            run_seed = 1000 * seed + k + 1
            keys = list(arms)
            for key in keys[k % len(keys):] + keys[:k % len(keys)]:
                got[key].append(side_run(cfg, arms[key], run_seed, target))
        times = {key: [ttt(c, target) for c in curves] for key, curves in got.items()}
        med = {key: statistics.median(ts) for key, ts in times.items()}
        base, r1 = med["best"], med[rec.trial_id]
        regret = r1 / base if math.isfinite(r1) else math.inf
        pairs = [r / b for r, b in zip(times[rec.trial_id], times["best"])]
        oracle = min(med[key] for key in arms if key != "best") / base
        # the search's prediction against this benchmark's fresh runs, at the search's own target and
        # validation spacing
        spacing = {x for c in candidates for run in c.get("curves") or [] for x in run["samples"]}
        fresh = []
        for key, pred_s in predicted.items():
            if key in got and search_target:
                measured = statistics.median(ttt(at_spacing(c, spacing), search_target) for c in got[key])
                fresh.append(pred_s / measured if math.isfinite(measured) and measured > 0 else math.inf)
        rows.append({"seed": seed, "batch_size": rec.params.batch_size, "lr": rec.params.lr, "regret": regret,
                     "compute": spent / grid_s, "how": res.report.method, "pred": ratios, "pred_fresh": fresh,
                     "oracle": oracle, "recommended": rec.trial_id,
                     # every arm's fresh runs (times to the benchmark's target, s), for scripts that
                     # re-read the pick among the candidates without parsing the printed medians
                     "arms": [{"key": key, **arms[key], "times_s": times[key],
                               "median_s": med[key], "predicted_s": predicted.get(key)} for key in arms]})
        cand = "; ".join(f"{arms[key]['batch_size']}/{arms[key]['lr']:.3g} {med[key]:.2f}" for key in arms
                         if key != "best")
        print(f"seed {seed}: recommended batch_size {rec.params.batch_size} lr {rec.params.lr:.3g} "
              f"({res.report.method.split(':')[0]}); time to target {_times(times[rec.trial_id])} s "
              f"vs grid best {_times(times['best'])} s: regret {regret:.2f} (run pairs "
              f"{min(pairs):.2f}-{max(pairs):.2f}); medians of the confirmed (batch/lr s): {cand}, the best of them "
              f"{oracle:.2f} x the grid best; search {spent:.0f} trial-s = {spent / grid_s:.2f} of the grid "
              f"({wall:.0f} s wall); predicted/measured time to target of the confirmed, against the search's "
              f"runs: {', '.join(f'{x:.2f}' for x in ratios) or 'none'}, against the {runs} fresh runs: "
              f"{', '.join(f'{x:.2f}' for x in fresh) or 'none'}", flush=True)
    return {"name": path.name, "target": target, "grid_best": {"batch_size": best_point[0], "lr": best_point[1]},
            "grid_train_s": grid_s, "rows": rows}


def gns_overhead(pairs: int) -> tuple[float, float, float, float | None]:
    """Side by side, interleaved: quickstart trials (batch 64, lr 0.04) with the gradient noise
    scale estimated (budget.gns_batches default) and without (0). Returns (median step-time ratio
    - 1, its spread as the half range of the ratios, median share of a trial's training seconds
    the estimate took, outside the window, 95 % half-width of the mean ratio over the pairs)."""
    from tune_batch.analysis.noise import mean_ci
    from tune_batch.config import load_config
    from tune_batch.trial import run_trial

    on = load_config(REPO / "configs" / "quickstart.yaml")
    off = on.model_copy(update={"budget": on.budget.model_copy(update={"gns_batches": 0})})
    params = {"batch_size": 64, "lr": 0.04, "num_gpus": 1}
    ratios, costs = [], []
    for i in range(pairs):
        first, second = (on, off) if i % 2 == 0 else (off, on)
        a, b = run_trial(first, params), run_trial(second, params)
        r_on, r_off = (a, b) if first is on else (b, a)
        ratios.append(r_on.metrics.step_time_s / r_off.metrics.step_time_s)
        costs.append(r_on.info.gns_cost_frac)
        print(f"gns pair {i + 1}/{pairs}: step time with/without {ratios[-1]:.3f}, estimate took "
              f"{costs[-1]:.3f} of the trial's training, B_simple {r_on.metrics.grad_noise_scale}", flush=True)
    spread = (max(ratios) - min(ratios)) / 2
    return statistics.median(ratios) - 1.0, spread, statistics.median(costs), mean_ci(ratios)[1]


def regret_interval(rec: list[float], best: list[float], reps: int = 4000, seed: int = 0) -> tuple[float, float]:
    """95 % bootstrap interval of one search's regret (median time of the recommendation over the
    median of the grid's best) from its side-by-side runs alone: the rounds resampled with
    replacement, run k of both arms together (they share a fresh seed and a moment of the
    machine). How much of a regret is the fresh runs' own noise."""
    import random

    rng = random.Random(seed)
    idx = range(min(len(rec), len(best)))
    got = []
    for _ in range(reps):
        pick = rng.choices(idx, k=len(idx))
        b = statistics.median(best[i] for i in pick)
        got.append(statistics.median(rec[i] for i in pick) / b if b > 0 else math.inf)
    got.sort()
    return got[int(0.025 * reps)], got[int(0.975 * reps) - 1]


def parse_output(path: Path) -> dict:
    """The rows of a printed bench_decision output (runs before --json existed): per seed the
    regret, the recommendation's and the grid best's fresh-run times, the predictions' ratios,
    compute and the best confirmed candidate's regret; the other arms' runs were printed only as
    medians, so they are missing. The GNS overhead line's figures where printed."""
    import re

    workloads: list[dict] = []
    gns: dict = {}
    for line in path.read_text().splitlines():
        m = re.match(r"(\S+\.json): .*grid best: batch_size (\d+) lr (\S+) at", line)
        if m:
            workloads.append({"name": m.group(1), "rows": []})
            continue
        m = re.match(r"gradient noise scale: step time ([-+.\d]+) .*took ([.\d]+) of a trial", line)
        if m:
            gns = {"gns_overhead": float(m.group(1)), "gns_overhead_ci": None, "gns_trial_cost": float(m.group(2))}
        m = re.match(r"seed (\d+): recommended batch_size (\d+) lr (\S+) .*?time to target ([^s]+) s vs grid best "
                     r"([^s]+) s: regret (\S+) .*the best of them (\S+) x the grid best; search \S+ trial-s = (\S+) "
                     r"of the grid .*against the search's runs: ([^,]*(?:, [^,a-z]*)*), "
                     r"against the \d+ fresh runs: (.*)$", line)
        if m and workloads:
            nums = lambda t: [float(x) for x in t.replace(",", " ").split() if x != "none"]  # noqa: E731
            rec, best = nums(m.group(4)), nums(m.group(5))
            workloads[-1]["rows"].append({
                "seed": int(m.group(1)), "batch_size": int(m.group(2)), "lr": float(m.group(3)),
                "regret": float(m.group(6)), "oracle": float(m.group(7)), "compute": float(m.group(8)),
                "pred": nums(m.group(9)), "pred_fresh": nums(m.group(10)),
                "arms": [{"key": "best", "times_s": best}, {"key": "recommended", "times_s": rec}],
                "recommended": "recommended", "parsed_from": str(path.name)})
    return {"workloads": workloads, **gns}


def summarize(results: list[dict], runs: int, gns: dict) -> None:
    """The figures over every search of ``results`` (each workload's rows), and the RESULT line."""
    from bench_search import median_interval  # scripts/ is on sys.path when a script runs

    overhead, ci, cost = gns.get("gns_overhead"), gns.get("gns_overhead_ci"), gns.get("gns_trial_cost")
    nan = math.nan
    regrets = [r["regret"] for res in results for r in res["rows"]]
    agree = [max(Counter(r["batch_size"] for r in res["rows"]).values()) / len(res["rows"]) for res in results]
    compute = [r["compute"] for res in results for r in res["rows"]]
    preds = [x for res in results for r in res["rows"] for x in r["pred"]]
    fresh = [x for res in results for r in res["rows"] for x in r["pred_fresh"]]
    within = sum(1 for x in preds if 1 / 1.5 <= x <= 1.5)
    within_fresh = sum(1 for x in fresh if 1 / 1.5 <= x <= 1.5)
    for name, xs, n in (("the search's own confirmation runs", preds, within),
                        (f"the median of {runs} fresh runs", fresh, within_fresh)):
        print(f"time to target predicted from the gradient noise scale / measured by {name}, every confirmed "
              f"candidate: {n} of {len(xs)} within 1.5x (median {statistics.median(xs) if xs else nan:.2f}, "
              f"range {min(xs, default=nan):.2f}-{max(xs, default=nan):.2f})")
    oracles = [r["oracle"] for res in results for r in res["rows"]]
    # the floor under any prediction checked against runs: how often two fresh runs of one config
    # (same code, same machine, other seeds) are within 1.5x of each other
    pairs = [max(a, b) / min(a, b) for res in results for r in res["rows"] for arm in r.get("arms", [])
             for a, b in combinations(arm["times_s"], 2) if math.isfinite(a) and math.isfinite(b) and min(a, b) > 0]
    floor = sum(1 for x in pairs if x <= 1.5) / len(pairs) if pairs else nan
    print(f"fresh runs of one config against each other (the seeds' own spread): {floor:.2f} of {len(pairs)} "
          f"pairs within 1.5x")
    finite = [x for x in regrets if math.isfinite(x)]
    lo, hi = median_interval(finite) if len(finite) == len(regrets) and finite else (math.inf, math.inf)
    print(f"regret median {statistics.median(regrets):.3f}, 95 % bootstrap interval over the searches "
          f"[{lo:.3f}, {hi:.3f}] ({len(regrets)} searches)")
    # each search's regret with its own interval from its fresh runs (rounds resampled)
    beyond, upper = 0, []
    for res in results:
        for r in res["rows"]:
            arms = {a["key"]: a["times_s"] for a in r.get("arms", [])}
            rec, best = arms.get(r.get("recommended")), arms.get("best")
            if not rec or not best:
                continue
            a, b = regret_interval(rec, best)
            upper.append(a)
            beyond += a > 1.5
            print(f"  {res['name']} seed {r['seed']}: regret {r['regret']:.2f} [{a:.2f}, {b:.2f}] over its {len(rec)} "
                  f"side-by-side rounds")
    print(f"searches whose regret is above 1.5 beyond the fresh runs' noise (interval's low end > 1.5): {beyond} "
          f"of {len(upper)}")
    print("\nregret per workload and seed: " + "; ".join(
        f"{res['name']}: " + ", ".join(f"{r['regret']:.2f}" for r in res["rows"]) for res in results))
    print(f"RESULT tta_regret_median={statistics.median(regrets):.3f} tta_regret_worst={max(regrets):.3f} "
          f"agree={min(agree):.2f} search_compute_frac={statistics.median(compute):.3f} "
          f"gns_overhead={overhead if overhead is not None else nan:.4f} "
          f"gns_trial_cost={cost if cost is not None else nan:.4f} "
          f"gns_pred_within_1_5x={within_fresh / len(fresh) if fresh else nan:.2f} "
          f"gns_pred_within_1_5x_search_runs={within / len(preds) if preds else nan:.2f} "
          f"confirmed_best_regret_worst={max(oracles):.3f} runs={runs} "
          f"tta_regret_median_lo={lo:.3f} tta_regret_median_hi={hi:.3f} "
          f"gns_overhead_ci={ci if ci is not None else nan:.4f} "
          f"fresh_pairs_within_1_5x={floor:.2f} searches={len(regrets)} tta_regret_over_1_5_beyond_noise={beyond}")


def main() -> None:
    if "--heldout" in sys.argv[1:]:  # the held-out benchmark with its five baseline arms (bench_heldout.py)
        from bench_heldout import main as heldout

        heldout(sys.argv[1:])
        return
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--measure", action="store_true")
    ap.add_argument("--config", default=str(REPO / "configs" / "quickstart.yaml"))
    ap.add_argument("--table", default=None)
    ap.add_argument("--length", type=int, default=65536, help="samples of full training (--measure)")
    ap.add_argument("--evaluations", type=int, default=128, help="validations along a full run (--measure)")
    ap.add_argument("--lrs", type=int, default=5, help="learning rates in the grid (--measure)")
    ap.add_argument("--tables", nargs="+", default=[str(t) for t in TABLES])
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--target-fraction", type=float, default=0.95)
    ap.add_argument("--runs", type=int, default=5,
                    help="fresh-seed runs of the grid best, the recommendation and each confirmed candidate")
    ap.add_argument("--keep", type=Path, default=None, help="keep each search's output under this folder")
    ap.add_argument("--gns-pairs", type=int, default=5, help="side-by-side trial pairs for the GNS overhead")
    ap.add_argument("--json", type=Path, default=None,
                    help="also write every workload's rows (each arm's fresh-run times) to this JSON file")
    ap.add_argument("--reuse", type=Path, default=None,
                    help="no searching: read each seed's search from this folder (an earlier run's --keep) and "
                         "train only the side-by-side runs")
    ap.add_argument("--summarize", type=Path, nargs="+", default=None,
                    help="no training: the figures pooled over earlier runs' --json files (or printed outputs, "
                         "whose other arms' runs are missing)")
    args = ap.parse_args()
    if args.summarize:
        loaded = [json.loads(f.read_text()) if f.suffix == ".json" else parse_output(f) for f in args.summarize]
        merged: dict[str, dict] = {}  # one workload's searches from every file together
        for d in loaded:
            for w in d["workloads"]:
                merged.setdefault(w["name"], {**w, "rows": []})["rows"] += w["rows"]
        results = list(merged.values())
        gns = next((d for d in loaded if d.get("gns_overhead_ci") is not None), loaded[0])
        print(f"pooled over {', '.join(f.name for f in args.summarize)}; the GNS overhead of "
              f"{args.summarize[loaded.index(gns)].name}")
        summarize(results, args.runs, gns)
        return
    if args.measure:
        if not args.table:
            raise SystemExit("--measure needs --table")
        measure(args)
        return
    missing = [t for t in args.tables if not Path(t).exists()]
    if missing:
        raise SystemExit(f"{missing} missing: run python scripts/bench_decision.py --measure --config C --table T "
                         f"first")
    overhead = spread = cost = ci = None
    if args.gns_pairs > 0:
        overhead, spread, cost, ci = gns_overhead(args.gns_pairs)
        print(f"gradient noise scale: step time {overhead:+.3f} (+- {spread:.3f}, half range over {args.gns_pairs} "
              f"pairs; the mean ratio's 95 % half-width {ci if ci is not None else float('nan'):.3f}) with it on; "
              f"it runs "
              f"after validation, outside the timed window, and took {cost:.3f} of a trial's training seconds (median)")
    results = [one_table(Path(t), args.seeds, args.target_fraction, args.keep, args.runs, args.reuse)
               for t in args.tables]
    gns = {"gns_overhead": overhead, "gns_overhead_ci": ci, "gns_trial_cost": cost}
    if args.json:
        args.json.write_text(json.dumps({"seeds": args.seeds, "runs": args.runs,
                                         "target_fraction": args.target_fraction, **gns, "workloads": results},
                                        indent=1, default=lambda x: None))
        print(f"wrote {args.json}")
    summarize(results, args.runs, gns)

if __name__ == "__main__":
    main()
