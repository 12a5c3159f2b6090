"""Should the recommendation rank confirmed candidates by their runs alone, or by the blend of
their runs' time to target with the time the gradient noise scale predicts for them?

Why it is asked: the blend (``decide.predict.estimate_time``, adopted 2026-12-01 when three
candidates were confirmed) is the geometric mean of a candidate's measured time and a prediction
made from the *other* candidates' samples to target. With two contenders, as the default
``confirm.candidates: 2`` gives, candidate A's prediction is B's samples to target x
(1 + A/B_noise) / (1 + B/B_noise) at A's samples/s and the reverse for B, so in the ratio of the
two blends both candidates' measured samples to target cancel exactly: the order is the noise-scale
model's and the step times', whatever the confirmation runs measured, unless the runs differ
beyond their spread (``Confirmation.contenders``). Seen on the held-out ``attn_majority`` search of
seed 1: 128/0.0091 reached the target in 5.41 s (both runs), 16/0.0025 in 7.89 s, and the blend
recommended the second (7.98 against 5.02 s estimated; both predictions off by 2.2x and 2.5x).

What it does (the replay reads no new search; the side-by-side runs train):
- every stored held-out search (``benchmarks/heldout/*_searches.tgz``, and ``--runs DIR`` for
  searches not yet archived) is re-read with today's decision code; its contenders are ranked both
  ways (the blend, as recommended, and the runs' median time alone);
- where the two picks differ, both configs are trained again side by side at the workload's full
  length, ``--runs`` fresh seeds each (7100 + k), interleaved (each round in a rotated order), each
  run stopped at the workload's committed yardstick target (``bench_heldout``: 0.99 x the grid's
  best final value; for a loss, 0.99 of the way from the first validation to it). A config that
  two searches disagree over is trained once per seed and read for both.
- per search: the runs pick's median time to the yardstick over the blend pick's (below 1: the
  runs alone would have recommended the quicker config); over searches, the median of those ratios
  and its 95 % bootstrap interval (the searches resampled, then each config's runs).

Criterion, fixed before any side-by-side run (2026-12-07): the recommendation ranks by the runs
alone by default if the interval of the median ratio lies below 1; the blend stays if it lies
above 1; inside the noise nothing changes. Searches of development workloads are not read (their
stored searches come from many older versions); every search read here was run before this
question was asked, so the workloads are held out from the rule, not from the judgement (the next
new held-out workload judges it in a real search).

Usage: python scripts/bench_blend.py [--runs 4] [--out DIR] [--tgz F ...] [--extra DIR ...] [--replay-only]
Ends with: RESULT searches=... disagree=... runs_over_blend_median=... lo=... hi=... runs_quicker=...
blend_quicker=... verdict=...
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import tarfile
import tempfile
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import bench_heldout as bh  # noqa: E402
from bench_heldout import median_ratio, ratio  # noqa: E402,F401  (read here and by the tests)

REPO = Path(__file__).resolve().parents[1]
DEFAULT_TGZ = sorted((REPO / "benchmarks" / "heldout").glob("*_searches.tgz"))


def workload_of(run: str) -> str | None:
    """The held-out workload a stored search directory belongs to (its name's prefix)."""
    names = [n for n in bh.WORKLOADS if bh.WORKLOADS[n]["held_out"] and run.startswith(n + "-")]
    return max(names, key=len, default=None)


def picks(run: Path) -> dict | None:
    """One stored search re-read: (the blend's pick, the runs' pick) among its contenders."""
    from tune_batch.decide.recommend import _decide

    conf = _decide(*bh.stored_search(run), None, None).confirmation
    if conf is None or conf.at_length or len(conf.contenders()) < 2:
        return None
    # the product's own ranking both ways: as the search ran (the blend), and with confirm.rank_by runs
    b, r = replace(conf, blend=True).best, replace(conf, blend=False).best
    as_params = lambda c: {"batch_size": c.trial.params.batch_size, "lr": c.trial.params.lr}  # noqa: E731
    return {"contenders": len(conf.contenders()), "blended": replace(conf, blend=True).ranked_with_predictions(),
            "blend": as_params(b), "runs": as_params(r),
            "blend_s": b.time_to_target_s, "runs_s": r.time_to_target_s, "differ": b is not r}


def replay(tgzs: list[Path], extra: list[Path]) -> list[dict]:
    """Every stored held-out search's two picks (sorted by workload and name)."""
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        dirs = []
        for tgz in tgzs:
            dest = Path(tmp) / tgz.name.removesuffix(".tgz")
            with tarfile.open(tgz) as tar:
                tar.extractall(dest, filter="data")
            dirs.append(dest)
        for root in [*dirs, *extra]:
            for trials in sorted(root.rglob("trials.jsonl")):
                run = trials.parent
                name = workload_of(run.name)
                if name is None or not (run / "config.yaml").exists():
                    continue
                got = picks(run)
                if got is not None:
                    rows.append({"workload": name, "search": run.name, **got})
    seen, out = set(), []
    for r in sorted(rows, key=lambda r: (r["workload"], r["search"])):
        if (r["workload"], r["search"]) not in seen:  # a search archived and also given by --extra
            seen.add((r["workload"], r["search"]))
            out.append(r)
    return out


def side(rows: list[dict], runs: int, out: Path) -> dict[tuple, list[float]]:
    """Every config a disagreeing search names, ``runs`` fresh seeds each, interleaved; stored in
    ``out``/blend_side.jsonl as each run ends (runs already there are not repeated). Returns
    (workload, batch, lr) -> training seconds to the workload's yardstick target per run (inf: not reached)."""
    path = out / "blend_side.jsonl"
    stored = bh.jsonl(path)
    configs = sorted({(r["workload"], *bh.key(r[k])) for r in rows if r["differ"] for k in ("blend", "runs")})
    sticks = {w: bh.yardstick(w, bh.jsonl(bh.HELDOUT / f"{w}_grid.jsonl")) for w in {c[0] for c in configs}}
    cfgs = {w: bh.run_config(bh.load(w), bh.WORKLOADS[w]["length"]) for w in sticks}
    done = {(r["workload"], *bh.key(r["params"]), r["seed"]) for r in stored}
    total = len(configs) * runs
    print(f"{len(configs)} configs side by side x {runs} runs: {len(done)} stored", flush=True)
    n = len(done)
    for k in range(runs):
        seed = 7100 + k
        for w, b, lr in configs[k % len(configs):] + configs[:k % len(configs)]:
            if (w, b, lr, seed) in done:
                continue
            stick = sticks[w]
            row = bh.train_full(cfgs[w], {"batch_size": b, "lr": lr}, seed,
                                until=lambda v, s=stick: bh.reached(v, s["target"], s["direction"]))
            row["workload"] = w
            bh.append(path, row)
            stored.append(row)
            n += 1
            t = bh.ttt(row["curve"], stick["target"], stick["direction"])
            print(f"  [{n}/{total}] {w} batch {b} lr {lr:.3g} run {k + 1}: {row['status']}, "
                  + (f"the target in {t:.1f} s of training" if math.isfinite(t) else "no target"), flush=True)
    times: dict[tuple, list[float]] = {}
    for r in stored:
        stick = sticks.get(r["workload"])
        if stick is not None:
            times.setdefault((r["workload"], *bh.key(r["params"])), []).append(
                bh.ttt(r["curve"], stick["target"], stick["direction"]))
    return times


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tgz", nargs="*", type=Path, default=DEFAULT_TGZ)
    ap.add_argument("--extra", nargs="*", type=Path, default=[], help="folders of searches not yet archived")
    ap.add_argument("--runs", type=int, default=4, help="side-by-side runs of each config")
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks" / "heldout")
    ap.add_argument("--replay-only", action="store_true", help="the picks only, no training")
    args = ap.parse_args(argv)
    rows = replay(args.tgz, args.extra)
    differ = [r for r in rows if r["differ"]]
    lab = lambda p: f"{p['batch_size']}/{p['lr']:.3g}"  # noqa: E731
    print(f"{len(rows)} stored held-out searches with two or more contenders; the blend ranked in "
          f"{sum(r['blended'] for r in rows)}; its pick differs from the runs' in {len(differ)} "
          f"({sum(r['contenders'] == 2 for r in differ)} of them with two contenders)")
    for r in differ:
        print(f"  {r['search']:34s} {r['contenders']} contenders: blend {lab(r['blend']):>12s} "
              f"(runs {r['blend_s']:.2f} s)  runs {lab(r['runs']):>12s} (runs {r['runs_s']:.2f} s)")
    if args.replay_only or not differ:
        print(f"RESULT searches={len(rows)} disagree={len(differ)}")
        return
    times = side(differ, args.runs, args.out)
    pairs = []
    print(f"\n{'search':34s} {'blend pick':>12s} {'median s':>8s} {'runs pick':>12s} {'median s':>8s} {'ratio':>6s}")
    for r in differ:
        a = times[(r["workload"], *bh.key(r["runs"]))]
        b = times[(r["workload"], *bh.key(r["blend"]))]
        pairs.append((a, b))
        print(f"{r['search']:34s} {lab(r['blend']):>12s} {statistics.median(b):8.2f} {lab(r['runs']):>12s} "
              f"{statistics.median(a):8.2f} {ratio(statistics.median(a), statistics.median(b)):6.3f}")
    point, lo, hi = median_ratio(pairs)
    quicker = sum(ratio(statistics.median(a), statistics.median(b)) < 1 for a, b in pairs)
    slower = sum(ratio(statistics.median(a), statistics.median(b)) > 1 for a, b in pairs)
    verdict = "runs_alone" if hi < 1 else "blend" if lo > 1 else "inside_noise"
    print(f"\nthe runs' pick over the blend's, time to the yardstick target: median {point:.3f} "
          f"[95 % {lo:.3f}, {hi:.3f}] over {len(pairs)} searches; quicker in {quicker}, slower in {slower}; "
          f"by the criterion fixed before the runs: {verdict}")
    print(f"RESULT searches={len(rows)} disagree={len(differ)} runs_over_blend_median={point:.3f} lo={lo:.3f} "
          f"hi={hi:.3f} runs_quicker={quicker} blend_quicker={slower} verdict={verdict}")


if __name__ == "__main__":
    main()
