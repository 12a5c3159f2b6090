"""Would a learning-rate term make the predicted time to target better? Replayed on stored searches.

The shipped prediction (tune_batch.confirm.predictions) models a confirmed candidate's samples to
the target as E_min x (1 + B / B_noise), E_min the median over the *other* candidates, and has no
learning-rate term. This script re-predicts every confirmed candidate of the stored searches
(benchmarks/searches_*.tgz that hold pareto.json: the thirteenth and fourteenth sessions'
bench_decision runs, seeds 31-36, 12 searches, 36 candidates) under:

  none      the shipped model; the script checks that it reproduces pareto.json's predictions
  quad      x McCandlish et al.'s quadratic progress, 1 / (2x - x^2), x = lr / eps_opt(B), with
            eps_opt(B) = eps_max / (1 + B_noise / B) and eps_max from the search's most accurate
            short trial (b*, lr*): eps_max = lr* x (1 + B_noise / b*); no constant fitted on the
            stored runs (x clipped to [0.05, 1.9])
  quad_low  the same, penalising only rates below eps_opt (x capped at 1)

and scores each against the candidate's measured time in the search's own confirmation runs
(pareto.json: the only measured time stored with the searches; bench_decision's fresh runs read
the grid's target, not the search's). Each candidate's samples/s is backed out of its shipped
prediction, so all three use the same throughput.

Usage: python scripts/retro_prediction.py [benchmarks/searches_fourteenth_session.tgz ...]
"""

from __future__ import annotations

import json
import statistics
import sys
import tarfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT = [REPO / "benchmarks" / "searches_thirteenth_session.tgz", REPO / "benchmarks" / "searches_fourteenth_session.tgz"]
MODELS = ("none", "quad", "quad_low")


def progress_factor(x: float, model: str) -> float:
    """Samples needed relative to the optimal rate's (>= 1)."""
    if model == "none":
        return 1.0
    if model == "quad_low":
        x = min(x, 1.0)
    x = min(max(x, 0.05), 1.9)
    return 1.0 / (2 * x - x * x)


def searches(paths: list[Path]):
    """(name, pareto dict, short-trial records) of every stored search with a confirmation."""
    for path in paths:
        with tarfile.open(path) as tar:
            names = tar.getnames()
            for name in sorted(n for n in names if n.endswith("/pareto.json")):
                folder = name.rsplit("/", 1)[0]
                pareto = json.load(tar.extractfile(name))
                if "confirmation" not in pareto or f"{folder}/trials.jsonl" not in names:
                    continue
                lines = tar.extractfile(f"{folder}/trials.jsonl").read().decode().splitlines()
                yield f"{path.name}:{folder}", pareto, [json.loads(line) for line in lines if line.strip()]


def main() -> None:
    paths = [Path(p) for p in sys.argv[1:]] or DEFAULT
    ratios: dict[str, list[float]] = {m: [] for m in MODELS}
    reproduced, n_search = [], 0
    print(f"{'search':58s} {'batch':>5s} {'lr':>8s} {'x':>5s} " + " ".join(f"{m:>8s}" for m in MODELS))
    for name, pareto, records in searches(paths):
        conf = pareto["confirmation"]
        pred = conf["prediction"]
        b_noise = pred.get("grad_noise_scale")
        if not b_noise:
            continue
        n_search += 1
        # the search's most accurate short trial (not a confirmation run: those carry no search row)
        short = [r for r in records if r.get("status") == "ok" and (r.get("metrics") or {}).get("val_acc") is not None
                 and not r.get("info", {}).get("confirm_of")]
        best = max(short, key=lambda r: r["metrics"]["val_acc"])
        eps_max = best["params"]["lr"] * (1 + b_noise / best["params"]["batch_size"])
        shipped = {x["trial_id"]: x for x in pred["confirmed"]}
        cands = []
        for c in conf["candidates"]:
            b, lr = c["params"]["batch_size"], c["params"]["lr"]
            p = shipped.get(c["trial_id"], {})
            cands.append({"id": c["trial_id"], "b": b, "lr": lr, "s": c.get("samples_to_target"),
                          "pred": p.get("predicted_s"), "measured": p.get("measured_s"),
                          "x": lr / (eps_max / (1 + b_noise / b))})
        for c in cands:
            others = [o for o in cands if o["id"] != c["id"] and o["s"]]
            if not others or not c["pred"] or not c["measured"]:
                continue
            e_plain = statistics.median(o["s"] / (1 + o["b"] / b_noise) for o in others)
            sps = e_plain * (1 + c["b"] / b_noise) / c["pred"]  # the throughput the shipped prediction used
            row = {}
            for m in MODELS:
                e = statistics.median(o["s"] / ((1 + o["b"] / b_noise) * progress_factor(o["x"], m)) for o in others)
                row[m] = e * (1 + c["b"] / b_noise) * progress_factor(c["x"], m) / sps / c["measured"]
                ratios[m].append(row[m])
            reproduced.append(abs(row["none"] - c["pred"] / c["measured"]) < 1e-9)
            print(f"{name[-58:]:58s} {c['b']:5d} {c['lr']:8.3g} {c['x']:5.2f} " + " ".join(f"{row[m]:8.2f}" for m in MODELS))
    if not ratios["none"]:
        sys.exit("no stored search with a confirmation and a noise scale in: " + ", ".join(map(str, paths)))
    print(f"\n{n_search} searches, {len(ratios['none'])} confirmed candidates; the shipped model reproduced "
          f"pareto.json's prediction for {sum(reproduced)} of {len(reproduced)}")
    within = {m: sum(1 for r in v if 1 / 1.5 <= r <= 1.5) for m, v in ratios.items()}
    for m, v in ratios.items():
        print(f"  {m:8s} predicted / measured within 1.5x: {within[m]} of {len(v)}; "
              f"median {statistics.median(v):.2f}, range {min(v):.2f}-{max(v):.2f}")
    n = len(ratios["none"])
    print("RESULT " + " ".join(f"{m}_within_1_5x={within[m] / n:.3f}" for m in MODELS) + f" candidates={n}")


if __name__ == "__main__":
    main()
