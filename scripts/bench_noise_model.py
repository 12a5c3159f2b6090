"""Does one val_acc noise level pooled over a search's configs fit each config, or should each
config's own spread count? A check on stored searches, no training (seconds).

A search gives every config the same val_acc noise on the log-odds scale: the run-to-run
variance pooled over the configs it measured with several seeds (``analysis.points.noise_levels``).
Configs differ in spread: one that learns on some seeds and not on others (0.21-0.53 over three
seeds) has a log-odds variance tens of times that of a settled one (0.735-0.752), and a pooled
mean of two such configs and one settled one is mostly the noisy ones'. The wide interval then
lets fast configs near chance dominate accurate ones off the front.

Three models of a config's variance on the log-odds scale, from the search's repeated configs:
- ``pooled`` (as shipped): the degrees-of-freedom-weighted mean of their variances;
- ``geometric``: the mean of their log variances, each corrected for its bias under normal
  noise (Smyth 2004, eq. 9 with d0 infinite), read back: a typical config's variance, moved
  less by one or two unstable configs;
- ``moderated``: empirical Bayes (Smyth 2004, limma): the prior variance s0^2 and its degrees of
  freedom d0 estimated from the spread of the log variances; a config with its own runs gets
  (d0 s0^2 + d s^2) / (d0 + d) on d0 + d degrees of freedom, one without gets s0^2 on d0.

Check: for each config measured with k >= 3 seeds, each run is held out in turn and predicted
from the config's other k - 1 runs: centre their mean log-odds, half-width
t95(df) x s x sqrt(1 + 1 / (k - 1)), s from the model fitted on the search's other repeated
configs (and, for ``moderated``, the config's own other runs). Scored in val_acc units after
reading the interval back: coverage per band of the config's mean (a calibrated model covers
95 % in every band), and the mean interval score (Gneiting and Raftery 2007, alpha 0.05: the
width plus 40 x how far outside the run fell; lower is better, it rewards narrow intervals that
still cover). Also printed per model: how many searches have their most accurate config off the
noise-aware front by more than 0.1 in val_acc (the product's build_report with that model).

Sets, fixed before any model was scored: development = benchmarks/confirmed_searches.tgz (75
searches of the two development workloads); held out = the stored default searches of the
held-out workloads with val_acc (gru_majority, mlp_adamw_images goal, sgd_mlp_images,
waves_conv1d and its fixed seed 4: 31 searches), on which no noise model was ever scored (the
count of accurate configs off the front was read on them once, which is why this was asked).
Criterion, written before the first run: the model with the lowest mean interval score on the
development set whose worst-band coverage error there is at most 0.05 above ``pooled``'s is the
candidate; it replaces ``pooled`` if on the held-out set its mean interval score is lower than
``pooled``'s with the 95 % bootstrap interval of the difference (searches resampled) below 0,
and its worst-band coverage error there is at most 0.05 above ``pooled``'s.

Usage: python scripts/bench_noise_model.py
Ends with a RESULT line for the held-out set.
"""

from __future__ import annotations

import argparse
import functools
import math
import random
import statistics
import sys
import tarfile
import tempfile
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tune_batch.analysis import noise as nz  # noqa: E402
from tune_batch.analysis.points import from_share_scale, share_scale  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
DEVELOPMENT = [REPO / "benchmarks" / "confirmed_searches.tgz"]
HELD_OUT = [REPO / "benchmarks" / "heldout" / f for f in
            ("gru_majority_searches.tgz", "mlp_adamw_images_goal_searches.tgz", "sgd_mlp_images_searches.tgz",
             "waves_conv1d_searches.tgz", "fixed/waves_conv1d_fixed_search4.tgz")]
BANDS = ((0.0, 0.5, "< 0.50"), (0.5, 0.8, "0.50-0.80"), (0.8, 0.95, "0.80-0.95"), (0.95, 1.01, ">= 0.95"))
MODELS = ("pooled", "geometric", "moderated")
ALPHA = 0.05


