"""Which front candidates are re-measured with other seeds before the recommendation is made
(policy: decided from the report, never by measurement)."""

from __future__ import annotations

import math

from tune_batch.analysis.pareto import normalise
from tune_batch.analysis.report import Report
from tune_batch.config import Config
from tune_batch.store.jobs import Job, JobKind
from tune_batch.store.records import TrialResult


def candidates(report: Report, n: int) -> list[TrialResult]:
    """Up to ``n`` configs to measure again: the recommended one, the best feasible in each
    objective, disturbed front points (their one window may not be the config's), then the
    feasible configs nearest to the ideal point (each objective scaled over the feasible range):
    a single reading cannot tell which of them is really better."""
    rec = report.recommended
    metrics, directions = report.config.metric_names, report.config.directions
    ok = [p.trial for p in report.points.values() if all(m in p.mean for m in metrics)]
    if rec is None or n <= 0 or not ok:
        return []
    scaled = normalise([[report.stat(r, m)[0] or 0.0 for m in metrics] for r in ok], directions)
    best = [ok[max(range(len(ok)), key=lambda i: scaled[i][k])] for k in range(len(metrics))]
    disturbed = [r for r in report.front if r.info.disturbed]
    near = [ok[i] for i in sorted(range(len(ok)), key=lambda i: math.dist(scaled[i], [1.0] * len(metrics)))]
    out: list[TrialResult] = []
    for r in [rec, *best, *disturbed, *near]:
        if r not in out:
            out.append(r)
    return out[:n]


def jobs(config: Config, report: Report, done: set[object]) -> list[Job]:
    """The repeats still to run: ``repeats.seeds`` other seeds of each candidate, those in
    ``done`` (trial ids already recorded) left out."""
    out = []
    for r in candidates(report, config.repeats.candidates):
        for k in range(1, config.repeats.seeds + 1):
            seed = config.search.seed + k
            job = Job(f"{r.trial_id}s{seed}", JobKind.REPEAT, r.trial_id, r.params, seed)
            if job.trial_id not in done:
                out.append(job)
    return out
