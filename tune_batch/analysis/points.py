"""Configs and their runs: a searched trial and its repeats with other seeds, summarised as a
mean and a 95 % half-width per metric; and the search's noise level per objective.

The noise of an objective comes, in order, from configs measured more than once (pooled over
them: the run-to-run spread, seeds included), or for ``samples_per_s`` from the scatter of a
trial's timed blocks (within one window; smaller than run-to-run), or it is unknown (said so).

Throughput and the other step-work metrics (``STEP_WORK``) do not depend on the learning rate:
a step at lr 0.001 does the same arithmetic as one at lr 0.1 (scripts/bench_search.py checks
it on the five measured grids, 3 runs at each of 6 learning rates per batch size: a permutation
test within each measuring round gives p < 0.05 in 3 of 25 batch sizes, about chance). So every run of the
same step (``step_key``: batch size, GPUs, precision, micro-batching, device, the user's extra
parameters) pools into one mean: a config is not put on the front by a lucky throughput
reading, and configs that do the same work show the same samples/s.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from tune_batch.analysis.noise import t95
from tune_batch.store.records import Status, TrialResult

RELATIVE = ("samples_per_s", "model_flops_per_s", "mfu")  # noise proportional to the value
# shares in [0, 1] whose seed spread depends on their level (a config at 0.98 cannot move by
# +-0.2; one at 0.5 can): pooled on the log-odds scale, log(p / (1 - p)), and read back at each
# config's own level. Scored on stored searches against raw and arcsine pooling (2026-12-01),
# and against each config's own spread counted beside the pooled one (2026-12-05, not better):
# docs/benchmarks.md, "Retrospective studies"; README, "Reading the answer"
SHARES = ("val_acc",)
SHOWN_LEVELS = (0.5, 0.8, 0.95, 0.99)  # where a share's +- is printed (terminal, pareto.json)
# properties of the step, not of the learning rate: pooled over every run of the same step
STEP_WORK = ("samples_per_s", "model_flops_per_s", "mfu", "device_util", "peak_mem_bytes")


_SHARE_EPS = 1e-3  # a share of exactly 0 or 1 is read this far inside, so its log-odds is finite


def share_scale(p: float) -> float:
    """log(p / (1 - p)): the scale a share's seed spread is pooled on (p clipped to
    [_SHARE_EPS, 1 - _SHARE_EPS])."""
    p = min(max(p, _SHARE_EPS), 1.0 - _SHARE_EPS)
    return math.log(p / (1.0 - p))


def from_share_scale(x: float) -> float:
    """The share at ``x`` on the share scale (the inverse of ``share_scale``)."""
    return 1.0 / (1.0 + math.exp(-x))


@dataclass(frozen=True)
class NoiseLevel:
    """Half-width (95 %) of one measurement of a metric: absolute, relative to the value, or on
    the share scale (``share``: log-odds; its +- in the metric's units depends on the level)."""

    half_width: float | None
    relative: bool
    how: str
    share: bool = False

    def of(self, value: float, n: int) -> float | None:
        """The 95 % half-width of a mean of ``n`` runs at ``value``, in the metric's units (on the
        share scale: half the width of the interval read back at ``value``, within [0, 1])."""
        if self.half_width is None:
            return None
        h = self.half_width / math.sqrt(max(n, 1))
        if self.share:
            x = share_scale(value)
            return (from_share_scale(x + h) - from_share_scale(x - h)) / 2
        return h * (abs(value) if self.relative else 1.0)

    def to_dict(self) -> dict[str, object]:
        key = "relative_half_width" if self.relative else "log_odds_half_width" if self.share else "half_width"
        out: dict[str, object] = {key: self.half_width, "how": self.how}
        if self.share and self.half_width is not None:  # what one run's +- is at a few levels, in the metric's units
            out["half_width_at"] = {f"{p:g}": round(self.of(p, 1) or 0.0, 4) for p in SHOWN_LEVELS}
        return out


@dataclass(frozen=True)
class Point:
    """One config: its searched trial, the runs measured of it (ok ones), and per metric the
    mean and 95 % half-width (None where the noise is unknown)."""

    trial: TrialResult
    runs: tuple[TrialResult, ...]
    mean: dict[str, float]
    ci: dict[str, float | None]

    step_runs: int = 0  # runs pooled for the STEP_WORK metrics (this config's and its step's others)

    @property
    def n(self) -> int:
        return len(self.runs)


def group_runs(records: Sequence[TrialResult]) -> dict[object, list[TrialResult]]:
    """Searched trial id -> its ok runs (itself first, then its repeats)."""
    groups: dict[object, list[TrialResult]] = {}
    for r in records:
        if r.searched and r.status is Status.OK:
            groups.setdefault(r.trial_id, []).insert(0, r)
    for r in records:
        if r.info.repeat_of is not None and r.status is Status.OK and r.info.repeat_of in groups:
            groups[r.info.repeat_of].append(r)
    return groups


def step_key(r: TrialResult) -> tuple:
    """What decides a step's work, all but the learning rate: runs with the same key measure the
    same throughput."""
    p, i = r.params, r.info
    extra = json.dumps(p.extra, sort_keys=True, default=str) if p.extra else ""
    return (p.batch_size, p.num_gpus, extra, i.precision, i.accumulation_steps, i.micro_batch_size, i.device)


def step_groups(groups: dict[object, list[TrialResult]]) -> dict[tuple, list[TrialResult]]:
    """Step key -> the ok runs (of every config) with that step. A step's disturbed runs (another
    process used the machine during the window) are left out when it has undisturbed ones: they
    measured the contention, not the step."""
    out: dict[tuple, list[TrialResult]] = {}
    for runs in groups.values():
        for r in runs:
            out.setdefault(step_key(r), []).append(r)
    return {k: undisturbed(v) for k, v in out.items()}


def undisturbed(runs: list[TrialResult]) -> list[TrialResult]:
    """The runs of one step that measure it: the undisturbed ones, or all when none is."""
    return [r for r in runs if not r.info.disturbed] or runs


class StepMeans:
    """What the sampler is told of a trial's step-work objectives: the mean over every ok run of
    its step seen so far (searched trials and repeats; confirmation runs train differently), not
    its one reading. Replayed on the four grids measured then, this raised GP's 25 %-of-the-grid
    score on the mlp grid at 20 % over from 0.95 to 0.98 and lowered none (scripts/bench_search.py)."""

    def __init__(self) -> None:
        self._seen: dict[tuple, list[TrialResult]] = {}  # step key -> its ok runs so far

    def observe(self, r: TrialResult) -> None:
        if r.status is Status.OK and r.info.confirm_of is None:
            self._seen.setdefault(step_key(r), []).append(r)

    def only_disturbed(self, r: TrialResult) -> bool:
        """Whether every reading of ``r``'s step so far was disturbed (then they are used)."""
        runs = self._seen.get(step_key(r), [])
        return bool(runs) and all(x.info.disturbed for x in runs)

    def told(self, r: TrialResult) -> TrialResult:
        """``r`` with its step-work metrics replaced by its step's means (``r`` observed first):
        over the runs that measure the step (``undisturbed``, as the front pools them)."""
        runs = undisturbed(self._seen.get(step_key(r), [])) if r.status is Status.OK else []
        means = {m: statistics.fmean(v) for m in STEP_WORK
                 if r.metrics.value(m) is not None and (v := _values(runs, m))}
        return r.replace(metrics=r.metrics.with_(**means)) if means else r


def _values(runs: Sequence[TrialResult], metric: str) -> list[float]:
    return [v for r in runs if (v := r.metrics.value(metric)) is not None and math.isfinite(v)]


def noise_levels(groups: dict[object, list[TrialResult]], metrics: Sequence[str],
                 why_unmeasured: str = "repeats.seeds = 0") -> dict[str, NoiseLevel]:
    """Each metric's run-to-run noise, pooled over the configs (or steps) measured more than once;
    ``why_unmeasured`` says why none was where none was (no repeats, or none run yet)."""
    out = {}
    steps = step_groups(groups)
    for m in metrics:
        rel, step, share = m in RELATIVE, m in STEP_WORK, m in SHARES
        ss, df, n_groups = 0.0, 0, 0
        for runs in (steps if step else groups).values():
            vals = _values(runs, m)
            if len(vals) < 2:
                continue
            mean = statistics.fmean(vals)
            scaled = [v / mean for v in vals] if rel and mean else [share_scale(v) for v in vals] if share else vals
            ss += statistics.variance(scaled) * (len(vals) - 1)
            df += len(vals) - 1
            n_groups += 1
        if df:
            what = (f"{n_groups} step(s) measured more than once (batch sizes; any learning rate, any seed)" if step
                    else f"{n_groups} config(s) measured with several seeds")
            out[m] = NoiseLevel(t95(df) * math.sqrt(ss / df), rel, f"run-to-run spread pooled over {what}"
                                + (" on the log-odds scale" if share else ""), share)
        elif m == "samples_per_s":
            rels = [r.metrics.samples_per_s_ci / r.metrics.samples_per_s for runs in groups.values() for r in runs
                    if r.metrics.samples_per_s_ci is not None and r.metrics.samples_per_s]
            out[m] = NoiseLevel(statistics.median(rels) if rels else None, True,
                                "scatter of the timed blocks inside one window (run-to-run noise is larger): "
                                "no config was measured twice")
        else:
            out[m] = NoiseLevel(None, rel, f"unknown: no config was measured twice ({why_unmeasured})", share)
    return out


def points(groups: dict[object, list[TrialResult]], metrics: Sequence[str],
           noise: dict[str, NoiseLevel]) -> list[Point]:
    """Every searched config with an ok run (``group_runs``), in record order, with its
    statistics under ``noise``: the STEP_WORK metrics over every run of its step, the others
    over its own runs."""
    out = []
    steps = step_groups(groups)
    # a step's runs and their values, read once per step and not once per config of it: the configs of
    # one batch size share a step, and a progress line per trial made that quadratic (1000 trials: 8 s)
    by_steps: dict[tuple, tuple[list[TrialResult], dict[str, list[float]]]] = {}
    for runs in groups.values():
        mean, ci = {}, {}
        # every run of the steps this config's runs made (one step unless its runs ran on different devices)
        keys = tuple(dict.fromkeys(step_key(r) for r in runs))
        if keys not in by_steps:
            by_steps[keys] = (list({id(x): x for k in keys for x in steps[k]}.values()), {})
        same_step, step_values = by_steps[keys]
        for m in {*metrics, "samples_per_s", "val_acc", "device_util", "peak_mem_bytes"}:
            if m not in STEP_WORK:
                vals = _values(runs, m)
            elif (vals := step_values.get(m)) is None:
                vals = step_values[m] = _values(same_step, m)
            if not vals:
                continue
            mean[m] = statistics.fmean(vals)
            level = noise.get(m)
            ci[m] = level.of(mean[m], len(vals)) if level is not None else None
            if ci[m] is None and m == "samples_per_s" and len(vals) == 1:
                ci[m] = runs[0].metrics.samples_per_s_ci
        out.append(Point(runs[0], tuple(runs), mean, ci, len(same_step)))
    return out


def one_worker_sps(records: Sequence[TrialResult]) -> dict[int, float]:
    """Per batch size, the best samples/s an ``ok`` one-worker run of ``records`` reached."""
    out: dict[int, float] = {}
    for r in records:
        sps = r.metrics.samples_per_s
        if r.status is Status.OK and r.params.num_gpus == 1 and sps is not None:
            out[r.params.batch_size] = max(out.get(r.params.batch_size, 0.0), sps)
    return out


def scaling_efficiency(rec: TrialResult, one: dict[int, float]) -> float | None:
    """sps(n) / (n x sps(1)) of an ``ok`` run of n > 1 workers, against ``one`` (one_worker_sps)
    at its per-worker batch; None where that was not measured."""
    n, sps, base = rec.params.num_gpus, rec.metrics.samples_per_s, one.get(rec.params.per_worker_batch)
    if rec.status is not Status.OK or n < 2 or sps is None or not base:
        return None
    return sps / (n * base)
