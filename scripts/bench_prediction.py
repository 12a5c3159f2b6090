"""How well does the gradient noise scale predict time to target? Every stored search with
confirmation runs, re-read with today's decision code (no training: seconds).

Each confirmed candidate's time to target is predicted from the other candidates of its search
(leave one out: E_min x (1 + B / B_noise) samples at its step's samples/s, tune_batch.decide.confirm)
and compared with its measured time (the median over its confirmation runs). The same runs give
the noise floor: how far one seed's time to target is from another seed's of the same config.

The searches (benchmarks/confirmed_searches.tgz, 0.5 MB: each run's trials.jsonl and
config.yaml) are every default quickstart and synthetic search with confirmation that this
project ran on its 2-core VM from 2026-11-30 to 2026-12-01: the bench_decision and
bench_stability runs and README quickstart runs, recorded by several versions of the trial code
(the records are measurements; only the reading of them is today's).

Printed: predicted/measured within 1.5x over every confirmed candidate; the median ratio of the
candidate measured fastest in its search against the others (the fastest of a few noisy runs
is faster than its config's average, so its ratio leans above 1); the same with the target's
crossing interpolated between validations instead of read at the first validation past it;
and the share of same-config seed pairs within 1.5x of each other.

Usage: python scripts/bench_prediction.py [--archive A | --runs DIR ...]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tarfile
import tempfile
import warnings
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

REPO = Path(__file__).resolve().parents[1]


def interpolated_reach(curve, target):  # -> (training seconds, samples) | None
    """The target's crossing between the last validation below it and the first at or above it,
    linearly interpolated (the first validation's own reading when there is no rise to divide)."""
    if target is None:
        return None
    prev = None
    for samples, train_s, acc, *_ in curve:
        if acc >= target:
            if prev is None or acc <= prev[2]:
                return train_s, samples
            f = (target - prev[2]) / (acc - prev[2])
            return prev[1] + f * (train_s - prev[1]), prev[0] + f * (samples - prev[0])
        prev = (samples, train_s, acc)
    return None


def read(run: Path, reach: Callable | None = None) -> tuple[list[tuple[int, float, bool]], list[float]] | None:
    """((long rank, predicted/measured, whether its step's throughput was read only in disturbed
    windows) per confirmed candidate, seed-pair time ratios) of one
    run directory; None without confirmation. ``reach`` replaces how the crossing is read."""
    import yaml

    import tune_batch.decide.confirm as confirm_mod
    from tune_batch.config import config_from_dict
    from tune_batch.decide.recommend import decide
    from tune_batch.store.rundir import RunDir

    cfg = config_from_dict(yaml.safe_load((run / "config.yaml").read_text()))
    records, _ = RunDir(run).records()
    original = confirm_mod.first_reach
    if reach is not None:
        confirm_mod.first_reach = reach  # confirm() reads the module's name at call time
    try:
        report = decide(cfg, records)
        conf = report.confirmation
        if conf is None or conf.target is None:
            return None
        pred = confirm_mod.predictions(conf, report.front)
        rank = {c.trial.trial_id: c.long_rank for c in conf.candidates}
        ratios = [(rank[x["trial_id"]], x["ratio"], x["disturbed_throughput"]) for x in pred["confirmed"] if x["ratio"]]
        pairs = []
        for c in conf.candidates:
            hits = [confirm_mod.first_reach(r.info.curve or [], conf.target) for r in c.runs]
            if len(hits) == 2 and all(hits):
                pairs.append(hits[0][0] / hits[1][0])
        return ratios, pairs
    finally:
        confirm_mod.first_reach = original


def within(ratios: list[float], factor: float = 1.5) -> float:
    return sum(1 for r in ratios if 1 / factor <= r <= factor) / len(ratios) if ratios else float("nan")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--archive", default=str(REPO / "benchmarks" / "confirmed_searches.tgz"))
    ap.add_argument("--runs", nargs="*", help="run directories instead of the archive")
    args = ap.parse_args()
    warnings.filterwarnings("ignore")
    with tempfile.TemporaryDirectory() as tmp:
        if args.runs:
            runs = [Path(r) for r in args.runs]
        else:
            with tarfile.open(args.archive) as tar:
                tar.extractall(tmp, filter="data")
            runs = sorted({p.parent for p in Path(tmp).rglob("trials.jsonl")})
        first: list[tuple[int, float, bool]] = []
        interp: list[float] = []
        pairs: list[float] = []
        searches = 0
        for run in runs:
            got = read(run)
            if got is None:
                continue
            searches += 1
            first += got[0]
            pairs += got[1]
            interp += [r for _, r, _ in (read(run, interpolated_reach) or ([], []))[0]]
            name = run.relative_to(tmp) if not args.runs else run
            print(f"{name}: predicted/measured "
                  + ", ".join(f"#{k} {r:.2f}" + (" (disturbed throughput)" if d else "") for k, r, d in sorted(got[0])))
    ratios = [r for _, r, _ in first]
    winner = [r for k, r, _ in first if k == 1]
    others = [r for k, r, _ in first if k > 1]
    quiet = [r for _, r, d in first if not d]
    print(f"\n{searches} searches, {len(ratios)} confirmed candidates predicted (leave one out)")
    print(f"within 1.5x: {within(ratios):.3f} (median ratio {statistics.median(ratios):.3f}, "
          f"range {min(ratios):.2f}-{max(ratios):.2f})")
    print(f"{len(ratios) - len(quiet)} of them divide by a samples/s read only in disturbed windows; the others "
          f"within 1.5x: {within(quiet):.3f}")
    print(f"the candidate measured fastest in its search: median ratio {statistics.median(winner):.3f}, "
          f"within 1.5x {within(winner):.3f} ({len(winner)}); the others: median {statistics.median(others):.3f}, "
          f"within 1.5x {within(others):.3f} ({len(others)})")
    print(f"crossing interpolated between validations instead: within 1.5x {within(interp):.3f} "
          f"(median ratio {statistics.median(interp):.3f})")
    print(f"noise floor: one seed's time to target against another seed's of the same config, within 1.5x in "
          f"{within(pairs):.3f} of {len(pairs)} pairs")
    print(f"RESULT pred_within_1_5x={within(ratios):.3f} winner_ratio_median={statistics.median(winner):.3f} "
          f"others_ratio_median={statistics.median(others):.3f} interp_within_1_5x={within(interp):.3f} "
          f"seed_pairs_within_1_5x={within(pairs):.3f} searches={searches} candidates={len(ratios)} "
          f"disturbed_throughput={len(ratios) - len(quiet)}")


if __name__ == "__main__":
    main()
