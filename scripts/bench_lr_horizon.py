"""How far the best learning rate moves between a search trial's length and a late target, on the
stored 3-seed grids (no training; chooses nothing).

A search ranks configs after a trial's samples (1/16 of each grid's full length); the decision
benchmark's yardstick is the time to a late target (0.99 x the best final value, which the best
grid point reaches at 0.4-0.9 of the full length). Bjorck et al. (ICLR 2025, "Scaling optimal LR
across token horizons") found the best learning rate of a language model falling with the training
horizon as a power law, lr* ~ horizon^-beta. This reads, for every batch size of every stored grid:

short    the learning rate with the best median value (over the grid's 3 seeds) after one trial's
         samples, the search's view;
long     the learning rate with the least median time to the yardstick's target (inf for a seed
         that never reaches it), the benchmark's view;
horizon  the samples at which that long-best point reaches the target, over one trial's samples;
beta     -ln(long / short) / ln(horizon): the power law's exponent that would carry the short
         view to the long one (0: no move; positive: the long run wants a lower rate).

Both best rates are refined within the grid's log-spaced rates by the vertex of a parabola
through the best point and its two neighbours (in ln lr; value for short, ln time for long) where
the best point is not at an end of the grid, and clipped to half a grid step either side.

Workloads: the ten held-out grids (spent: every rule after them is judged on new ones) and the
three development grids, reported apart.

Usage: python scripts/bench_lr_horizon.py [--workloads NAME ...]
Ends with: RESULT beta_median=... beta_q1=... beta_q3=... lower_share=... same_share=... higher_share=...
cells=... workloads=...
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_heldout as bh  # noqa: E402

#: search trials per full length: budget.train_samples is 1/16 of each grid's full length
TRIALS_PER_LENGTH = 16
#: held-out workloads this must not read until the rule they judge is built and judged on them
#: (attn_majority, read since the horizon candidate was judged on it on 2026-12-07)
NOT_YET: set[str] = set()
GRIDS = {name: (bh.HELDOUT / f"{name}_grid.jsonl" if spec["held_out"]
                else bh.REPO / "benchmarks" / "dev" / f"{name}_grid.jsonl")
         for name, spec in bh.WORKLOADS.items() if name not in NOT_YET}
GRIDS = {name: path for name, path in GRIDS.items() if path.exists()}  # a workload whose grid is not measured yet


def value_at(curve: list, samples: float) -> float:
    """The value of the last validation at or before ``samples`` (nan when none)."""
    out = math.nan
    for s, _t, v, *_ in curve or []:
        if s <= samples + 1e-9:
            out = v
    return out


def vertex(xs: list[float], ys: list[float], i: int) -> float:
    """x of the extremum of the parabola through points i-1, i, i+1 (xs[i] at an end of the grid
    or where the three are collinear), within half a step of xs[i]."""
    if i <= 0 or i >= len(xs) - 1 or not all(math.isfinite(y) for y in ys[i - 1:i + 2]):
        return xs[i]
    (x0, x1, x2), (y0, y1, y2) = xs[i - 1:i + 2], ys[i - 1:i + 2]
    den = (x0 - x1) * (x0 - x2) * (x1 - x2)
    a = (x2 * (y1 - y0) + x1 * (y0 - y2) + x0 * (y2 - y1)) / den
    b = (x2 * x2 * (y0 - y1) + x1 * x1 * (y2 - y0) + x0 * x0 * (y1 - y2)) / den
    if a == 0:
        return xs[i]
    half = min(x1 - x0, x2 - x1) / 2
    return min(max(-b / (2 * a), x1 - half), x1 + half)


def grid_of(name: str, rows: list[dict]) -> tuple[dict, dict[tuple, list[dict]]]:
    """The yardstick (fixed from the whole grid) and the grid's runs by (batch size, lr)."""
    for r in rows:  # development grids stored no train_s: their curve's last training seconds
        r.setdefault("train_s", (r.get("curve") or [[0, 0.0]])[-1][1])
    ok = [r for r in rows if r.get("status", "ok") == "ok" and r.get("curve")]
    by: dict[tuple, list[dict]] = {}
    for r in ok:
        by.setdefault(bh.key(r["params"]), []).append(r)
    return bh.yardstick(name, ok), by


def resampled(by: dict[tuple, list[dict]], rng: random.Random) -> dict[tuple, list[dict]]:
    """Each point's seeds drawn again with replacement: how much of a best rate is the seeds'."""
    return {k: [rng.choice(rs) for _ in rs] for k, rs in by.items()}


def median_beta(rows: list[dict]) -> float:
    betas = [r["beta"] for r in rows if r["beta"] is not None]
    return statistics.median(betas) if betas else math.nan


