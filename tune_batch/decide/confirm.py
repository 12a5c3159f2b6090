"""Confirmation at length: the front's most promising configs trained again for longer, with
validation along the way, and what their curves say: time to the target accuracy, the ranks of
the short and the long budget, and their agreement (its text is ``output.text.confirm_lines``).
Which configs, with which seeds, is planned from the report, never by measurement; the runs
are ``trial.curve.confirm_run`` on either backend."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from tune_batch.analysis.noise import pooled_sd, slower_beyond_noise, t95
from tune_batch.analysis.points import StepMeans, one_worker_sps, scaling_efficiency
from tune_batch.config import Config
from tune_batch.config.metrics import reached
from tune_batch.decide.horizon import HORIZON, horizon_config, is_horizon
from tune_batch.decide.predict import estimate_time, predict_time, samples_factor, search_noise_scale, usable_prediction
from tune_batch.decide.target import default_target, level
from tune_batch.store.jobs import Job, JobKind
from tune_batch.store.records import Params, Status, TrialResult

#: ``confirm_of`` of the baseline's confirmation runs (``baseline:``; trial ids ``baseline-c<seed>``).
BASELINE = "baseline"


def jobs(config: Config, candidates: Sequence[TrialResult], done: set[object], baseline: Params | None = None,
         rung: int = 1, samples: int | None = None, horizon: bool = False) -> list[Job]:
    """``confirm.seeds`` runs of each candidate and of the ``baseline`` (confirm_of "baseline"),
    seed-major (every config once, then again: slow drift of a shared machine spreads over all of
    them), those in ``done`` left out. ``horizon``: the first candidate's horizon-scaled config
    (``confirm.horizon_beta``, where set) beside it."""
    out = []
    tail = f"r{rung}" if rung > 1 else ""  # an escalation round's runs: <trial>c<seed>r<round>
    lower = horizon_config(config, candidates[0]) if horizon and candidates else None
    for k in range(config.confirm.seeds):
        seed = config.search.seed + k
        for r in candidates:  # a data-parallel config as a worker group, on the path of its trials
            job = Job(f"{r.trial_id}c{seed}{tail}", JobKind.CONFIRM, r.trial_id, r.params, seed, rung, samples)
            if job.trial_id not in done:
                out.append(job)
            if lower is not None and r is candidates[0]:
                of = f"{r.trial_id}{HORIZON}"
                job = Job(f"{of}c{seed}{tail}", JobKind.CONFIRM, of, lower, seed, rung, samples)
                if job.trial_id not in done:
                    out.append(job)
        if baseline is not None and candidates and f"{BASELINE}-c{seed}{tail}" not in done:
            out.append(Job(f"{BASELINE}-c{seed}{tail}", JobKind.CONFIRM, BASELINE, baseline, seed, rung, samples))
    return out


def last_round(runs: Sequence[TrialResult]) -> list[TrialResult]:
    """The confirmation runs of the latest escalation round among ``runs`` (all of them when
    there was none): the round the decision reads."""
    rung = max((r.info.rung or 1 for r in runs), default=1)
    return [r for r in runs if (r.info.rung or 1) == rung]


def step_before(curve: Sequence[Sequence[float]], target: float | None, maximize: bool = True) -> float | None:
    """Training seconds between the validation that first reached ``target`` and the one before
    it: how finely the curve resolves the time to target."""
    prev = 0.0
    for _samples, train_s, acc, *_ in curve if target is not None else []:
        if reached(acc, target, maximize):
            return train_s - prev
        prev = train_s
    return None


def first_reach(curve: Sequence[Sequence[float]], target: float | None,
                maximize: bool = True) -> tuple[float, float] | None:
    """(training seconds, samples) at the first validation at or past ``target`` (at or above it
    when ``maximize``, at or below it otherwise), or None."""
    if target is None:
        return None
    for samples, train_s, acc, *_ in curve:
        if reached(acc, target, maximize):
            return train_s, samples
    return None


def reach_times(runs: Sequence[TrialResult], target: float | None, maximize: bool = True) -> list[float]:
    """Training seconds to ``target`` of each of ``runs`` whose curve reached it (none without a target)."""
    hits = (first_reach(r.info.curve or [], target, maximize) for r in runs)
    return [h[0] for h in hits if h is not None]


def kendall_tau(a: Sequence[float], b: Sequence[float]) -> float | None:
    """Kendall's tau-a between two rankings of the same items (None with fewer than 2)."""
    n = len(a)
    if n < 2:
        return None
    s = 0
    for i in range(n):
        for j in range(i + 1, n):
            s += int(math.copysign(1, (a[i] - a[j]) * (b[i] - b[j]))) if (a[i] - a[j]) * (b[i] - b[j]) else 0
    return s / (n * (n - 1) / 2)


