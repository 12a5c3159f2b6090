"""Which confirmation target picks the config that reaches a late target soonest? A replay of the
confirmation's choice on a development workload's 3-seed grid (no training, seconds).

The held-out decision benchmark (``bench_decision.py --heldout``) found the default confirmation
picking, on all three held-out workloads, the candidates fastest to its own early target: the
highest learning rates, slower to the late yardstick. A remedy must be chosen on development
workloads, not on those. This script replays the choice on a grid measured by
``bench_decision.py --heldout --dev --workloads quickstart --phase grid`` (every point x 3 seeds
at the full length, validated 32 times), with bench_heldout's yardstick (0.99 x the best final
val_acc; for a loss 0.99 of the way from the first validation to the best final).

For every set of ``--candidates`` grid points (what confirmation is handed) and each rule:
- each candidate's confirmation runs are its grid runs on two seeds, cut at the rule's length;
- the rule's own target is ``fraction`` x the best val_acc any candidate reached within that
  length (for a loss: that fraction of the way from the first validation to the best), as
  ``tune_batch.decide.confirm`` sets it;
- the pick is the candidate with the least median time to that target (ties: each tied
  candidate counts with equal weight);
- its regret is its time to the late yardstick on the third seed, over the fastest of the set
  on that seed (sets in which no candidate reaches it on that seed are left out).
Each of the three seeds is held back in turn. What it leaves out: the noise-scale prediction that
the recommendation blends with the measured time (``estimate_time``), the baseline and the other
GPU count among the candidates, and the search that chooses the candidates (every set of points
counts once, a real search's candidates are better than most).

Rules compared (fixed before any grid was read): fractions 0.90, 0.95 (the default until 2026-12-05), 0.98, 0.99
and 1.0 of the best reached, each at confirmation lengths of 4 trials (the default then) and 8 trials;
and the default target and length with the lowest learning rate among the candidates within
1.25x of the least time (the spread of one config's runs; learning rates best for short runs are
too high for long ones: Bjorck et al., ICLR 2025).

Rules added 2026-12-05, after the quickstart and synthetic grids had been read and before the
noisy_tabular grid was measured (the default's own target is "the best any run reached", set by
one lucky validation, which a 2-run median rarely reaches at 0.99 or 1.0):
- ``level``: the target is ``fraction`` (0.98, 0.99, 1.0) x the best candidate's level, a
  candidate's level being the median over its runs of the mean of the last quarter of each cut
  curve's validations (for a loss: that fraction of the way from the first validation to the
  best level); at 4 and 8 trials;
- ``at_length``: the goal's rule without a target (``Confirmation.best_at_length`` as it was then;
  it now breaks ties in time by the final value): the best mean
  final value at the cut, and among the candidates within noise of it (95 % interval of the gap,
  from the runs' spread pooled over the candidates) the one whose runs took the least time; at 4
  and 8 trials.

Rule added 2026-12-05, for losses, before it was replayed on any grid (written after the
tiny_lm quickstart showed a val_loss target within 0.001 of the level: the first validation, at
1/16 of a 32768-sample run, had already fallen from 4.16 untrained to 1.39 of a 1.31 level):
- ``level_start``: the level rule whose loss target starts from the untrained model's value (a
  confirmation run's ``info.start_value``, here computed per batch size and seed by one such
  run: the untrained model depends on the seed alone) instead of the first validation, whose
  place depends on the run's length and its validations; for val_acc the same as ``level``.
  At 8 trials, fractions 0.98 and 0.99. Replayed on lm_markov and friedman_mlp, the two loss
  workloads measured (held out for the rules before, so development evidence for this one).
  Criterion, fixed before the replay: it is worth judging on a new held-out loss workload if, on
  both grids, ``level_start`` 0.99's median regret, p90 and miss share are each no worse than the
  default's by more than the range of the default's per-held-back-seed p90 (miss) figures; it
  changes no default by itself.

Rule added 2026-12-06, before it was replayed on any grid (written after the held-out workloads
showed picks that touch the confirmation's target in passing and level off below it: tabular_mlp's
three missing picks "touched it in passing in 1 of 3 runs", mlp_adamw_images' high rates):
- ``level_held``: the default's target (0.99 x the best candidate's level, 8 trials), and a
  candidate counts only if its own level (the median over its runs) is at or beyond the target:
  one that reaches the target and levels off short of it is not a pick.
  Criterion, fixed before the replay (the one the level target was chosen by): it becomes the
  default if, with 2 candidates (the shipped ``confirm.candidates``), on each of the three
  development grids (quickstart, synthetic, noisy_tabular) its median, p90 and miss share are each
  no worse than the default's by more than the range of the default's per-held-back-seed figures
  (p90, miss), and on at least one of them its p90 or miss share is better by more than that
  range. The spent held-out grids are replayed beside them and reported, and decide nothing.

Usage: python scripts/bench_confirm_target.py --workload quickstart --grid DIR/quickstart_grid.jsonl
Ends with: RESULT workload=... sets=... then per rule ``f<fraction>_l<trials>_median=`` (median
regret), ``_p90=`` and ``_miss=`` (share of sets whose pick never reaches the yardstick on the
held-back seed while another candidate does, or in which no candidate reached the rule's own
target, so nothing was picked).
"""

