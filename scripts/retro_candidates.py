"""Which configs should confirmation train? Candidate rules replayed on every stored search.

Confirmation trains a handful of the short budget's configs at length and recommends the one
that reaches the target first, so it can do no better than the best config among them. This
script re-reads every stored default search (benchmarks/confirmed_searches.tgz and
benchmarks/searches_*.tgz: config.yaml and trials.jsonl of quickstart and synthetic searches
this project ran on its 2-core VM), lets two rules choose the candidates from the same short
trials, and scores each set by the committed full-training grid of its workload
(benchmarks/decision_{quickstart,synthetic}_fine.json: 25 configs, one seed each, 65536 samples
validated every 512): the best candidate's time to the grid's target (0.95 x its best val_acc),
its learning rate snapped to the grid's nearest (log scale), over the grid best's time. No
training: seconds.

Rules (after the recommended config and the most accurate, both in every rule, the configs
within confirm.target_fraction of the most accurate at the short budget, ordered by):

  samples/s   fastest per sample first (the rule until 2026-12-03)
  shipped     soonest to a common target first by the gradient noise scale's model:
              (1 + B / B_noise) / samples/s at the search's B_noise (tune_batch.decision)

The grid is one seed per config and the snap moves a learning rate by up to 1.8x, so a score is
a coarse reading of a set: the comparison is of the two rules on the same searches, paired.
Searches stored in two archives are read once.

Usage: python scripts/retro_candidates.py [--archives A ...]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import statistics
import sys
import tarfile
import tempfile
import warnings
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

GRIDS = {"quickstart": "decision_quickstart_fine.json", "synthetic-grid": "decision_synthetic_fine.json"}


def grid_times(path: Path, fraction: float = 0.95) -> tuple[dict, float, list[float]]:
    """(time to target per (batch, lr), the best of them, the grid's learning rates)."""
    from tune_batch.confirm import first_reach

    table = json.loads(path.read_text())
    target = fraction * max(c[2] for r in table["records"] for c in r["info"].get("curve") or [])
    times = {}
    for r in table["records"]:
        hit = first_reach(r["info"].get("curve") or [], target)
        times[(r["params"]["batch_size"], r["params"]["lr"])] = hit[0] if hit else math.inf
    return times, min(times.values()), table["lr_grid"]


def score(picked, times: dict, best: float, lrs: list[float]) -> float:
    """The best candidate's grid time over the grid best's (learning rates snapped)."""
    def snapped(r) -> float:
        lr = min(lrs, key=lambda x: abs(math.log(x) - math.log(r.params.lr)))
        return times.get((r.params.batch_size, lr), math.inf)

    return min(snapped(r) for r in picked) / best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--archives", nargs="+", default=None,
                    help="default: benchmarks/confirmed_searches.tgz and benchmarks/searches_*.tgz")
    args = ap.parse_args()
    warnings.filterwarnings("ignore")
    import yaml

    import tune_batch.decision as decision
    from tune_batch.config import config_from_dict
    from tune_batch.report import build_report, latest_per_trial
    from tune_batch.results import RunDir

    archives = [Path(a) for a in args.archives] if args.archives else \
        [REPO / "benchmarks" / "confirmed_searches.tgz", *sorted((REPO / "benchmarks").glob("searches_*.tgz"))]
    grids = {name: grid_times(REPO / "benchmarks" / file) for name, file in GRIDS.items()}
    shipped_noise_scale = decision.search_noise_scale
    rows: dict[str, list[tuple[float, float]]] = {name: [] for name in GRIDS}
    seen: set[str] = set()
    with tempfile.TemporaryDirectory() as tmp:
        for k, archive in enumerate(archives):
            with tarfile.open(archive) as tar:
                tar.extractall(Path(tmp) / str(k), filter="data")
        for run in sorted({p.parent for p in Path(tmp).rglob("trials.jsonl")}):
            digest = hashlib.sha256((run / "trials.jsonl").read_bytes()).hexdigest()
            if digest in seen or not (run / "config.yaml").exists():
                continue
            seen.add(digest)
            cfg = config_from_dict(yaml.safe_load((run / "config.yaml").read_text()))
            if cfg.name not in GRIDS or cfg.confirm.candidates <= 0:
                continue
            records, _ = RunDir(run).records()
            report = build_report(cfg, [r for r in latest_per_trial(records) if r.info.confirm_of is None])
            if not report.learned:
                continue
            try:
                decision.search_noise_scale = lambda _records: (None, 0)  # the rule before: samples/s alone
                before = decision.confirm_candidates(report)
            finally:
                decision.search_noise_scale = shipped_noise_scale
            now = decision.confirm_candidates(report)
            a, b = score(before, *grids[cfg.name]), score(now, *grids[cfg.name])
            rows[cfg.name].append((a, b))
            if a != b:
                show = lambda picked: ", ".join(f"({r.params.batch_size}, {r.params.lr:.3g})" for r in picked)  # noqa: E731
                print(f"{run.relative_to(tmp)}: {a:.2f} -> {b:.2f}  [{show(before)}] -> [{show(now)}]")
    total = {"better": 0, "worse": 0, "n": 0}
    summary = []
    for name, pairs in rows.items():
        if not pairs:
            continue
        a, b = [x for x, _ in pairs], [y for _, y in pairs]
        better, worse = sum(y < x for x, y in pairs), sum(y > x for x, y in pairs)
        total["better"] += better
        total["worse"] += worse
        total["n"] += len(pairs)
        print(f"{name}: {len(pairs)} searches; best candidate / grid best: samples/s order median "
              f"{statistics.median(a):.3f} worst {max(a):.3f}; shipped median {statistics.median(b):.3f} worst "
              f"{max(b):.3f}; shipped better in {better}, worse in {worse}")
        summary.append(f"{name.split('-')[0]}_median_before={statistics.median(a):.3f} "
                       f"{name.split('-')[0]}_median_shipped={statistics.median(b):.3f}")
    n = total["better"] + total["worse"]
    # two-sided sign test over the searches where the two sets score differently
    p = min(1.0, 2 * sum(math.comb(n, i) for i in range(min(total["better"], total["worse"]) + 1)) / 2 ** n) if n else 1.0
    print(f"RESULT searches={total['n']} better={total['better']} worse={total['worse']} sign_test_p={p:.3f} "
          + " ".join(summary))


if __name__ == "__main__":
    main()
