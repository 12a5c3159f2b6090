"""What the CPU step-memory reading costs, torch's whole memory analysis against the one kept
(``measure.memory._profile_peak``: one walk of the profiled events for the timeline's totals, with
no data flow graph or categories), on the same profiled steps.

On a CPU, tune_batch reads a training step's peak tensor bytes from torch's memory profiler: each
trial's worst-case probe (a train and an evaluation step), and in each confirmation run one step
per quarter and each larger batch. The analysis of a step's profile took longer than the step
itself (tiny_lm: 0.45 s for a 0.02 s step; torch's analysis without its categories, kept until
2026-12-07, still 0.3 s). This script builds each config's model, optimizer and
step as a trial does (``trial.loop.Stepper``), profiles ``--repeats`` real steps, and reads each
profile both ways, in alternating order: whether the two peaks are the same bytes (they must be:
the categories only split the total), and the seconds each analysis took.

Usage: python scripts/bench_step_peak.py [--configs C ...] [--repeats 6] [--batch-size 32]
Ends with: RESULT configs= same_peaks= analysis_whole_s= analysis_kept_s= ratio_median= ratio_worst=
(seconds: the median over configs of each config's median; ratios kept / whole per config)
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tune_batch.config import load_config  # noqa: E402
from tune_batch.measure.memory import StepPeak, _profile_peak, quiet_native_stderr  # noqa: E402
from tune_batch.trial.loop import Recipe, Stepper, cycle, loader, make_optimizer, prime  # noqa: E402
from tune_batch.workload import build_datasets, build_model  # noqa: E402

CONFIGS = ["configs/quickstart.yaml", "configs/tiny_lm.yaml", "configs/tiny_lm_varlen.yaml",
           "benchmarks/heldout/bn_wd_cnn.yaml", "benchmarks/heldout/gru_majority.yaml",
           "benchmarks/heldout/tabular_mlp.yaml", "benchmarks/heldout/waves_conv1d.yaml"]
# resnet18 offline: synthetic images at 32 px, no pretrained weights
RESNET = ("configs/resnet18.yaml", ["data.name=synthetic", "data.resize=32", "model.pretrained=false"])


def peak_of(profile: object) -> int:
    from torch.profiler._memory_profiler import MemoryProfileTimeline

    _, sizes = MemoryProfileTimeline(profile)._coalesce_timeline(torch.device("cpu"))
    return int(max((sum(s) for s in sizes), default=0))


def one_config(path: str, overrides: list[str], repeats: int, batch_size: int) -> dict:
    config = load_config(REPO / path, overrides)
    torch.manual_seed(0)
    data = build_datasets(config.data, num_classes=config.model.num_classes, seed=0)
    device = torch.device("cpu")
    prime(config, data.train, device, None)
    model = build_model(config.model).to(device)
    model.train()
    opt = make_optimizer(config, model.parameters(), config.space.lr.low)
    batches = cycle(loader(data.train, batch_size, shuffle=True))
    stepper = Stepper(model, opt, batches, device, float("inf"), None, batch_size, Recipe.of(config))
    stepper.step()
    whole_s, kept_s, step_s, same = [], [], [], 0
    for i in range(repeats):
        peak = StepPeak()
        peak.start()
        t = time.perf_counter()
        stepper.step()
        step_s.append(time.perf_counter() - t)
        with quiet_native_stderr():
            peak._quiet.close()  # leave the profiler without reading it: both ways read it below
        result = peak._prof.profiler.kineto_results
        readings = {}
        for way in (("whole", "kept") if i % 2 == 0 else ("kept", "whole")):
            t = time.perf_counter()
            got = (peak_of(peak._prof._memory_profile()) if way == "whole"
                   else _profile_peak(result, torch.device("cpu")))
            readings[way] = (got, time.perf_counter() - t)
        same += readings["whole"][0] == readings["kept"][0]
        whole_s.append(readings["whole"][1])
        kept_s.append(readings["kept"][1])
        if readings["whole"][0] != readings["kept"][0]:
            print(f"  {path}: step {i}: whole {readings['whole'][0]} B, kept {readings['kept'][0]} B")
    ratios = [k / w for k, w in zip(kept_s, whole_s)]
    return {"name": config.name, "same": same, "n": repeats, "peak": readings["whole"][0],
            "step_s": statistics.median(step_s), "whole_s": statistics.median(whole_s),
            "kept_s": statistics.median(kept_s), "ratio": statistics.median(ratios),
            "ratio_range": (min(ratios), max(ratios))}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--configs", nargs="*", default=None, help="configs to read (default: seven shipped and "
                    "held-out ones and resnet18 on synthetic 32 px images)")
    ap.add_argument("--repeats", type=int, default=6)
    ap.add_argument("--batch-size", type=int, default=32)
    args = ap.parse_args()
    runs = [(c, []) for c in args.configs] if args.configs else [(c, []) for c in CONFIGS] + [RESNET]
    rows = []
    print(f"{'config':<18} {'same':>5} {'peak MiB':>9} {'step s':>7} {'whole s':>8} {'kept s':>7} "
          f"{'kept/whole [range]':>22}")
    for path, overrides in runs:
        r = one_config(path, overrides, args.repeats, args.batch_size)
        rows.append(r)
        lo, hi = r["ratio_range"]
        print(f"{r['name'][:18]:<18} {r['same']}/{r['n']:<3} {r['peak'] / 2**20:9.2f} {r['step_s']:7.3f} "
              f"{r['whole_s']:8.3f} {r['kept_s']:7.3f} {r['ratio']:8.3f} [{lo:.3f}-{hi:.3f}]", flush=True)
    same = sum(r["same"] for r in rows)
    total = sum(r["n"] for r in rows)
    print(f"RESULT configs={len(rows)} same_peaks={same}/{total} "
          f"analysis_whole_s={statistics.median(r['whole_s'] for r in rows):.3f} "
          f"analysis_kept_s={statistics.median(r['kept_s'] for r in rows):.3f} "
          f"ratio_median={statistics.median(r['ratio'] for r in rows):.3f} "
          f"ratio_worst={max(r['ratio'] for r in rows):.3f}")


if __name__ == "__main__":
    main()