from __future__ import annotations

import argparse
import itertools
import math
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_heldout as bh  # noqa: E402

from tune_batch.analysis.noise import pooled_sd, t95  # noqa: E402
from tune_batch.decide.target import level  # noqa: E402

FRACTIONS = (0.90, 0.95, 0.98, 0.99, 1.0)
LEVEL_FRACTIONS = (0.98, 0.99, 1.0)
LENGTHS_IN_TRIALS = (4, 8)
LOWER_LR_WITHIN = 1.25
# (target kind, fraction, confirmation length in trials, pick the lowest lr within this factor of
# the least time); kind "best": of the best any run reached (the earlier default), "level": of the best
# candidate's level, "at_length": no target, the goal's best-at-length rule (fraction unused)
RULES = ([("best", f, n, 1.0) for n in LENGTHS_IN_TRIALS for f in FRACTIONS] + [("best", 0.95, 4, LOWER_LR_WITHIN)]
         + [("level", f, n, 1.0) for n in LENGTHS_IN_TRIALS for f in LEVEL_FRACTIONS]
         + [("at_length", 1.0, n, 1.0) for n in LENGTHS_IN_TRIALS]
         + [("level_start", f, 8, 1.0) for f in (0.98, 0.99)]
         + [("level_held", 0.99, 8, 1.0)])
#: (batch size, seed) -> the untrained model's value of the metric (``untrained``; losses only)
STARTS: dict[tuple[int, int], float] = {}
EARLIER = ("best", 0.95, 4, 1.0)  # tune_batch's default until 2026-12-05
DEFAULT = ("level", 0.99, 8, 1.0)  # its default since, chosen on this replay


def cut(curve: list, samples: float) -> list:
    return [c for c in curve if c[0] <= samples + 0.5]


def _toward(ref: float, curves: dict, fraction: float, direction: str,
            starts: list[float] | None = None) -> float | None:
    """``fraction`` x ``ref`` (maximize); for a loss, that fraction of the way from the first
    validation (median over the runs), or from ``starts`` (the runs' untrained values) where
    given, to ``ref`` (None when ``ref`` is no better than it)."""
    if direction == "maximize":
        return fraction * ref
    start = statistics.median(starts or [cv[0][2] for cs in curves.values() for cv in cs if cv])
    return start + fraction * (ref - start) if ref < start else None


def own_target(curves: dict, fraction: float, direction: str) -> float | None:
    """The rule's target over the candidates' cut curves (``curves``: point -> list of curves)."""
    values = [c[2] for cs in curves.values() for cv in cs for c in cv if c[2] == c[2]]
    if not values:
        return None
    return _toward(max(values) if direction == "maximize" else min(values), curves, fraction, direction)


def level_target(curves: dict, fraction: float, direction: str,
                 starts: list[float] | None = None) -> float | None:
    """The ``level`` rule's target: ``fraction`` x the best candidate's level (its runs' median of
    ``tune_batch.decide.target.level``, the product's); ``starts``: the level_start rule's."""
    levels = [statistics.median([level(cv) for cv in cs]) for cs in curves.values() if all(cs)]
    levels = [x for x in levels if x == x]
    if not levels:
        return None
    return _toward(max(levels) if direction == "maximize" else min(levels), curves, fraction, direction, starts)


def at_length(curves: dict, direction: str) -> list:
    """The goal's best-at-length rule on cut curves (as ``Confirmation.best_at_length``)."""
    sign = 1.0 if direction == "maximize" else -1.0
    finals = {p: [cv[-1][2] for cv in cs if cv and cv[-1][2] == cv[-1][2]] for p, cs in curves.items()}
    finals = {p: v for p, v in finals.items() if v}
    if not finals:
        return []
    mean = {p: statistics.fmean(v) for p, v in finals.items()}
    top = max(finals, key=lambda p: sign * mean[p])
    sd, df = pooled_sd(list(finals.values()))

    def near(p: tuple) -> bool:
        gap = sign * (mean[top] - mean[p])
        return gap <= 0.0 or (sd is not None and
                              gap <= t95(df) * sd * math.sqrt(1 / len(finals[top]) + 1 / len(finals[p])))

    seconds = {p: statistics.median([cv[-1][1] for cv in curves[p] if cv]) for p in finals if near(p)}
    least = min(seconds.values())
    return [p for p, t in seconds.items() if t == least]


