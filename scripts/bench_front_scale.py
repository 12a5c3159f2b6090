"""How long the noise-aware front takes as a search grows: every progress line computes it (the
front the summary will show), so its cost is paid once per finished trial.

Seeded synthetic records (3 batch sizes, random learning rates, samples/s and val_acc with
scatter), no training. For each size, interleaved: ``build_report`` with the dominators compared
pair by pair (``better_beyond`` for every pair, as the front was computed before) and in numpy
blocks (``analysis.pareto._dominators``, as shipped); both fronts must be the same. Medians over
the repeats, their spread (min-max) beside them.

    python scripts/bench_front_scale.py [--sizes 200 500 1000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

from tune_batch.analysis import pareto
from tune_batch.analysis.report import build_report
from tune_batch.config import config_from_dict
from tune_batch.store.records import TrialResult


def records(n: int, seed: int = 0) -> list[TrialResult]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        b, lr = rng.choice([16, 32, 64]), 10 ** rng.uniform(-3, -1)
        out.append(TrialResult.from_record({
            "trial_id": i, "params": {"batch_size": b, "lr": lr, "num_gpus": 1}, "status": "ok",
            "metrics": {"samples_per_s": 1000 * b ** 0.3 * rng.uniform(0.9, 1.1), "val_acc": rng.uniform(0.5, 0.95),
                        "peak_mem_bytes": 2**20 * b},
            "info": {"seed": 0, "chance_acc": 0.1}}))
    return out


def pair_by_pair(finite, values, cis, directions):  # the reference: every pair in Python
    return {i: [j for j in finite if j != i and pareto.better_beyond(values[j], values[i], cis[j], cis[i], directions)
                and not pareto.better_beyond(values[i], values[j], cis[i], cis[j], directions)] for i in finite}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[200, 500, 1000])
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    cfg = config_from_dict({"name": "scale", "objectives": [{"metric": "samples_per_s"}, {"metric": "val_acc"}]})
    shipped = pareto._dominators
    result = {}
    print(f"{'configs':>8} {'pair by pair s (min-max)':>26} {'blocks s (min-max)':>22} {'ratio':>6}  same front")
    for n in args.sizes:
        recs = records(n)
        times: dict[str, list[float]] = {"pairs": [], "blocks": []}
        fronts = {}
        for _ in range(args.repeats):
            for name, fn in (("pairs", pair_by_pair), ("blocks", shipped)):
                pareto._dominators = fn
                start = time.perf_counter()
                fronts[name] = [r.trial_id for r in build_report(cfg, recs).front]
                times[name].append(time.perf_counter() - start)
        pareto._dominators = shipped
        a, b = statistics.median(times["pairs"]), statistics.median(times["blocks"])
        same = fronts["pairs"] == fronts["blocks"]
        print(f"{n:>8} {a:>10.3f} ({min(times['pairs']):.3f}-{max(times['pairs']):.3f}) "
              f"{b:>10.3f} ({min(times['blocks']):.3f}-{max(times['blocks']):.3f}) {a / b:>6.1f}  {same}")
        result[n] = (a, b, same)
    big = max(result)
    print(f"RESULT configs={big} pairs_s={result[big][0]:.3f} blocks_s={result[big][1]:.3f} "
          f"speedup={result[big][0] / result[big][1]:.1f} same_front={all(r[2] for r in result.values())}")


if __name__ == "__main__":
    main()
