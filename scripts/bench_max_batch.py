"""tune_batch's ``max-batch`` against Lightning's binsearch batch-size finder, same model, data and cap.

Both use the same probe: a real short training run (one warm-up step, two measured steps) whose
peak memory is measured; a probe whose peak exceeds the cap counts as out of memory for the
Lightning algorithm (which keeps no margin), and over the cap less the margin for tune_batch.

The Lightning side is *Lightning's documented binsearch algorithm, re-implemented here*
(``Tuner.scale_batch_size(mode="binsearch", init_val=2)``: double the batch size until the first
out-of-memory, then bisect between the last success and the failure until they are 1 apart;
the batch size is capped at the training set's length). The ``lightning`` package is not used.

Usage: python scripts/bench_max_batch.py [--cap 48MiB] [--repeats 3] [--set KEY=VALUE ...]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tune_batch.config import load_config, parse_memory  # noqa: E402
from tune_batch.max_batch import Probe, max_batch, probe_trial  # noqa: E402
from tune_batch.trial import run_trial  # noqa: E402
from tune_batch.workload import build_datasets  # noqa: E402


def lightning_binsearch(probe, cap: float, n_train: int, init_val: int = 2, max_trials: int = 25) -> tuple[int, list[Probe]]:
    """Lightning's documented binsearch, re-implemented (see the module docstring)."""
    probes: list[Probe] = []
    low, high = 1, None
    size = min(init_val, n_train)
    count = 0
    while True:
        p = probe(size)
        probes.append(p)
        fails = p.status == "oom" or (p.peak_mem_bytes is not None and p.peak_mem_bytes > cap)
        if not fails:
            count += 1
            if count > max_trials:
                break
            low = size
            if high:
                if high - low <= 1:
                    break
                new = (high + low) // 2
            else:
                new = min(size * 2, n_train)
            if new == size:
                break
            size = new
        else:
            high = size
            size = (high + low) // 2
            if high - low <= 1:
                break
    return low, probes


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default=str(Path(__file__).resolve().parents[1] / "configs/quickstart.yaml"))
    ap.add_argument("--cap", default="48MiB")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--set", dest="overrides", action="append", default=[])
    args = ap.parse_args()
    cfg = load_config(args.config, [f"resources.device_memory={args.cap}", *args.overrides])
    cap = parse_memory(cfg.resources.device_memory)[1]
    n_train = len(build_datasets(cfg.data, num_classes=cfg.model.num_classes).train)
    probe = probe_trial(cfg)
    print(f"model {cfg.model.name} {cfg.model.kwargs}, data {cfg.data.name} at {cfg.data.resize} px ({n_train} train), "
          f"cap {cap / 2**20:.0f} MiB, margin {cfg.resources.memory_margin:.0%}, {args.repeats} repeats")

    rows = []
    for rep in range(args.repeats):
        t0 = time.perf_counter()
        ours = max_batch(cfg, 1, probe)
        t_ours = time.perf_counter() - t0
        t0 = time.perf_counter()
        l_batch, l_probes = lightning_binsearch(probe, cap, n_train)
        t_l = time.perf_counter() - t0
        # does our answer really fit? a longer run (20 steps) under the enforced cap
        check = None
        if ours.batch_size is not None:
            b = ours.batch_size
            budget = cfg.budget.model_copy(update={"train_samples": 20 * b, "warmup_steps": 2})
            check = run_trial(cfg.model_copy(update={"budget": budget}), {"batch_size": b, "lr": cfg.space.lr.low, "num_gpus": 1},
                              validate=False)
        # prediction error of our memory line on Lightning's independent probes inside the fitted range
        errs = []
        if ours.fit is not None:
            lo, hi = ours.fit.batch_range
            for p in l_probes:
                if lo <= p.batch_size <= hi and p.status == "ok" and p.peak_mem_bytes:
                    errs.append(abs(ours.fit.predict(p.batch_size) - p.peak_mem_bytes) / p.peak_mem_bytes)
        fits = int(check is not None and check.status == "ok")
        rows.append((len(ours.probes), len(l_probes), ours.batch_size or 0, l_batch, fits, t_ours, t_l,
                     max(errs) if errs else float("nan")))
        print(f"repeat {rep + 1}: tune_batch {ours.batch_size} in {len(ours.probes)} probes ({t_ours:.1f} s) "
              f"[{', '.join(str(p.batch_size) for p in ours.probes)}]; lightning-binsearch {l_batch} in {len(l_probes)} probes "
              f"({t_l:.1f} s) [{', '.join(str(p.batch_size) for p in l_probes)}]; "
              f"20-step check at {ours.batch_size}: {check.status if check else '-'}{' (' + str(check.reason) + ')' if check and check.reason else ''}"
              f" peak {(check.metrics.peak_mem_bytes or 0) / 2**20 if check else 0:.1f} MiB; "
              f"max prediction error inside the fit {max(errs) if errs else float('nan'):.1%} ({len(errs)} points)")

    med = [statistics.median(r[i] for r in rows) for i in range(7)]
    pred_err = statistics.median(r[7] for r in rows)
    fits_all = int(all(r[4] for r in rows))
    print(f"median probes: tune_batch {med[0]:g}, lightning-binsearch {med[1]:g} (ratio {med[0] / med[1]:.2f}); "
          f"median seconds: {med[5]:.1f} vs {med[6]:.1f}; batch: {med[2]:g} vs {med[3]:g}")
    print(f"RESULT probes={med[0]:g} lightning_probes={med[1]:g} batch={med[2]:g} lightning_batch={med[3]:g} "
          f"fits={fits_all} pred_err={pred_err:.3f}")


if __name__ == "__main__":
    main()
