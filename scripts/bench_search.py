"""Search quality: how close each sampler gets to the full grid's Pareto front, for how much compute.

--measure   trains every point of a config's grid for real (every batch size x a log grid of
            learning rates, num_gpus 1), --repeats times interleaved, and stores the median record
            of each point with the machine in --table. Minutes on the 2-core machine: a script,
            not a test. Thirteen grids are committed under benchmarks/ (<name>_grid.json, each with
            its config <name>_grid.yaml but the quickstart's, configs/quickstart.yaml).
(default)   replays searches against the tables: a trial's result is looked up, not trained,
            through tune_batch's own Objective (policy, feasibility model, Optuna seam). Samplers:
            grid (Optuna's GridSampler: the grid in random order), random, tpe, nsga2, gp, and tpe
            seeded with the batch-size ladder exactly as a search ships it (tpe+ladder); gp and tpe
            as a search builds them (the scaling probe, search.scale_probe, on), gp-noprobe and
            tpe-noprobe without it (as they shipped before the scaling probe, 2026-12-01), and
            gp-optuna-startup (gp as it shipped before its random start counted budget trials
            only: Optuna's own n_startup_trials, which counts free skips); the
            feasibility model on; at 10 %, 25 % and 50 % of the grid, over --seeds seeds; on every
            table under no cap and caps putting about 20 %, 40 % and 60 % of its batch sizes out of
            memory; a proposal the feasibility model skips uses no trial, as in a search (free_skip).
            Continuous learning rates are snapped to the nearest grid value (in log space).
            A point whose measured peak exceeds the cap is an `oom` trial costing its set-up time
            (duration_s - timed_s); a skipped trial costs nothing. The objectives scored are those
            of configs/quickstart.yaml as shipped (--objectives). As in a search, the sampler is
            told each trial's samples/s as the mean over the runs of its batch size so far
            (Policy.told), the record keeps the point's own reading.

Training seeds: --measure trains repeat r of every point with search.seed + r (data order,
            initialisation, validation split), and keeps each seed's status and val_acc
            (seed_runs). The first twelve grids were measured with one seed for all repeats,
            then (2026-12-02) their three seeds' runs were measured and
            merged in, their samples/s left as first measured (seed_runs_measured in each table);
            on 2026-12-03 seeds 3, 4 and 5 of all thirteen were added the same
            way (--add-seeds 3; seed_runs_added). A replayed search with seed s reads seed
            (s mod the table's seed count)'s landscape, as a real search trains every trial with
            its one search.seed; it is scored at the mean over seeds.

hv_frac      hypervolume of the configs a search found / the full grid's, each config scored at
             the best estimate of its truth: val_acc the mean over its training seeds (feasible
             when most seeds' runs were; a diverged run counts at chance), samples/s the
             median of all runs of its batch size (every learning rate: the step's work does not
             depend on it; the script checks that on each grid, "samples/s vs learning rate").
             Objectives scaled to [0, 1] by the full grid's feasible ranges; reference point -0.1.
             This is also what a search reports: its front pools samples/s over every run of the
             same step (tune_batch.analysis.points). A found set is part of the grid: never above 1.
hv_frac single reading
             the same ratio with each point's own median of 3 as its samples/s and the search's
             seed's val_acc, in the found set and that seed's grid alike (the headline until
             2026-12-01). Its grid front holds points that
             are on it only because one reading came out high (synthetic grid, batch 32: 7600
             samples/s at lr 0.0025 against 6240-6962 at the other five, runs 5794-7970), which a
             search hits by luck.
compute_frac trial-seconds spent / trial-seconds of the whole grid
The default is judged by its worst case over grids and caps at 25 %, and against random search;
both scores are printed, and the default against random search paired over seeds (the same
seed; since the start-up's learning rates are stratified (2026-12-01), they
no longer start from the same proposals), with a sign-flip test per case. Thirteen grids: quickstart,
synthetic (small CNNs, SGD), mlp (an MLP on digits), adam (a small CNN with Adam), mlp_adam (an
MLP with Adam on synthetic images), deep_mlp (a 4 x 256 MLP with SGD on synthetic images),
mlp3_digits (a 3 x 128 MLP with SGD on digits), rmsprop_cnn (a small CNN with RMSprop on
digits at 28 px), nesterov_mlp (a 2 x 512 MLP, Nesterov SGD; a ceiling grid) and plain_sgd_mlp
(a 3 x 192 MLP, SGD without momentum, on digits at 12 px), plain_sgd_cnn (a small CNN, SGD
without momentum, on synthetic images at 16 px), half_momentum_cnn (a small CNN, SGD at
momentum 0.5, on digits at 20 px; measured after the far-end walk) and wd_cnn (a small CNN, SGD
at momentum 0.9 with weight decay, on synthetic images at 24 px; measured with three seeds from
the start, 2026-12-03, after the default it scores was fixed); adam was measured only after the
default was chosen on the other three, mlp_adam only after gp became the default, deep_mlp
after the random start counted budget trials only, mlp3_digits after the scaling probe became
the default, rmsprop_cnn after the probe walked down too, nesterov_mlp and plain_sgd_mlp after
the probe took edges from past-the-peak trials, plain_sgd_cnn after the start-up was
stratified (2026-12-01): held-out checks (docs/benchmarks.md, "Choosing the sampler").

Usage: python scripts/bench_search.py [--measure --config C --table T] [--seeds 20]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

REPO = Path(__file__).resolve().parents[1]
TABLE = REPO / "benchmarks" / "quickstart_grid.json"


def lr_grid(low: float, high: float, n: int) -> list[float]:
    return [float(f"{math.exp(math.log(low) + i * (math.log(high) - math.log(low)) / (n - 1)):.6g}") for i in range(n)]


def seeded(cfg, seed: int):
    """``cfg`` with ``search.seed`` set: the seed of data order, initialisation and validation split."""
    return cfg.model_copy(update={"search": cfg.search.model_copy(update={"seed": seed})})


def seed_run(seed: int, rec: dict) -> dict:
    """One seed's outcome of a grid point as a table keeps it (``seed_runs``): what a replayed
    search with that landscape reads."""
    return {"seed": seed, "status": rec["status"], "reason": rec["reason"], "duration_s": rec["duration_s"],
            "val_acc": rec["metrics"].get("val_acc")}


def measure(args: argparse.Namespace) -> None:
    import torch

    from tune_batch.config import load_config
    from tune_batch.trial import run_trial

    cfg = load_config(args.config)
    lrs = lr_grid(cfg.space.lr.low, cfg.space.lr.high, args.lrs)
    points = [(b, lr) for b in cfg.space.batch_choices() for lr in lrs]
    runs: dict[tuple[int, float], list[dict]] = {p: [] for p in points}
    t0 = time.time()
    raw = TABLE.with_suffix(".runs.jsonl")
    raw.unlink(missing_ok=True)
    print(f"each run is appended to {raw} as it ends")
    # repeats are interleaved (the whole grid, then again), so slow drift of a shared machine
    # spreads over every point instead of biasing some; each point keeps the median run of the
    # step-work metrics. Repeat r trains with search.seed + r (data order, initialisation, the
    # validation split): a trial's val_acc is one seed's, and a search sees one seed's landscape
    seeds = [cfg.search.seed + rep for rep in range(args.repeats)]
    for rep, seed in enumerate(seeds):
        with_seed = seeded(cfg, seed)
        for i, (b, lr) in enumerate(points, 1):
            res = run_trial(with_seed, {"batch_size": b, "lr": lr, "num_gpus": 1}, trial_id=i - 1)
            rec = res.to_record()
            # what else used the machine during its window (trial.measure: other processes' CPU, steal)
            rec["info"] = {k: rec["info"].get(k) for k in ("device", "timed_steps", "peak_mem_method", "bottleneck",
                                                           "others_cpu_frac", "steal_frac", "disturbed")}
            rec["traceback"] = None
            runs[(b, lr)].append(rec)
            with raw.open("a") as f:  # every run kept as it ends: a crash later loses nothing measured
                f.write(json.dumps(rec) + "\n")
            m = res.metrics
            print(f"[repeat {rep + 1}/{args.repeats}, seed {seed}, {i}/{len(points)}] batch_size {b} lr {lr:.4g}: "
                  f"{res.status} "
                  f"{m.samples_per_s or 0:.0f} samples/s, util {m.device_util or 0:.3f}, "
                  f"val_acc {m.val_acc or 0:.3f}, peak {(m.peak_mem_bytes or 0) / 2**20:.1f} MiB, "
                  f"{res.duration_s:.1f} s" + (" (disturbed window: another process used the machine)"
                                               if rec["info"].get("disturbed") else ""), flush=True)
    records = []
    for reps in runs.values():
        ok = [r for r in reps if r["status"] == "ok"]
        shaken = sum(1 for r in reps if r["info"].get("disturbed"))  # its runs with a disturbed window
        # each seed's outcome, in seed order: what a search with that seed would read (Replay)
        by_seed = [seed_run(seed, r) for seed, r in zip(seeds, reps)]
        if not ok:
            records.append({**reps[0], "repeats": len(reps), "disturbed_runs": shaken, "seed_runs": by_seed})
            continue
        # a metric a run could not measure (the noise scale from too few batches, say) is absent
        # from its record: the median of the runs that have it
        keys = sorted({k for r in ok for k in r["metrics"]})
        metrics = {k: statistics.median(v) for k in keys
                   if (v := [r["metrics"][k] for r in ok if r["metrics"].get(k) is not None])}
        records.append({**ok[0], "metrics": metrics, "duration_s": statistics.median(r["duration_s"] for r in ok),
                        "repeats": len(reps), "disturbed_runs": shaken, "seed_runs": by_seed,
                        "samples_per_s_runs": [r["metrics"]["samples_per_s"] for r in ok]})
    disturbed = sum(r["disturbed_runs"] for r in records)
    print(f"disturbed windows: {disturbed} of {sum(map(len, runs.values()))} runs (other processes' CPU time or steal "
          f"during the timed window; a point keeps the median of its runs)")
    TABLE.parent.mkdir(exist_ok=True)
    TABLE.write_text(json.dumps({
        "config": cfg.to_dict(), "lr_grid": lrs, "batch_sizes": cfg.space.batch_choices(), "seeds": seeds,
        "machine": {"host": platform.node(), "cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
                    "torch": torch.__version__, "python": platform.python_version(),
                    "device": records[0]["info"].get("device") if records else None},
        "measured_at": time.strftime("%Y-%m-%d %H:%M:%S"), "wall_s": time.time() - t0, "records": records,
    }, indent=1))
    print(f"wrote {TABLE} ({len(records)} points x {args.repeats} repeats, {time.time() - t0:.0f} s, "
          f"{disturbed} disturbed windows)")


def add_seeds(args: argparse.Namespace) -> None:
    """--add-seeds K: trains K more training seeds of every point of an existing table (--table),
    the seeds after its last, each seed's whole grid in turn as --measure does, and appends each
    run's status and val_acc to its point's seed_runs (seed order: a replayed search with seed s
    then reads seed s mod len(seeds)). samples/s and the other step-work metrics stay as first
    measured, so what changes is the number of landscapes and the truth's mean alone. Every run
    is appended to <table>.seeds<first>-<last>.runs.jsonl as it ends; the table is written once,
    at the end."""
    import torch

    from tune_batch.config import config_from_dict
    from tune_batch.trial import run_trial

    table = json.loads(TABLE.read_text())
    if not table.get("seeds") or not all(r.get("seed_runs") for r in table["records"]):
        raise SystemExit(f"{TABLE}: no seed_runs to add to (measure it with --measure first)")
    cfg = config_from_dict(table["config"])
    have = list(table["seeds"])
    new = list(range(max(have) + 1, max(have) + 1 + args.add_seeds))
    raw = TABLE.with_name(f"{TABLE.stem}.seeds{new[0]}-{new[-1]}.runs.jsonl")
    raw.unlink(missing_ok=True)
    print(f"{TABLE.name}: seeds {have} + {new}; each run is appended to {raw} as it ends")
    t0, disturbed, runs = time.time(), 0, 0
    for seed in new:
        with_seed = seeded(cfg, seed)
        for i, point in enumerate(table["records"], 1):
            b, lr = point["params"]["batch_size"], point["params"]["lr"]
            res = run_trial(with_seed, {"batch_size": b, "lr": lr, "num_gpus": 1}, trial_id=i - 1)
            rec = res.to_record()
            shaken = bool(rec["info"].get("disturbed"))
            disturbed += shaken
            runs += 1
            with raw.open("a") as f:
                f.write(json.dumps({"seed": seed, "params": rec["params"], "status": rec["status"],
                                    "reason": rec["reason"], "duration_s": rec["duration_s"],
                                    "metrics": rec["metrics"], "disturbed": shaken}) + "\n")
            point["seed_runs"].append(seed_run(seed, rec))
            print(f"[seed {seed}, {i}/{len(table['records'])}] batch_size {b} lr {lr:.4g}: {res.status} "
                  f"val_acc {res.metrics.val_acc or 0:.3f}, {res.duration_s:.1f} s"
                  + (" (disturbed window)" if shaken else ""), flush=True)
    table["seeds"] = have + new
    table.setdefault("seed_runs_added", []).append({
        "at": time.strftime("%Y-%m-%d %H:%M:%S"), "wall_s": round(time.time() - t0), "seeds": new,
        "runs": str(raw.relative_to(REPO)) if raw.is_relative_to(REPO) else str(raw),
        "machine": {"host": platform.node(), "cpu": platform.processor() or platform.machine(),
                    "cores": os.cpu_count(), "torch": torch.__version__, "python": platform.python_version()},
        "disturbed_windows": disturbed,
        "how": "python scripts/bench_search.py --add-seeds with this table's stored config, search.seed set to each "
               "new seed; only each run's status and val_acc are merged (seed_runs)"})
    TABLE.write_text(json.dumps(table, indent=1))
    print(f"wrote {TABLE} (seeds {table['seeds']}, {runs} runs, {time.time() - t0:.0f} s, "
          f"{disturbed} disturbed windows)")


class Replay:
    """Looks trial results up in the measured grid, under an optional memory cap.

    A table measured with a training seed per repeat (``seed_runs``) holds one landscape per
    seed: a search with ``landscape`` k reads every trial's status and val_acc from seed k's run
    (a real search trains every trial with its one ``search.seed``), and a config's truth is its
    mean over the seeds (``truth``). A table without them is one landscape, its own truth.
    """

    def __init__(self, table: dict, cap_bytes: float | None, objectives: list[str] | None = None) -> None:
        from tune_batch.config import config_from_dict

        raw = dict(table["config"])
        if objectives:  # score the objectives tune_batch ships, whatever the table was measured for
            raw["objectives"] = [{"metric": m, "direction": "maximize"} for m in objectives]
        self.config = config_from_dict(raw)
        self.lrs = table["lr_grid"]
        self.cap = cap_bytes
        self.by_point = {(r["params"]["batch_size"], r["params"]["lr"]): r for r in table["records"]}
        # the work of a step does not depend on the learning rate: each batch size's samples/s is
        # best estimated by the median of all its runs, at every learning rate (18 runs, not 3)
        pooled: dict[int, list[float]] = {}
        for (b, _lr), r in self.by_point.items():
            pooled.setdefault(b, []).extend(r.get("samples_per_s_runs") or [])
        self.sps_pooled = {b: statistics.median(v) for b, v in pooled.items() if v}
        self.peaks = batch_peaks(table)  # a diverged or failed point has none: its batch size's
        runs = [r.get("seed_runs") for r in self.by_point.values()]
        self.landscapes = len(runs[0]) if runs and all(runs) else 1
        self.truth = {point: truth_of(r, self.config.model.num_classes) for point, r in self.by_point.items()}

    def snap(self, lr: float) -> float:
        return min(self.lrs, key=lambda v: abs(math.log(v) - math.log(lr)))

    def lookup(self, b: int, lr: float, landscape: int | None = None):  # -> (TrialResult, trial-seconds)
        """(the record as it would have come out under the cap, trial-seconds it cost): seed
        ``landscape``'s run where the table has one per seed (its step-work metrics the point's
        median over every seed's run), else the point's median record."""
        from tune_batch.store.records import Metrics, Status, TrialResult

        point = self.by_point[(b, self.snap(lr))]
        if landscape is not None and self.landscapes > 1:
            run = point["seed_runs"][landscape]
            if run["status"] == "ok" and point["status"] != "ok":  # ok in this seed only: its batch size's step
                point = {**point, "status": "ok", "reason": None, "duration_s": run["duration_s"], "metrics": {
                    "samples_per_s": self.sps_pooled[b], "peak_mem_bytes": self.peaks[b], "val_acc": run["val_acc"],
                    "timed_s": 0.0}}
            elif run["status"] == "ok":
                point = {**point, "metrics": {**point["metrics"], "val_acc": run["val_acc"]}}
            else:
                point = {**point, "status": run["status"], "reason": run["reason"], "metrics": {},
                         "duration_s": run["duration_s"]}
        rec = TrialResult.from_record(point)
        peak = rec.metrics.peak_mem_bytes if rec.status is Status.OK else self.peaks.get(b)
        if self.cap is not None and peak is not None and peak > self.cap:
            # out of memory in its first steps, before a point that diverged (at step 19 or later
            # here) could: whatever the learning rate, a batch over the cap ends as oom
            spent = rec.duration_s - rec.metrics.timed_s if rec.status is Status.OK else rec.duration_s
            return (rec.replace(status=Status.OOM, reason="replayed: measured peak over the cap", metrics=Metrics()),
                    max(0.0, spent))
        return rec, rec.duration_s

    def truth_of(self, rec):
        """``rec`` (a found record) at its config's truth: feasible only if it is feasible there,
        val_acc its mean over seeds."""
        from tune_batch.store.records import Metrics, Status

        ok, acc = self.truth[(rec.params.batch_size, self.snap(rec.params.lr))]
        if not ok:
            return rec.replace(status=Status.DIVERGED, reason="diverged in most seeds", metrics=Metrics())
        return rec.replace(metrics=rec.metrics.with_(val_acc=acc))

    def full(self, landscape: int | None = None) -> list:
        """Every grid point under the cap: as one seed's search reads it (``landscape``), or at
        its truth (None)."""
        if landscape is not None:
            return [self.lookup(b, lr, landscape)[0] for (b, lr) in self.by_point]
        out = []
        for (b, lr), point in self.by_point.items():
            seen = None  # the point's median record, or, where only later seeds' runs were ok, one of those
            if self.truth[(b, lr)][0] and point["status"] != "ok" and self.landscapes > 1:
                seen = next(k for k, r in enumerate(point["seed_runs"]) if r["status"] == "ok")
            rec = self.lookup(b, lr, seen)[0]
            out.append(self.truth_of(rec) if rec.feasible else rec)
        return out

    def full_cost(self) -> float:
        return sum(self.lookup(b, lr)[1] for (b, lr) in self.by_point)


def truth_of(point: dict, num_classes: int) -> tuple[bool, float | None]:
    """(feasible, val_acc) of a grid point at its best estimate: with a run per seed, feasible
    when most seeds' runs were, val_acc the mean over every seed with a run that was not at
    chance accuracy (1 / classes: what a diverged run leaves); else the point's own record."""
    runs = point.get("seed_runs")
    if not runs:
        return point["status"] == "ok", point["metrics"].get("val_acc")
    ok = [r for r in runs if r["status"] == "ok"]
    if 2 * len(ok) <= len(runs):
        return False, None
    return True, statistics.fmean(r["val_acc"] if r["status"] == "ok" else 1.0 / num_classes for r in runs)


