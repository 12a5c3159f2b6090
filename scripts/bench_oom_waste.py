"""Compute spent on configs that cannot fit: a search with the memory feasibility model against
the same search without it, on a space where at least 30 % of the batch sizes exceed the cap.

waste_frac = trial-seconds of ``oom`` and ``skipped`` trials / trial-seconds of all trials
(trial-seconds: each record's ``duration_s``, measured inside the trial).

Usage: python scripts/bench_oom_waste.py [--cap 40MiB] [--trials 12] [--seeds 0 1]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tune_batch.config import load_config, parse_memory  # noqa: E402
from tune_batch.pipeline.max_batch import probe_trial  # noqa: E402
from tune_batch.pipeline.search import search  # noqa: E402


def waste(records: list) -> tuple[float, dict[str, int], float]:
    total = sum(r.duration_s for r in records)
    bad = sum(r.duration_s for r in records if r.status in ("oom", "skipped"))
    counts = {s: sum(1 for r in records if r.status == s) for s in ("ok", "oom", "skipped", "failed")}
    return (bad / total if total else 0.0), counts, total


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default=str(Path(__file__).resolve().parents[1] / "configs/quickstart.yaml"))
    ap.add_argument("--cap", default="40MiB")
    ap.add_argument("--trials", type=int, default=12)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    args = ap.parse_args()
    base = [f"resources.device_memory={args.cap}", f"budget.trials={args.trials}"]
    cfg = load_config(args.config, base)
    cap = parse_memory(cfg.resources.device_memory)[1]

    # how much of the space is over the cap: one real probe per batch size
    probe = probe_trial(cfg)
    over = []
    for b in cfg.space.batch_choices():
        p = probe(b)
        peak = f"{p.peak_mem_bytes / 2**20:.1f} MiB" if p.peak_mem_bytes else "-"
        print(f"probe batch_size {b}: {p.status} peak {peak}")
        if p.status != "ok":
            over.append(b)
    share = len(over) / len(cfg.space.batch_choices())
    print(f"cap {cap / 2**20:.0f} MiB: {len(over)} of {len(cfg.space.batch_choices())} batch sizes ({share:.0%}) "
          f"exceed it: {over}")

    results: dict[bool, list[float]] = {True: [], False: []}
    tmp = Path(tempfile.mkdtemp(prefix="bench-oom-"))
    try:
        for seed in args.seeds:
            for model_on in (True, False):
                c = load_config(args.config, [*base, f"search.seed={seed}",
                                              f"resources.feasibility_model={str(model_on).lower()}"])
                res = search(c, tmp / f"s{seed}-{int(model_on)}", quiet=True)
                frac, counts, total = waste(res.records)
                results[model_on].append(frac)
                print(f"seed {seed} feasibility_model={model_on}: waste {frac:.1%} of {total:.0f} trial-s; {counts}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    on, off = statistics.median(results[True]), statistics.median(results[False])
    print(f"median waste: with the model {on:.1%}, without {off:.1%} (space over the cap: {share:.0%})")
    print(f"RESULT waste_frac={on:.4f} waste_frac_no_model={off:.4f} space_over_cap={share:.2f}")


if __name__ == "__main__":
    main()