@dataclass(frozen=True)
class Candidate:
    """A confirmed config: its runs, the best value of the target metric reached (``best_acc``:
    val_acc unless the confirmation reads another metric), and time/samples to the target."""

    trial: TrialResult
    runs: tuple[TrialResult, ...]
    short_rank: int
    best_acc: float
    final_acc: float
    time_to_target_s: float | None  # median over the runs that reached it; None: none did
    samples_to_target: float | None
    reached: int  # runs that reached the target
    long_rank: int = 0
    # the blend of the runs' time to target and the noise scale's prediction (estimate_time), or the runs' alone
    estimate_s: float | None = None
    predicted: bool = False  # estimate_s holds a prediction (there is one, not from disturbed readings only)

    @property
    def grows(self) -> bool:
        """Whether memory grew beyond noise along one of its runs (``info.memory_growth``: a leak?)."""
        return any((r.info.memory_growth or {}).get("flagged") for r in self.runs)

    @property
    def device_seconds_to_target(self) -> float | None:
        """Time to target x the devices it kept busy (``num_gpus``): what the run costs."""
        t = self.time_to_target_s
        return None if t is None else t * self.trial.params.num_gpus

    def ranked_by(self, devices: bool, blend: bool = True) -> float | None:
        """What the recommendation ranks it by: the estimated wall seconds (estimate_s; its runs'
        time alone without one or where not ``blend``), x num_gpus when ``devices``."""
        t = self.estimate_s if blend and self.estimate_s is not None else self.time_to_target_s
        return None if t is None else t * (self.trial.params.num_gpus if devices else 1)

    def to_dict(self, metric: str = "val_acc") -> dict[str, Any]:
        return {"trial_id": self.trial.trial_id, "params": self.trial.params.to_dict(),
                "num_gpus": self.trial.params.num_gpus, "device_seconds_to_target": self.device_seconds_to_target,
                "short_rank": self.short_rank, "long_rank": self.long_rank, "time_to_target_s": self.time_to_target_s,
                "estimate_s": self.estimate_s, "predicted": self.predicted,
                "samples_to_target": self.samples_to_target, "reached_target": f"{self.reached} of {len(self.runs)}",
                f"best_{metric}": self.best_acc, f"final_{metric}": self.final_acc,
                "runs": [r.trial_id for r in self.runs],
                "curves": [{"seed": r.info.seed, "start": r.info.start_value, "samples": [c[0] for c in cv],
                            "train_s": [c[1] for c in cv], metric: [c[2] for c in cv]}
                           for r in self.runs for cv in [r.info.curve or []]]}


