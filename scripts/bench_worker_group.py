"""What a data-parallel run pays to start its worker group: this checkout's group of plain Ray
actors (``tune_batch.backends.ray.group``) against ``--against REV``, a git worktree of a commit
whose groups were Ray Train ``TorchTrainer`` runs.

Each side runs ``probe --num-gpus 2`` (the run a search's 2-worker trial is: CPU worker processes
and gloo here) from its own tree, a fresh command each time, the two interleaved with the order
alternating pair by pair, nothing else running. Per side: the seconds until both ranks ran the
training function (``group_start_s`` in the record), the run's seconds from asking for the group to
its record (``duration_s``), the whole command's wall seconds (Ray's start-up and shutdown
included), and the measured samples/s (which a launcher must not change). With ``--search``, also
whole searches from the command line (``--search-set`` overrides), wall seconds per side.

Usage: python scripts/bench_worker_group.py --against REV [--config C] [--repeats 4] [--search]
Ends with: RESULT group_start_s= group_start_against_s= run_s= run_against_s= run_ratio=
samples_per_s_ratio= [search_wall_s= search_wall_against_s= search_ratio=] (medians over repeats)
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "scripts"))

from bench_kept_memory import spread  # noqa: E402
from bench_one_experiment import against_tree, tree_env  # noqa: E402

SEARCH_SET = ["space.num_gpus=[2]", "budget.trials=4"]


def one_probe(tree: Path, config: Path, out: Path) -> dict[str, float]:
    """``probe --num-gpus 2`` with ``tree``'s tune_batch: its record's figures and the wall."""
    t = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "tune_batch", "probe", str(config), "--batch-size", "64", "--lr", "0.05",
                        "--num-gpus", "2", "--output", str(out)], cwd=tree, env=tree_env(tree), capture_output=True,
                       text=True)
    wall = time.perf_counter() - t
    if p.returncode != 0:
        raise RuntimeError(f"probe with {tree} failed (exit {p.returncode}): {p.stderr[-2000:]}")
    (rec,) = [json.loads(x) for x in (out / "trials.jsonl").read_text().splitlines()]
    if rec["status"] != "ok":
        raise RuntimeError(f"probe with {tree}: {rec['status']}: {rec['reason']}")
    return {"start": rec["info"]["group_start_s"], "run": rec["duration_s"], "wall": wall,
            "sps": rec["metrics"]["samples_per_s"]}


def one_search(tree: Path, config: Path, out: Path, sets: list[str]) -> float:
    t = time.perf_counter()
    cmd = [sys.executable, "-m", "tune_batch", "search", str(config), "--output", str(out), "--quiet"]
    for s in sets:
        cmd += ["--set", s]
    p = subprocess.run(cmd, cwd=tree, env=tree_env(tree), capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"search with {tree} failed (exit {p.returncode}): {p.stderr[-2000:]}")
    return time.perf_counter() - t


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--against", required=True, help="a commit whose worker groups were Ray Train runs")
    ap.add_argument("--config", default="configs/quickstart.yaml")
    ap.add_argument("--repeats", type=int, default=4, help="runs per side (interleaved)")
    ap.add_argument("--search", action="store_true", help="also whole searches (--search-set)")
    ap.add_argument("--search-set", action="append", help=f"a search override (default: {SEARCH_SET})")
    args = ap.parse_args(argv)
    config = (REPO / args.config).resolve()
    with tempfile.TemporaryDirectory(prefix="tb-group-") as tmp, against_tree(args.against, tmp) as against:
        return _compare({"actors": REPO, "against": against}, config, args, Path(tmp))


def _compare(trees: dict[str, Path], config: Path, args: argparse.Namespace, tmp: Path) -> int:
    print(f"{config.relative_to(REPO)}: probe --num-gpus 2, {args.repeats} per side, interleaved; 'actors': this "
          f"checkout, 'against': {args.against}", flush=True)
    got: dict[str, dict[str, list[float]]] = {w: {} for w in trees}
    for i in range(args.repeats):
        for way in (list(trees) if i % 2 == 0 else list(reversed(trees))):
            fig = one_probe(trees[way], config, tmp / f"probe-{way}{i}")
            for k, v in fig.items():
                got[way].setdefault(k, []).append(v)
            print(f"  [{i + 1}/{args.repeats}] {way}: group started in {fig['start']:.2f} s, run {fig['run']:.2f} s, "
                  f"command {fig['wall']:.2f} s, {fig['sps']:.0f} samples/s", flush=True)
    for way, g in got.items():
        print(f"{way}: group start s {spread(g['start'])}; run s {spread(g['run'])}; command s {spread(g['wall'])}; "
              f"samples/s {spread(g['sps'])}")
    run_r = [a / b for a, b in zip(got["actors"]["run"], got["against"]["run"], strict=True)]
    sps_r = [a / b for a, b in zip(got["actors"]["sps"], got["against"]["sps"], strict=True)]
    print(f"run actors / against, pair by pair: {spread(run_r)}; samples/s: {spread(sps_r)}")
    med = {w: {k: statistics.median(v) for k, v in g.items()} for w, g in got.items()}
    result = (f"RESULT group_start_s={med['actors']['start']:.2f} group_start_against_s={med['against']['start']:.2f} "
              f"run_s={med['actors']['run']:.2f} run_against_s={med['against']['run']:.2f} "
              f"run_ratio={statistics.median(run_r):.3f} samples_per_s_ratio={statistics.median(sps_r):.3f}")
    if args.search:
        sets = args.search_set or SEARCH_SET
        walls: dict[str, list[float]] = {w: [] for w in trees}
        print(f"whole searches with {sets}, {args.repeats} per side, interleaved", flush=True)
        for i in range(args.repeats):
            for way in (list(trees) if i % 2 == 0 else list(reversed(trees))):
                walls[way].append(one_search(trees[way], config, tmp / f"search-{way}{i}", sets))
                print(f"  [{i + 1}/{args.repeats}] {way}: {walls[way][-1]:.1f} s", flush=True)
        ratios = [a / b for a, b in zip(walls["actors"], walls["against"], strict=True)]
        print(f"search wall s: actors {spread(walls['actors'])}; against {spread(walls['against'])}; "
              f"pair by pair {spread(ratios)}")
        result += (f" search_wall_s={statistics.median(walls['actors']):.1f} "
                   f"search_wall_against_s={statistics.median(walls['against']):.1f} "
                   f"search_ratio={statistics.median(ratios):.3f}")
    print(result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
