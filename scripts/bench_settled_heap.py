"""What a search's garbage collections cost, on a settled heap (``measure.memory.settled_heap``:
the heap frozen for the search, so the collection after each run walks only what the runs made)
and as before (every collection walks the whole heap: the trial boundary's and Optuna's
``gc_after_trial``, 0.3-0.4 s each once torch is loaded).

Each way runs in a process of its own from its own source tree: this one, and a checkout of
``--before`` (a git revision, checked out as a temporary worktree). Each process does a warm-up
search (the once-per-process costs: imports, the profiler's and the optimizer's first use),
then ``--searches`` in-process searches (Optuna backend) of ``--trials`` small trials, timing
each, and counts the full collections (generation 2) and their seconds through ``gc.callbacks``.
The ways run interleaved (A B A B ...), ``--repeats`` processes each; figures are medians over
every timed search of a way, with the spread (min-max).

Usage: python scripts/bench_settled_heap.py [--before d9796c3] [--repeats 3] [--searches 3] [--trials 6]
Ends with: RESULT search_wall_settled_s= search_wall_before_s= search_wall_ratio=
full_collections_settled= full_collections_before= collection_s_settled= collection_s_before=
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

# runs in the child: the warm-up search, then the timed ones, one JSON line per timed search
CHILD = r"""
import gc, json, sys, tempfile, time
from tune_batch.config import config_from_dict
from tune_batch.pipeline.search import search

def config(seed, trials):
    return config_from_dict({
        "name": "bench", "model": {"name": "small_cnn", "kwargs": {"width": 8}},
        "data": {"name": "digits", "resize": 16, "val_samples": 300},
        "space": {"batch_size": {"min": 16, "max": 64}, "lr": {"low": 0.01, "high": 0.1}},
        "budget": {"trials": trials, "train_samples": 1024, "warmup_steps": 2, "min_window_s": 0},
        "search": {"backend": "optuna", "seed": seed}, "resources": {"peak_flops": 100e9},
        "repeats": {"seeds": 0}, "confirm": {"candidates": 0}})

searches, trials = int(sys.argv[1]), int(sys.argv[2])
out = tempfile.mkdtemp(prefix="bench-settled-")
search(config(99, 1), out + "/warm", quiet=True)
state = {"n": 0, "s": 0.0, "t0": 0.0}

def watch(phase, info):
    if info["generation"] != 2:
        return
    if phase == "start":
        state["t0"] = time.perf_counter()
    else:
        state["n"] += 1
        state["s"] += time.perf_counter() - state["t0"]

gc.callbacks.append(watch)
for i in range(searches):
    state.update(n=0, s=0.0)
    t = time.perf_counter()
    search(config(i, trials), out + f"/r{i}", quiet=True)
    wall = time.perf_counter() - t
    print(json.dumps({"wall_s": wall, "full_collections": state["n"], "collection_s": state["s"]}), flush=True)
"""


def _run(tree: Path, searches: int, trials: int) -> list[dict]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    p = subprocess.run([sys.executable, "-c", CHILD, str(searches), str(trials)], cwd=tree, env=env,
                       capture_output=True, text=True, timeout=1800)
    if p.returncode != 0:
        raise SystemExit(f"bench_settled_heap: a search in {tree} failed:\n{p.stderr[-3000:]}")
    return [json.loads(line) for line in p.stdout.splitlines() if line.startswith("{")]


def _spread(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--before", default="d9796c3", help="the git revision to compare with (default: %(default)s)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--searches", type=int, default=3)
    ap.add_argument("--trials", type=int, default=6)
    args = ap.parse_args()
    before = Path(tempfile.mkdtemp(prefix="bench-before-")) / "tree"
    subprocess.run(["git", "-C", str(REPO), "worktree", "add", "-q", "--detach", str(before), args.before], check=True)
    ways = {"settled": REPO, "before": before}
    got: dict[str, list[dict]] = {w: [] for w in ways}
    try:
        for r in range(args.repeats):
            for way, tree in ways.items():
                runs = _run(tree, args.searches, args.trials)
                got[way] += runs
                print(f"repeat {r} {way:8s} " + " ".join(f"{x['wall_s']:.2f}s/{x['full_collections']}gc" for x in runs),
                      flush=True)
    finally:
        subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(before)], check=False)
    print(f"\n{args.searches} searches of {args.trials} trials per process, {args.repeats} processes a way "
          f"(medians, min-max):")
    med = {}
    for way, runs in got.items():
        wall = [x["wall_s"] for x in runs]
        n = [float(x["full_collections"]) for x in runs]
        s = [x["collection_s"] for x in runs]
        med[way] = (statistics.median(wall), statistics.median(n), statistics.median(s))
        print(f"  {way:8s} search wall {_spread(wall)} s; full collections {_spread(n)}, taking {_spread(s)} s")
    ratio = med["settled"][0] / med["before"][0]
    print(f"  settled / before: {ratio:.2f} of the wall")
    print(f"RESULT search_wall_settled_s={med['settled'][0]:.2f} search_wall_before_s={med['before'][0]:.2f} "
          f"search_wall_ratio={ratio:.2f} full_collections_settled={med['settled'][1]:g} "
          f"full_collections_before={med['before'][1]:g} collection_s_settled={med['settled'][2]:.2f} "
          f"collection_s_before={med['before'][2]:.2f}")


if __name__ == "__main__":
    main()