@dataclass(frozen=True)
class Confirmation:
    """What the confirmation runs say. ``candidates`` in long-budget rank order."""

    target: float | None  # None: nothing was learned in the confirmation runs either
    target_how: str
    train_samples: float
    candidates: list[Candidate]
    agreement: float | None  # Kendall's tau between short and long ranks
    failed: list[TrialResult] = field(default_factory=list)
    noise_scale: float | None = None  # the search's B_noise (search_noise_scale), for the prediction
    noise_scale_trials: int = 0
    steps: StepMeans = field(default_factory=StepMeans)  # of the short runs: the samples/s a prediction divides by
    short_runs: tuple[TrialResult, ...] = ()  # the search's trials and repeats (their scaling efficiency)
    metric: str = "val_acc"  # what the curves hold and the target is on
    maximize: bool = True
    excluded: dict[Any, str] = field(default_factory=dict)  # trial id -> why it cannot be recommended (memory)
    at_length: bool = False  # goal: a run length and no target: the best metric at that length decides
    own_run: bool = False  # the user said how long their run is (goal.train_samples / goal.epochs)
    rung: int = 1  # the escalation round its runs come from (1: no escalation)
    replaced: dict[Any, Any] = field(default_factory=dict)  # trial id that did not reach -> its replacement's
    epochs: float | None = None  # the length as given in passes over the training set (goal.epochs, confirm.epochs)
    blend: bool = True  # confirm.rank_by "blend": the prediction may weigh in (see best_by)

    @property
    def best(self) -> Candidate | None:
        """The candidate with the shortest estimated time to the target (estimate_s), of those whose
        runs reached it and that are not ``excluded``; one whose memory grew only when all did;
        ties: the long-budget rank."""
        return self.best_by(devices=False)

    def best_by(self, devices: bool) -> Candidate | None:
        """The candidate soonest to the target in wall seconds, or in device-seconds (wall x
        num_gpus) when ``devices``, of those whose runs reached it and that are not ``excluded`` (too
        close to the memory limit); one whose memory grew only when all did; ties: the long-budget rank."""
        if self.at_length:
            return self.best_at_length(devices)
        steady = self.contenders(devices)
        blend = self.ranked_with_predictions(steady)
        return min(steady, key=lambda c: (c.ranked_by(devices, blend) or 0.0, c.long_rank), default=None)

    def contenders(self, devices: bool = False) -> list[Candidate]:
        """The candidates the time-to-target rule chooses among: those whose runs reached the
        target, not ``excluded``, one whose memory grew only when all did, and none whose runs were
        slower than another's beyond their spread."""
        hit = [c for c in self.candidates if c.time_to_target_s is not None and c.trial.trial_id not in self.excluded]
        steady = [c for c in hit if not c.grows] or hit
        # the prediction weighs in only where the runs leave the order open: a candidate whose runs
        # reached the target later than another's beyond their spread is not ranked ahead of it
        slower = slower_beyond_noise({c.trial.trial_id: self.run_times(c, devices) for c in steady},
                                     {c.trial.trial_id: c.trial.params.num_gpus for c in steady})
        return [c for c in steady if c.trial.trial_id not in slower] or steady

    def unpredicted(self, among: Sequence[Candidate] | None = None) -> list[Candidate]:
        """The candidates (of ``among``, default all) that reached the target without a usable
        prediction. While any of those competing does, every one is ranked by its runs alone: a
        blend for some and not others compares unlike readings (a one-worker candidate whose
        prediction was 2.8x its runs lost to a worker group that had none and that its runs beat)."""
        return [c for c in (self.candidates if among is None else among)
                if c.time_to_target_s is not None and not c.predicted]

    def ranked_with_predictions(self, among: Sequence[Candidate] | None = None) -> bool:
        """Whether the recommendation ranks ``among`` (default its wall-second contenders) by their estimates."""
        return self.blend and not self.at_length and not self.unpredicted(self.contenders() if among is None else among)

    def run_times(self, c: Candidate, devices: bool = False) -> list[float]:
        """Training seconds to the target of each of ``c``'s runs that reached it (x num_gpus when ``devices``)."""
        scale = c.trial.params.num_gpus if devices else 1
        return [t * scale for t in reach_times(c.runs, self.target, self.maximize)]

    def best_at_length(self, devices: bool = False) -> Candidate | None:
        """The goal's rule without a target: the candidate with the best final metric (mean over
        its runs) at the goal's length; among those within noise of it, the ones whose runs took
        the least time (x num_gpus when ``devices``), and of those the best final metric. Within
        noise: the difference of the two means inside its 95 % interval, from the runs' spread
        pooled over every candidate (a candidate's own two runs give an interval of about 9
        standard deviations, wide enough to tie a config 0.17 below the best with it); the least
        time: not slower than another beyond the runs' pooled spread (``slower_beyond_noise``:
        configs of one step take the same time, and which of them ran luckier is no reason to
        prefer it). Not ``excluded``; one whose memory grew only when all did; candidates without
        a finite final value are out."""
        pool = [c for c in self.candidates if c.trial.trial_id not in self.excluded]
        pool = [c for c in pool if not c.grows] or pool
        finals = {c.trial.trial_id: [v for v in ((r.info.curve or [[0, 0, math.nan]])[-1][2] for r in c.runs)
                                     if math.isfinite(v)] for c in pool}
        pool = [c for c in pool if finals[c.trial.trial_id]]
        if not pool or self.target is None:  # nothing learned, or no run improved on its first validation
            return None
        sign = 1.0 if self.maximize else -1.0
        mean = {k: statistics.fmean(v) for k, v in finals.items() if v}
        top = max(pool, key=lambda c: sign * mean[c.trial.trial_id])
        sd, df = pooled_sd([finals[c.trial.trial_id] for c in pool])

        def within(c: Candidate) -> bool:
            a, b = finals[top.trial.trial_id], finals[c.trial.trial_id]
            gap = sign * (mean[top.trial.trial_id] - mean[c.trial.trial_id])
            return gap <= 0.0 or (sd is not None and gap <= t95(df) * sd * math.sqrt(1 / len(a) + 1 / len(b)))

        def walls(c: Candidate) -> list[float]:
            return [(r.info.curve or [[0, math.inf]])[-1][1] * (c.trial.params.num_gpus if devices else 1)
                    for r in c.runs]

        near = [c for c in pool if within(c)]
        slow = slower_beyond_noise({c.trial.trial_id: walls(c) for c in near},
                                   {c.trial.trial_id: c.trial.params.num_gpus for c in near})
        quick = [c for c in near if c.trial.trial_id not in slow] or near
        return min(quick, key=lambda c: (-sign * mean[c.trial.trial_id], statistics.median(walls(c)), c.long_rank))

    def gpu_counts(self) -> list[dict[str, Any]]:
        """Per GPU count confirmed: its soonest candidate to the target (wall, device-seconds), its trials'
        scaling efficiency (samples/s per device over one worker's at the per-worker batch: no_one_worker_at)."""
        out, one = [], one_worker_sps(self.short_runs)
        for n in sorted({c.trial.params.num_gpus for c in self.candidates}):
            mine = [c for c in self.candidates if c.trial.params.num_gpus == n]
            reached = [c for c in mine if c.time_to_target_s is not None]
            fastest = min(reached, key=lambda c: c.time_to_target_s or 0.0, default=None)
            # against every one-worker run (a group trial written before them has no field of its own)
            groups = [r for r in self.short_runs if r.params.num_gpus == n and r.status is Status.OK]
            effs = [e for e in (scaling_efficiency(r, one) for r in groups) if e is not None]
            missing = sorted({r.params.per_worker_batch for r in groups} - set(one)) if n > 1 and not effs else []
            values = [v for r in groups if (v := r.metrics.value(self.metric)) is not None and math.isfinite(v)]
            out.append({"num_gpus": n, "candidates": len(mine), "reached": len(reached),
                        # the best reading of its trials at the short budget: whether the search tried a good config
                        f"best_trial_{self.metric}": (max if self.maximize else min)(values, default=None),
                        "trial_id": fastest.trial.trial_id if fastest else None,
                        "time_to_target_s": fastest.time_to_target_s if fastest else None,
                        "device_seconds_to_target": fastest.device_seconds_to_target if fastest else None,
                        "scaling_efficiency": 1.0 if n == 1 else (statistics.median(effs) if effs else None),
                        "scaling_efficiency_trials": len(effs), "no_one_worker_at": missing})
        return out

    def stopped_at_target(self) -> tuple[int, int]:
        """(runs that ended at the given target before their length, runs)."""
        runs = [r for c in self.candidates for r in c.runs]
        return sum(bool(r.info.stopped_at_target) for r in runs), len(runs)

    def to_dict(self, others: Sequence[TrialResult] = ()) -> dict[str, Any]:
        return {"prediction": predictions(self, others), "target_metric": self.metric, "target_how": self.target_how,
                "target_direction": "maximize" if self.maximize else "minimize", "target": self.target,
                "train_samples": self.train_samples, "epochs": self.epochs, "agreement_kendall_tau": self.agreement,
                "runs_stopped_at_target": self.stopped_at_target()[0],
                "recommended_trial_id": self.best.trial.trial_id if self.best else None,
                "rule": "best_at_length" if self.at_length else "time_to_target", "escalation_round": self.rung,
                "ranked_with_predictions": self.ranked_with_predictions(),
                "length_from": "goal" if self.own_run else "confirm",
                "recommended_trial_id_device_seconds": (self.best_by(devices=True).trial.trial_id
                                                        if self.best_by(devices=True) else None),
                "gpu_counts": self.gpu_counts(), "replaced": [{"trial_id": k, "replaced_by": v}
                                                             for k, v in self.replaced.items()],
                "candidates": [c.to_dict(self.metric) for c in self.candidates],
                "failed_runs": [{"trial_id": r.trial_id, "status": r.status.value, "reason": r.reason}
                                for r in self.failed]}


