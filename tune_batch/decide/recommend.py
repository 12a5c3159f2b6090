"""The decision of a search: the report of its searched trials (and repeats), then, when the
front's candidates were trained again at length, the recommendation from those runs.

``decide`` is what the search and ``tune-batch report`` show; ``confirm_candidates`` is what
the confirmation stage trains (the same function, so a resumed search picks the same ones).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

from tune_batch.analysis.notes import Note, NoteKind
from tune_batch.analysis.pareto import Prefer, better_beyond
from tune_batch.analysis.report import Report, build_report, latest_per_trial, with_tradeoffs
from tune_batch.config import Config
from tune_batch.decide.baseline import compare, is_current, stale_ids
from tune_batch.decide.confirm import BASELINE, Confirmation, confirm, last_round
from tune_batch.decide.confirm import jobs as confirm_jobs
from tune_batch.decide.horizon import HORIZON, is_horizon, with_horizon
from tune_batch.decide.predict import samples_factor, search_noise_scale
from tune_batch.decide.repeats import candidates
from tune_batch.decide.target import default_target, level, lowest_run_levels
from tune_batch.store.records import Status, TrialResult

TIME_TO_TARGET = "time_to_target"
DEVICE_SECONDS = "device_seconds_to_target"  # the same, in wall seconds x num_gpus


#: When the short trials learned nothing, confirmation trains at least this many configs spread
#: over the learning rates (the lowest, the middle, the highest), whatever ``confirm.candidates``.
SPREAD_AT_LEAST = 3


def confirm_candidates(report: Report, n: int | None = None) -> list[TrialResult]:
    """The configs confirmation trains, for the one that reaches the target soonest: the
    recommended one, the most accurate, then those already within 0.95 (``confirm.target_fraction``
    where set) of the most accurate at the short budget, soonest to a common target first by the gradient
    noise scale's model (few samples to go, each one cheap: (1 + B / B_noise) / samples/s, the
    inverse of goodput at the search's B_noise; by samples/s alone where no trial measured a
    noise scale), then the others by the repeats' order (best in each objective, nearest to the
    ideal point). The fastest config overall is not one of them for its speed alone: at
    a learning rate too low it never reaches the target (in 7 of the decision benchmark's 18
    stored searches, before this order). Each GPU count searched that the first ``n`` leave out
    adds its own most promising config by the same rule among its configs (its most accurate):
    how many GPUs is measured at length, not assumed. When the short trials learned nothing,
    the feasible configs spread over the searched learning rates (``spread``; at least
    ``SPREAD_AT_LEAST``): which fell furthest in a short run is noise when none learned. One
    config is confirmed once: a sampler can propose the same params twice (at a bound of the
    space, e.g. lr 0.1), and a second candidate of the same config would repeat its runs seed
    for seed and leave one out of the prediction only to find itself among the others (3 of 93
    stored searches confirmed one config twice)."""
    n = report.config.confirm.candidates if n is None else n
    if n <= 0:
        return []
    if not report.learned:  # at least SPREAD_AT_LEAST rates: which one learns is the question
        m = max(n, SPREAD_AT_LEAST)
        return _every_gpu_count(spread([p.trial for p in report.points.values()], m), m)
    rest = candidates(report, len(report.points))  # the recommended one first
    promising = _Promise(report)
    ordered = _distinct([*rest[:1], *promising.first(rest), *rest])
    by_count = [r for c in sorted({r.params.num_gpus for r in rest}) for r in promising.of_count(c, rest)]
    return _every_gpu_count(ordered, n, by_count)


class _Promise:
    """How promising a config is for the confirmation's target: its short-budget value of the
    target metric (larger is better), and its seconds per unit of progress toward a common
    target as the time-to-target prediction models it: (1 + B / B_noise) samples each at the
    step's samples/s (1 / samples/s where the search measured no noise scale)."""

    def __init__(self, report: Report) -> None:
        self.report = report
        self.name, direction = report.config.confirm_metric or ("val_acc", "maximize")
        self.sign = 1.0 if direction == "maximize" else -1.0
        self.b_noise, _ = search_noise_scale([*report.records, *report.repeats])

    def acc(self, r: TrialResult) -> float | None:
        v = self.report.stat(r, self.name)[0]
        return None if v is None else self.sign * v

    def time_per_progress(self, r: TrialResult) -> float:
        sps = self.report.stat(r, "samples_per_s")[0] or 0.0
        if sps <= 0:
            return math.inf
        return (samples_factor(self.b_noise, r.params.batch_size) if self.b_noise else 1.0) / sps

    def first(self, pool: Sequence[TrialResult]) -> list[TrialResult]:
        """The most accurate of ``pool``, then those within ``confirm.target_fraction`` (0.95) of
        it (its inverse for a loss), soonest first."""
        learned = [r for r in pool if self.acc(r) is not None]
        if not learned:
            return []
        top = max(map(self.acc, learned))
        f = self.report.config.confirm.target_fraction or 0.95
        near_top = [r for r in learned if self.acc(r) >= (f * top if self.sign > 0 else top / f)]
        return [max(learned, key=self.acc), *sorted(near_top, key=self.time_per_progress)]

    def of_count(self, num_gpus: int, ordered: Sequence[TrialResult]) -> list[TrialResult]:
        """The configs of one GPU count in the order confirmation would take them for that
        count: its most accurate, those near it soonest first, then the rest in ``ordered``'s
        order (the repeats' order)."""
        pool = [r for r in ordered if r.params.num_gpus == num_gpus]
        return _distinct([*self.first(pool), *pool])


