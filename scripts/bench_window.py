"""How long must the timed window be? Identical short trials with each --windows minimum
(budget.min_window_s) against a run of the same config ten times longer, interleaved: each round
runs every arm once, the order rotating by one arm per round, so drift of the machine hits every
arm alike.

Per arm: the median samples/s, the coefficient of variation of identical trials (the noise a
search sees), the median over rounds of trial / 10x-longer run of the same round (the bias),
and the trial's median duration (what the window costs).

cv_ratio   = cv(shortest window) / cv(longest window), pooled over the setups (the mean of the
             per-setup cvs): near 1 when the extra window buys no steadier reading
bias_worst = the largest |median ratio - 1| of the shortest window over the setups

Usage: python scripts/bench_window.py [--rounds 10] [--windows 1 2] [--setup CONFIG:BATCH:LR ...]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

REPO = Path(__file__).resolve().parents[1]
SETUPS = ["configs/quickstart.yaml:64:0.05", "benchmarks/synthetic_grid.yaml:16:0.01",
          "benchmarks/synthetic_grid.yaml:128:0.05"]


def one_setup(spec: str, windows: list[float], rounds: int) -> dict[str, dict[str, float]]:
    from tune_batch.config import load_config
    from tune_batch.trial import run_trial

    path, batch, lr = spec.rsplit(":", 2)
    cfg = load_config(REPO / path)  # an absolute path stays itself
    arms = {f"window {w:g} s": cfg.model_copy(update={"budget": cfg.budget.model_copy(update={"min_window_s": w})})
            for w in windows}
    arms["10x longer"] = cfg.model_copy(update={"budget": cfg.budget.model_copy(
        update={"train_samples": 10 * cfg.budget.train_samples})})
    names = list(arms)
    runs: dict[str, list] = {k: [] for k in names}
    params = {"batch_size": int(batch), "lr": float(lr), "num_gpus": 1}
    for r in range(rounds):
        for k in names[r % len(names):] + names[:r % len(names)]:
            res = run_trial(arms[k], params, trial_id=f"{k}-{r}", validate=False)
            if res.status != "ok":
                raise SystemExit(f"{spec} {k}: trial {res.status}: {res.reason}")
            runs[k].append((res.metrics.samples_per_s, res.metrics.timed_s, res.duration_s, bool(res.info.disturbed)))
    print(f"\n{path} batch_size {batch} lr {lr}, {cfg.budget.train_samples} samples per trial, {rounds} rounds "
          f"({res.info.device})")
    out = {}
    for k in names:
        sps = [x[0] for x in runs[k]]
        ratios = [x[0] / ref[0] for x, ref in zip(runs[k], runs["10x longer"])]
        out[k] = {"cv": statistics.stdev(sps) / statistics.mean(sps), "bias": statistics.median(ratios)}
        print(f"  {k:12s} {statistics.median(sps):8.0f} samples/s (min {min(sps):.0f}, max {max(sps):.0f}), "
              f"cv {out[k]['cv']:.3f}, / 10x longer: median {out[k]['bias']:.3f} (min {min(ratios):.3f}, "
              f"max {max(ratios):.3f}); window {statistics.median(x[1] for x in runs[k]):.2f} s, trial "
              f"{statistics.median(x[2] for x in runs[k]):.2f} s; disturbed {sum(x[3] for x in runs[k])} of {rounds}",
              flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--windows", type=float, nargs="+", default=[1.0, 2.0])
    ap.add_argument("--setup", nargs="+", default=SETUPS, help="CONFIG:BATCH:LR (config relative to the repository)")
    args = ap.parse_args()
    if args.rounds < 2:
        raise SystemExit("--rounds must be at least 2 (the spread needs two trials per arm)")
    windows = sorted(args.windows)
    results = [one_setup(s, windows, args.rounds) for s in args.setup]
    short, long_ = f"window {windows[0]:g} s", f"window {windows[-1]:g} s"
    cv_short = statistics.mean(r[short]["cv"] for r in results)
    cv_long = statistics.mean(r[long_]["cv"] for r in results)
    bias_worst = max(abs(r[short]["bias"] - 1) for r in results)
    print(f"\nmean cv of identical trials: {cv_short:.3f} with a {windows[0]:g} s window, {cv_long:.3f} with "
          f"{windows[-1]:g} s; worst bias of the {windows[0]:g} s window against the 10x longer run: {bias_worst:.3f}")
    print(f"RESULT cv_short={cv_short:.4f} cv_long={cv_long:.4f} cv_ratio={cv_short / cv_long:.3f} "
          f"bias_worst={bias_worst:.4f} windows={windows[0]:g},{windows[-1]:g} rounds={args.rounds}")


if __name__ == "__main__":
    main()
