"""How well the progress line's "~ left" foretells a search's remaining seconds: stored searches
replayed record by record (no training).

Each stored search's records are fed, in the order they finished, to ``backends.progress.Progress``
as a search would feed them (``repeating`` / ``confirming`` when a stage begins, with its runs'
count), on a clock that is the sum of the records' seconds (these searches ran one run at a time).
After each record, the estimate is compared with the seconds the records after it actually took.
Two estimates side by side: ``Progress.left_s`` (each run to come at its stage's length, from the
runs finished so far, including the stages the config plans but has not planned yet), and the rule
before it (the mean run so far times the runs in the total, which grows only when a stage is
planned). The replay knows each stage's runs when it begins, second looks included, for both.

Usage: python scripts/bench_eta.py [RUN_DIR_OR_TGZ ...]   (default: benchmarks/confirmed_searches.tgz
       and benchmarks/heldout/*_searches.tgz)
Ends with: RESULT searches= points= median_log_error= within_1_5x= median_log_error_before=
within_1_5x_before= (|log(estimate / actual)|; the share of estimates within 1.5x of the actual)
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import tarfile
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tune_batch.backends.progress import Progress  # noqa: E402
from tune_batch.config import load_config  # noqa: E402
from tune_batch.store.records import TrialResult  # noqa: E402


def kind(r: TrialResult) -> str:
    return "confirm" if r.info.confirm_of is not None else "repeat" if r.info.repeat_of is not None else "trial"


def replay(run_dir: Path) -> list[tuple[float, float, float, bool]]:
    """(estimate, estimate before, actual seconds left, at the last trial) after each record."""
    config = load_config(run_dir / "config.yaml")
    records = [TrialResult.from_record(json.loads(x)) for x in (run_dir / "trials.jsonl").read_text().splitlines()]
    kinds = [kind(r) for r in records]
    progress = Progress(config, config.budget.trials, quiet=True)
    total_s, elapsed, stage, out = sum(r.duration_s for r in records), 0.0, "trial", []
    for i, rec in enumerate(records):
        if kinds[i] != stage:
            stage = kinds[i]
            runs = sum(1 for k in kinds[i:] if k == stage)
            (progress.repeating if stage == "repeat" else progress.confirming)(runs)
        elapsed += rec.duration_s
        progress.records.append(rec)
        progress._here.append(rec)
        progress._done_here += 1
        actual = total_s - elapsed
        if i == len(records) - 1 or actual < 1.0:  # done, or the rest is instantaneous
            continue
        done = len({r.trial_id for r in progress.records if not r.info.free_skip})
        before = elapsed / progress._done_here * max(0, progress.total - done)
        last_trial = kinds[i] == "trial" and kinds[i + 1] != "trial"
        out.append((progress.left_s(done, elapsed), before, actual, last_trial))
    return out


def run_dirs(paths: list[Path], scratch: Path) -> list[Path]:
    found = []
    for p in paths:
        if p.suffix == ".tgz":
            with tarfile.open(p) as tar:
                tar.extractall(scratch / p.stem, filter="data")
            p = scratch / p.stem
        found += sorted(d.parent for d in p.rglob("trials.jsonl") if (d.parent / "config.yaml").exists())
    return found


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("paths", nargs="*", type=Path)
    args = ap.parse_args()
    paths = args.paths or [REPO / "benchmarks/confirmed_searches.tgz",
                           *sorted((REPO / "benchmarks/heldout").glob("*_searches.tgz"))]
    with tempfile.TemporaryDirectory() as scratch:
        dirs = run_dirs(paths, Path(scratch))
        points, searches = [], 0
        for d in dirs:
            try:
                got = replay(d)
            except Exception as e:  # noqa: BLE001 - a search stored by an older schema: said, skipped
                print(f"skipped {d.name}: {type(e).__name__}: {str(e).splitlines()[0][:120]}")
                continue
            searches += 1
            points += got
    if not points:
        raise SystemExit("bench_eta: no stored search could be replayed")

    def err(est: float, actual: float) -> float:
        return abs(math.log(max(est, 0.5) / actual))

    rows = {}
    for name, k in (("now", 0), ("before", 1)):
        errors = [err(p[k], p[2]) for p in points]
        last = [(round(p[k]), round(p[2])) for p in points if p[3]]
        rows[name] = (statistics.median(errors), sum(e < math.log(1.5) for e in errors) / len(errors))
        print(f"{name:>6}: median |log(estimate / actual)| {rows[name][0]:.3f}, within 1.5x {rows[name][1]:.3f}; "
              f"at the last trial (estimate, actual s), first 10: {last[:10]}")
    print(f"{searches} searches, {len(points)} estimates")
    print(f"RESULT searches={searches} points={len(points)} median_log_error={rows['now'][0]:.3f} "
          f"within_1_5x={rows['now'][1]:.3f} median_log_error_before={rows['before'][0]:.3f} "
          f"within_1_5x_before={rows['before'][1]:.3f}")


if __name__ == "__main__":
    main()
