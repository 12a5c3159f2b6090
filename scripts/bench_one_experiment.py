"""What a search saves by running all its stages (the trials, their repeats, the confirmation runs)
in one Tune experiment, against one Tune experiment per stage.

Whole command-line searches of ``--config`` on Ray (start-up included), with this checkout and
with ``--against REV``: a git worktree of an earlier commit, where each stage was its own
``Tuner.fit``. Each side runs from its own tree (its working directory and PYTHONPATH first, which
Ray's workers inherit), the two interleaved with the order alternating pair by pair, nothing else
running. Per side: the search's wall seconds and where they went (``bench_kept_memory.split``:
trials, repeats, candidates' and baseline's confirmation runs, the rest), how many trial processes
it started (distinct pids in its records), the Tune experiments it wrote, and its recommendation;
the wall ratio pair by pair; with ``--grid-s`` the wall over a target-stopped grid's seconds (the
held-out benchmark's cost figure).

Usage: python scripts/bench_one_experiment.py --against REV [--config C] [--repeats 3] [--grid-s S]
Ends with: RESULT wall_one_s= wall_apart_s= wall_ratio= rest_one_s= rest_apart_s= processes_one=
processes_apart= [cost_one= cost_apart=] (medians over the repeats)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "scripts"))

from bench_kept_memory import PARTS, keep, split, spread  # noqa: E402


@contextmanager
def against_tree(rev: str, where: str) -> Iterator[Path]:
    """A detached git worktree of ``rev`` under ``where``, removed afterwards; this checkout and
    it each checked to import tune_batch from their own tree."""
    path = Path(where) / "against"
    subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", "--quiet", str(path), rev], check=True)
    try:
        for tree in (REPO, path):
            check_tree(tree)
        yield path
    finally:
        subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(path)], check=False)


def tree_env(tree: Path) -> dict[str, str]:
    """This environment with ``tree`` first on PYTHONPATH (Ray's workers inherit it)."""
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(tree), os.environ.get("PYTHONPATH", "")) if p)}


def one_search(tree: Path, config: Path, out: Path) -> tuple[float, list[dict], dict, list[str]]:
    """A whole search from the command line with ``tree``'s tune_batch: wall seconds, its records,
    its pareto.json and the Tune experiments it wrote."""
    t = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "tune_batch", "search", str(config), "--output", str(out), "--quiet"],
                       cwd=tree, env=tree_env(tree), capture_output=True, text=True)
    wall = time.perf_counter() - t
    if p.returncode != 0:
        raise RuntimeError(f"search with {tree} failed (exit {p.returncode}): {p.stderr[-2000:]}")
    rows = [json.loads(x) for x in (out / "trials.jsonl").read_text().splitlines()]
    experiments = sorted(d.name.rsplit("-", 2)[0] for d in (out / "ray").iterdir() if d.is_dir())
    return wall, rows, json.loads((out / "pareto.json").read_text()), experiments


def check_tree(tree: Path) -> None:
    """That a search started from ``tree`` imports tune_batch from it (not from an installed copy)."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    p = subprocess.run([sys.executable, "-c", "import tune_batch; print(tune_batch.__file__)"], cwd=tree, env=env,
                       capture_output=True, text=True, check=True)
    if not Path(p.stdout.strip()).resolve().is_relative_to(tree.resolve()):
        raise RuntimeError(f"from {tree}, tune_batch is imported from {p.stdout.strip()}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--against", required=True, help="the commit whose stages were separate Tune experiments")
    ap.add_argument("--config", default="configs/quickstart.yaml")
    ap.add_argument("--repeats", type=int, default=3, help="searches per side (interleaved)")
    ap.add_argument("--grid-s", type=float, help="a target-stopped grid's seconds, for the cost")
    args = ap.parse_args(argv)
    config = (REPO / args.config).resolve()
    with tempfile.TemporaryDirectory(prefix="tb-one-") as tmp, against_tree(args.against, tmp) as apart:
        return _compare({"one": REPO, "apart": apart}, config, args.repeats, args.grid_s, Path(tmp))


def _compare(trees: dict[str, Path], config: Path, repeats: int, grid_s: float | None, tmp: Path) -> int:
    print(f"{config.relative_to(REPO)}: {repeats} whole searches per side, interleaved; 'one': this checkout "
          f"(all stages in one Tune experiment), 'apart': {trees['apart'].name} (one experiment per stage)", flush=True)
    out: dict[str, dict[str, list]] = {w: {"wall": [], "procs": [], "pick": []} for w in trees}
    for i in range(repeats):
        order = list(trees) if i % 2 == 0 else list(reversed(trees))
        for way in order:
            wall, rows, pareto, experiments = one_search(trees[way], config, tmp / f"{way}{i}")
            parts = split(rows, wall)
            procs = len({(r["info"].get("host"), r["info"].get("pid")) for r in rows if r["info"].get("pid")})
            pick = (pareto.get("recommended") or {}).get("params")
            keep(out[way], {"wall": wall, "procs": procs, "pick": pick, **parts})
            shares = ", ".join(f"{k} {v:.1f}" for k, v in parts.items())
            print(f"  [{i + 1}/{repeats}] {way}: wall {wall:.1f} s ({shares}); "
                  f"{len(rows)} runs in {procs} process(es); Tune experiments {experiments}; recommended {pick}",
                  flush=True)
    for way, o in out.items():
        print(f"{way}: search wall s {spread(o['wall'])}; processes {spread([float(x) for x in o['procs']])}")
        print(f"  where the wall went (medians, s): {', '.join(f'{k} {statistics.median(o[k]):.1f}' for k in PARTS)}")
    ratios = [a / b for a, b in zip(out["one"]["wall"], out["apart"]["wall"], strict=True)]
    print(f"search wall one / apart, pair by pair: {spread(ratios)}")
    med = {w: statistics.median(out[w]["wall"]) for w in trees}
    rest = {w: statistics.median(out[w]["rest"]) for w in trees}
    procs = {w: statistics.median(out[w]["procs"]) for w in trees}
    cost = ""
    if grid_s:
        for w in trees:
            print(f"cost, search wall / target-stopped grid ({grid_s:.1f} s), {w}: "
                  f"{', '.join(f'{x / grid_s:.2f}' for x in out[w]['wall'])}")
        cost = f" cost_one={med['one'] / grid_s:.3f} cost_apart={med['apart'] / grid_s:.3f}"
    print(f"RESULT wall_one_s={med['one']:.1f} wall_apart_s={med['apart']:.1f} "
          f"wall_ratio={statistics.median(ratios):.3f} "
          f"rest_one_s={rest['one']:.1f} rest_apart_s={rest['apart']:.1f} processes_one={procs['one']:g} "
          f"processes_apart={procs['apart']:g}{cost}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