def lr_effect(table: dict, perms: int = 2000, seed: int = 0) -> dict[int, tuple[float, float]]:
    """Does the learning rate change samples/s? Per batch size: (p-value, largest deviation of a
    learning rate's mean from the batch size's mean, relative). A permutation test within each
    measuring round (the grid measured every point once per round, interleaved, so a round is a
    block: the host's drift between rounds is not the learning rate's), statistic the spread of
    the per-learning-rate means."""
    import random

    rng = random.Random(seed)
    by: dict[int, list[list[float]]] = {}
    for r in table["records"]:
        if r["status"] == "ok" and r.get("samples_per_s_runs"):
            by.setdefault(r["params"]["batch_size"], []).append(r["samples_per_s_runs"])

    def spread(rounds: list[list[float]]) -> tuple[float, list[float]]:
        means = [statistics.fmean(rd[i] for rd in rounds) for i in range(len(rounds[0]))]
        grand = statistics.fmean(means)
        return sum((m - grand) ** 2 for m in means), means

    out = {}
    for b, runs in sorted(by.items()):
        n = min(len(v) for v in runs)
        rounds = [[v[j] for v in runs] for j in range(n)]  # round j: one run of every learning rate
        obs, means = spread(rounds)
        hits = sum(spread([rng.sample(rd, len(rd)) for rd in rounds])[0] >= obs for _ in range(perms))
        grand = statistics.fmean(means)
        out[b] = ((hits + 1) / (perms + 1), max(abs(m / grand - 1) for m in means))
    return out