def confirm_order(report: Report) -> list[TrialResult]:
    """Every measured config in the order confirmation would take them: ``confirm_candidates``
    over all of them, then any it leaves out. The order the decision reads runs in, escalation
    halves and the second look takes its next candidate from."""
    order = confirm_candidates(report, len(report.points))
    return order + [p.trial for p in report.points.values() if p.trial not in order]


def replacements(config: Config, records: Sequence[TrialResult]) -> dict[object, TrialResult]:
    """A second look (``confirm.replace_unreached``): {trial id of a first-round candidate whose
    runs did not reach the target: the config that replaces it}, the next in the confirmation's
    order (of its GPU count where there is one), trained as long. Without it, a search that
    confirms two configs and sees one never reach the target recommends the other by default,
    however slow: the choice was among one. Planned from the first round's records only (the
    replacements' own runs never change which they are: a resumed search plans the same). Empty
    when every candidate reached it, when the target is unknown (nothing learned: escalation's
    case), when no config is left, after escalation rounds (they chose among the configs that
    learned), and with a goal length and no goal target (nothing has to be reached there)."""
    c = config.confirm
    goal = config.goal
    if config.confirm_metric is None or not c.replace_unreached:
        return {}
    if goal is not None and goal.length_given and goal.target is None:
        return {}
    latest = latest_per_trial(records)
    short = [r for r in latest if r.info.confirm_of is None]
    runs = [r for r in latest if r.info.confirm_of not in (None, BASELINE)]
    if any((r.info.rung or 1) > 1 for r in runs):
        return {}
    base = build_report(config, short)
    first = confirm_candidates(base)
    first_ids = {t.trial_id for t in first}
    if not first or confirm_jobs(config, first, {r.trial_id for r in records}):
        return {}  # no first round, or it is not complete yet
    conf = confirm(config, first, [r for r in runs if r.info.confirm_of in first_ids], short)
    if conf is None or conf.target is None:
        return {}  # nothing finished, or nothing was learned (escalation's case)
    reached = {x.trial.trial_id for x in conf.candidates if x.time_to_target_s is not None}
    rest = [t for t in confirm_order(base) if t.trial_id not in first_ids]
    out: dict[object, TrialResult] = {}
    for i, t in enumerate(first):  # a candidate whose runs all failed did not reach it either
        if t.trial_id in reached or not rest:
            continue
        # one that stands for its GPU count is replaced by that count's next most promising
        pool = (_Promise(base).of_count(t.params.num_gpus, candidates(base, len(base.points)))
                if i >= c.candidates else rest)
        left = {r.trial_id for r in rest}
        same = [r for r in pool if r.params.num_gpus == t.params.num_gpus and r.trial_id in left]
        pick = (same or rest)[0]
        rest.remove(pick)
        out[t.trial_id] = pick
    return out


