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

With ``--search``: whole searches of ``--config`` from the command line instead (Ray start-up
included; ``TUNE_BATCH_KEPT_FREEZE=0`` in the environment of the whole-heap ones, which Ray's
workers inherit), the two ways interleaved; per way the search's wall seconds, the sum of its
confirmation runs' wall seconds, and its recommendation; ``--grid-s`` divides the wall by a
target-stopped grid's seconds (the held-out benchmark's cost figure).

Usage: python scripts/bench_kept_memory.py [--config configs/quickstart.yaml] [--repeats 6]
       [--batch-size 32] [--lr 0.01] [--heap ray|lightning]
       python scripts/bench_kept_memory.py --search --config C [--repeats 3] [--grid-s S]
Ends with: RESULT run_wall_frozen_s= run_wall_whole_s= run_wall_ratio= readings_s_frozen=
readings_s_whole= same_readings= (medians over the repeats); with --search: RESULT
search_wall_frozen_s= search_wall_whole_s= search_wall_ratio= confirm_wall_frozen_s=
confirm_wall_whole_s= [cost_frozen= cost_whole=]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def spread(xs: list[float]) -> str:
    return f"median {statistics.median(xs):.3f} [{min(xs):.3f} .. {max(xs):.3f}]"


PARTS = ("trials", "repeats", "candidates", "candidates_training", "baseline", "baseline_training", "rest")


def split(rows: list[dict], wall: float) -> dict[str, float]:
    """A search's wall seconds by what they went to: its short trials, their repeats on other
    seeds, the confirmation runs of the candidates and of the baseline (each with its training
    seconds), and the rest (Ray's start-up, scheduling, the driver's own work)."""
    def kind(r: dict) -> str:
        of = r["info"].get("confirm_of")
        if of is not None:
            return "baseline" if of == "baseline" else "candidates"
        return "repeats" if r["info"].get("repeat_of") is not None else "trials"

    out = dict.fromkeys(PARTS, 0.0)
    for r in rows:
        k = kind(r)
        out[k] += r["duration_s"] or 0.0
        if k in ("candidates", "baseline"):
            out[f"{k}_training"] += r["info"].get("train_s") or 0.0
    out["rest"] = wall - sum(out[k] for k in ("trials", "repeats", "candidates", "baseline"))
    return out


def keep(into: dict[str, list], values: dict[str, object]) -> None:
    """Each of ``values`` appended to its list in ``into`` (one search's figures, per way)."""
    for k, v in values.items():
        into.setdefault(k, []).append(v)


def searches(config: str, repeats: int, grid_s: float | None) -> int:
    """Whole searches from the command line, frozen and whole-heap readings interleaved."""
    ways = {"frozen": "1", "whole": "0"}
    out: dict[str, dict[str, list]] = {w: {"wall": [], "confirm": [], "pick": []} for w in ways}
    for i in range(repeats):
        for way, flag in ways.items():
            with tempfile.TemporaryDirectory(prefix="tb-kept-") as tmp:
                env = {**os.environ, "TUNE_BATCH_KEPT_FREEZE": flag}
                t = time.perf_counter()
                p = subprocess.run([sys.executable, "-m", "tune_batch", "search", config, "--output", f"{tmp}/run",
                                    "--quiet"], env=env, capture_output=True, text=True)
                wall = time.perf_counter() - t
                if p.returncode != 0:
                    print(f"search failed (exit {p.returncode}): {p.stderr[-2000:]}")
                    return 1
                rows = [json.loads(x) for x in Path(f"{tmp}/run/trials.jsonl").read_text().splitlines()]
                parts = split(rows, wall)
                confirm = parts["candidates"] + parts["baseline"]
                rec = json.loads(Path(f"{tmp}/run/pareto.json").read_text()).get("recommended") or {}
                pick = rec.get("params")
            keep(out[way], {"wall": wall, "confirm": confirm, "pick": pick, **parts})
            print(f"  [{i + 1}/{repeats}] {way}: search wall {wall:.1f} s, confirmation runs {confirm:.1f} s "
                  f"({', '.join(f'{k} {v:.1f}' for k, v in parts.items())}), recommended {pick}", flush=True)
    for way, o in out.items():
        print(f"{way}: search wall s {spread(o['wall'])}; confirmation runs s {spread(o['confirm'])}")
        shares = ", ".join(f"{k} {statistics.median(o[k]):.1f}" for k in PARTS)
        print(f"  where the wall went (medians, s): {shares}")
        if grid_s:
            print(f"  the same over the target-stopped grid: "
                  f"{', '.join(f'{k} {statistics.median(o[k]) / grid_s:.3f}' for k in PARTS)}")
    ratios = [a / b for a, b in zip(out["frozen"]["wall"], out["whole"]["wall"], strict=True)]
    print(f"search wall frozen / whole, pair by pair: {spread(ratios)}")
    wf, ww = (statistics.median(out[w]["wall"]) for w in ways)
    cf, cw = (statistics.median(out[w]["confirm"]) for w in ways)
    cost = ""
    if grid_s:
        print(f"cost, search wall / target-stopped grid ({grid_s:.1f} s): frozen "
              f"{', '.join(f'{w / grid_s:.2f}' for w in out['frozen']['wall'])}; whole "
              f"{', '.join(f'{w / grid_s:.2f}' for w in out['whole']['wall'])}")
        cost = f" cost_frozen={wf / grid_s:.3f} cost_whole={ww / grid_s:.3f}"
    print(f"RESULT search_wall_frozen_s={wf:.1f} search_wall_whole_s={ww:.1f} "
          f"search_wall_ratio={statistics.median(ratios):.3f} confirm_wall_frozen_s={cf:.1f} "
          f"confirm_wall_whole_s={cw:.1f}{cost}")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="configs/quickstart.yaml")
    ap.add_argument("--repeats", type=int, default=6, help="runs per way (interleaved)")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--lr", type=float, default=0.01)
    ap.add_argument("--heap", choices=["ray", "lightning"], default="ray",
                    help="what the process has loaded besides tune_batch: a Ray worker's modules, or also Lightning")
    ap.add_argument("--search", action="store_true", help="whole searches from the command line instead")
    ap.add_argument("--grid-s", type=float, help="with --search: a target-stopped grid's seconds, for the cost")
    args = ap.parse_args(argv)
    if args.search:
        return searches(args.config, args.repeats, args.grid_s)

    import ray  # noqa: F401  (a Ray trial worker has these loaded: the heap the readings walk)
    import ray.tune  # noqa: F401

    import tune_batch.backends.ray.search  # noqa: F401  (as a trial worker has it loaded)
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
    ways, before = {"frozen": True, "whole": False}, memory.FREEZE
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
    memory.FREEZE = before
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
