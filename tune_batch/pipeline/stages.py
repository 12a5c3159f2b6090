"""The stages of a search, in one place: the search's trials, then the repeats of its front
candidates, then the confirmation runs at length. Each stage is planned here from the records
the stage before it left (so a resumed search plans the same jobs and runs only what is
missing); a backend only runs what it is handed, through one verb:

- ``run(config, n, later)``: ``n`` trials proposed by the study's sampler, then each stage that
  ``later`` plans (``Planned``: planned jobs, ``store.jobs.Job``, repeats or confirmation runs),
  one after the other. A stage is planned only once the one before it is recorded. The Ray
  backend runs all of them in one Tune experiment (one start, its trial processes reused); the
  in-process one runs them in turn.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Protocol

from tune_batch.analysis.report import build_report, latest_per_trial
from tune_batch.backends import Later
from tune_batch.backends.progress import Progress
from tune_batch.backends.signals import stopping
from tune_batch.config import Config
from tune_batch.decide.baseline import done_ids
from tune_batch.decide.baseline import params_of as baseline_params
from tune_batch.decide.confirm import jobs as confirm_jobs
from tune_batch.decide.escalate import escalations
from tune_batch.decide.recommend import confirm_candidates, replacements
from tune_batch.decide.repeats import jobs as repeat_jobs
from tune_batch.store.jobs import Job, JobKind
from tune_batch.store.records import TrialResult, budget_used
from tune_batch.store.rundir import RunDir


class Backend(Protocol):
    """What a backend offers inside one session (one Ray instance, or this process)."""

    def run(self, config: Config, trials: int, later: Later) -> None: ...


def _searched(records: Sequence[TrialResult]) -> list[TrialResult]:
    return [r for r in latest_per_trial(records) if r.searched]


def repeats_of(config: Config, records: Sequence[TrialResult]) -> list[Job]:
    """The repeats the finished search still needs, given its records; none while the search
    itself is unfinished (stopped by a signal)."""
    # chosen from the searched trials alone, so that a resumed search picks the same candidates
    searched = _searched(records)
    if budget_used(searched) < config.budget.trials:
        return []
    return repeat_jobs(config, build_report(config, searched), {r.trial_id for r in records})


def confirms_of(config: Config, records: Sequence[TrialResult]) -> list[Job]:
    """The confirmation runs still needed, once the search and its repeats are complete: the
    candidates of the report of both (the same on a resumed search)."""
    if config.confirm_metric is None:  # train.evaluate measures no objective to read time to target on
        return []
    if budget_used(_searched(records)) < config.budget.trials or repeats_of(config, records):
        return []
    base = build_report(config, [r for r in records if r.info.confirm_of is None])
    return confirm_jobs(config, confirm_candidates(base), done_ids(config, records), baseline_params(config),
                        horizon=True)


def escalations_of(config: Config, records: Sequence[TrialResult]) -> list[Job]:
    """The next escalation round's runs (``decide.escalate``), once the confirmation is recorded."""
    if budget_used(_searched(records)) < config.budget.trials or repeats_of(config, records):
        return []
    if confirms_of(config, records):
        return []
    return escalations(config, records)


def replacements_of(config: Config, records: Sequence[TrialResult]) -> list[Job]:
    """The runs of the candidates that replace those that did not reach the target
    (``decide.recommend.replacements``), once the confirmation (and any escalation) is recorded."""
    if budget_used(_searched(records)) < config.budget.trials or repeats_of(config, records):
        return []
    if confirms_of(config, records) or escalations(config, records):
        return []
    picks = replacements(config, records)  # each confirm.seeds runs, as long as the first round's; no baseline
    return confirm_jobs(config, list(picks.values()), {r.trial_id for r in records}) if picks else []


#: The stages after the search, in order: what plans each, and how progress announces it.
#: Escalation rounds are planned again after each round, until none is left.
AFTER_SEARCH: tuple[tuple[JobKind, Callable[[Config, Sequence[TrialResult]], list[Job]]], ...] = (
    (JobKind.REPEAT, repeats_of),
    (JobKind.CONFIRM, confirms_of),
    (JobKind.CONFIRM, escalations_of),
    (JobKind.CONFIRM, replacements_of),
)