def front_hypervolume(results: list, metrics: list[str], directions: list[str],
                      bounds: list[tuple[float, float]] | None = None) -> float:
    """Hypervolume of the feasible results' front, scaled by ``bounds`` (default: the feasible
    results' own ranges)."""
    from tune_batch.analysis.pareto import feasible, hypervolume, normalise

    pts = [[r.metrics.value(m) for m in metrics] for r in feasible(results, metrics)]
    return hypervolume(normalise(pts, directions, bounds)) if pts else 0.0


def pooled_hypervolume(rp: Replay, records: list, metrics: list[str], directions: list[str],
                       bounds: list[tuple[float, float]]) -> float:
    """Hypervolume of the feasible ``records`` at the best estimate of their truth: samples/s
    their batch size's pooled median, val_acc (and feasibility) the mean over the table's seeds
    (``Replay.truth_of``); the score of what a search found (a search still sees, and decides
    on, the single noisy reading of each point, one seed's)."""
    pooled = [r.replace(metrics=r.metrics.with_(samples_per_s=rp.sps_pooled[r.params.batch_size]))
              if r.feasible and r.params.batch_size in rp.sps_pooled else r for r in records]
    pooled = [rp.truth_of(r) if r.feasible else r for r in pooled]
    return front_hypervolume(pooled, metrics, directions, bounds)