def repeated_configs(run: Path) -> list[list[float]]:
    """val_acc of each config measured with several seeds (searched trial and its repeats)."""
    from tune_batch.analysis.points import group_runs
    from tune_batch.analysis.report import latest_per_trial
    from tune_batch.store.rundir import load_records

    recs, _ = load_records(run / "trials.jsonl")
    latest = [r for r in latest_per_trial(recs) if r.info.confirm_of is None]
    out = []
    for runs in group_runs(latest).values():
        vals = [v for r in runs if (v := r.metrics.val_acc) is not None and math.isfinite(v)]
        if len(vals) >= 2:
            out.append(vals)
    return out


def spread(vals: list[float]) -> tuple[float, int]:
    """(variance on the log-odds scale, degrees of freedom) of one config's runs."""
    x = [share_scale(v) for v in vals]
    return statistics.variance(x), len(x) - 1


def fit(model: str, others: list[tuple[float, int]], own: tuple[float, int] | None) -> tuple[float, float]:
    """(variance, degrees of freedom) a config gets under ``model``, from the other configs'
    (variance, df) and, for ``moderated``, its own."""
    df = sum(d for _, d in others)
    if model == "pooled":
        return sum(v * d for v, d in others) / df, df
    if model == "geometric":  # the prior's centre with d0 taken as infinite (Smyth 2004, eq. 9)
        e = [math.log(v) - nz.digamma(d / 2) + math.log(d / 2) for v, d in others if v > 0]
        return math.exp(statistics.fmean(e)), df
    s0, d0 = nz.variance_prior(others)
    return nz.moderated((s0, d0, df), own)


def band_of(p: float) -> int:
    return next(i for i, (lo, hi, _) in enumerate(BANDS) if lo <= p < hi)


def interval_score(lo: float, hi: float, y: float) -> float:
    return (hi - lo) + 2 / ALPHA * (max(0.0, lo - y) + max(0.0, y - hi))


def score_search(configs: list[list[float]], model: str) -> list[tuple[int, bool, float]]:
    """Per held-out run: (band, covered, interval score)."""
    out = []
    for i, vals in enumerate(configs):
        others = [spread(v) for j, v in enumerate(configs) if j != i]
        if len(vals) < 3 or not any(v > 0 for v, _ in others):
            continue
        b = band_of(statistics.fmean(vals))
        for k in range(len(vals)):
            rest = vals[:k] + vals[k + 1:]
            var, df = fit(model, others, spread(rest))
            centre = statistics.fmean(share_scale(v) for v in rest)
            hw = nz.t95(max(1, int(min(df, 1000)))) * math.sqrt(var) * math.sqrt(1 + 1 / len(rest))
            lo, hi = from_share_scale(centre - hw), from_share_scale(centre + hw)
            out.append((b, lo <= vals[k] <= hi, interval_score(lo, hi, vals[k])))
    return out


def off_front(runs: list[Path], model: str) -> list[float] | None:
    """Per search: how far the most accurate config's val_acc lies above the front's most
    accurate (0 when it is on the front), with ``model`` in the product's build_report; None for a
    model the product does not have."""
    from tune_batch.analysis import report
    from tune_batch.analysis.points import noise_levels
    from tune_batch.store.rundir import RunDir

    if model not in ("pooled", "moderated"):
        return None
    out = []
    saved = report.noise_levels
    report.noise_levels = functools.partial(noise_levels, share_model=model)
    try:
        for run in runs:
            rd = RunDir(run)
            recs, _ = rd.records()
            rep = report.build_report(rd.load_config(), recs)
            accs = [p.mean["val_acc"] for p in rep.points.values() if "val_acc" in p.mean]
            front = [rep.points[t.trial_id].mean["val_acc"] for t in rep.front if t.trial_id in rep.points]
            out.append(max(accs) - max(front) if accs and front else 0.0)
    finally:
        report.noise_levels = saved
    return out


