"""How much does the pick among confirmed candidates cost? Replayed on stored searches.

``scripts/bench_decision.py`` trains every confirmed candidate of each search 5 times with fresh
seeds beside the grid's best config, and prints the medians ("medians of the confirmed"). The
searches themselves (config.yaml, trials.jsonl) are stored in benchmarks/searches_*.tgz. This
script re-reads each stored search with today's decision code, lets several rules pick one of
its confirmed candidates from the search's own confirmation runs, and scores each pick by the
fresh runs: regret = the pick's median time to target / the grid best's median, the same
regret bench_decision reports. No training: seconds.

Rules (each the candidate with the least value; ties by the long-budget rank):

  shipped     tune_batch's recommendation: the geometric mean of the runs' median time to target
              and the time the gradient noise scale predicts from the other candidates
  runs        the runs' median time to target alone
  predicted   the prediction alone (the runs' time where there is none)
  pooled      the runs' median samples to target / the samples/s of its step pooled over the
              search's short runs (machine jitter of the two confirmation runs taken out)
  interp      the runs' median time with the target's crossing interpolated between validations
  best        the fastest candidate by the fresh runs themselves (an oracle: what the candidates
              held, whatever the rule)

Printed per search and, per rule, the median, mean and worst regret and how many picks were
over 1.10. A rule can only pick among the candidates the search confirmed, so ``best`` bounds
every rule from below.

Usage: python scripts/retro_pick.py
"""

from __future__ import annotations

import math
import re
import statistics
import sys
import tarfile
import tempfile
import warnings
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "scripts")]
BENCH = REPO / "benchmarks"
# (archive of searches, folder pattern inside it, the bench_decision output with their fresh runs)
PAIRS = [
    ("searches_eleventh_session.tgz", "bd19-decision_{w}-seed{s}", "bench_decision_output_seeds19-21.txt"),
    ("searches_eleventh_session.tgz", "bd22-decision_{w}-seed{s}", "bench_decision_output.txt"),
    ("searches_thirteenth_session.tgz", "bd31/decision_{w}-seed{s}", "bench_decision_output_seeds31-33.txt"),
    ("searches_fourteenth_session.tgz", "decision_{w}-seed{s}", "bench_decision_output_seeds34-36.txt"),
    ("searches_eighteenth_session.tgz", "decision_{w}-seed{s}", "bench_decision_output_seeds43-45.txt"),
]
RULES = ("shipped", "runs", "predicted", "pooled", "interp", "best")
_TABLE = re.compile(r"decision_(\w+)\.json: .*grid best: batch_size")
_SEED = re.compile(r"seed (\d+): recommended .*vs grid best ([\d., ]+) s: regret [\d.]+.*"
                   r"medians of the confirmed \(batch/lr s\): (.*?), the best")


def fresh_medians(output: Path) -> list[tuple[str, int, float, dict[tuple[int, float], float]]]:
    """(workload, seed, grid best's median s, {(batch, lr): median s of the fresh runs}) per search."""
    out, workload = [], None
    for line in output.read_text().splitlines():
        m = _TABLE.match(line)
        if m:
            workload = m.group(1)
            continue
        m = _SEED.match(line)
        if m and workload:
            medians = {}
            for part in m.group(3).split(";"):
                config, seconds = part.strip().split(" ")
                b, lr = config.split("/")
                medians[(int(b), float(lr))] = float(seconds)
            out.append((workload, int(m.group(1)),
                        statistics.median(float(x) for x in m.group(2).split(",")), medians))
    return out


def fresh_time(medians: dict[tuple[int, float], float], trial) -> float | None:
    """The fresh runs' median of a trial's config (the output prints learning rates to 3 digits)."""
    b, lr = trial.params.batch_size, float(f"{trial.params.lr:.3g}")
    return next((v for (mb, mlr), v in medians.items() if mb == b and abs(math.log(mlr / lr)) < 0.02), None)


