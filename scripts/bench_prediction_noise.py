"""Which gradient noise scale predicts time to target better: the one the search's short trials
read (what tune_batch uses), or the one its confirmation runs read at their end? Stored searches
re-read (no training: seconds). This chooses nothing: it is a lead, measured on stored searches,
for a rule that would then be judged on held-out workloads not yet measured.

The noise scale B_noise grows as training goes on (McCandlish et al.), and the prediction
(samples to target = E_min x (1 + B / B_noise), leave one out, ``decide.confirm.predictions``)
is read at the confirmation's target, late in training; the short trials read B_noise early.
Confirmation runs measure it too, after their last validation (``trial.curve``), and records
written since 2026-12-02 keep it. For every stored search whose confirmation runs carry it, each
confirmed candidate's predicted/measured ratio is computed both ways.

Usage: python scripts/bench_prediction_noise.py [ARCHIVE.tgz ...]   (default: every
       benchmarks/heldout/*_searches.tgz and benchmarks/confirmed_searches.tgz)
Ends with: RESULT searches= candidates= within_1_5x_trials= within_1_5x_confirm= log_error_trials=
log_error_confirm= b_noise_trials= b_noise_confirm= (medians; |log(predicted / measured)|)
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import tarfile
import tempfile
import warnings
from dataclasses import replace
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import yaml  # noqa: E402

from tune_batch.config import config_from_dict  # noqa: E402
from tune_batch.decide.confirm import predictions  # noqa: E402
from tune_batch.decide.predict import search_noise_scale  # noqa: E402
from tune_batch.decide.recommend import decide  # noqa: E402
from tune_batch.store.rundir import RunDir  # noqa: E402


def within(ratios: list[float], factor: float = 1.5) -> float:
    return sum(1 for r in ratios if 1 / factor <= r <= factor) / len(ratios) if ratios else float("nan")


def read(run: Path) -> tuple[list[float], list[float], float, float] | None:
    """(ratios with the trials' B_noise, ratios with the confirmation runs', the two B_noise) of
    one stored search; None without confirmation runs that read a noise scale."""
    cfg = config_from_dict(yaml.safe_load((run / "config.yaml").read_text()))
    records, _ = RunDir(run).records()
    conf = decide(cfg, records).confirmation
    if conf is None or conf.target is None or not conf.noise_scale:
        return None
    at_end, _ = search_noise_scale([r for c in conf.candidates for r in c.runs])
    if not at_end:
        return None
    short = [x["ratio"] for x in predictions(conf, [])["confirmed"] if x["ratio"]]
    late = [x["ratio"] for x in predictions(replace(conf, noise_scale=at_end), [])["confirmed"] if x["ratio"]]
    return short, late, conf.noise_scale, at_end


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("archives", nargs="*", type=Path)
    args = ap.parse_args()
    archives = args.archives or [*sorted((REPO / "benchmarks/heldout").glob("*_searches.tgz")),
                                 REPO / "benchmarks/confirmed_searches.tgz"]
    warnings.filterwarnings("ignore")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for a in archives:
            with tarfile.open(a) as tar:
                tar.extractall(Path(tmp) / a.stem, filter="data")
            runs = sorted({p.parent for p in (Path(tmp) / a.stem).rglob("trials.jsonl")
                           if (p.parent / "config.yaml").exists()})
            got = [g for g in map(read, runs) if g is not None]
            print(f"{a.name}: {len(runs)} searches, {len(got)} with a noise scale from their confirmation runs")
            rows += got
    if not rows:
        raise SystemExit("bench_prediction_noise: no stored search has confirmation runs that read a noise scale")
    short = [r for g in rows for r in g[0]]
    late = [r for g in rows for r in g[1]]

    def log_error(ratios: list[float]) -> float:
        return statistics.median(abs(math.log(r)) for r in ratios)

    b_short, b_late = statistics.median(g[2] for g in rows), statistics.median(g[3] for g in rows)
    print(f"{len(rows)} searches, {len(short)} confirmed candidates predicted (leave one out)")
    print(f"B_noise, median over searches: short trials {b_short:.0f}, confirmation runs' end {b_late:.0f}")
    for name, ratios in (("short trials' B_noise (used)", short), ("confirmation runs' B_noise", late)):
        print(f"{name}: within 1.5x {within(ratios):.3f}, median |log(predicted / measured)| "
              f"{log_error(ratios):.3f}, median ratio {statistics.median(ratios):.3f}")
    print(f"RESULT searches={len(rows)} candidates={len(short)} within_1_5x_trials={within(short):.3f} "
          f"within_1_5x_confirm={within(late):.3f} log_error_trials={log_error(short):.3f} "
          f"log_error_confirm={log_error(late):.3f} b_noise_trials={b_short:.0f} b_noise_confirm={b_late:.0f}")


if __name__ == "__main__":
    main()