def choose(points: tuple, runs: dict, seeds: tuple, samples: float, fraction: float, direction: str,
           within: float = 1.0, kind: str = "best") -> list:
    """The pick(s) of one rule: the points with the least median time to the rule's own target
    (``within`` > 1: the lowest learning rate among those within that factor of the least);
    ``kind`` "at_length": the goal's best-at-length rule instead."""
    curves = {p: [cut(runs[p][s], samples) for s in seeds] for p in points}
    if kind == "at_length":
        return at_length(curves, direction)
    if kind == "level_start":
        starts = [STARTS[(p[0], sd)] for p in points for sd in seeds if (p[0], sd) in STARTS]
        target = level_target(curves, fraction, direction, starts if direction == "minimize" else None)
    else:
        target = (level_target if kind in ("level", "level_held") else own_target)(curves, fraction, direction)
    if target is None:
        return []
    times = {p: statistics.median([bh.ttt(cv, target, direction) for cv in curves[p]]) for p in points}
    if kind == "level_held":  # a candidate whose runs level off short of the target is out
        held = {p: statistics.median([level(cv) for cv in curves[p]]) if all(curves[p]) else math.nan for p in points}
        times = {p: t if bh.reached(held[p], target, direction) else math.inf for p, t in times.items()}
    least = min(times.values())
    if not math.isfinite(least):
        return []
    near = [p for p, t in times.items() if t <= least * within]
    if within > 1.0:
        low = min(p[1] for p in near)
        return [p for p in near if p[1] == low]
    return near


def grid_runs(workload: str, rows: list[dict]) -> tuple[dict, dict, list, list, dict]:
    """(the yardstick, point -> seed -> curve, the seeds, the points run on every seed, point ->
    seed -> time to the yardstick) of a grid's rows."""
    stick = bh.yardstick(workload, rows)
    runs: dict = {}
    for r in rows:
        if r["status"] == "ok" and r["curve"]:
            runs.setdefault(bh.key(r["params"]), {})[r["seed"]] = r["curve"]
    seeds_all = sorted({s for v in runs.values() for s in v})
    points = sorted(p for p, v in runs.items() if len(v) == len(seeds_all))
    late_t = {p: {s: bh.ttt(runs[p][s], stick["target"], stick["direction"]) for s in seeds_all} for p in points}
    return stick, runs, seeds_all, points, late_t


def study(workload: str, rows: list[dict], k: int, trial_samples: float) -> tuple[dict, dict, int, list]:
    stick, runs, seeds_all, points, late_t = grid_runs(workload, rows)
    direction = stick["direction"]
    regrets: dict = {r: [] for r in RULES}
    misses: dict = {r: [] for r in RULES}
    sets = 0
    helds: list = []  # the held-back seed of each set, in order
    for held in seeds_all:
        conf_seeds = tuple(s for s in seeds_all if s != held)
        for combo in itertools.combinations(points, k):
            fastest = min(late_t[p][held] for p in combo)
            if not math.isfinite(fastest):
                continue
            sets += 1
            helds.append(held)
            for rule in RULES:
                kind, f, n, within = rule
                picks = choose(combo, runs, conf_seeds, n * trial_samples, f, direction, within, kind)
                if not picks:  # no candidate reached the rule's own target: nothing recommended
                    regrets[rule].append(math.inf)
                    misses[rule].append(1.0)
                    continue
                rs = [late_t[p][held] / fastest for p in picks]
                regrets[rule].append(statistics.fmean(rs) if all(map(math.isfinite, rs)) else math.inf)
                misses[rule].append(sum(1 for x in rs if not math.isfinite(x)) / len(rs))
    return stick, {r: (regrets[r], misses[r]) for r in RULES}, sets, helds


