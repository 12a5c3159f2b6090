"""Recommendation stability: the same search run with different ``search.seed``s, compared.

Runs ``python -m tune_batch search CONFIG --set search.seed=N --output DIR/seedN`` for each
seed (or reads run directories that exist already, with --reuse), then compares the
recommendations: same batch size with learning rates within a factor of 2, or within the
noise of each other in every objective (each run's means and 95 % half-widths, combined).

Usage: python scripts/bench_stability.py [--config configs/quickstart.yaml] [--seeds 1 2 3] [--out DIR] [--reuse]
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _recommended(run: Path) -> dict:
    pareto = json.loads((run / "pareto.json").read_text())
    rec_id = pareto["recommended_trial_id"]
    rec = next(t for t in pareto["trials"] if t["trial_id"] == rec_id)
    return {"params": rec["params"], "metrics": rec["metrics"], "objectives": [o["metric"] for o in pareto["objectives"]]}


def _within_noise(a: dict, b: dict) -> bool:
    for m in a["objectives"]:
        tol = math.hypot(a["metrics"].get(f"{m}_ci") or 0.0, b["metrics"].get(f"{m}_ci") or 0.0)
        if abs(a["metrics"][m] - b["metrics"][m]) > tol:
            return False
    return True


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default=str(REPO / "configs" / "quickstart.yaml"))
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--out", default=None, help="where the run directories go (default: a temp dir)")
    ap.add_argument("--reuse", action="store_true", help="read OUT/seedN that exist instead of running them")
    args = ap.parse_args()
    out = Path(args.out or tempfile.mkdtemp(prefix="tb-stability-"))
    recs = {}
    for seed in args.seeds:
        run = out / f"seed{seed}"
        if not (args.reuse and (run / "pareto.json").exists()):
            t0 = time.time()
            p = subprocess.run([sys.executable, "-m", "tune_batch", "search", args.config, "--set", f"search.seed={seed}",
                                "--output", str(run), "--quiet"], capture_output=True, text=True, cwd=REPO)
            if p.returncode != 0:
                raise SystemExit(f"seed {seed}: exit {p.returncode}: {p.stderr[-2000:]}")
            print(f"seed {seed}: searched in {time.time() - t0:.0f} s")
        recs[seed] = _recommended(run)
        r = recs[seed]
        shown = ", ".join(f"{m} {r['metrics'][m]:.4g} +- {r['metrics'].get(f'{m}_ci') or 0:.3g}" for m in r["objectives"])
        print(f"seed {seed}: recommended batch_size {r['params']['batch_size']} lr {r['params']['lr']:.3g} ({shown})")
    same_batch = max(sum(1 for r in recs.values() if r["params"]["batch_size"] == b)
                     for b in {r["params"]["batch_size"] for r in recs.values()})
    pairs = list(itertools.combinations(args.seeds, 2))
    lr_ok = all(max(recs[a]["params"]["lr"], recs[b]["params"]["lr"]) / min(recs[a]["params"]["lr"], recs[b]["params"]["lr"]) <= 2
                for a, b in pairs if recs[a]["params"]["batch_size"] == recs[b]["params"]["batch_size"])
    noise_ok = [(a, b, _within_noise(recs[a], recs[b])) for a, b in pairs]
    for a, b, ok in noise_ok:
        print(f"seeds {a} and {b}: recommendations {'within' if ok else 'NOT within'} noise of each other in every objective")
    agree = same_batch >= 2 and lr_ok
    within = all(ok for *_, ok in noise_ok)
    print(f"same batch size in {same_batch} of {len(recs)} runs (learning rates within 2x: {lr_ok}); "
          f"all recommendations within noise of each other: {within}")
    print(f"RESULT same_batch={same_batch} runs={len(recs)} lr_within_2x={int(lr_ok)} within_noise={int(within)} "
          f"stable={int(agree or within)}")


if __name__ == "__main__":
    main()