#: What each kind of stage is called where a user reads that it was cut.
STAGE_NAMES = {JobKind.REPEAT: "the repeats of the front candidates", JobKind.CONFIRM: "the confirmation runs"}


def pending_stage(config: Config, records: Sequence[TrialResult]) -> tuple[str, int] | None:
    """After the whole budget, the first stage with runs still to run, given the records: its
    name and how many runs it plans; None when the trials or nothing are left."""
    if budget_used(_searched(records)) < config.budget.trials:
        return None
    for kind, plan in AFTER_SEARCH:
        jobs = plan(config, records)
        if jobs:
            return STAGE_NAMES[kind], len(jobs)
    return None


def unfinished(config: Config, records: Sequence[TrialResult]) -> str | None:
    """What a run directory's search has left, for ``report``: None when nothing is."""
    used = budget_used(_searched(records))
    if used < config.budget.trials:
        left = f"{used} of {config.budget.trials} trials done"
    elif (stage := pending_stage(config, records)) is not None:
        left = f"all {config.budget.trials} trials done, {stage[0]} with {stage[1]} run(s) left"
    else:
        return None
    return (f"this search is unfinished (still running, or stopped): {left}; the summary is from what finished "
            f"(its search command run again on this directory continues it)")


def pending(config: Config, records: Sequence[TrialResult]) -> bool:
    """Whether any trial or job is still to run, given the records."""
    return budget_used(_searched(records)) < config.budget.trials or pending_stage(config, records) is not None


class Planned:
    """The stages after the search, as an iterator (``backends.Later``): each stage planned from
    the records when it is asked for, so after the stage before it is recorded, and announced;
    escalation rounds planned again after each round; nothing more once a signal was received.
    Plain state, no generator: Tune pickles the searcher that holds it."""

    def __init__(self, config: Config, run_dir: RunDir, progress: Progress) -> None:
        self.config, self.run_dir, self.progress = config, run_dir, progress
        self.stage = 0  # the index in AFTER_SEARCH of the stage to plan next

    def __iter__(self) -> Planned:
        return self

    def __next__(self) -> tuple[JobKind, list[Job]]:
        config, progress = self.config, self.progress
        while self.stage < len(AFTER_SEARCH) and not stopping():
            kind, plan = AFTER_SEARCH[self.stage]
            jobs = plan(config, self.run_dir.records()[0])
            if not jobs or plan is not escalations_of:  # rounds go on while escalations_of plans one
                self.stage += 1
            if not jobs:
                continue
            if plan is escalations_of:
                progress.say(f"escalating: nothing learned yet; {len(jobs)} run(s) of {jobs[0].samples} samples "
                             f"(round {jobs[0].rung} of at most {config.confirm.escalations + 1})")
            if plan is replacements_of:
                progress.say(f"second look: {len(jobs)} run(s) of the next candidate(s), in place of those that did "
                             f"not reach the target (confirm.replace_unreached)")
            if kind is JobKind.REPEAT:
                progress.repeating(len(jobs))
            else:
                progress.confirming(len(jobs), jobs[0].samples)
            return kind, jobs
        raise StopIteration  # done, or stopped: what is recorded stays, the rest runs on resume


def run_stages(config: Config, run_dir: RunDir, open_backend: Callable[[], AbstractContextManager[Backend]],
               progress: Progress) -> None:
    """Run what the records say is still to run, stage by stage, inside one backend session
    (opened only when something is to run). Every stage's jobs get the whole config; only the
    search stage runs the trials left (a budget of 0 is no valid config in a trial process)."""
    records = run_dir.records()[0]
    if not pending(config, records):
        return
    with open_backend() as backend:
        left = config.budget.trials - budget_used(_searched(records))
        backend.run(config, max(0, left), Planned(config, run_dir, progress))