def untrained(workload: str, rows: list[dict]) -> dict[tuple[int, int], float]:
    """(batch size, seed) -> the untrained model's value of the metric, as a confirmation run
    records it (``info.start_value``), from one run of one step per batch size and seed of the grid."""
    from tune_batch.store.jobs import seeded
    from tune_batch.trial.curve import confirm_run

    cfg = bh.load(workload)
    out = {}
    for b, sd in sorted({(int(r["params"]["batch_size"]), int(r["seed"])) for r in rows}):
        rc = bh.run_config(cfg, b)  # one step: the value is read before it
        one = rc.model_copy(update={"confirm": rc.confirm.model_copy(update={"evaluations": 2})})
        rec = confirm_run(seeded(one, sd), {"batch_size": b, "lr": float(rows[0]["params"]["lr"]), "num_gpus": 1})
        if rec.info.start_value is None:
            raise SystemExit(f"{workload}: batch {b} seed {sd}: no start value ({rec.status.value}: {rec.reason})")
        out[(b, sd)] = rec.info.start_value
    return out


def quantile(xs: list[float], q: float) -> float:
    ys = sorted(xs)
    return ys[min(len(ys) - 1, int(q * len(ys)))] if ys else math.nan


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workload", required=True, choices=sorted(bh.WORKLOADS))
    ap.add_argument("--grid", type=Path, required=True, help="<workload>_grid.jsonl (bench_heldout's grid phase)")
    ap.add_argument("--candidates", type=int, default=3, help="points handed to confirmation (default 3)")
    args = ap.parse_args(argv)
    if not args.grid.exists():
        ap.error(f"--grid {args.grid}: no such file (bench_decision.py --heldout --phase grid writes it)")
    if args.candidates < 1:
        ap.error(f"--candidates {args.candidates}: give 1 or more (confirmation's default is 3)")
    rows = bh.jsonl(args.grid)
    cfg = bh.load(args.workload)
    trial_samples = float(cfg.budget.train_samples)
    if bh.metric_of(cfg)[1] == "minimize":
        STARTS.update(untrained(args.workload, rows))
        print("untrained values (batch size, seed): " + ", ".join(f"{k}: {v:.4g}" for k, v in sorted(STARTS.items())))
    stick, by_rule, sets, helds = study(args.workload, rows, args.candidates, trial_samples)
    print(f"{args.workload}: {stick['points']} points, {stick['runs']} runs; yardstick {stick['metric']} "
          f"{'>=' if stick['direction'] == 'maximize' else '<='} {stick['target']:.4g}, reached by "
          f"{stick['reaching']} points; {sets} candidate sets of {args.candidates} (x held-back seed) in which "
          f"some candidate reaches it; a trial is {trial_samples:.0f} samples")
    seeds = sorted(set(helds))
    print("p90 and miss: over every set; in brackets, over the sets of each held-back seed (seeds "
          f"{', '.join(map(str, seeds))}): the spread that one seed's runs make")
    print(f"{'rule':<60} {'median':>7} {'p75':>7} {'p90':>7} {'miss':>6}   {'p90 by seed':<22} miss by seed")
    out = [f"workload={args.workload}", f"sets={sets}"]
    for (kind, f, n, within), (reg, miss) in by_rule.items():
        med, p75, p90, m = statistics.median(reg), quantile(reg, 0.75), quantile(reg, 0.9), statistics.fmean(miss)
        tag = {DEFAULT: " (default)", EARLIER: " (earlier default)"}.get((kind, f, n, within), "")
        low = f", lowest lr within {within:g}x" if within > 1.0 else ""
        what = {"best": f"f {f:.2f} of the best reached", "level": f"f {f:.2f} of the best level",
                "level_start": f"f {f:.2f} of the best level, from untrained",
                "level_held": f"f {f:.2f} of the best level, own level at it",
                "at_length": "best at length (goal rule)"}[kind]
        by_seed = [([x for x, h in zip(reg, helds) if h == sd], [x for x, h in zip(miss, helds) if h == sd])
                   for sd in seeds]
        p90s = " ".join(f"{quantile(r, 0.9):.3f}" for r, _ in by_seed)
        ms = " ".join(f"{statistics.fmean(x):.3f}" for _, x in by_seed)
        print(f"{f'{what}, {n} trials long{low}{tag}':<60} {med:7.3f} {p75:7.3f} {p90:7.3f} {m:6.3f}   "
              f"[{p90s}]{'':<3} [{ms}]")
        name = {"best": f"f{f:.2f}", "level": f"level{f:.2f}", "level_start": f"levelstart{f:.2f}",
                "level_held": f"levelheld{f:.2f}",
                "at_length": "atlen"}[kind].replace(".", "")
        name += f"_l{n}" + ("_lowlr" if within > 1.0 else "")
        out += [f"{name}_median={med:.3f}", f"{name}_p90={p90:.3f}", f"{name}_miss={m:.3f}"]
    print("RESULT " + " ".join(out))


if __name__ == "__main__":
    main()