def replay_search(rp: Replay, sampler_name: str, n_trials: int, seed: int, feasibility: bool,
                  bounds: list[tuple[float, float]]) -> tuple[float, float, float]:
    """One replayed search through tune_batch's own Objective (policy, Optuna seam), with a
    runner that looks results up instead of training."""
    import optuna

    from tune_batch.backends.local import Objective, optimize
    from tune_batch.study.admission import Policy
    from tune_batch.study.samplers import make_sampler, probe_rule

    resources = rp.config.resources.model_copy(update={"device_memory": int(rp.cap) if rp.cap else None,
                                                       "feasibility_model": feasibility})
    space = rp.config.space.model_copy(update={"num_gpus": [1]})
    cfg = rp.config.model_copy(update={"resources": resources, "space": space})
    seeded = sampler_name.endswith("+ladder")
    sampler_name = sampler_name.removesuffix("+ladder")
    if sampler_name == "grid":
        sampler = optuna.samplers.GridSampler({"batch_size": cfg.space.batch_choices(), "lr": rp.lrs, "num_gpus": [1]},
                                              seed=seed)
    elif sampler_name == "gp-optuna-startup":  # gp as it shipped until 2026-12-01: free skips
        from tune_batch.study.samplers import startup_trials  # counted towards its random start

        sampler = optuna.samplers.GPSampler(seed=seed, n_startup_trials=startup_trials(n_trials))
    elif sampler_name.endswith("-noprobe"):  # gp / tpe as they shipped before ScaledProbe (2026-12-01)
        sampler = make_sampler(sampler_name.removesuffix("-noprobe"), seed, n_trials)
    else:  # as a search builds it (search.scale_probe on)
        sampler = make_sampler(sampler_name, seed, n_trials, probe_rule(cfg))
    study = optuna.create_study(directions=cfg.directions, sampler=sampler)
    if seeded:  # exactly as a search seeds itself: at most a third of its budget (search.seed_ladder)
        from tune_batch.study.space import seed_points

        shipped = cfg.model_copy(update={"budget": cfg.budget.model_copy(update={"trials": n_trials}),
                                         "search": cfg.search.model_copy(update={"seed_ladder": True})})
        for point in seed_points(shipped, [1]):
            study.enqueue_trial(point)
    spent = [0.0]

    landscape = seed % rp.landscapes  # the training seed this search's trials read

    def runner(config, params, *, trial_id, extra, run_dir):
        rec, cost = rp.lookup(params.batch_size, params.lr, landscape)
        spent[0] += cost
        return rec.replace(trial_id=trial_id, params=params)

    # as a search ships: a skipped proposal uses no trial of the budget (backends.local.optimize)
    objective = Objective(cfg, policy=Policy(cfg), runner=runner, free_skips=True)
    optimize(study, objective, n_trials)
    return (front_hypervolume(objective.records, cfg.metric_names, cfg.directions, bounds), spent[0],
            pooled_hypervolume(rp, objective.records, cfg.metric_names, cfg.directions, bounds))


