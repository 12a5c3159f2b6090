"""What reading the target again changes: every stored search decided with and without
``decide.recommend.reachable`` (no training, seconds).

The default target is a fraction of the best candidate's median run level; where no candidate's
runs reached it, the target is now read again from the level every run of one candidate reached
(docs/decision.md, "A target no candidate reached"). Each stored search (``--tgz``: its config.yaml
and trials.jsonl; ``--extra DIR``: searches not archived) is decided by today's code twice, the
second time with that step left out, and the searches whose recommendation differs are listed
with both targets. It chooses nothing: the step corrects an answer the product gave (none where a
candidate learned), found on a held-out search, and a changed pick is not judged here.

``--side W``: the changed picks of held-out workload W's searches are trained side by side with
that workload's oracle (the quickest config of its stored side-by-side runs), ``--runs`` fresh seeds
each (7200 + k), interleaved, each run stopped at W's yardstick target (``bench_heldout``); each
changed pick's regret is its median time to the target over the oracle's in this round (stored in
``--out``/<W>_reread_side.jsonl as each run ends; a rerun resumes).

Usage: python scripts/bench_target_replay.py [--tgz F ...] [--extra DIR ...] [--side W [--runs 3] [--out DIR]]
Ends with: RESULT searches=... confirmed=... none_before=... none_after=... changed=...
[reread_regrets=r1,r2,... oracle_s=...]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import tarfile
import tempfile
from pathlib import Path

from tune_batch.config import load_config
from tune_batch.decide import recommend
from tune_batch.store.records import TrialResult

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_heldout as bh  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
DEFAULT_TGZ = [REPO / "benchmarks" / "confirmed_searches.tgz",
               *sorted((REPO / "benchmarks" / "heldout").glob("*_searches.tgz"))]


def both(run: Path) -> dict | None:
    """The search in ``run`` decided with and without the target read again; None without a
    confirmation."""
    recs = [TrialResult.from_record(json.loads(x)) for x in (run / "trials.jsonl").read_text().splitlines()
            if x.strip()]
    config = load_config(run / "config.yaml")
    now = recommend.decide(config, recs)
    if now.confirmation is None:
        return None
    keep = recommend.reachable
    recommend.reachable = lambda config, conf, *rest: conf
    try:
        before = recommend.decide(config, recs)
    finally:
        recommend.reachable = keep
    pick = lambda r: None if r.recommended is None else bh.key(  # noqa: E731
        {"batch_size": r.recommended.params.batch_size, "lr": r.recommended.params.lr})
    return {"run": run.name, "before": pick(before), "now": pick(now), "target_before": before.confirmation.target,
            "target_now": now.confirmation.target}


def side(workload: str, picks: list[tuple[int, float]], runs: int, out: Path) -> tuple[tuple, dict]:
    """(the oracle, config -> times to the yardstick) of ``picks`` (``bench_heldout.key``s) and the oracle
    trained side by side."""
    stick = bh.yardstick(workload, bh.jsonl(bh.HELDOUT / f"{workload}_grid.jsonl"))
    stored = bh.times_to_target(bh.jsonl(bh.HELDOUT / f"{workload}_side.jsonl"), stick)
    oracle = min(stored, key=lambda k: statistics.median(stored[k]))
    configs = [oracle, *sorted(set(picks) - {oracle})]
    cfg = bh.run_config(bh.load(workload), bh.WORKLOADS[workload]["length"])
    path = out / f"{workload}_reread_side.jsonl"
    rows = bh.jsonl(path)
    done = {(*bh.key(r["params"]), r["seed"]) for r in rows}
    for k in range(runs):
        for b, lr in configs[k % len(configs):] + configs[:k % len(configs)]:
            if (b, lr, 7200 + k) in done:
                continue
            row = bh.train_full(cfg, {"batch_size": b, "lr": lr}, 7200 + k,
                                until=lambda v: bh.reached(v, stick["target"], stick["direction"]))
            bh.append(path, row)
            rows.append(row)
            t = bh.ttt(row["curve"], stick["target"], stick["direction"])
            print(f"  batch {b} lr {lr:.3g} run {k + 1}: " + (f"the target in {t:.1f} s" if math.isfinite(t)
                                                              else "no target"), flush=True)
    return oracle, bh.times_to_target(rows, stick)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tgz", nargs="*", type=Path, default=DEFAULT_TGZ)
    ap.add_argument("--extra", nargs="*", type=Path, default=[], help="folders of unarchived searches")
    ap.add_argument("--side", default=None, metavar="W", help="train W's changed picks beside its oracle")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks" / "heldout")
    args = ap.parse_args(argv)
    if args.runs < 1:
        ap.error("--runs takes 1 or more")
    rows, searches = [], 0
    with tempfile.TemporaryDirectory() as tmp:
        roots = []
        for tgz in args.tgz:
            dest = Path(tmp) / tgz.name.removesuffix(".tgz")
            with tarfile.open(tgz) as tar:
                tar.extractall(dest, filter="data")
            roots.append(dest)
        for root in [*roots, *args.extra]:
            for trials in sorted(root.rglob("trials.jsonl")):
                if not (trials.parent / "config.yaml").exists():
                    continue
                searches += 1
                row = both(trials.parent)
                if row is not None:
                    rows.append(row)
    changed = [r for r in rows if r["before"] != r["now"]]
    num = lambda x: "-" if x is None else f"{x:.4g}"  # noqa: E731
    for r in changed:
        print(f"{r['run']:40s} {r['before'] or 'no recommendation'} -> {r['now'] or 'no recommendation'}; "
              f"target {num(r['target_before'])} -> {num(r['target_now'])}")
    none_before = sum(r["before"] is None for r in rows)
    none_after = sum(r["now"] is None for r in rows)
    print(f"{searches} stored searches, {len(rows)} with a confirmation; no recommendation before: {none_before}, "
          f"now: {none_after}; changed: {len(changed)}")
    extra = ""
    if args.side is not None:
        mine = [r for r in changed if r["run"].startswith(args.side + "-") and r["now"] is not None]
        oracle, times = side(args.side, [r["now"] for r in mine], args.runs, args.out)
        base = statistics.median(times[oracle])
        regrets = []
        for r in mine:
            t = times[r["now"]]
            regrets.append(statistics.median(t) / base)
            print(f"{r['run']}: {r['now']} median {statistics.median(t):.2f} s over the oracle's {base:.2f} s "
                  f"({oracle[0]}/{oracle[1]:.3g}): regret {regrets[-1]:.2f}")
        extra = f" reread_regrets={','.join(f'{x:.3f}' for x in regrets) or 'none'} oracle_s={base:.3f}"
    print(f"RESULT searches={searches} confirmed={len(rows)} none_before={none_before} none_after={none_after} "
          f"changed={len(changed)}{extra}")


if __name__ == "__main__":
    main()