def confirm(config: Config, candidates: Sequence[TrialResult], runs: Sequence[TrialResult],
            short_runs: Sequence[TrialResult] = ()) -> Confirmation | None:
    """The confirmation of ``candidates`` (in short-budget rank order) from their ``runs``;
    None when no run finished. ``short_runs``: the search's trials and repeats, whose noise
    scales the prediction pools."""
    by: dict[Any, list[TrialResult]] = {}
    failed = []
    for r in runs:
        if r.status is Status.OK and r.info.curve:
            by.setdefault(r.info.confirm_of, []).append(r)
        else:
            failed.append(r)
    ranked = list(enumerate((c for c in candidates if c.trial_id in by), start=1))
    if not ranked:
        return None
    name, direction = config.confirm_metric or ("val_acc", "maximize")
    up = direction == "maximize"
    best_of = max if up else min
    curves = [r.info.curve or [] for _, t in ranked for r in by[t.trial_id]]
    best_any = best_of(c[2] for cv in curves for c in cv)
    # each candidate's level: the median of its runs' (candidates with a run that has none are out)
    per_run = [[level(r.info.curve or []) for r in by[t.trial_id]] for _, t in ranked]
    levels = [statistics.median(lv) for lv in per_run if all(map(math.isfinite, lv))]
    target, how = default_target(config, name, up, best_any, best_of(levels) if levels else None,
                                 [cv[0][2] for cv in curves if cv], [r for rs in by.values() for r in rs])
    out = []
    for short_rank, t in ranked:
        rs = by[t.trial_id]
        hits = ([h for h in (first_reach(r.info.curve or [], target, up) for r in rs) if h is not None]
                if target is not None else [])
        # a run that never reached the target counts as not reaching it: the median is over all runs
        # only when most reached it
        ttt = statistics.median(h[0] for h in hits) if hits and 2 * len(hits) > len(rs) else None
        stt = statistics.median(h[1] for h in hits) if ttt is not None else None
        out.append(Candidate(t, tuple(rs), short_rank, best_of(p[2] for r in rs for p in r.info.curve or []),
                             statistics.mean((r.info.curve or [[0, 0, 0]])[-1][2] for r in rs), ttt, stt, len(hits)))
    out.sort(key=lambda x: (x.time_to_target_s is None, x.time_to_target_s or 0.0, -x.best_acc if up else x.best_acc))
    out = [Candidate(**{**x.__dict__, "long_rank": i + 1}) for i, x in enumerate(out)]
    measured = [x for x in out if not is_horizon(x.trial)]  # the ranks' agreement: configs a short trial measured
    tau = kendall_tau([x.short_rank for x in measured], [x.long_rank for x in measured])
    length = statistics.median(r.info.planned_samples or r.info.train_samples_done or 0
                               for rs in by.values() for r in rs)
    steps = StepMeans()
    for r in short_runs:
        steps.observe(r)
    at_length = config.goal is not None and config.goal.length_given and config.goal.target is None
    rung = max((r.info.rung or 1 for r in runs), default=1)
    conf = Confirmation(target, how, length, out, tau, failed, *search_noise_scale(short_runs), steps,
                        tuple(short_runs), name, up, at_length=at_length, rung=rung,
                        own_run=config.goal is not None and config.goal.length_given,
                        epochs=config.confirm_epochs if rung == 1 else None, blend=config.confirm.rank_by == "blend")
    predicted = {x["trial_id"]: x for x in predictions(conf, [])["confirmed"]}
    return replace(conf, candidates=[
        replace(x, estimate_s=estimate_time(x.time_to_target_s, predicted[x.trial.trial_id]),
                predicted=usable_prediction(x.time_to_target_s, predicted[x.trial.trial_id]))
        for x in out])