_STATE: dict = {}


def _init_worker(tables: list[str], objectives: list[str]) -> None:
    import warnings

    import optuna

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    warnings.filterwarnings("ignore")
    import torch

    torch.set_num_threads(1)  # one replay per core: the GP sampler's torch must not oversubscribe
    _STATE["tables"] = [json.loads(Path(t).read_text()) for t in tables]
    _STATE["objectives"] = objectives
    _STATE["replays"] = {}


def _one(task: tuple) -> tuple[float, float, float]:
    grid, cap, bounds, name, _frac, n, seed = task
    key = (grid, cap)
    if key not in _STATE["replays"]:
        _STATE["replays"][key] = Replay(_STATE["tables"][grid], cap, _STATE["objectives"])
    return replay_search(_STATE["replays"][key], name, n, seed, True, bounds)


def batch_peaks(table: dict) -> dict[int, float]:
    """Each batch size's measured peak memory (the largest over its ok points)."""
    peaks: dict[int, float] = {}
    for r in table["records"]:
        if r["status"] == "ok":
            b = r["params"]["batch_size"]
            peaks[b] = max(peaks.get(b, 0.0), r["metrics"]["peak_mem_bytes"])
    return peaks


def caps_of(table: dict) -> list[tuple[str, float | None]]:
    """No cap, and caps that put about 20 %, 40 % and 60 % of the grid's batch sizes out of
    memory: half-way between the measured peaks of neighbouring batch sizes."""
    peaks = batch_peaks(table)
    ordered = [peaks[b] for b in sorted(peaks)]
    out: list[tuple[str, float | None]] = [("none", None)]
    for share in (0.2, 0.4, 0.6):
        over = round(share * len(ordered))
        if 0 < over < len(ordered):
            cap = (ordered[-over - 1] + ordered[-over]) / 2
            out.append((f"{share:.0%} over ({cap / 2**20:.1f} MiB)", cap))
    return out


