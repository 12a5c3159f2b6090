"""Does a recommended config run out of memory later? Real runs, a few minutes on a CPU.

1. The variable-length tiny LM (configs/tiny_lm_varlen.yaml: one sequence in 512 runs to the full
   context, a batch is padded to its longest) searched under a memory cap twice, with each
   trial's worst-case probe (data.worst_case: auto) and without it (off); each search's
   recommendation is then trained at the confirmation length (one epoch) under the same cap.
   ``recommended_oom_later``: how many of the probed search's recommendations ran out of memory
   there (the other arm's count beside it); ``underestimate_without_worst_case``: the median over
   the probed search's ok trials of worst-case peak / window peak (what a random-batch window
   alone would have reported is that many times too small); ``margin``: the share of the cap the
   probed recommendation's worst case leaves free (resources.memory_margin asks 0.1).
2. A leak: a small CNN that keeps 64 KiB of its input at every step, trained as a confirmation
   run, beside the same run without the leak: ``leak_flagged`` (1: flagged), ``false_leak_flags``
   (the run without it flagged), and the measured growth against the 62.5 MiB per 1000 steps put in.
3. The cost: the worst-case probe's seconds per trial (median, range) and the profiled steps of
   a confirmation run's memory watch.

Usage: python scripts/bench_memory_safety.py [--cap 48MiB] [--trials 3]
On CUDA the peaks held against the cap are the allocator's reserved ones (allocated beside them).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tune_batch.config import Config, config_from_dict, load_config  # noqa: E402
from tune_batch.store.records import Status, TrialResult  # noqa: E402

MiB = 2**20


def varlen_config(cap: str, worst_case: str, trials: int) -> Config:
    base = load_config(REPO / "configs/tiny_lm_varlen.yaml", [
        "budget.train_samples=512", "budget.warmup_steps=2", "confirm.epochs=1", "confirm.evaluations=4",
        f"resources.device_memory={cap}", f"data.worst_case={worst_case}"])
    raw = base.to_dict()
    raw["space"] = {"batch_size": [16, 32, 64], "lr": {"low": 1e-3, "high": 1e-3}, "num_gpus": [1],
                    "min_batch_per_gpu": 16}
    raw["search"] = {**raw["search"], "backend": "optuna", "sampler": "random", "seed": 0}
    raw["budget"]["trials"] = trials
    raw["repeats"] = {"candidates": 0, "seeds": 0}
    return config_from_dict(raw)


def mib(x: float | None) -> str:
    return "-" if x is None else f"{x / MiB:.1f}"


def one_search(cap: str, worst_case: str, trials: int, out: Path) -> dict[str, Any]:
    from tune_batch.pipeline.search import search
    from tune_batch.trial.curve import confirm_run

    cfg = varlen_config(cap, worst_case, trials)
    t = time.perf_counter()
    res = search(cfg, out / f"search-{worst_case}", quiet=True)
    search_s = time.perf_counter() - t
    print(f"\n== search with data.worst_case={worst_case}, cap {cap}: {search_s:.0f} s")
    print("  trial  batch  status   window MiB  worst MiB  worst/window  probe s")
    records: list[TrialResult] = res.report.records
    ratios, probe_s = [], []
    for r in records:
        w, x = r.metrics.peak_mem_bytes, r.metrics.peak_mem_worst_bytes
        ratio = x / w if w and x else None
        if ratio is not None and r.status is Status.OK:
            ratios.append(ratio)
        if r.info.worst_case_s is not None:
            probe_s.append(r.info.worst_case_s)
        secs = "-" if r.info.worst_case_s is None else f"{r.info.worst_case_s:.2f}"
        print(f"  {r.trial_id!s:5}  {r.params.batch_size:5}  {r.status.value:7}  {mib(w):>10}  {mib(x):>9}  "
              f"{'-' if ratio is None else f'{ratio:.2f}':>12}  {secs:>7}"
              + (f"  ({r.reason[:70]})" if r.reason else ""))
    rec = res.recommended
    out_d: dict[str, Any] = {"ratios": ratios, "probe_s": probe_s, "recommended": None, "oom_later": None,
                             "margin": None}
    if rec is None:
        print("  recommended: none")
        return out_d
    room = res.report.headroom(rec)
    print(f"  recommended: batch_size={rec.params.batch_size} (trial {rec.trial_id}); {room.line()}")
    t = time.perf_counter()
    later = confirm_run(cfg, {"batch_size": rec.params.batch_size, "lr": rec.params.lr}, trial_id="later",
                        confirm_of=rec.trial_id)
    print(f"  trained for one epoch under the same cap: {later.status.value} ({time.perf_counter() - t:.0f} s"
          + (f"; {later.reason}" if later.reason else f"; peak {mib(later.metrics.peak_mem_bytes)} MiB, quarters "
             f"{[round(q / MiB, 1) for q in later.info.memory_quarters_bytes or []]} MiB, "
             f"{later.info.steps} steps") + ")")
    out_d.update(recommended=rec.params.batch_size, oom_later=int(later.status is Status.OOM),
                 margin=room.margin_left, device=room.device)
    if later.info.memory_quarters_bytes is not None:
        out_d["later"] = later
    return out_d


def leak_check() -> dict[str, Any]:
    from tests.conftest import tiny_config
    from tune_batch.trial.curve import confirm_run

    out: dict[str, Any] = {}
    print("\n== a confirmation run with and without a leak (64 KiB kept per step), 1024 samples at batch 16")
    for name, kwargs in (("small_cnn", {"width": 8}), ("tests.workloads:leaky", {"kib_per_step": 64})):
        cfg = tiny_config(model={"name": name, "kwargs": kwargs}, confirm={"train_samples": 1024, "evaluations": 8})
        t = time.perf_counter()
        r = confirm_run(cfg, {"batch_size": 16, "lr": 0.05}, trial_id="c", confirm_of=0)
        g = r.info.memory_growth or {}
        print(f"  {name}: {r.status.value}, {time.perf_counter() - t:.0f} s, train_s {r.info.train_s:.1f}; quarters "
              f"{[round(q / MiB, 2) for q in r.info.memory_quarters_bytes or []]} MiB; growth "
              f"{(g.get('bytes_per_1000_steps') or 0) / MiB:.2f} +- "
              f"{(g.get('ci_bytes_per_1000_steps') or 0) / MiB:.2f} "
              f"MiB per 1000 steps, flagged {g.get('flagged')}; profiled steps: {r.info.peak_mem_method}")
        out[name] = r
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cap", default="48MiB", help="resources.device_memory of both searches (default 48MiB)")
    ap.add_argument("--trials", type=int, default=3)
    args = ap.parse_args()
    import torch

    print(f"device: {'cuda ' + torch.cuda.get_device_name() if torch.cuda.is_available() else 'cpu'}, "
          f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="tb-memsafety-") as tmp:
        probed = one_search(args.cap, "auto", args.trials, Path(tmp))
        bare = one_search(args.cap, "off", args.trials, Path(tmp))
    leaks = leak_check()
    leak = leaks["tests.workloads:leaky"].info.memory_growth or {}
    clean = leaks["small_cnn"].info.memory_growth or {}
    put_in = 64 * 1024 * 1000
    rate_err = abs((leak.get("bytes_per_1000_steps") or 0) - put_in) / put_in
    ratios, probe_s = probed["ratios"], probed["probe_s"]
    under = statistics.median(ratios) if ratios else float("nan")
    print(f"\nworst case / window peak over the probed search's ok trials: median {under:.2f}, range "
          f"{min(ratios, default=float('nan')):.2f}-{max(ratios, default=float('nan')):.2f} ({len(ratios)} trials)")
    if probe_s:
        print(f"worst-case probe: median {statistics.median(probe_s):.2f} s per trial, range {min(probe_s):.2f}-"
              f"{max(probe_s):.2f} s ({len(probe_s)} trials; a timing on a shared machine)")
    print(f"leak: measured {(leak.get('bytes_per_1000_steps') or 0) / MiB:.2f} MiB per 1000 steps against "
          f"{put_in / MiB:.2f} put in ({rate_err:.1%} off)")
    print(f"total {time.perf_counter() - t0:.0f} s")
    margin = probed["margin"]
    print(f"RESULT recommended_oom_later={probed['oom_later']} underestimate_without_worst_case={under:.2f} "
          f"leak_flagged={int(bool(leak.get('flagged')))} margin={'nan' if margin is None else f'{margin:.3f}'} "
          f"recommended_oom_later_without_worst_case={bare['oom_later']} "
          f"false_leak_flags={int(bool(clean.get('flagged')))} "
          f"leak_rate_err={rate_err:.3f} recommended_batch={probed['recommended']} "
          f"recommended_batch_without_worst_case={bare['recommended']} "
          f"probe_s_median={statistics.median(probe_s) if probe_s else float('nan'):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
