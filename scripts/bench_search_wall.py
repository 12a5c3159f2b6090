"""What a whole search costs in wall seconds with this checkout against ``--against REV`` (a git
worktree of an earlier commit), the same command from each tree, interleaved.

Each side runs ``python -m tune_batch search CONFIG --set ...`` from the command line (Ray's
start-up and shutdown included), a fresh command each time, the order alternating pair by pair,
nothing else running. Per side: the search's wall seconds, what they went to (short trials,
repeats, the confirmation runs of the candidates and of the baseline, the rest:
``bench_kept_memory.split``), and its recommendation; pair by pair, this side's wall over the
other's. For changes that must not change what a search measures or decides, ``same_answer``
counts the pairs whose recommendations agree (they can also differ by the runs' own noise).

Usage: python scripts/bench_search_wall.py --against REV [--config C] [--set K=V ...] [--repeats 3]
Ends with: RESULT search_wall_s= search_wall_against_s= wall_ratio= same_answer= (medians over
the repeats; wall_ratio pair by pair)
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "scripts"))

from bench_kept_memory import PARTS, split, spread  # noqa: E402
from bench_one_experiment import against_tree  # noqa: E402
from bench_worker_group import one_search  # noqa: E402

SETS = ["budget.trials=4", "confirm.train_samples=8192"]


def _answer(out: Path) -> str:
    """The recommendation in pareto.json as batch/lr/num_gpus ('none' where there is none)."""
    rec = json.loads((out / "pareto.json").read_text()).get("recommended")
    if not rec:
        return "none"
    p = rec["params"]
    return f"{p['batch_size']}/{p['lr']:.3g}/{p['num_gpus']}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--against", required=True, help="an earlier commit")
    ap.add_argument("--config", default="configs/quickstart.yaml")
    ap.add_argument("--set", action="append", dest="sets", help=f"a search override (default: {SETS})")
    ap.add_argument("--repeats", type=int, default=3, help="searches per side (interleaved)")
    args = ap.parse_args(argv)
    config, sets = (REPO / args.config).resolve(), args.sets or SETS
    with tempfile.TemporaryDirectory(prefix="tb-wall-") as tmp, against_tree(args.against, tmp) as against:
        trees = {"this": REPO, "against": against}
        print(f"{config.relative_to(REPO)} with {sets}: {args.repeats} searches per side, interleaved; 'this': this "
              f"checkout, 'against': {args.against}", flush=True)
        walls: dict[str, list[float]] = {w: [] for w in trees}
        parts: dict[str, dict[str, list[float]]] = {w: {} for w in trees}
        answers: dict[str, list[str]] = {w: [] for w in trees}
        for i in range(args.repeats):
            for way in (list(trees) if i % 2 == 0 else list(reversed(trees))):
                out = Path(tmp) / f"{way}{i}"
                wall = one_search(trees[way], config, out, sets)
                rows = [json.loads(x) for x in (out / "trials.jsonl").read_text().splitlines()]
                walls[way].append(wall)
                for k, v in split(rows, wall).items():
                    parts[way].setdefault(k, []).append(v)
                answers[way].append(_answer(out))
                print(f"  [{i + 1}/{args.repeats}] {way}: {wall:.1f} s, recommended {answers[way][-1]}", flush=True)
    for way in trees:
        print(f"{way}: wall s {spread(walls[way])}")
        print("  " + "; ".join(f"{k} {statistics.median(parts[way][k]):.1f}" for k in PARTS))
    ratios = [a / b for a, b in zip(walls["this"], walls["against"], strict=True)]
    same = sum(a == b for a, b in zip(answers["this"], answers["against"], strict=True))
    print(f"wall this / against, pair by pair: {spread(ratios)}")
    print(f"RESULT search_wall_s={statistics.median(walls['this']):.1f} "
          f"search_wall_against_s={statistics.median(walls['against']):.1f} "
          f"wall_ratio={statistics.median(ratios):.3f} same_answer={same}/{args.repeats}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