def _grid_setup(table: dict, cap: float | None, objectives: list[str]) -> tuple[Replay, list, list, float, float]:
    """(replay, objective bounds (the truth's feasible ranges), the full grid's hypervolume in
    each landscape's single readings, the grid's trial-seconds, its hypervolume at the truth)."""
    rp = Replay(table, cap, objectives)
    cfg = rp.config
    full = rp.full()
    ok = [r for r in full if r.feasible]
    bounds = [(min(r.metrics.value(m) for r in ok), max(r.metrics.value(m) for r in ok)) for m in cfg.metric_names]
    single = [front_hypervolume(rp.full(k) if rp.landscapes > 1 else full, cfg.metric_names, cfg.directions, bounds)
              for k in range(rp.landscapes)]
    return rp, bounds, single, rp.full_cost(), pooled_hypervolume(rp, full, cfg.metric_names, cfg.directions, bounds)


def replay(args: argparse.Namespace) -> None:
    import warnings

    warnings.filterwarnings("ignore")
    tables = [json.loads(Path(t).read_text()) for t in args.tables]
    objectives = args.objectives.split(",")
    cases, tasks = [], []
    fracs = (0.10, 0.25, 0.50)
    for g, table in enumerate(tables):
        for cap_name, cap in caps_of(table):
            rp, bounds, hv_full, full_cost, hv_pooled = _grid_setup(table, cap, objectives)
            n_grid = len(rp.by_point)
            cases.append((g, cap_name, hv_full, full_cost, n_grid, hv_pooled))
            tasks += [(g, cap, bounds, name, frac, max(2, round(frac * n_grid)), seed)
                      for frac in fracs for name in args.samplers for seed in range(args.seeds)]
    effects = [lr_effect(table) for table in tables]
    for name, eff in zip(args.tables, effects):
        print(f"samples/s vs learning rate, {Path(name).name}: " + ", ".join(
            f"batch {b} p={p:.2f} (each lr's mean within {d:.1%} of the batch size's)" for b, (p, d) in eff.items()))
    low = sum(1 for eff in effects for p, _ in eff.values() if p < 0.05)
    print(f"  {low} of {sum(len(eff) for eff in effects)} batch sizes below p=0.05 (chance gives about 1 in 20)")
    t0 = time.time()
    with ProcessPoolExecutor(max_workers=args.jobs, initializer=_init_worker,
                             initargs=(args.tables, objectives)) as pool:
        outs = list(pool.map(_one, tasks, chunksize=4))
    per_case = len(fracs) * len(args.samplers) * args.seeds
    med: dict[tuple[int, str, str, float], tuple[float, float, float]] = {}
    per_seed: dict[tuple[int, str, str, float], list[float]] = {}  # best-estimate score, in seed order
    for c, (g, cap_name, hv_full, full_cost, n_grid, hv_pooled) in enumerate(cases):
        rows: dict[tuple[str, float], list[tuple[float, float, float]]] = {}
        for task, (hv, cost, hvn) in zip(tasks[c * per_case:(c + 1) * per_case], outs[c * per_case:(c + 1) * per_case]):
            # (best-estimate score, compute, single-reading score)
            rows.setdefault((task[3], task[4]), []).append(
                (hvn / hv_pooled, cost / full_cost, hv / hv_full[task[6] % len(hv_full)]))
        table = tables[g]
        print(f"\ngrid {Path(args.tables[g]).name} ({n_grid} points, {table['config']['name']}, measured on "
              f"{table['machine']['device']}), cap {cap_name}: full-grid hypervolume {hv_pooled:.4f} "
              f"(single readings: {', '.join(f'{h:.4f}' for h in hv_full)}"
              + (f", one per training seed; a search with seed s reads seed s mod {len(hv_full)}'s runs, "
                 f"and is scored at the mean over seeds)" if len(hv_full) > 1 else ")"))
        print(f"{'sampler':11s} " + " ".join(f"{f'{f:.0%} hv_frac [q25,q75]':>26s}" for f in fracs)
              + f" {'compute_25':>10s} {'25% single':>10s}")
        for name in args.samplers:
            cells = []
            for f in fracs:
                got = rows[(name, f)]
                hvs = [h for h, _, _ in got]
                per_seed[(g, cap_name, name, f)] = hvs
                q = statistics.quantiles(hvs, n=4) if len(hvs) > 1 else [hvs[0]] * 3
                med[(g, cap_name, name, f)] = (statistics.median(hvs), statistics.median(c for _, c, _ in got),
                                               statistics.median(n for _, _, n in got))
                cells.append(f"{statistics.median(hvs):.3f} [{q[0]:.3f},{q[2]:.3f}]")
            m25 = med[(g, cap_name, name, 0.25)]
            print(f"{name:11s} " + " ".join(f"{c:>26s}" for c in cells) + f" {m25[1]:10.3f} {m25[2]:10.3f}")
    _summary(args, cases, med, per_seed)
    print(f"replay took {time.time() - t0:.0f} s")


