"""How faithful is a trial's throughput? A trial's ``samples_per_s`` against a steady-state run of
the same config ten times longer, and the timed window with the profiler on against off.

Both comparisons run as adjacent pairs, the order alternating (A/B, B/A, ...), so slow drift of
the machine hits both sides alike. The headline figures are the issue's: medians of each side.
Beside them, the median of the per-pair ratios (``*_paired``), which also cancels drift slower
than one pair; on a noisy host, or a launch-bound GPU config whose speed follows the host CPU,
the two can differ by more than the effect measured, which is worth seeing.

sps_rel_err       = |median sps(trial) - median sps(10x longer)| / median sps(10x longer)
profiler_overhead = |median sps(profiling on) - median sps(profiling off)| / median sps(profiling off)
                    (the timed window only: the profiled steps run after it)

Usage: python scripts/bench_fidelity.py [--config C] [--batch-size 64] [--lr 0.05] [--repeats 5] [--pairs 11]
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
    ap.add_argument("--repeats", type=int, default=5, help="trial / 10x-longer pairs (default 5)")
    ap.add_argument("--pairs", type=int, default=11,
                    help="profiler on/off pairs (default 11: the true effect is about 0, so the medians need enough "
                         "pairs to sit within a few %% of it where identical trials vary by 5-8 %%)")
    ap.add_argument("--set", dest="overrides", action="append", default=[])
    args = ap.parse_args()
    cfg = load_config(args.config, args.overrides)
    n = cfg.budget.train_samples
    longer = cfg.model_copy(update={"budget": cfg.budget.model_copy(update={"train_samples": 10 * n})})
    prof_on = cfg.model_copy(update={"profile": cfg.profile.model_copy(update={"enabled": True})})
    prof_off = cfg.model_copy(update={"profile": cfg.profile.model_copy(update={"enabled": False})})
    params = {"batch_size": args.batch_size, "lr": args.lr, "num_gpus": 1}
    step_overhead: list[float] = []
    disturbed: list[str] = []

    with TemporaryDirectory() as tmp:
        def sps(name: str, c, rep: int) -> float:
            res = run_trial(c, params, trial_id=f"{name.replace(' ', '-')}-{rep}", run_dir=tmp, validate=False)
            if res.status != "ok":
                raise SystemExit(f"{name}: trial {res.status}: {res.reason}")
            if res.info.disturbed:
                disturbed.append(f"{name} {rep + 1} (others {res.info.others_cpu_frac:.0%} of the CPU)")
            if res.info.profiler_overhead is not None:
                step_overhead.append(res.info.profiler_overhead)
            ext = res.info.window_extension_steps or 0
            ci = res.metrics.samples_per_s_ci
            print(f"{name:13s} {rep + 1}: {res.metrics.samples_per_s:9.1f} +- {ci or 0:.1f} samples/s over "
                  f"{res.info.timed_steps} timed steps{f' ({ext} lengthening)' if ext else ''}, "
                  f"{res.metrics.timed_s:.2f} s, "
                  f"others {res.info.others_cpu_frac or 0:.0%} of the CPU, {res.info.device}", flush=True)
            return res.metrics.samples_per_s

        def pairs(n: int, a: tuple, b: tuple) -> tuple[list[float], list[float], list[float]]:
            xs, ys, ratios = [], [], []
            for rep in range(n):
                if rep % 2 == 0:
                    x = sps(a[0], a[1], rep)
                    y = sps(b[0], b[1], rep)
                else:
                    y = sps(b[0], b[1], rep)
                    x = sps(a[0], a[1], rep)
                xs.append(x)
                ys.append(y)
                ratios.append(x / y)
            return xs, ys, ratios

        trial, long_, r_len = pairs(args.repeats, ("trial", cfg), ("10x longer", longer))
        on, off, r_prof = pairs(args.pairs, ("profiler on", prof_on), ("profiler off", prof_off))

    med = statistics.median
    rel = abs(med(trial) - med(long_)) / med(long_)
    prof = abs(med(on) - med(off)) / med(off)
    rel_p, prof_p = abs(med(r_len) - 1.0), abs(med(r_prof) - 1.0)
    # the noise floor: how much identical short trials differ from run to run on this machine
    noise = max(statistics.stdev(xs) / statistics.mean(xs) for xs in (trial, off) if len(xs) > 1) \
        if max(len(trial), len(off)) > 1 else float("nan")
    for name, xs in (("trial", trial), ("10x longer", long_), ("profiler on", on), ("profiler off", off)):
        print(f"median {name:12s}: {statistics.median(xs):9.1f} samples/s (min {min(xs):.1f}, max {max(xs):.1f})")
    for name, rs in (("trial / 10x longer", r_len), ("profiler on / off", r_prof)):
        print(f"{name:19s}: median ratio {statistics.median(rs):.4f} over {len(rs)} pairs "
              f"(min {min(rs):.4f}, max {max(rs):.4f})")
    if step_overhead:
        print(f"inside the profiled steps themselves the profiler costs {statistics.median(step_overhead):+.1%} "
              f"per step "
              f"(kept out of the timed window)")
    print(f"config {Path(args.config).name}: batch_size {args.batch_size}, lr {args.lr}, {n} samples per trial, "
          f"budget.min_window_s {cfg.budget.min_window_s} (null: 2 s on CUDA, 1 s on a CPU); "
          f"trial vs 10x longer: {rel:.1%}; "
          f"timed window with profiling on vs off: {prof:.1%} (paired: {rel_p:.1%} and {prof_p:.1%})")
    print(f"run-to-run spread of identical short trials (coefficient of variation, the larger of trial and "
          f"profiler off): {noise:.1%}; differences well inside it are noise, not an effect")
    print(f"bias of the short trial against the 10x longer run (median of the per-pair ratios): "
          f"{med(r_len):.4f}, next to the noise: {noise:.1%}")
    total = 2 * (args.repeats + args.pairs)
    print(f"disturbed windows (other processes over 15 % of the CPU, or steal over 5 %): {len(disturbed)} of {total}"
          + (f": {', '.join(disturbed)}" if disturbed else ""))
    print(f"RESULT sps_rel_err={rel:.4f} profiler_overhead={prof:.4f} sps_rel_err_paired={rel_p:.4f} "
          f"profiler_overhead_paired={prof_p:.4f} bias={med(r_len):.4f} noise_cv={noise:.4f} "
          f"disturbed={len(disturbed)}")


if __name__ == "__main__":
    main()
