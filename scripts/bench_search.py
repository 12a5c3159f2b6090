"""Search quality: how close each sampler gets to the full grid's Pareto front, for how much compute.

--measure   trains every point of the quickstart space's grid for real (every batch size x a log
            grid of learning rates, num_gpus 1), --repeats times interleaved, and stores the median
            record of each point with the machine in benchmarks/quickstart_grid.json. About ten
            minutes on the 2-core machine: a script, not a test.
(default)   replays searches against that table: a trial's result is looked up, not trained.
            Samplers: grid (Optuna's GridSampler: the grid in random order), random, tpe, nsga2, gp,
            and tpe seeded with the batch-size ladder and square-root lr scaling (tpe+ladder);
            each with and without the memory feasibility model, at 10 %, 25 % and 50 % of the grid,
            over --seeds seeds. Continuous learning rates are snapped to the nearest grid value (in
            log space). Under the replay's memory cap a point whose measured peak exceeds it is an
            `oom` trial costing its set-up time (duration_s - timed_s); a skipped trial costs nothing.

hv_frac      hypervolume of the found front / the full grid's (objectives scaled to [0, 1] by the
             full grid's feasible ranges; reference point -0.1)
compute_frac trial-seconds spent / trial-seconds of the whole grid

Usage: python scripts/bench_search.py [--measure] [--seeds 20] [--cap 40MiB]
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


def measure(args: argparse.Namespace) -> None:
    import torch

    from tune_batch.config import load_config
    from tune_batch.trial import run_trial

    cfg = load_config(args.config)
    lrs = lr_grid(cfg.space.lr.low, cfg.space.lr.high, args.lrs)
    points = [(b, lr) for b in cfg.space.batch_choices() for lr in lrs]
    runs: dict[tuple[int, float], list[dict]] = {p: [] for p in points}
    t0 = time.time()
    # repeats are interleaved (the whole grid, then again), so slow drift of a shared machine
    # spreads over every point instead of biasing some; each point keeps the median run
    for rep in range(args.repeats):
        for i, (b, lr) in enumerate(points, 1):
            res = run_trial(cfg, {"batch_size": b, "lr": lr, "num_gpus": 1}, trial_id=i - 1)
            rec = res.to_record()
            rec["info"] = {k: rec["info"].get(k) for k in ("device", "timed_steps", "peak_mem_method", "bottleneck")}
            rec["traceback"] = None
            runs[(b, lr)].append(rec)
            m = res.metrics
            print(f"[repeat {rep + 1}/{args.repeats}, {i}/{len(points)}] batch_size {b} lr {lr:.4g}: {res.status} "
                  f"{m.samples_per_s or 0:.0f} samples/s, util {m.device_util or 0:.3f}, "
                  f"val_acc {m.val_acc or 0:.3f}, peak {(m.peak_mem_bytes or 0) / 2**20:.1f} MiB, "
                  f"{res.duration_s:.1f} s", flush=True)
    records = []
    for reps in runs.values():
        ok = [r for r in reps if r["status"] == "ok"]
        if not ok:
            records.append({**reps[0], "repeats": len(reps)})
            continue
        metrics = {k: statistics.median(r["metrics"][k] for r in ok) for k in ok[0]["metrics"]}
        records.append({**ok[0], "metrics": metrics, "duration_s": statistics.median(r["duration_s"] for r in ok),
                        "repeats": len(reps),
                        "samples_per_s_runs": [r["metrics"]["samples_per_s"] for r in ok]})
    TABLE.parent.mkdir(exist_ok=True)
    TABLE.write_text(json.dumps({
        "config": cfg.to_dict(), "lr_grid": lrs, "batch_sizes": cfg.space.batch_choices(),
        "machine": {"host": platform.node(), "cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
                    "torch": torch.__version__, "python": platform.python_version(),
                    "device": records[0]["info"].get("device") if records else None},
        "measured_at": time.strftime("%Y-%m-%d %H:%M:%S"), "wall_s": time.time() - t0, "records": records,
    }, indent=1))
    print(f"wrote {TABLE} ({len(records)} points x {args.repeats} repeats, {time.time() - t0:.0f} s)")


class Replay:
    """Looks trial results up in the measured grid, under an optional memory cap."""

    def __init__(self, table: dict, cap_bytes: float | None) -> None:
        from tune_batch.config import config_from_dict

        self.config = config_from_dict(table["config"])
        self.lrs = table["lr_grid"]
        self.cap = cap_bytes
        self.by_point = {(r["params"]["batch_size"], r["params"]["lr"]): r for r in table["records"]}

    def snap(self, lr: float) -> float:
        return min(self.lrs, key=lambda v: abs(math.log(v) - math.log(lr)))

    def lookup(self, b: int, lr: float):  # -> (TrialResult, trial-seconds)
        """(the record as it would have come out under the cap, trial-seconds it cost)."""
        from tune_batch.records import Metrics, Status, TrialResult

        rec = TrialResult.from_record(self.by_point[(b, self.snap(lr))])
        if rec.status is not Status.OK:
            return rec, rec.duration_s
        m = rec.metrics
        if self.cap is not None and m.peak_mem_bytes > self.cap:
            return (rec.replace(status=Status.OOM, reason="replayed: measured peak over the cap", metrics=Metrics()),
                    max(0.0, rec.duration_s - m.timed_s))
        return rec, rec.duration_s

    def full(self) -> list:
        return [self.lookup(b, lr)[0] for (b, lr) in self.by_point]

    def full_cost(self) -> float:
        return sum(self.lookup(b, lr)[1] for (b, lr) in self.by_point)


def replay_search(rp: Replay, sampler_name: str, n_trials: int, seed: int, feasibility: bool,
                  bounds: list[tuple[float, float]]) -> tuple[float, float]:
    """One replayed search through tune_batch's own Objective (policy, Optuna seam), with a
    runner that looks results up instead of training."""
    import optuna

    from tune_batch.backends.optuna import Objective
    from tune_batch.pareto import front_hypervolume
    from tune_batch.policy import Policy
    from tune_batch.samplers import make_sampler

    resources = rp.config.resources.model_copy(update={"device_memory": int(rp.cap) if rp.cap else None,
                                                       "feasibility_model": feasibility})
    space = rp.config.space.model_copy(update={"num_gpus": [1]})
    cfg = rp.config.model_copy(update={"resources": resources, "space": space})
    seeded = sampler_name.endswith("+ladder")
    sampler_name = sampler_name.removesuffix("+ladder")
    if sampler_name == "grid":
        sampler = optuna.samplers.GridSampler({"batch_size": cfg.space.batch_choices(), "lr": rp.lrs, "num_gpus": [1]}, seed=seed)
    else:
        sampler = make_sampler(sampler_name, seed, n_trials)
    study = optuna.create_study(directions=cfg.directions, sampler=sampler)
    if seeded:
        from tune_batch.space import ladder

        for point in ladder(cfg.space)[:n_trials]:
            study.enqueue_trial(point)
    spent = [0.0]

    def runner(config, params, *, trial_id, extra, run_dir):
        rec, cost = rp.lookup(params.batch_size, params.lr)
        spent[0] += cost
        return rec.replace(trial_id=trial_id, params=params)

    objective = Objective(cfg, policy=Policy(cfg), runner=runner)
    study.optimize(objective, n_trials=n_trials)
    return front_hypervolume(objective.records, cfg.metric_names, cfg.directions, bounds), spent[0]


_STATE: dict = {}


def _init_worker(table_path: str, cap: str, bounds: list) -> None:
    import warnings

    import optuna

    from tune_batch.config import parse_memory

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    warnings.filterwarnings("ignore")
    import torch

    torch.set_num_threads(1)  # one replay per core: the GP sampler's torch must not oversubscribe
    _STATE["rp"] = Replay(json.loads(Path(table_path).read_text()), parse_memory(cap)[1] if cap else None)
    _STATE["bounds"] = bounds


def _one(task: tuple) -> tuple[float, float]:
    name, feas, _frac, n, seed = task
    return replay_search(_STATE["rp"], name, n, seed, feas, _STATE["bounds"])


def replay(args: argparse.Namespace) -> None:
    import optuna

    from tune_batch.config import parse_memory
    from tune_batch.pareto import front_hypervolume

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    import warnings

    warnings.filterwarnings("ignore")
    table = json.loads(TABLE.read_text())
    cap = parse_memory(args.cap)[1] if args.cap else None
    rp = Replay(table, cap)
    cfg = rp.config
    full = rp.full()
    ok = [r for r in full if r.feasible]
    if not ok:
        raise SystemExit(f"no grid point fits under --cap {args.cap}: raise it")
    bounds = [(min(r.metrics.value(m) for r in ok), max(r.metrics.value(m) for r in ok)) for m in cfg.metric_names]
    hv_full = front_hypervolume(full, cfg.metric_names, cfg.directions, bounds)
    full_cost = rp.full_cost()
    n_grid = len(rp.by_point)
    over = sum(1 for r in full if r.status == "oom")
    print(f"table: {n_grid} points measured on {table['machine']['device']} ({table['machine']['host']}, "
          f"{table['measured_at']}); cap {args.cap}: {over} points ({over / n_grid:.0%}) over it; "
          f"full-grid hypervolume {hv_full:.4f}, compute {full_cost:.0f} trial-s")
    print(f"{'sampler':10s} {'model':5s} {'budget':>6s} {'trials':>6s} {'hv_frac median':>14s} {'[q25, q75]':>16s} "
          f"{'compute_frac':>12s}")
    results: dict[tuple[str, bool, float], tuple[float, float]] = {}
    t0 = time.time()
    tasks = [(name, feas, frac, max(2, round(frac * n_grid)), seed)
             for frac in (0.10, 0.25, 0.50) for name in args.samplers for feas in (True, False) for seed in range(args.seeds)]
    # independent replays: spread over the cores (the GP sampler's fits dominate the time)
    with ProcessPoolExecutor(max_workers=args.jobs, initializer=_init_worker, initargs=(str(TABLE), args.cap, bounds)) as pool:
        outs = list(pool.map(_one, tasks, chunksize=4))
    by_key: dict[tuple[str, bool, float], list[tuple[float, float]]] = {}
    for (name, feas, frac, _n, _seed), (hv, cost) in zip(tasks, outs):
        by_key.setdefault((name, feas, frac), []).append((hv / hv_full, cost / full_cost))
    for frac in (0.10, 0.25, 0.50):
        n = max(2, round(frac * n_grid))
        for name in args.samplers:
            for feas in (True, False):
                hvs = [h for h, _ in by_key[(name, feas, frac)]]
                costs = [c for _, c in by_key[(name, feas, frac)]]
                q = statistics.quantiles(hvs, n=4) if len(hvs) > 1 else [hvs[0]] * 3
                med, cmed = statistics.median(hvs), statistics.median(costs)
                results[(name, feas, frac)] = (med, cmed)
                print(f"{name:10s} {'on' if feas else 'off':5s} {frac:6.0%} {n:6d} {med:14.3f} "
                      f"{f'[{q[0]:.3f}, {q[2]:.3f}]':>16s} {cmed:12.3f}", flush=True)
    default = args.default_sampler
    hv25, c25 = results[(default, True, 0.25)]
    rnd25, _ = results[("random", True, 0.25)]
    print(f"replay took {time.time() - t0:.0f} s; tune_batch's default ({default}, feasibility model on) at 25 % of the grid: "
          f"{hv25:.1%} of the full grid's hypervolume for {c25:.1%} of its compute (random: {rnd25:.1%})")
    print(f"RESULT hv_frac_25={hv25:.4f} random_hv_frac_25={rnd25:.4f} compute_frac={c25:.4f}")


def main() -> None:
    global TABLE
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--measure", action="store_true", help="train the whole grid for real and store the table")
    ap.add_argument("--config", default=str(REPO / "configs/quickstart.yaml"))
    ap.add_argument("--lrs", type=int, default=6, help="learning rates in the log grid (--measure)")
    ap.add_argument("--repeats", type=int, default=3, help="measurements of each grid point (--measure); median kept")
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--cap", default="40MiB", help="memory cap of the replay ('' for none)")
    ap.add_argument("--samplers", nargs="+", default=["grid", "random", "tpe", "nsga2", "gp", "tpe+ladder"])
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="replay processes")
    ap.add_argument("--default-sampler", default="tpe+ladder", help="the configuration tune_batch uses by default")
    ap.add_argument("--table", default=None, help="the measured table (default benchmarks/quickstart_grid.json)")
    args = ap.parse_args()
    TABLE = Path(args.table) if args.table else TABLE
    if args.measure:
        measure(args)
    else:
        if not TABLE.exists():
            raise SystemExit(f"{TABLE} is missing: run python scripts/bench_search.py --measure first")
        replay(args)


if __name__ == "__main__":
    main()