def paired_p(a: list[float], b: list[float], perms: int = 20000, seed: int = 0) -> tuple[float, float]:
    """(mean of a - b, two-sided p-value) over paired seeds: a sign-flip permutation test. Both
    samplers of one seed start from the same random proposals (Optuna's model-based samplers
    start with a RandomSampler of their seed), so the seed is the pair."""
    import random

    d = [x - y for x, y in zip(a, b)]
    obs = abs(sum(d))
    if obs == 0:
        return 0.0, 1.0
    rng = random.Random(seed)
    hits = sum(abs(sum(v if rng.random() < 0.5 else -v for v in d)) >= obs - 1e-12 for _ in range(perms))
    return sum(d) / len(d), (hits + 1) / (perms + 1)


def _versus_random(default: str, keys: list, per_seed: dict) -> None:
    """The default against random search, case by case, paired over seeds (best-estimate score)."""
    if "random" not in {k[2] for k in per_seed} or default == "random":
        return
    wins, losses, within = 0, [], []
    for g, cap in keys:
        mean_d, p = paired_p(per_seed[(g, cap, default, 0.25)], per_seed[(g, cap, "random", 0.25)])
        if p < 0.05 and mean_d > 0:
            wins += 1
        elif p < 0.05:
            losses.append(f"grid {g} cap {cap} (mean {mean_d:+.3f}, p={p:.3f})")
        else:
            within.append(f"grid {g} cap {cap} ({mean_d:+.3f}, p={p:.2f})")
    print(f"default ({default}) vs random, paired over seeds (sign-flip test, mean hv_frac difference): above "
          f"beyond seed noise (p<0.05) in {wins} of {len(keys)} cases; below beyond noise in {len(losses)}"
          + (f": {', '.join(losses)}" if losses else "")
          + (f"; within noise in {len(within)}: {', '.join(within)}" if within else ""))


def worst_case_interval(per_case: list[list[float]], reps: int = 4000, seed: int = 0) -> tuple[float, float]:
    """95 % bootstrap interval of the worst case over cases of each case's median over seeds:
    every case's seeds resampled with replacement, independently, ``reps`` times. How far the
    headline worst case moves with the search seeds alone (each grid's measured landscape and
    truth held fixed)."""
    import random

    rng = random.Random(seed)
    worst = sorted(min(statistics.median(rng.choices(v, k=len(v))) for v in per_case) for _ in range(reps))
    return worst[int(0.025 * reps)], worst[int(0.975 * reps) - 1]


def median_interval(values: list[float], reps: int = 4000, seed: int = 0) -> tuple[float, float]:
    """95 % bootstrap interval of the median of ``values`` (one case's seeds)."""
    return worst_case_interval([values], reps, seed)


