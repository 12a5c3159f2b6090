"""How faithful is a trial's throughput? A trial's ``samples_per_s`` against a steady-state run of
the same config ten times longer, and the timed window with the profiler on against off.

Trial vs 10x longer: runs interleaved (trial, long, trial, long, ...) so slow drift of the
machine hits both alike; medians over ``--repeats``.
Profiler on vs off: ``--pairs`` adjacent pairs, the order alternating (on/off, off/on, ...); each
pair gives a ratio, and the median ratio is the estimate, so drift slower than a pair cancels.

sps_rel_err       = |median sps(trial) - median sps(10x longer)| / median sps(10x longer)
profiler_overhead = |median over pairs of sps(profiling on) / sps(profiling off) - 1|
                    (the timed window only: the profiled steps run after it)

Usage: python scripts/bench_fidelity.py [--config C] [--batch-size 64] [--lr 0.05] [--repeats 3] [--pairs 7]
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
    ap.add_argument("--repeats", type=int, default=3, help="trial / 10x-longer repeats (default 3)")
    ap.add_argument("--pairs", type=int, default=7, help="profiler on/off pairs (default 7)")
    ap.add_argument("--set", dest="overrides", action="append", default=[])
    args = ap.parse_args()
    cfg = load_config(args.config, args.overrides)
    n = cfg.budget.train_samples
    longer = cfg.model_copy(update={"budget": cfg.budget.model_copy(update={"train_samples": 10 * n})})
    prof_on = cfg.model_copy(update={"profile": cfg.profile.model_copy(update={"enabled": True})})
    prof_off = cfg.model_copy(update={"profile": cfg.profile.model_copy(update={"enabled": False})})
    params = {"batch_size": args.batch_size, "lr": args.lr, "num_gpus": 1}
    step_overhead: list[float] = []

    with TemporaryDirectory() as tmp:
        def sps(name: str, c, rep: int) -> float:
            res = run_trial(c, params, trial_id=f"{name.replace(' ', '-')}-{rep}", run_dir=tmp, validate=False)
            if res.status != "ok":
                raise SystemExit(f"{name}: trial {res.status}: {res.reason}")
            if "profiler_overhead" in res.info:
                step_overhead.append(res.info["profiler_overhead"])
            ext = res.info.get("window_extension_steps", 0)
            print(f"{name:13s} {rep + 1}: {res.metrics['samples_per_s']:9.1f} samples/s over {res.info['timed_steps']} "
                  f"timed steps{f' ({ext} lengthening)' if ext else ''}, {res.metrics['timed_s']:.2f} s, "
                  f"{res.info['device']}", flush=True)
            return res.metrics["samples_per_s"]

        trial, long_ = [], []
        for rep in range(args.repeats):
            trial.append(sps("trial", cfg, rep))
            long_.append(sps("10x longer", longer, rep))
        ratios = []
        for rep in range(args.pairs):
            if rep % 2 == 0:
                on = sps("profiler on", prof_on, rep)
                off = sps("profiler off", prof_off, rep)
            else:
                off = sps("profiler off", prof_off, rep)
                on = sps("profiler on", prof_on, rep)
            ratios.append(on / off)

    med_t, med_l = statistics.median(trial), statistics.median(long_)
    rel = abs(med_t - med_l) / med_l
    prof = abs(statistics.median(ratios) - 1.0)
    print(f"median trial       : {med_t:9.1f} samples/s (min {min(trial):.1f}, max {max(trial):.1f})")
    print(f"median 10x longer  : {med_l:9.1f} samples/s (min {min(long_):.1f}, max {max(long_):.1f})")
    print(f"profiler on/off    : median ratio {statistics.median(ratios):.4f} over {len(ratios)} pairs "
          f"(min {min(ratios):.4f}, max {max(ratios):.4f})")
    if step_overhead:
        print(f"inside the profiled steps themselves the profiler costs {statistics.median(step_overhead):+.1%} per step "
              f"(kept out of the timed window)")
    print(f"config {Path(args.config).name}: batch_size {args.batch_size}, lr {args.lr}, {n} samples per trial, "
          f"budget.min_window_s {cfg.budget.min_window_s}; trial vs 10x longer: {rel:.1%}; "
          f"timed window with profiling on vs off: {prof:.1%}")
    print(f"RESULT sps_rel_err={rel:.4f} profiler_overhead={prof:.4f}")


if __name__ == "__main__":
    main()
