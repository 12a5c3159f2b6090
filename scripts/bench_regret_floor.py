"""How small can the held-out benchmark's regret be? Its noise floor, from the stored side-by-side
runs (no training, seconds).

``bench_decision.py --heldout`` scores a search by its pick's median time to the yardstick over
3 side-by-side runs, divided by the oracle's: the least such median among every config it
retrained. The least of about 25-30 noisy medians is lower than the best config's true time,
so even a search that always picked the truly fastest config would not score 1.0. This script
estimates that floor per held-out workload: every config's runs are resampled with replacement
(``--reps`` times), the oracle is found again among the resampled medians, and the regret of the
config that is the oracle on the stored runs is read each time. It also lists the configs whose
stored median is within ``--near`` of the oracle's, and pairs of configs within 1 % of each
other's learning rate at the same batch size (one config in all but name): how far apart their
medians are is the benchmark's own spread.

The bars of issue 40 (median regret <= 1.15, worst <= 1.5) are read beside it: a bar below the
floor cannot be met by any rule, and a difference inside it is not a result.

Usage: python scripts/bench_regret_floor.py [--workloads W ...] [--dir benchmarks/heldout]
Ends with: RESULT then per workload ``<w>_floor_median=`` and ``<w>_floor_p90=``.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_heldout as bh  # noqa: E402


def floor(times: dict[tuple, list[float]], reps: int, seed: int = 0) -> tuple[tuple, list[float]]:
    """(the oracle config on the stored runs, its regrets under ``reps`` resamplings of every config's runs)."""
    med = {k: statistics.median(v) for k, v in times.items()}
    best = min(med, key=lambda k: med[k])
    rng = random.Random(seed)
    out = []
    for _ in range(reps):
        m = {k: statistics.median(rng.choices(v, k=len(v))) for k, v in times.items()}
        least = min(m.values())
        out.append(m[best] / least if least > 0 else float("inf"))
    return best, sorted(out)


def twins(times: dict[tuple, list[float]], within: float = 0.01) -> list[tuple[tuple, tuple, float]]:
    """Pairs of configs at one batch size whose learning rates differ by less than ``within`` (relative),
    with the ratio of their medians (larger over smaller)."""
    keys = sorted(times)
    med = {k: statistics.median(times[k]) for k in keys}
    out = []
    for i, a in enumerate(keys):
        for b in keys[i + 1:]:
            if a[0] == b[0] and abs(a[1] - b[1]) <= within * max(a[1], b[1]):
                lo, hi = sorted((med[a], med[b]))
                out.append((a, b, hi / lo if lo > 0 else float("inf")))
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    held = [n for n, w in bh.WORKLOADS.items() if w["held_out"] and (bh.HELDOUT / f"{n}_side.jsonl").exists()]
    ap.add_argument("--workloads", nargs="+", default=held, choices=sorted(bh.WORKLOADS))
    ap.add_argument("--dir", type=Path, default=bh.HELDOUT, help="where <w>_grid.jsonl and <w>_side.jsonl are")
    ap.add_argument("--reps", type=int, default=4000)
    ap.add_argument("--near", type=float, default=1.15, help="list the configs within this factor of the oracle")
    args = ap.parse_args(argv)
    if args.reps < 100 or args.near < 1.0:
        ap.error("--reps takes 100 or more, --near 1.0 or more")
    res = []
    for name in args.workloads:
        grid, side = args.dir / f"{name}_grid.jsonl", args.dir / f"{name}_side.jsonl"
        if not grid.exists() or not side.exists():
            print(f"{name}: no stored runs in {args.dir} (bench_decision.py --heldout measures them): left out")
            continue
        stick = bh.yardstick(name, bh.jsonl(grid))
        times: dict[tuple, list[float]] = {}
        for r in bh.jsonl(side):
            times.setdefault(bh.key(r["params"]), []).append(bh.ttt(r["curve"], stick["target"], stick["direction"]))
        best, regs = floor(times, args.reps)
        med = {k: statistics.median(v) for k, v in times.items()}
        near = sorted((k for k in med if k != best and med[k] <= args.near * med[best]), key=lambda k: med[k])
        q = {p: regs[min(len(regs) - 1, int(p * len(regs)))] for p in (0.5, 0.75, 0.9)}
        print(f"{name}: {len(times)} configs x {statistics.median(len(v) for v in times.values()):.0f} runs; oracle "
              f"{bh.label(best)} at {med[best]:.3g} s; its own regret when every config's runs are resampled: median "
              f"{q[0.5]:.3f}, p75 {q[0.75]:.3f}, p90 {q[0.9]:.3f}")
        print(f"  within {args.near:g}x of it on the stored runs: "
              + (", ".join(f"{bh.label(k)} {med[k] / med[best]:.2f}x" for k in near) or "none"))
        for a, b, ratio in twins(times):
            print(f"  one config in all but name: {bh.label(a)} and {bh.label(b)}, medians {ratio:.2f}x apart")
        res += [f"{name}_floor_median={q[0.5]:.3f}", f"{name}_floor_p90={q[0.9]:.3f}"]
    print("RESULT " + " ".join(res))


if __name__ == "__main__":
    main()