def picks(run: Path, medians: dict[tuple[int, float], float]) -> dict[str, object]:
    """The trial each rule picks among the search's confirmed candidates."""
    import yaml
    from bench_prediction import interpolated_reach

    import tune_batch.confirm as cm
    from tune_batch.config import config_from_dict
    from tune_batch.decision import decide
    from tune_batch.results import RunDir

    cfg = config_from_dict(yaml.safe_load((run / "config.yaml").read_text()))
    records, _ = RunDir(run).records()
    conf = decide(cfg, records).confirmation
    predicted = {x["trial_id"]: x["predicted_s"] for x in cm.predictions(conf, [])["confirmed"]}
    reached = [c for c in conf.candidates if c.time_to_target_s is not None]

    def interp(c) -> float | None:
        hits = [h for h in (interpolated_reach(r.info.curve or [], conf.target) for r in c.runs) if h]
        return statistics.median(h[0] for h in hits) if hits and 2 * len(hits) > len(c.runs) else None

    def pooled(c) -> float | None:
        sps = conf.steps.told(c.trial).metrics.samples_per_s
        return c.samples_to_target / sps if sps and c.samples_to_target else None

    value = {
        "shipped": lambda c: c.estimate_s or c.time_to_target_s,
        "runs": lambda c: c.time_to_target_s,
        "predicted": lambda c: predicted.get(c.trial.trial_id) or c.time_to_target_s,
        "pooled": pooled,
        "interp": interp,
        "best": lambda c: fresh_time(medians, c.trial),
    }
    out: dict[str, object] = {}
    for rule, f in value.items():
        scored = [(v, c.long_rank, c.trial) for c in reached if (v := f(c)) is not None]
        out[rule] = min(scored, key=lambda x: x[:2])[2] if scored else None
    if out["shipped"] is not (conf.best.trial if conf.best else None):
        raise SystemExit(f"{run}: the shipped rule here does not reproduce tune_batch's recommendation")
    return out


def main() -> None:
    warnings.filterwarnings("ignore")
    regrets: dict[str, list[float]] = {r: [] for r in RULES}
    searches = 0
    with tempfile.TemporaryDirectory() as tmp:
        for archive, pattern, output in PAIRS:
            if not (BENCH / archive).exists() or not (BENCH / output).exists():
                print(f"skipped {archive} / {output}: not in benchmarks/")
                continue
            with tarfile.open(BENCH / archive) as tar:
                tar.extractall(Path(tmp) / archive, filter="data")
            for workload, seed, grid_best, medians in fresh_medians(BENCH / output):
                run = Path(tmp) / archive / pattern.format(w=workload, s=seed)
                if not (run / "trials.jsonl").exists():
                    print(f"skipped {workload} seed {seed}: {run.name} not in {archive}")
                    continue
                chosen = picks(run, medians)
                searches += 1
                cells = []
                for rule in RULES:
                    t = fresh_time(medians, chosen[rule]) if chosen[rule] is not None else None
                    if t is not None:
                        regrets[rule].append(t / grid_best)
                    cells.append(f"{rule} {t / grid_best:.2f}" if t is not None else f"{rule} -")
                print(f"{workload:16s} seed {seed}: " + ", ".join(cells))
    print(f"{searches} stored searches, each pick's regret by 5 fresh runs of it and of the grid's best:")
    for rule in RULES:
        v = regrets[rule]
        if v:
            print(f"  {rule:10s} median {statistics.median(v):.3f}  mean {statistics.fmean(v):.3f}  "
                  f"worst {max(v):.2f}  over 1.10 in {sum(x > 1.10 for x in v)} of {len(v)}")
    med = {r: statistics.median(v) for r, v in regrets.items() if v}
    print("RESULT " + " ".join(f"{r}_regret_median={m:.3f}" for r, m in med.items())
          + f" shipped_regret_worst={max(regrets['shipped']):.3f} searches={searches}")


if __name__ == "__main__":
    main()