def bootstrap_diff(per_search: list[tuple[list[float], list[float]]], seed: int = 0, n: int = 2000):
    """Mean interval score difference (model - pooled) over held-out runs and its 95 % bootstrap
    interval, resampling searches."""
    rng = random.Random(seed)
    pairs = [(a, b) for a, b in per_search if a]

    def mean_diff(sample):
        num = sum(sum(x - y for x, y in zip(a, b)) for a, b in sample)
        den = sum(len(a) for a, _ in sample)
        return num / den if den else 0.0

    est = mean_diff(pairs)
    boots = sorted(mean_diff([rng.choice(pairs) for _ in pairs]) for _ in range(n))
    return est, boots[int(0.025 * n)], boots[int(0.975 * n) - 1]


def score_set(name: str, runs: list[Path]) -> dict:
    searches = [repeated_configs(r) for r in runs]
    n_cfg = sum(1 for s in searches for v in s if len(v) >= 3)
    print(f"\n== {name}: {len(runs)} searches, {n_cfg} configs measured with 3+ seeds ==")
    print(f"{'model':<11}" + "".join(f"{band:>22}" for *_, band in BANDS)
          + f"{'worst |cov-0.95|':>18}{'interval score':>16}{'acc. off front >0.1':>21}")
    res: dict = {}
    per_model_search = {}
    for model in MODELS:
        per_search = [score_search(s, model) for s in searches]
        per_model_search[model] = [[x[2] for x in ps] for ps in per_search]
        flat = [x for ps in per_search for x in ps]
        cells, worst = [], 0.0
        for b in range(len(BANDS)):
            hits = [c for bb, c, _ in flat if bb == b]
            cov = sum(hits) / len(hits) if hits else float("nan")
            if hits:
                worst = max(worst, abs(cov - 0.95))
            cells.append(f"{cov:6.1%} of {len(hits):>4}")
        mis = statistics.fmean(x[2] for x in flat)
        gaps = off_front(runs, model)
        n_off = sum(g > 0.1 for g in gaps) if gaps is not None else None
        print(f"{model:<11}" + "".join(f"{c:>22}" for c in cells) + f"{worst:>18.3f}{mis:>16.4f}"
              + f"{'n/a' if n_off is None else n_off:>21}")
        res[model] = {"worst": worst, "is": mis, "off": n_off}
    for model in MODELS[1:]:
        est, lo, hi = bootstrap_diff(list(zip(per_model_search[model], per_model_search["pooled"])))
        res[model]["diff"] = (est, lo, hi)
        print(f"  {model} - pooled, mean interval score: {est:+.4f} "
              f"[95 % bootstrap over searches {lo:+.4f}, {hi:+.4f}]")
    return res


def extract(archives: list[Path], into: Path) -> list[Path]:
    for k, a in enumerate(archives):
        with tarfile.open(a) as tar:
            tar.extractall(into / str(k), filter="data")
    return sorted(p.parent for p in into.rglob("trials.jsonl"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.parse_args()
    warnings.filterwarnings("ignore")
    with tempfile.TemporaryDirectory() as tmp:
        dev = score_set("development", extract(DEVELOPMENT, Path(tmp) / "dev"))
        held = score_set("held out", extract(HELD_OUT, Path(tmp) / "held"))
    ok = [m for m in MODELS[1:] if dev[m]["worst"] <= dev["pooled"]["worst"] + 0.05]
    cand = min(ok, key=lambda m: dev[m]["is"], default=None)
    if cand is not None and dev[cand]["is"] >= dev["pooled"]["is"]:
        cand = None
    verdict = "pooled stays"
    if cand is not None:
        _, _, hi = held[cand]["diff"]
        passes = hi < 0 and held[cand]["worst"] <= held["pooled"]["worst"] + 0.05
        verdict = f"{cand} {'replaces pooled' if passes else 'does not pass on the held-out set: pooled stays'}"
    print(f"\ncandidate from the development set: {cand}; {verdict}")
    h = held
    figures = " ".join(f"heldout_{k}_{m}={h[m][key]:{fmt}}" for m in MODELS
                       for k, key, fmt in (("is", "is", ".4f"), ("worst_cov", "worst", ".3f")))
    offs = " ".join(f"heldout_off_front_{m}={h[m]['off']}" for m in MODELS if h[m]["off"] is not None)
    print(f"RESULT candidate={cand} {figures} {offs} verdict={'pooled' if 'stays' in verdict else cand}")

if __name__ == "__main__":
    main()