def cells(name: str, stick: dict, by: dict[tuple, list[dict]]) -> list[dict]:
    """Per batch size, the short and long best rates, the horizon and beta."""
    direction, target = stick["direction"], stick["target"]
    trial = bh.WORKLOADS[name]["length"] / TRIALS_PER_LENGTH
    sign = 1.0 if direction == "maximize" else -1.0
    out = []
    for b in sorted({k[0] for k in by}):
        lrs = sorted(k[1] for k in by if k[0] == b)
        xs = [math.log(lr) for lr in lrs]
        short = [sign * bh.median([value_at(r["curve"], trial) for r in by[(b, lr)]]) for lr in lrs]
        times = [bh.median([bh.ttt(r["curve"], target, direction) for r in by[(b, lr)]]) for lr in lrs]
        if not any(math.isfinite(t) for t in times) or not any(math.isfinite(s) for s in short):
            continue
        i_short = max(range(len(lrs)), key=lambda i: short[i] if math.isfinite(short[i]) else -math.inf)
        i_long = min(range(len(lrs)), key=lambda i: times[i])
        lr_short = math.exp(vertex(xs, short, i_short))
        lr_long = math.exp(vertex(xs, [-math.log(t) if math.isfinite(t) and t > 0 else -math.inf for t in times],
                                  i_long))
        reach = bh.median([next((c[0] for c in r["curve"] if bh.reached(c[2], target, direction)), math.inf)
                           for r in by[(b, lrs[i_long])]])
        horizon = reach / trial
        beta = -math.log(lr_long / lr_short) / math.log(horizon) if math.isfinite(horizon) and horizon > 1 else None
        out.append({"batch_size": b, "short_lr": lr_short, "long_lr": lr_long, "grid_steps": i_long - i_short,
                    "horizon": horizon, "beta": beta, "long_ttt_s": times[i_long]})
    return out


def quartiles(xs: list[float]) -> tuple[float, float, float]:
    if len(xs) < 2:
        return (xs[0], xs[0], xs[0]) if xs else (math.nan,) * 3
    q = statistics.quantiles(xs, n=4)
    return q[0], statistics.median(xs), q[2]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workloads", nargs="*", default=list(GRIDS))
    ap.add_argument("--resamples", type=int, default=200, help="seed resamples per workload (default 200)")
    args = ap.parse_args(argv)
    unknown = sorted(set(args.workloads) - set(GRIDS))
    if unknown:
        ap.error(f"--workloads: unknown {unknown[0]!r}; allowed: {', '.join(GRIDS)}")
    every: dict[bool, list[dict]] = {True: [], False: []}
    by_kind: dict[str, list[float]] = {"adaptive": [], "sgd": []}
    for name in args.workloads:
        stick, by = grid_of(name, bh.jsonl(GRIDS[name]))
        rows = cells(name, stick, by)
        rng = random.Random(0)
        again = sorted(median_beta(cells(name, stick, resampled(by, rng))) for _ in range(args.resamples))
        again = [b for b in again if math.isfinite(b)]
        held = bh.WORKLOADS[name]["held_out"]
        every[held].extend(rows)
        optimizer = bh.load(name).optimizer.name
        kind = "adaptive" if optimizer in bh.ADAPTIVE else "sgd"
        if held:
            by_kind[kind].extend(r["beta"] for r in rows if r["beta"] is not None)
        print(f"{name} ({'held out' if held else 'development'}; {optimizer}; target {stick['metric']} "
              f"{stick['target']:.4g}, trial {bh.WORKLOADS[name]['length'] // TRIALS_PER_LENGTH} samples)")
        print("  batch  short-best lr  long-best lr  grid steps  horizon  beta")
        for r in rows:
            beta = f"{r['beta']:+.2f}" if r["beta"] is not None else "  -  "
            print(f"  {r['batch_size']:>5}  {r['short_lr']:>13.3g}  {r['long_lr']:>12.3g}  {r['grid_steps']:>+10d}  "
                  f"{r['horizon']:>7.1f}  {beta}")
        betas = [r["beta"] for r in rows if r["beta"] is not None]
        q1, med, q3 = quartiles(betas)
        lo, hi = (again[int(0.05 * len(again))], again[int(0.95 * len(again)) - 1]) if again else (math.nan,) * 2
        print(f"  beta median {med:+.2f} [{q1:+.2f}, {q3:+.2f}] over {len(betas)} batch sizes; with each point's "
              f"seeds resampled ({args.resamples} times) the median reads {lo:+.2f} to {hi:+.2f} (90 %)")
    for held in (False, True):
        rows = every[held]
        betas = [r["beta"] for r in rows if r["beta"] is not None]
        if not betas:
            continue
        q1, med, q3 = quartiles(betas)
        steps = [r["grid_steps"] for r in rows]
        print(f"{'held-out' if held else 'development'} grids: beta median {med:+.2f} [{q1:+.2f}, {q3:+.2f}] over "
              f"{len(betas)} batch sizes; the long run's best rate a grid step or more lower in "
              f"{sum(s < 0 for s in steps)}, the same in {sum(s == 0 for s in steps)}, higher in "
              f"{sum(s > 0 for s in steps)} of {len(steps)}")
    for kind, betas in by_kind.items():
        if betas:
            q1, med, q3 = quartiles(betas)
            print(f"held-out grids, {'adaptive optimizers' if kind == 'adaptive' else 'SGD'}: beta median "
                  f"{med:+.2f} [{q1:+.2f}, {q3:+.2f}] over {len(betas)} batch sizes")
    rows = every[True] or every[False]
    betas = [r["beta"] for r in rows if r["beta"] is not None]
    q1, med, q3 = quartiles(betas)
    steps = [r["grid_steps"] for r in rows]
    n = max(1, len(steps))
    kinds = "".join(f"beta_{k}_median={quartiles(v)[1]:.3f} " for k, v in by_kind.items() if v)
    names = ",".join(w for w in args.workloads if bh.WORKLOADS[w]["held_out"] == bool(every[True]))
    print(f"RESULT beta_median={med:.3f} beta_q1={q1:.3f} beta_q3={q3:.3f} "
          f"lower_share={sum(s < 0 for s in steps) / n:.3f} same_share={sum(s == 0 for s in steps) / n:.3f} "
          f"higher_share={sum(s > 0 for s in steps) / n:.3f} cells={len(steps)} {kinds}workloads={names}")


if __name__ == "__main__":
    main()
