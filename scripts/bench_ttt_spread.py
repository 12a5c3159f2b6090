"""How precisely can one confirmation run measure time to target? The floor under any
prediction of it.

Trains a few configs of a workload as a confirmation run does (the config's ``confirm`` section
as shipped: length, validations), each with --seeds seeds (data order and initialisation),
interleaved seed-major so machine drift spreads over all configs, and reads each run's time and
samples to the target (--target-fraction x the best val_acc any run reached).

Per config it prints the spread over seeds; then the share of runs whose time to target is
within 1.5x of the median of the *other* seeds of the same config: what a perfect predictor of a
config's typical time to target would score against single-seed measurements (the check
``scripts/bench_decision.py`` reports as gns_pred_within_1_5x, with confirm.seeds = 1).
"""

from __future__ import annotations

import argparse
import itertools
import math
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def within(x: float, ref: float, factor: float = 1.5) -> bool:
    return ref / factor <= x <= ref * factor


def _oracle_k(reached: dict[tuple[int, float], list[float]], k: int) -> float:
    """The same check with confirm.seeds = k: each k-subset of a config's seeds measured as the
    median of its times to target, against the median of the config's other seeds."""
    ok = n = 0
    for times in reached.values():
        for pick in itertools.combinations(range(len(times)), k):
            rest = [t for i, t in enumerate(times) if i not in pick]
            if rest:
                n += 1
                ok += within(statistics.median(times[i] for i in pick), statistics.median(rest))
    print(f"with {k} seeds per measured time (the median of a subset of {k}): within 1.5x of the median of the "
          f"other seeds in {ok} of {n} subsets")
    return ok / n if n else math.nan


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default=str(REPO / "configs" / "quickstart.yaml"))
    ap.add_argument("--points", nargs="+", default=["16:0.1", "32:0.1", "64:0.0316", "128:0.01"],
                    help="batch_size:lr of the configs to measure")
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--target-fraction", type=float, default=0.95)
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="config overrides, as on the command line (e.g. confirm.evaluations=64)")
    args = ap.parse_args()

    import torch

    from tune_batch.config import load_config
    from tune_batch.decide.confirm import first_reach
    from tune_batch.store.jobs import seeded
    from tune_batch.trial.curve import confirm_run

    torch.set_num_threads(2)
    cfg = load_config(args.config, args.set)
    points = [(int(b), float(lr)) for b, lr in (p.split(":") for p in args.points)]
    c = cfg.confirm
    length = cfg.confirm_samples(0) if c.epochs is None else f"{c.epochs} epochs"
    print(f"{Path(args.config).name}: confirmation runs of {length} "
          f"samples, {c.evaluations} validations; {len(points)} configs x {args.seeds} seeds, interleaved", flush=True)
    t0 = time.time()
    curves: dict[tuple[int, float], list[list]] = {p: [] for p in points}
    for seed, (b, lr) in itertools.product(range(args.seeds), points):
        r = confirm_run(seeded(cfg, 100 + seed), {"batch_size": b, "lr": lr, "num_gpus": 1}, trial_id=f"s{seed}")
        if r.status.value != "ok":
            print(f"batch {b} lr {lr:g} seed {seed}: {r.status.value} ({r.reason})")
            continue
        curves[(b, lr)].append(r.info.curve)
        print(f"batch {b} lr {lr:g} seed {seed}: best val_acc {max(x[2] for x in r.info.curve):.3f}, "
              f"{r.info.train_s:.2f} s of training", flush=True)
    best = max(x[2] for cs in curves.values() for cur in cs for x in cur)
    target = args.target_fraction * best
    print(f"\ntarget val_acc {target:.3f} ({args.target_fraction:g} x the best any run reached, {best:.3f})")
    ratios, spreads, pair_ok, pairs = [], [], 0, 0
    reached: dict[tuple[int, float], list[float]] = {}
    for p, cs in curves.items():
        hits = [first_reach(cur, target) for cur in cs]
        times = reached[p] = [h[0] for h in hits if h is not None]
        samples = [h[1] for h in hits if h is not None]
        never = sum(h is None for h in hits)
        if len(times) < 2:
            print(f"batch {p[0]} lr {p[1]:g}: reached the target in {len(times)} of {len(hits)} runs")
            continue
        spreads.append(max(times) / min(times))
        for i, t in enumerate(times):
            ratios.append(statistics.median(times[:i] + times[i + 1:]) / t)
        for a, b in itertools.combinations(times, 2):
            pairs += 1
            pair_ok += within(a, b)
        print(f"batch {p[0]} lr {p[1]:g}: time to target {', '.join(f'{t:.2f}' for t in times)} s "
              f"(max/min {max(times) / min(times):.2f}); samples {', '.join(f'{s:.0f}' for s in samples)}"
              + (f"; never reached in {never} run(s)" if never else ""))
    share = sum(within(r, 1.0) for r in ratios) / len(ratios) if ratios else math.nan
    two = _oracle_k(reached, 2)
    print(f"\nleave-one-seed-out: the median of a config's other seeds is within 1.5x of a run's time to target "
          f"in {sum(within(r, 1.0) for r in ratios)} of {len(ratios)} runs; pairs of seeds within 1.5x of each "
          f"other: {pair_ok} of {pairs}; took {time.time() - t0:.0f} s")
    print(f"RESULT oracle_within_1_5x={share:.3f} pairs_within_1_5x={pair_ok / pairs if pairs else math.nan:.3f} "
          f"oracle_within_1_5x_2seeds={two:.3f} "
          f"ttt_spread_median={statistics.median(spreads) if spreads else math.nan:.3f} seeds={args.seeds} "
          f"configs={len(points)}")


if __name__ == "__main__":
    main()
