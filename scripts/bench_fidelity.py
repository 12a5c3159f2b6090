"""How faithful is a trial's throughput? A trial's ``samples_per_s`` against a steady-state run of
the same config ten times longer, and the timed window with the profiler on against off.

Runs are interleaved (short, long, profiler on, profiler off, repeated) so slow drift of the
machine hits every variant alike; figures are medians over ``--repeats``.

sps_rel_err       = |median sps(trial) - median sps(10x longer)| / median sps(10x longer)
profiler_overhead = |median sps(profiling on) - median sps(profiling off)| / median sps(off)
                    (the timed window only: profiled steps run after it)

Usage: python scripts/bench_fidelity.py [--batch-size 64] [--lr 0.05] [--repeats 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path
from tempfile import TemporaryDirectory

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tune_batch.config import load_config  # noqa: E402
from tune_batch.trial import run_trial  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default=str(Path(__file__).resolve().parents[1] / "configs/quickstart.yaml"))
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--set", dest="overrides", action="append", default=[])
    args = ap.parse_args()
    cfg = load_config(args.config, args.overrides)
    n = cfg.budget.train_samples
    variants = {
        "trial": cfg,
        "10x longer": cfg.model_copy(update={"budget": cfg.budget.model_copy(update={"train_samples": 10 * n})}),
        "profiler on": cfg.model_copy(update={"profile": cfg.profile.model_copy(update={"enabled": True})}),
        "profiler off": cfg.model_copy(update={"profile": cfg.profile.model_copy(update={"enabled": False})}),
    }
    params = {"batch_size": args.batch_size, "lr": args.lr, "num_gpus": 1}
    sps: dict[str, list[float]] = {k: [] for k in variants}
    step_overhead: list[float] = []
    with TemporaryDirectory() as tmp:
        for rep in range(args.repeats):
            for name, c in variants.items():
                res = run_trial(c, params, trial_id=f"{name.replace(' ', '-')}-{rep}", run_dir=tmp, validate=False)
                if res.status != "ok":
                    raise SystemExit(f"{name}: trial {res.status}: {res.reason}")
                sps[name].append(res.metrics["samples_per_s"])
                if "profiler_overhead" in res.info:
                    step_overhead.append(res.info["profiler_overhead"])
                print(f"repeat {rep + 1} {name:13s}: {res.metrics['samples_per_s']:8.1f} samples/s over "
                      f"{res.info['timed_steps']} timed steps ({res.metrics['timed_s']:.2f} s), device {res.info['device']}")
    med = {k: statistics.median(v) for k, v in sps.items()}
    spread = {k: (min(v), max(v)) for k, v in sps.items()}
    rel = abs(med["trial"] - med["10x longer"]) / med["10x longer"]
    prof = abs(med["profiler on"] - med["profiler off"]) / med["profiler off"]
    for k in variants:
        print(f"median {k:13s}: {med[k]:8.1f} samples/s (min {spread[k][0]:.1f}, max {spread[k][1]:.1f})")
    if step_overhead:
        print(f"inside the profiled steps themselves the profiler costs {statistics.median(step_overhead):+.1%} per step "
              f"(kept out of the timed window)")
    print(f"config {Path(args.config).name}: batch_size {args.batch_size}, lr {args.lr}, {n} samples per trial; "
          f"trial vs 10x longer: {rel:.1%}; timed window with profiling on vs off: {prof:.1%}")
    print(f"RESULT sps_rel_err={rel:.4f} profiler_overhead={prof:.4f}")


if __name__ == "__main__":
    main()
