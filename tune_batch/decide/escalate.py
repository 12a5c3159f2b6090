"""Escalation: when neither the short trials nor the confirmation runs learned anything, train
longer before giving up. Each round trains the better half of the last round's configs 4x
longer (successive halving), at most ``confirm.escalations`` rounds; the decision reads the
last round (``confirm.last_round``). Planned from the records, never by measurement, so a
resumed search plans the same rounds."""

from __future__ import annotations

import math
from collections.abc import Sequence

from tune_batch.analysis.report import build_report, latest_per_trial
from tune_batch.config import Config
from tune_batch.decide.baseline import done_ids
from tune_batch.decide.baseline import params_of as baseline_params
from tune_batch.decide.confirm import BASELINE, confirm
from tune_batch.decide.confirm import jobs as confirm_jobs
from tune_batch.decide.recommend import confirm_order
from tune_batch.store.jobs import Job
from tune_batch.store.records import TrialResult

#: How much longer each round trains than the one before it.
GROWTH = 4


def escalations(config: Config, records: Sequence[TrialResult]) -> list[Job]:
    """The jobs of the next escalation round still to run, replayed from the first round's
    records (the same rounds on a resumed search): none when something was learned (at the
    short budget or in a round), when the goal fixes the run's length, or after
    ``confirm.escalations`` rounds. Call it once the first round (the confirmation) is recorded."""
    c = config.confirm
    if config.confirm_metric is None or c.escalations == 0 or (config.goal is not None and config.goal.length_given):
        return []
    latest = latest_per_trial(records)
    short = [r for r in latest if r.info.confirm_of is None]
    base = build_report(config, short)
    if base.learned:  # the short trials learned: confirmation decides as planned
        return []
    runs = [r for r in latest if r.info.confirm_of not in (None, BASELINE)]
    order = confirm_order(base)
    done = done_ids(config, records)
    rung = 1
    while rung <= c.escalations:
        mine = [r for r in runs if (r.info.rung or 1) == rung]
        conf = confirm(config, order, mine, short)
        if conf is None or conf.target is not None:  # nothing finished, or this round learned
            return []
        ranked = sorted(conf.candidates, key=lambda x: -x.best_acc if conf.maximize else x.best_acc)
        keep = [x.trial for x in ranked[:max(1, math.ceil(len(ranked) / 2))]]
        samples = GROWTH * max(r.info.train_samples_done or 0 for r in mine)
        planned = confirm_jobs(config, keep, set(), baseline_params(config), rung + 1, max(1, samples))
        missing = [j for j in planned if j.trial_id not in done]
        if missing:
            return missing
        rung += 1
    return []