def _e_min(c: Candidate, b_noise: float | None) -> float | None:
    """The fewest samples to the target implied by a confirmed candidate (McCandlish et al.:
    samples = E_min x (1 + B / B_noise)), from its samples to target and the search's B_noise."""
    if c.samples_to_target is None or not b_noise:
        return None
    return c.samples_to_target / samples_factor(b_noise, c.trial.params.batch_size)


def predictions(conf: Confirmation, others: Sequence[TrialResult]) -> dict[str, Any]:
    """Time to target predicted from the gradient noise scale: for each confirmed candidate from
    the other candidates (leave one out: predicted against measured), and for ``others`` (e.g.
    the unconfirmed front) from all of them."""
    b_noise = conf.noise_scale

    def sps(t: TrialResult) -> float | None:  # its step's mean over the short runs, else its own reading
        return conf.steps.told(t).metrics.samples_per_s

    e = {c.trial.trial_id: _e_min(c, b_noise) for c in conf.candidates}
    checked = []
    for c in conf.candidates:
        rest = [v for k, v in e.items() if k != c.trial.trial_id and v is not None]
        pred = predict_time(c.trial, statistics.median(rest), b_noise, sps(c.trial)) if rest else None
        # its step's only throughput readings were taken while another process used the machine
        disturbed = conf.steps.only_disturbed(c.trial)
        checked.append({"trial_id": c.trial.trial_id, "predicted_s": pred, "measured_s": c.time_to_target_s,
                        "ratio": pred / c.time_to_target_s if pred and c.time_to_target_s else None,
                        "disturbed_throughput": disturbed})
    every = [v for v in e.values() if v is not None]
    confirmed = {c.trial.trial_id for c in conf.candidates}
    unconfirmed = {str(t.trial_id): predict_time(t, statistics.median(every), b_noise, sps(t)) for t in others
                   if t.trial_id not in confirmed} if every else {}
    ratios = [x["ratio"] for x in checked if x["ratio"] is not None]
    return {"confirmed": checked, "unconfirmed": unconfirmed, "grad_noise_scale": b_noise,
            "grad_noise_scale_trials": conf.noise_scale_trials,
            "within_1_5x": f"{sum(1 for r in ratios if 1 / 1.5 <= r <= 1.5)} of {len(ratios)}",
            "model": "samples to target = E_min x (1 + batch_size / B_noise); B_noise = mean tr(Sigma) / mean |G|^2 "
                     "over the search's trials; E_min from the other confirmed candidates (median); "
                     "time = samples / samples_per_s of its step (mean over the search's runs of its batch size, "
                     "any lr)"}
