"""What the noise-aware front's definition does to the answer: every stored search's short-budget
report built with the front as it was until 2026-12-05 and as it is now (no training, seconds).

Until 2026-12-05 a config was off the front when any other beat it beyond the noise in one
objective and it beat that one beyond the noise in none. That relation is not transitive: a slow
config at 0.76 was put off by a faster one at 0.70 (inside the noise of it), that one by a faster
one at 0.60, and so on, until the front held only fast configs near chance, each of them beaten
beyond the noise in val_acc by the config at 0.76. Now only a config *on the front* puts another
off (``analysis.pareto.noisy_non_dominated`` decides them in the order of the domination), so a
config stays unless a front config is at least as good within the noise.

Per set of stored searches (``benchmarks/confirmed_searches.tgz``: the two development workloads;
``benchmarks/heldout/*_searches.tgz``: the held-out ones), both ways: the front's size (median,
range); the searches whose most accurate config is off the front while beating every front
config in val_acc beyond the noise ("accurate left out"), and those where it is more than 0.1
above the front's most accurate; the searches whose short-budget pick (the knee,
``Report.recommended``) changes; those whose confirmation candidates (the first
``confirm.candidates`` of ``decide.recommend.confirm_candidates``) change. It chooses nothing:
the definition changed because the old one contradicts itself, and a changed pick or candidate
set is not judged here (that needs training: a held-out workload).

Usage: python scripts/bench_front_replay.py [--tgz F ...]
Ends with: RESULT searches=... left_out_old=... left_out_new=... knee_changed=... candidates_changed=...
"""

from __future__ import annotations

import argparse
import math
import statistics
import tarfile
import tempfile
import warnings
from collections.abc import Sequence
from pathlib import Path

from tune_batch.analysis import pareto, report
from tune_batch.analysis.report import build_report, latest_per_trial
from tune_batch.decide.recommend import confirm_candidates
from tune_batch.store.rundir import RunDir

REPO = Path(__file__).resolve().parent.parent
DEFAULT_TGZ = [REPO / "benchmarks" / "confirmed_searches.tgz",
               *sorted((REPO / "benchmarks" / "heldout").glob("*_searches.tgz"))]


def old_noisy_non_dominated(values: Sequence[Sequence[float]], cis: Sequence[Sequence[float | None]],
                            directions: Sequence[str]) -> list[int]:
    """The front as it was until 2026-12-05: any j put i off when j was better beyond the noise in
    one objective and i better beyond it in none, whether j was on the front or not."""
    finite = [i for i, p in enumerate(values) if all(math.isfinite(v) for v in p)]

    def dominated_by(i: int, j: int) -> bool:
        return (bool(pareto.better_beyond(values[j], values[i], cis[j], cis[i], directions))
                and not pareto.better_beyond(values[i], values[j], cis[i], cis[j], directions))

    return [i for i in finite if not any(dominated_by(i, j) for j in finite if j != i)]


def read(run: Path, old: bool) -> dict:
    rd = RunDir(run)
    recs, _ = rd.records()
    cfg = rd.load_config()
    short = [r for r in latest_per_trial(recs) if r.info.confirm_of is None]
    saved = report.noisy_non_dominated
    report.noisy_non_dominated = old_noisy_non_dominated if old else saved
    try:
        rep = build_report(cfg, short)
        cands = [r.trial_id for r in confirm_candidates(rep)] if cfg.confirm.candidates else []
    finally:
        report.noisy_non_dominated = saved
    out = {"front": len(rep.front), "knee": rep.recommended.trial_id if rep.recommended else None,
           "cands": sorted(map(str, cands)), "left_out": False, "gap": 0.0}
    if "val_acc" in cfg.metric_names and rep.front:
        pts = [p for p in rep.points.values() if "val_acc" in p.mean]
        best = max(pts, key=lambda p: p.mean["val_acc"])
        front = [rep.points[t.trial_id] for t in rep.front]
        out["gap"] = best.mean["val_acc"] - max(p.mean["val_acc"] for p in front)
        out["left_out"] = best.trial not in rep.front and all(
            pareto.beyond(best.mean["val_acc"], p.mean["val_acc"], best.ci.get("val_acc"), p.ci.get("val_acc"))
            for p in front)
    return out


def score(name: str, runs: list[Path]) -> dict:
    rows = [(read(r, True), read(r, False)) for r in runs]
    old_sizes, new_sizes = [o["front"] for o, _ in rows], [n["front"] for _, n in rows]
    res = {"searches": len(rows),
           "left_out_old": sum(o["left_out"] for o, _ in rows), "left_out_new": sum(n["left_out"] for _, n in rows),
           "gap_old": sum(o["gap"] > 0.1 for o, _ in rows), "gap_new": sum(n["gap"] > 0.1 for _, n in rows),
           "knee_changed": sum(o["knee"] != n["knee"] for o, n in rows),
           "candidates_changed": sum(o["cands"] != n["cands"] for o, n in rows if o["cands"] or n["cands"]),
           "with_candidates": sum(bool(o["cands"] or n["cands"]) for o, n in rows)}
    print(f"\n== {name}: {len(rows)} searches ==")
    print(f"front size, median (range): before {statistics.median(old_sizes)} ({min(old_sizes)}-{max(old_sizes)}), "
          f"now {statistics.median(new_sizes)} ({min(new_sizes)}-{max(new_sizes)})")
    print(f"most accurate config off the front, beating every front config in val_acc beyond the noise: "
          f"before {res['left_out_old']}, now {res['left_out_new']}")
    print(f"most accurate config more than 0.1 above the front's most accurate: before {res['gap_old']}, "
          f"now {res['gap_new']}")
    print(f"short-budget pick (knee) changed: {res['knee_changed']}; confirmation candidates changed: "
          f"{res['candidates_changed']} of {res['with_candidates']} searches that confirm")
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tgz", nargs="+", type=Path, default=DEFAULT_TGZ)
    args = ap.parse_args()
    warnings.filterwarnings("ignore")
    total: dict[str, int] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for k, tgz in enumerate(args.tgz):
            with tarfile.open(tgz) as tar:
                tar.extractall(Path(tmp) / str(k), filter="data")
            runs = sorted(p.parent for p in (Path(tmp) / str(k)).rglob("trials.jsonl"))
            for key, v in score(tgz.name, runs).items():
                total[key] = total.get(key, 0) + v
    print("\nRESULT " + " ".join(f"{k}={v}" for k, v in total.items()))


if __name__ == "__main__":
    main()