def _summary(args: argparse.Namespace, cases: list, med: dict, per_seed: dict) -> None:
    default = args.default_sampler
    keys = [(g, cap) for g, cap, *_ in cases]
    labels = ((0, "hv_frac (samples/s pooled per batch size)"), (2, "hv_frac single reading"))
    for col, label in labels:
        print(f"\n{label} at 25 % of the grid, median over {args.seeds} seeds, per grid and cap "
              "(worst case decides the default):")
        for name in args.samplers:
            vals = [med[(g, cap, name, 0.25)][col] for g, cap in keys]
            print(f"  {name:11s} median {statistics.median(vals):.3f}  worst {min(vals):.3f}  "
                  f"({', '.join(f'{v:.2f}' for v in vals)})")
    if default not in args.samplers or "random" not in args.samplers:
        print(f"(no default-against-random comparison and no RESULT line: --samplers lacks {default!r} or 'random')")
        return
    d = [med[(g, cap, default, 0.25)] for g, cap in keys]
    r = [med[(g, cap, "random", 0.25)] for g, cap in keys]
    for col, label in labels:
        ties = [f"grid {g} cap {cap}" for (g, cap), dv, rv in zip(keys, d, r) if round(dv[col], 3) == round(rv[col], 3)]
        losses = [f"grid {g} cap {cap} ({dv[col]:.3f} vs {rv[col]:.3f})" for (g, cap), dv, rv in zip(keys, d, r)
                  if round(dv[col], 3) < round(rv[col], 3)]
        print(f"default ({default}), {label}: beats random in {len(keys) - len(losses) - len(ties)} of {len(keys)} "
              f"cases" + (f"; ties in: {', '.join(ties)}" if ties else "")
              + (f"; loses in: {', '.join(losses)}" if losses else ""))
    _versus_random(default, keys, per_seed)
    # the search seeds' share of the noise in the headline: a case's median over 20 seeds moves
    # with the seeds (docs/benchmarks.md: the same code scored one case 0.848 on seeds 0-19, 0.791 on 20-79)
    worst = min(x[0] for x in d)
    lo, hi = worst_case_interval([per_seed[(g, cap, default, 0.25)] for g, cap in keys])
    below = []
    for (g, cap), x in zip(keys, d):
        a, b = median_interval(per_seed[(g, cap, default, 0.25)])
        if a < 0.90:
            below.append(f"grid {g} cap {cap} {x[0]:.3f} [{a:.3f}, {b:.3f}]")
    print(f"default ({default}) worst case {worst:.3f}, 95 % bootstrap interval over the search seeds "
          f"[{lo:.3f}, {hi:.3f}]; cases whose median's interval reaches below 0.90: {len(below)}"
          + (f" ({', '.join(below)})" if below else ""))
    print(f"RESULT hv_frac_25={statistics.median(x[0] for x in d):.4f} hv_frac_25_worst={worst:.4f} "
          f"hv_frac_25_worst_lo={lo:.4f} hv_frac_25_worst_hi={hi:.4f} "
          f"random_hv_frac_25_worst={min(x[0] for x in r):.4f} compute_frac={statistics.median(x[1] for x in d):.4f} "
          f"single_hv_frac_25={statistics.median(x[2] for x in d):.4f} "
          f"single_hv_frac_25_worst={min(x[2] for x in d):.4f} "
          f"random_single_hv_frac_25_worst={min(x[2] for x in r):.4f}")


def main() -> None:
    global TABLE
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--measure", action="store_true", help="train the whole grid for real and store the table")
    ap.add_argument("--config", default=str(REPO / "configs/quickstart.yaml"))
    ap.add_argument("--lrs", type=int, default=6, help="learning rates in the log grid (--measure)")
    ap.add_argument("--repeats", type=int, default=3, help="measurements of each grid point (--measure); median kept")
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--tables", nargs="+", default=[str(REPO / "benchmarks" / f"{g}_grid.json")
                                                     for g in ("quickstart", "synthetic", "mlp", "adam", "mlp_adam",
                                                               "deep_mlp", "mlp3_digits", "rmsprop_cnn", "nesterov_mlp",
                                                               "plain_sgd_mlp", "plain_sgd_cnn", "half_momentum_cnn",
                                                               "wd_cnn")],
                    help="measured grids to replay on (each under no cap and caps putting 20/40/60 %% over)")
    ap.add_argument("--objectives", default="samples_per_s,val_acc",
                    help="objectives scored (default: those of configs/quickstart.yaml, as shipped)")
    ap.add_argument("--samplers", nargs="+", default=["grid", "random", "tpe", "nsga2", "gp", "tpe+ladder"])
    ap.add_argument("--table", default=None, help="with --measure: where the measured table goes")
    ap.add_argument("--add-seeds", type=int, default=0,
                    help="train this many more training seeds of every point of --table and merge them in")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="replay processes")
    ap.add_argument("--default-sampler", default="gp", help="the configuration tune_batch uses by default")
    args = ap.parse_args()
    TABLE = Path(args.table) if args.table else TABLE
    if args.add_seeds:
        if not args.table:
            raise SystemExit("--add-seeds needs --table (the measured table to add seeds to)")
        add_seeds(args)
    elif args.measure:
        measure(args)
    else:
        missing = [t for t in args.tables if not Path(t).exists()]
        if missing:
            raise SystemExit(f"{missing} missing: run python scripts/bench_search.py --measure --config ... "
                             f"--table ... first")
        replay(args)


if __name__ == "__main__":
    main()
