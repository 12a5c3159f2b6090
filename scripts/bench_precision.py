"""Mixed precision on this machine: peak memory and samples/s of the same trial in fp32 and
bf16 (autocast), side by side.

For each batch size, --repeats rounds; in each round the fp32 and the bf16 trial run back to back
(order alternating between rounds, so drift hits both). Reported per batch size: the median of
each side and the median of the per-round ratios (bf16 / fp32), with the ratios' range.

Usage: python scripts/bench_precision.py [--config configs/quickstart.yaml] [--batch-sizes 64 256] [--repeats 3]
       [--precisions fp32 bf16 fp16 tf32] [--set KEY=VALUE ...]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

REPO = Path(__file__).resolve().parents[1]


def main() -> None:
    from tune_batch.config import load_config
    from tune_batch.trial import run_trial

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default=str(REPO / "configs" / "quickstart.yaml"))
    ap.add_argument("--batch-sizes", type=int, nargs="+", default=[64, 256])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--lr", type=float, default=0.04)
    ap.add_argument("--precisions", nargs="+", default=["fp32", "bf16"],
                    help="the first is the reference of every ratio (default: fp32 bf16; CUDA also fp16, tf32)")
    ap.add_argument("--set", dest="overrides", action="append", default=[], help="config override KEY=VALUE")
    args = ap.parse_args()
    base = load_config(args.config, args.overrides)
    ref, others = args.precisions[0], args.precisions[1:]
    configs = {p: base.model_copy(update={"train": base.train.model_copy(update={"precision": p})})
               for p in args.precisions}
    mem_ratios: dict[str, list[float]] = {p: [] for p in others}
    sps_ratios: dict[str, list[float]] = {p: [] for p in others}
    for b in args.batch_sizes:
        runs: dict[str, list] = {p: [] for p in args.precisions}
        for k in range(args.repeats):
            order = args.precisions if k % 2 == 0 else args.precisions[::-1]
            for p in order:
                r = run_trial(configs[p], {"batch_size": b, "lr": args.lr, "num_gpus": 1})
                if r.status.value != "ok":
                    raise SystemExit(f"batch {b} {p}: {r.status.value} {r.reason}")
                runs[p].append(r)
                print(f"batch {b} round {k + 1} {p}: peak {r.metrics.peak_mem_bytes / 2**20:.2f} MiB "
                      f"({r.info.peak_mem_method}), {r.metrics.samples_per_s:.0f} samples/s, "
                      f"val_acc {r.metrics.val_acc:.3f} on {r.info.device}", flush=True)

        def med(p: str, f, runs: dict = runs) -> float:
            return statistics.median(f(r) for r in runs[p])

        for p in others:
            mem = [x.metrics.peak_mem_bytes / r.metrics.peak_mem_bytes for r, x in zip(runs[ref], runs[p])]
            sps = [x.metrics.samples_per_s / r.metrics.samples_per_s for r, x in zip(runs[ref], runs[p])]
            mem_ratios[p].append(statistics.median(mem))
            sps_ratios[p].append(statistics.median(sps))
            print(f"batch {b}: peak {ref} {med(ref, lambda r: r.metrics.peak_mem_bytes) / 2**20:.2f} MiB, {p} "
                  f"{med(p, lambda r: r.metrics.peak_mem_bytes) / 2**20:.2f} MiB (ratio {mem_ratios[p][-1]:.3f}, "
                  f"rounds {min(mem):.3f}-{max(mem):.3f}); "
                  f"samples/s {ref} {med(ref, lambda r: r.metrics.samples_per_s):.0f}, "
                  f"{p} {med(p, lambda r: r.metrics.samples_per_s):.0f} (ratio {sps_ratios[p][-1]:.3f}, rounds "
                  f"{min(sps):.3f}-{max(sps):.3f})")
    lower = {p: all(m < 1.0 for m in mem_ratios[p]) for p in others}
    for p in others:
        print(f"{p} peak memory is {'' if lower[p] else 'NOT '}lower than {ref} at every batch size measured")
    figures = " ".join(f"{p}_mem_ratio={statistics.median(mem_ratios[p]):.3f} "
                       f"{p}_sps_ratio={statistics.median(sps_ratios[p]):.3f}" for p in others)
    print(f"RESULT {figures} lower_everywhere={int(all(lower.values()))}")


if __name__ == "__main__":
    main()