def spread(trials: Sequence[TrialResult], n: int) -> list[TrialResult]:
    """``n`` distinct configs of ``trials`` spread over their learning rates: evenly spaced in
    the order of log lr, the lowest and the highest among them (then the rest, in that order);
    at one learning rate, the smaller batch first. The learning rate decides first whether a
    network learns at all; a short run's falling loss cannot tell which."""
    ordered = _distinct(sorted(trials, key=lambda r: (r.params.lr, r.params.batch_size)))
    if len(ordered) <= n:
        return ordered
    picks = [len(ordered) // 2] if n == 1 else sorted({round(i * (len(ordered) - 1) / (n - 1)) for i in range(n)})
    first = [ordered[i] for i in picks]
    return first + [r for r in ordered if r not in first]


def _every_gpu_count(ordered: list[TrialResult], n: int, by_count: Sequence[TrialResult] | None = None
                     ) -> list[TrialResult]:
    """The first ``n`` of ``ordered``, and then, for each GPU count not among them, its first in
    ``by_count`` (``ordered`` where not given): how many GPUs is measured at length, not assumed
    from the short trials."""
    chosen = ordered[:n]
    for r in (ordered[n:] if by_count is None else by_count):
        if all(r.params.num_gpus != c.params.num_gpus for c in chosen):
            chosen.append(r)
    return chosen


def _distinct(trials: Sequence[TrialResult]) -> list[TrialResult]:
    """``trials`` in order, each config (params) once: the first trial of it stays."""
    out: list[TrialResult] = []
    for r in trials:
        if all(r.params != o.params for o in out):
            out.append(r)
    return out


def off_front_note(report: Report) -> str | None:
    """Why a confirmed recommendation is not on the short-budget front (None when it is): the
    front points better than it beyond noise in some objective and worse in none there."""
    rec = report.recommended
    if rec is None or report.recommended_on_front is not False:
        return None
    metrics, directions = report.config.metric_names, report.config.directions

    def stats(r: TrialResult) -> tuple[list[float], list[float | None]]:
        pairs = [report.stat(r, m) for m in metrics]
        return [v if v is not None else math.nan for v, _ in pairs], [c for _, c in pairs]

    by: dict[tuple[str, ...], list[str]] = {}  # objectives -> the front trials better in them
    rv, rc = stats(rec)
    for f in report.front:
        fv, fc = stats(f)
        # an objective whose noise is unknown (no config measured twice) is better by any margin: said so
        ms = tuple(metrics[k] if fc[k] is not None or rc[k] is not None else f"{metrics[k]} (by any margin: its "
                   f"noise is unknown)" for k in better_beyond(fv, rv, fc, rc, directions))
        if ms and not better_beyond(rv, fv, rc, fc, directions):
            by.setdefault(ms, []).append(str(f.trial_id))
    why = "; ".join(f"trial(s) {', '.join(ids)} better beyond noise in {', '.join(ms)} and worse beyond it in nothing"
                    for ms, ids in by.items()) or "dominated there"
    return (f"the recommended trial {rec.trial_id} is not on the short-budget front ({why}, after "
            f"{report.config.budget.train_samples} samples per trial); trained at length it reached the target first")


def decide(config: Config, records: Sequence[TrialResult], warnings: list[str] | None = None,
           prefer: Prefer = None, search_wall_s: float | None = None) -> Report:
    """The report, its recommendation from the confirmation runs when there are any (and the
    preference is not another objective), and the baseline's runs against it (``search_wall_s``:
    what the search cost, for the pay-back)."""
    report = _decide(config, records, warnings, prefer)
    base_runs = [r for r in report.confirm_runs if r.info.confirm_of == BASELINE]
    if config.baseline is not None and not base_runs and stale_ids(config, records):
        b = config.baseline
        report = dataclasses.replace(report, notes=(*report.notes, Note(NoteKind.DECISION, (
            f"baseline (batch_size={b.batch_size} lr={b.lr:.3g} num_gpus={b.num_gpus}): not compared yet: the "
            f"baseline runs in this directory are of another baseline; continue the search to run this one"))))
    if report.confirmation is None or not base_runs:
        return report
    best = next((c for c in report.confirmation.candidates
                 if report.recommended is not None and c.trial.trial_id == report.recommended.trial_id), None)
    report = dataclasses.replace(report, baseline=compare(config, report.confirmation, best, base_runs, search_wall_s,
                                                             report.recommended))
    return _keep_baseline(report, prefer)


def _keep_baseline(report: Report, prefer: Prefer) -> Report:
    """The user's baseline stays the recommendation where its confirmation runs reached the target
    sooner than the search's pick beyond the runs' noise (in device-seconds under --prefer
    device_seconds_to_target), no confirmed candidate's own runs were as quick, and it keeps the
    memory margin: the search recommended, on 3 of 42 stored searches, a config its own runs
    showed slower than the config the user already had. Not where the user prefers an objective,
    nor for a goal without a target (no time is compared there)."""
    b, conf, pick = report.baseline, report.confirmation, report.recommended
    iv = b.speedup_interval if b is not None else None
    if (b is None or conf is None or pick is None or prefer not in (None, TIME_TO_TARGET, DEVICE_SECONDS)
            or conf.at_length or iv is None or b.time_to_target_s is None):
        return report
    devices = prefer == DEVICE_SECONDS
    # device-seconds are time x GPUs: the speedup and its interval scale by the GPU counts' ratio
    scale = b.params.num_gpus / (b.recommended_gpus or 1) if devices else 1.0
    if not iv[1] * scale < 1.0:  # sooner than the pick beyond the noise: the whole interval below 1
        return report
    theirs, mine = (b.device_seconds or (0.0, 0.0)) if devices else (b.recommended_s or 0.0, b.time_to_target_s)
    # a candidate whose own runs were as quick as the baseline's (the pick is chosen on its runs and
    # its prediction together) leaves "the search found nothing faster" untrue: the pick stands
    if any(c.time_to_target_s is not None and c.time_to_target_s * (c.trial.params.num_gpus if devices else 1) <= mine
           for c in conf.candidates if c.trial.trial_id not in conf.excluded):
        return report
    run = next(r for r in b.runs if r.status is Status.OK and r.info.curve)
    room = report.headroom(run)
    if not room.keeps_margin:
        return report
    p, q = b.params, pick.params
    how = "with fewer device-seconds than" if devices else "sooner than"
    unit = "device-s" if devices else "s of training"
    note = Note(NoteKind.DECISION, (
        f"the baseline (batch_size={p.batch_size} lr={p.lr:.3g} num_gpus={p.num_gpus}) reached the {conf.metric} "
        f"target {how} the search's pick, trial {pick.trial_id} (batch_size={q.batch_size} lr={q.lr:.3g} "
        f"num_gpus={q.num_gpus}), beyond the runs' noise ({mine:.2f} vs {theirs:.2f} {unit}): keep it; the "
        f"search found nothing {'cheaper' if devices else 'faster'}"))
    method = (f"baseline: the baseline reached {conf.metric} {conf.target:.4g} {how} the search's pick, "
              f"beyond the runs' noise, in confirmation runs of {conf.train_samples:.0f} samples")
    return dataclasses.replace(report, recommended=run, method=method, tradeoffs={},
                               baseline=dataclasses.replace(b, kept=True, kept_by_devices=devices),
                               notes=(*report.notes, note))


def reachable(config: Config, conf: Confirmation | None, order: list[TrialResult], runs: list[TrialResult],
              short: list[TrialResult]) -> Confirmation | None:
    """The confirmation read again where no candidate's runs reached the default target. That target
    is a fraction of the best candidate's level, the median over its runs; with two runs whose levels
    differ it lies between them, and the lower run may never get there, so a search whose candidates
    learned could end without an answer (a held-out search: the best candidate at 0.763, one of its
    two runs short of 0.99 of that). Read again from ``lowest_run_levels`` (the best of the
    candidates' worst run levels), a target every run of that candidate reached. Not for a target
    the user gave, ``confirm.target_from: best``, or a goal length without a target."""
    c = config.confirm
    given = c.target is not None or (config.goal is not None and config.goal.target is not None)
    if (conf is None or conf.target is None or given or c.target_from != "level" or conf.at_length
            or any(x.time_to_target_s is not None for x in conf.candidates)):
        return conf
    up = conf.maximize
    ref = lowest_run_levels([[level(r.info.curve or []) for r in x.runs] for x in conf.candidates], up)
    if ref is None:
        return conf
    every = [r for x in conf.candidates for r in x.runs]
    target, how = default_target(config, conf.metric, up, (max if up else min)(x.best_acc for x in conf.candidates),
                                 ref, [r.info.curve[0][2] for r in every if r.info.curve], every,
                                 described="the level every run of one candidate reached")
    if target is None or target == conf.target:
        return conf
    again = confirm(config.model_copy(update={"confirm": c.model_copy(update={"target": target})}), order, runs, short)
    return dataclasses.replace(again, target_how=f"{how}: no candidate's runs reached {conf.target:.4g} "
                                                 f"({conf.target_how})") if again is not None else conf


def _decide(config: Config, records: Sequence[TrialResult], warnings: list[str] | None, prefer: Prefer) -> Report:
    base_prefer = None if prefer in (TIME_TO_TARGET, DEVICE_SECONDS) else prefer
    latest = latest_per_trial(records)
    short = [r for r in latest if r.info.confirm_of is None]  # the trials and their repeats: the short budget
    report = build_report(config, short, warnings, prefer=base_prefer)
    runs = [r for r in latest if r.info.confirm_of is not None]
    if not runs:
        if prefer in (TIME_TO_TARGET, DEVICE_SECONDS):  # asked for by name: say why it is not what decided
            note = Note(NoteKind.DECISION, f"--prefer {prefer}: this run has no confirmation runs to read a time to "
                                           f"the target from (confirm.candidates = {config.confirm.candidates}); "
                                           f"the short trials' {report.method.split(':')[0]} decided instead")
            report = dataclasses.replace(report, notes=(*report.notes, note))
        return report
    runs = last_round(runs)  # after escalation rounds, the decision reads the last
    base_runs = [r for r in runs if is_current(config, r)]  # (runs of an earlier baseline: not this one's)
    runs = [r for r in runs if r.info.confirm_of != BASELINE]
    # every config with runs, in the order the short budget ranks them (a finished run read with
    # another confirm.candidates still shows what was confirmed)
    order = with_horizon(confirm_order(report), runs)
    conf = reachable(config, confirm(config, order, runs, short), order, runs, short)
    if conf is not None:  # the second look's replacements that have runs
        ran = {r.info.confirm_of for r in runs}
        conf = dataclasses.replace(conf, replaced={k: v.trial_id for k, v in replacements(config, latest).items()
                                                   if v.trial_id in ran})
    report = dataclasses.replace(report, confirmation=conf, confirm_runs=[*runs, *base_runs])
    if conf is None or base_prefer is not None:
        return report
    # a candidate too close to the memory limit (over all its runs) is not recommended
    rooms = {c.trial.trial_id: report.headroom(c.trial) for c in conf.candidates}
    conf = dataclasses.replace(conf, excluded={t: h.shortfall() for t, h in rooms.items() if not h.keeps_margin})
    report = dataclasses.replace(report, confirmation=conf)
    devices = prefer == DEVICE_SECONDS
    best = conf.best_by(devices)
    if best is None:
        why = (f"nothing was learned in the confirmation runs either (up to {conf.train_samples:.0f} samples"
               + (f", {conf.rung} rounds" if conf.rung > 1 else "") + ")" if conf.target is None
               else "no confirmed candidate reached the target" + (" and left resources.memory_margin"
                                                                    if conf.excluded else ""))
        return dataclasses.replace(report, recommended=None, method=f"time_to_target: {why}", tradeoffs={},
                                   notes=(*report.notes, Note(NoteKind.DECISION, f"{why}: no recommendation")))
    # the short budget's notes about its own choice no longer apply
    notes = [n for n in report.notes if n.kind is not NoteKind.PICK]
    short = report.recommended
    if short is not None and short.trial_id != best.trial.trial_id:
        notes.append(Note(NoteKind.DECISION, f"the short trials alone would have recommended trial {short.trial_id} "
                                             f"(batch_size={short.params.batch_size} lr={short.params.lr:.3g}); "
                                             f"confirmation at length chose trial {best.trial.trial_id}"))
    if conf.at_length:
        method = (f"best_at_length: the best {conf.metric} at the goal's {conf.train_samples:.0f} samples (mean "
                  f"over the confirmation runs); within its noise, the least "
                  f"{'device-seconds' if devices else 'training time'}")
    else:
        blended = conf.ranked_with_predictions()
        how = "estimated" if blended else "median"
        method = (f"{DEVICE_SECONDS if devices else TIME_TO_TARGET}: the shortest {how} "
                  f"{'device-seconds (wall x num_gpus)' if devices else 'time'} to {conf.metric} {conf.target:.4g}, "
                  f"from confirmation runs of {conf.train_samples:.0f} samples"
                  + (" and the time the noise scale predicts" if blended else ""))
    report = dataclasses.replace(report, recommended=best.trial, method=method, learned=True)
    if is_horizon(best.trial):  # a config no short trial measured: no short-budget trade-offs to state
        parent = best.trial.trial_id[:-len(HORIZON)]
        notes.append(Note(NoteKind.DECISION, f"trial {best.trial.trial_id} is trial {parent}'s config at a lower "
                                             f"learning rate (confirm.horizon_beta), measured in its confirmation "
                                             f"runs only"))
        return dataclasses.replace(report, notes=tuple(notes), tradeoffs={})
    off = off_front_note(report)
    if off:
        notes.append(Note(NoteKind.DECISION, off))
    return with_tradeoffs(dataclasses.replace(report, notes=tuple(notes)))
