"""What the memory watch's readings cost a confirmation run, with the heap frozen after a run's
first reading (``measure.memory.kept_scope``, the default) and without (every reading collects
and scans the whole heap, as before).

A confirmation run reads the memory it keeps between steps at each quarter's end and at up to
``KEPT_READINGS`` validations. Each reading is a garbage collection and, on a CPU, a scan of
every Python object for tensors; in a process that has torch, Ray and tune_batch loaded that is
most of a second's fraction per reading, paid by every confirmation run of a search. This script
trains the same confirmation run in one process, the two ways interleaved (A B A B ...), and
prints per way: the run's wall seconds, its training seconds, the readings' seconds and count,
and whether the readings (bytes kept at each step) are the same both ways.

Usage: python scripts/bench_kept_memory.py [--config configs/quickstart.yaml] [--repeats 6]
       [--batch-size 32] [--lr 0.01] [--heap ray|lightning]
Ends with: RESULT run_wall_frozen_s= run_wall_whole_s= run_wall_ratio= readings_s_frozen=
readings_s_whole= same_readings= (medians over the repeats)
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def spread(xs: list[float]) -> str:
    return f"median {statistics.median(xs):.3f} [{min(xs):.3f} .. {max(xs):.3f}]"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="configs/quickstart.yaml")
    ap.add_argument("--repeats", type=int, default=6, help="runs per way (interleaved)")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--lr", type=float, default=0.01)
    ap.add_argument("--heap", choices=["ray", "lightning"], default="ray",
                    help="what the process has loaded besides tune_batch: a Ray worker's modules, or also Lightning")
    args = ap.parse_args(argv)

    import ray  # noqa: F401  (a Ray trial worker has these loaded: the heap the readings walk)
    import ray.tune  # noqa: F401

    import tune_batch.backends.ray  # noqa: F401
    from tune_batch.config import load_config
    from tune_batch.measure import memory
    from tune_batch.store.records import Status
    from tune_batch.trial import watch
    from tune_batch.trial.curve import confirm_run

    if args.heap == "lightning":
        import lightning  # noqa: F401
    config = load_config(args.config)
    spent = {"s": 0.0, "n": 0}
    reading = watch.kept_bytes

    def timed(device):  # type: ignore[no-untyped-def]
        t = time.perf_counter()
        try:
            return reading(device)
        finally:
            spent["s"] += time.perf_counter() - t
            spent["n"] += 1

    watch.kept_bytes = timed
    print(f"{args.config}: batch {args.batch_size} lr {args.lr}, confirm.train_samples "
          f"{config.confirm.train_samples}, {config.confirm.evaluations} validations; "
          f"{len(gc.get_objects())} objects tracked by the collector in this process", flush=True)
    params = {"batch_size": args.batch_size, "lr": args.lr, "num_gpus": 1}
    confirm_run(config, params, trial_id="warm", confirm_of=0)  # first-run imports, outside the figures
    ways = {"frozen": True, "whole": False}
    out: dict[str, dict[str, list]] = {w: {"wall": [], "train": [], "read": [], "n": [], "kept": []} for w in ways}
    for i in range(args.repeats):
        for way, freeze in ways.items():
            memory.FREEZE = freeze
            spent["s"], spent["n"] = 0.0, 0
            r = confirm_run(config, params, trial_id=f"{way}{i}", confirm_of=0)
            if r.status is not Status.OK:
                print(f"run failed: {r.status.value} {r.reason}")
                return 1
            o = out[way]
            o["wall"].append(r.duration_s)
            o["train"].append(r.info.train_s)
            o["read"].append(spent["s"])
            o["n"].append(spent["n"])
            o["kept"].append(r.info.memory_kept_bytes)
            print(f"  [{i + 1}/{args.repeats}] {way}: wall {r.duration_s:.2f} s, training {r.info.train_s:.2f} s, "
                  f"{spent['n']} readings {spent['s']:.3f} s", flush=True)
    memory.FREEZE = True
    same = all(a == b for a, b in zip(out["frozen"]["kept"], out["whole"]["kept"], strict=True))
    for way, o in out.items():
        print(f"{way}: wall s {spread(o['wall'])}; training s {spread(o['train'])}; readings s {spread(o['read'])} "
              f"({statistics.median(o['n']):.0f} per run)")
    wf, ww = (statistics.median(out[w]["wall"]) for w in ways)
    ratios = [a / b for a, b in zip(out["frozen"]["wall"], out["whole"]["wall"], strict=True)]
    print(f"wall frozen / whole, run by run: {spread(ratios)}; readings the same both ways (bytes at each step): "
          f"{same}")
    rf, rw = (statistics.median(out[w]["read"]) for w in ways)
    print(f"RESULT run_wall_frozen_s={wf:.3f} run_wall_whole_s={ww:.3f} run_wall_ratio={statistics.median(ratios):.3f} "
          f"readings_s_frozen={rf:.3f} readings_s_whole={rw:.3f} same_readings={int(same)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
