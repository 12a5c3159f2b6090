"""Does a search ever recommend a config its own runs showed slower than the user's baseline? A
replay of the decision on every stored search that confirmed a baseline (no training, seconds).

The stored searches (``benchmarks/confirmed_searches.tgz`` and ``benchmarks/heldout/*_searches.tgz``:
each search's config.yaml and trials.jsonl) are read with today's decision code. For each one
with a baseline and a recommendation this prints:

- the speedup of the recommendation over the baseline (the baseline's median time to the target
  over the recommendation's) and its 95 % half-width two ways: as it was computed until
  2026-12-05 (each side's own runs, the normal 1.96) and as it is now (the log times' spread
  pooled over every confirmed config and the baseline, Student's t of the pooled degrees of
  freedom; since 2026-12-05 (later) an interval on the log scale, speedup x exp(+-w), where it
  was speedup +- speedup x w); whether each reads beyond noise;
- the search's pick before the baseline rule (``baseline: kept`` replaces it) and whether the
  baseline is now kept (``decide.recommend._keep_baseline``: the baseline sooner than the pick
  beyond noise, no candidate's own runs as quick, the memory margin kept).

It chooses no rule: the rule was written after these searches were read (three picks slower than
the baseline beyond the old interval), so they are development evidence for it, not a judgement.

Usage: python scripts/bench_baseline_replay.py [--tgz F ...]
Ends with: RESULT searches=... with_speedup=... beyond_old=... beyond_new=... slower_beyond_old=...
kept=...
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import tarfile
import tempfile
from pathlib import Path

from tune_batch.config import load_config
from tune_batch.decide.baseline import compare
from tune_batch.decide.confirm import BASELINE, reach_times
from tune_batch.decide.recommend import _decide, decide
from tune_batch.store.records import TrialResult

REPO = Path(__file__).resolve().parent.parent
DEFAULT_TGZ = [REPO / "benchmarks" / "confirmed_searches.tgz", *sorted((REPO / "benchmarks" / "heldout").glob(
    "*_searches.tgz"))]


def old_ci(speedup: float, mine: list[float], theirs: list[float]) -> float | None:
    """The interval as it was: each side's own log-time variance over its runs, the normal 1.96."""
    mine, theirs = [t for t in mine if t > 0], [t for t in theirs if t > 0]
    if len(mine) < 2 or len(theirs) < 2:
        return None
    var = (statistics.variance([math.log(t) for t in mine]) / len(mine)
           + statistics.variance([math.log(t) for t in theirs]) / len(theirs))
    return speedup * 1.96 * math.sqrt(var)


def read(run: Path) -> dict | None:
    """One stored search: its pick before the baseline rule, the speedup both ways, kept or not."""
    text = (run / "trials.jsonl").read_text()
    if "baseline-c" not in text:
        return None
    cfg = load_config(run / "config.yaml")
    recs = [TrialResult.from_record(json.loads(x)) for x in text.splitlines() if x.strip()]
    before = _decide(cfg, recs, None, None)  # the decision without the baseline's runs read
    conf, pick = before.confirmation, before.recommended
    base_runs = [r for r in before.confirm_runs if r.info.confirm_of == BASELINE]
    if conf is None or not base_runs:
        return None
    best = next((c for c in conf.candidates if pick is not None and c.trial.trial_id == pick.trial_id), None)
    b = compare(cfg, conf, best, base_runs, None)
    if b is None:
        return None
    old = None
    if b.speedup is not None and best is not None:
        old = old_ci(b.speedup, reach_times([r for r in b.runs if r.info.curve], conf.target, conf.maximize),
                     reach_times(best.runs, conf.target, conf.maximize))
    now = decide(cfg, recs)
    return {"run": run.name, "speedup": b.speedup, "ci_old": old, "interval": b.speedup_interval,
            "beyond_old": b.speedup is not None and old is not None and abs(b.speedup - 1) > old,
            "beyond_new": b.beyond_noise, "kept": now.baseline is not None and now.baseline.kept,
            "pick": None if pick is None else f"{pick.params.batch_size}/{pick.params.lr:.3g}",
            "baseline_s": b.time_to_target_s, "pick_s": b.recommended_s}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tgz", nargs="*", type=Path, default=DEFAULT_TGZ)
    args = ap.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for tgz in args.tgz:
            dest = Path(tmp) / tgz.name.removesuffix(".tgz")
            with tarfile.open(tgz) as tar:
                tar.extractall(dest, filter="data")
            for trials in sorted(dest.rglob("trials.jsonl")):
                row = read(trials.parent)
                if row is not None:
                    row["set"] = tgz.name
                    rows.append(row)
    fmt = lambda x, f=".3f": "-" if x is None else f"{x:{f}}"  # noqa: E731
    iv = lambda x: "-" if x is None else f"{x[0]:.2f}-{x[1]:.2f}"  # noqa: E731
    print(f"{'search':58s} {'pick':>12s} {'pick s':>7s} {'base s':>7s} {'speedup':>8s} {'+- old':>7s} "
          f"{'95 % now':>12s}  beyond old/now  kept")
    for r in rows:
        name = r["set"].removesuffix(".tgz") + "/" + r["run"]
        print(f"{name:58s} {r['pick'] or '-':>12s} {fmt(r['pick_s'], '.2f'):>7s} {fmt(r['baseline_s'], '.2f'):>7s}"
              f" {fmt(r['speedup']):>8s} {fmt(r['ci_old']):>7s} {iv(r['interval']):>12s}"
              f"  {str(r['beyond_old']):>5s}/{str(r['beyond_new']):5s}  {r['kept']}")
    with_speedup = [r for r in rows if r["speedup"] is not None]
    slower_old = [r for r in with_speedup if r["beyond_old"] and r["speedup"] < 1]
    beyond_old, beyond_new = (sum(r[k] for r in with_speedup) for k in ("beyond_old", "beyond_new"))
    kept = sum(r["kept"] for r in rows)
    print(f"{len(rows)} stored searches with a confirmed baseline; {len(with_speedup)} where both reached the target; "
          f"beyond noise: {beyond_old} read the old way, {beyond_new} now; the pick slower than the baseline beyond "
          f"the old interval: {len(slower_old)}; the baseline kept now: {kept}")
    print(f"RESULT searches={len(rows)} with_speedup={len(with_speedup)} beyond_old={beyond_old} "
          f"beyond_new={beyond_new} slower_beyond_old={len(slower_old)} kept={kept}")

if __name__ == "__main__":
    main()
