"""Mixed precision on this machine: peak memory and samples/s of the same trial in fp32 and
bf16 (autocast), side by side.

For each batch size, --repeats rounds; in each round the fp32 and the bf16 trial run back to back
(order alternating between rounds, so drift hits both). Reported per batch size: the median of
each side and the median of the per-round ratios (bf16 / fp32), with the ratios' range.

Usage: python scripts/bench_precision.py [--config configs/quickstart.yaml] [--batch-sizes 64 256] [--repeats 3]
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
    args = ap.parse_args()
    base = load_config(args.config)
    configs = {p: base.model_copy(update={"train": base.train.model_copy(update={"precision": p})})
               for p in ("fp32", "bf16")}
    mem_ratios, sps_ratios = [], []
    for b in args.batch_sizes:
        runs: dict[str, list] = {"fp32": [], "bf16": []}
        for k in range(args.repeats):
            order = ("fp32", "bf16") if k % 2 == 0 else ("bf16", "fp32")
            for p in order:
                r = run_trial(configs[p], {"batch_size": b, "lr": args.lr, "num_gpus": 1})
                if r.status.value != "ok":
                    raise SystemExit(f"batch {b} {p}: {r.status.value} {r.reason}")
                runs[p].append(r)
                print(f"batch {b} round {k + 1} {p}: peak {r.metrics.peak_mem_bytes / 2**20:.2f} MiB "
                      f"({r.info.peak_mem_method}), {r.metrics.samples_per_s:.0f} samples/s, "
                      f"val_acc {r.metrics.val_acc:.3f}", flush=True)
        mem = [b16.metrics.peak_mem_bytes / f32.metrics.peak_mem_bytes for f32, b16 in zip(runs["fp32"], runs["bf16"])]
        sps = [b16.metrics.samples_per_s / f32.metrics.samples_per_s for f32, b16 in zip(runs["fp32"], runs["bf16"])]
        mem_ratios.append(statistics.median(mem))
        sps_ratios.append(statistics.median(sps))

        def med(p: str, f, runs: dict = runs) -> float:
            return statistics.median(f(r) for r in runs[p])

        print(f"batch {b}: peak fp32 {med('fp32', lambda r: r.metrics.peak_mem_bytes) / 2**20:.2f} MiB, bf16 "
              f"{med('bf16', lambda r: r.metrics.peak_mem_bytes) / 2**20:.2f} MiB (ratio {mem_ratios[-1]:.3f}, "
              f"rounds {min(mem):.3f}-{max(mem):.3f}); samples/s fp32 {med('fp32', lambda r: r.metrics.samples_per_s):.0f}, "
              f"bf16 {med('bf16', lambda r: r.metrics.samples_per_s):.0f} (ratio {sps_ratios[-1]:.3f}, rounds "
              f"{min(sps):.3f}-{max(sps):.3f})")
    lower = all(m < 1.0 for m in mem_ratios)
    print("bf16 peak memory is lower than fp32 at every batch size measured" if lower else
          "bf16 peak memory is NOT lower than fp32 at every batch size on this machine")
    print(f"RESULT bf16_mem_ratio={statistics.median(mem_ratios):.3f} bf16_sps_ratio={statistics.median(sps_ratios):.3f} "
          f"lower_everywhere={int(lower)}")


if __name__ == "__main__":
    main()
