"""OptunaSearch that tells Optuna what a tune_batch trial really was, through the one seam; and
the searcher that runs a whole search, its later stages included, as one Tune experiment."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from ray.tune.search import Searcher
from ray.tune.search.optuna import OptunaSearch

from tune_batch.backends import Later
from tune_batch.backends.signals import stopping
from tune_batch.config import Config
from tune_batch.store.records import Params, TrialResult
from tune_batch.store.rundir import RunDir
from tune_batch.study import seam
from tune_batch.study.admission import Policy


class ConstrainedOptunaSearch(OptunaSearch):
    """``oom`` and ``skipped`` trials are told COMPLETE with sentinel values and a constraint > 0
    (infeasible: the sampler learns the boundary, the front never shows them); ``failed`` trials
    are told FAIL; every trial carries its status, reason and metrics as user attributes.
    The policy decides, before a trial starts, whether it is run at all (``skip_reason`` in its
    config). Uses OptunaSearch internals (``_ot_trials``, ``_ot_study``, ``_completed_trials``)
    of the pinned Ray minor version; tests exercise it.
    """

    def __init__(self, *args: Any, config: Config, policy: Policy,
                 on_skip: Callable[[TrialResult], None] | None = None, **kwargs: Any) -> None:
        self.tb_config = config
        self.policy = policy
        self.on_skip = on_skip  # where a free skip's record goes (the run directory, progress)
        super().__init__(*args, **kwargs)

    def _setup_study(self, mode: Any) -> None:
        super()._setup_study(mode)
        seam.name_study(self._ot_study, self.tb_config)  # names on the study from its first trial

    def suggest(self, trial_id: str) -> dict[str, Any] | None:
        """A proposal to run. One the policy skips is told to Optuna and recorded here, and the
        sampler asked again, so it uses no trial of ``budget.trials`` (Policy.skip's ``free``);
        past FREE_SKIPS_IN_A_ROW skips in a row it goes to a trial that records it as before."""
        while True:
            spec = super().suggest(trial_id)
            if spec is None:
                return None
            params = Params.of({k: v for k, v in spec.items() if k != "trial_number"})
            rec = self.policy.skip(params, spec.get("trial_number"), free=self.on_skip is not None)
            if rec is None:
                return spec
            if not rec.info.free_skip:
                spec["skip_reason"] = rec.reason
                return spec
            ot_trial = self._ot_trials.pop(trial_id)
            self.policy.observe(rec)
            seam.tell(self._ot_study, ot_trial, self.tb_config, rec, told=self.policy.told(rec))
            self.on_skip(rec)  # type: ignore[misc]

    def on_trial_complete(self, trial_id: str, result: dict[str, Any] | None = None, error: bool = False) -> None:
        ot_trial = self._ot_trials.get(trial_id)
        if ot_trial is None or "tb_record" not in (result or {}) or trial_id in self._completed_trials:
            super().on_trial_complete(trial_id, result, error)
            return
        record = TrialResult.from_record(json.loads(result["tb_record"]))  # type: ignore[index]
        self.policy.observe(record)
        try:
            seam.tell(self._ot_study, ot_trial, self.tb_config, record, told=self.policy.told(record))
        finally:
            self._completed_trials.add(trial_id)


class Staged(Searcher):
    """A whole search as one Tune experiment: ``trials`` trials proposed by ``first`` (the
    study's ConstrainedOptunaSearch), then the jobs of each stage that ``later`` plans (repeats,
    confirmation runs, escalation rounds), so that Tune starts once and its trial processes are
    reused from stage to stage.

    A stage is planned only when everything handed out before it has completed and is recorded
    in ``run_dir`` (the plans read the records); until then there is no proposal (None), and when
    ``later`` is exhausted, Searcher.FINISHED. An error while planning ends the experiment and is
    kept in ``error`` for the driver to raise (Tune would wrap it in its own).
    """

    def __init__(self, first: Searcher | None, trials: int, later: Later, run_dir: RunDir) -> None:
        super().__init__()
        self.first, self.trials = first, trials if first is not None else 0
        self.later, self.run_dir = later, run_dir
        self.queue: list[dict[str, Any]] = []  # the current stage's specs not yet handed out
        self.live: set[str] = set()  # Tune trial ids handed out and not complete
        self.of_first: set[str] = set()  # those ``first`` proposed (it hears of their results)
        self.awaited: set[object] = set()  # record ids handed out in the current stage
        self.error: BaseException | None = None
        self.done = False

    def suggest(self, trial_id: str) -> dict[str, Any] | str | None:
        if stopping():  # a signal or a config fault: the running trials finish, no new one starts
            self.done = True
        if self.done:
            return Searcher.FINISHED
        try:
            spec = self._propose(trial_id)
        except Exception as e:  # noqa: BLE001 (kept, raised by the driver after Tune has stopped)
            self.error, self.done = e, True
            return Searcher.FINISHED
        if isinstance(spec, dict):
            self.live.add(trial_id)
            self.awaited.add(spec.get("trial_number"))
        return spec

    def _propose(self, trial_id: str) -> dict[str, Any] | str | None:
        if self.trials > 0:
            spec = self.first.suggest(trial_id)  # type: ignore[union-attr]
            if isinstance(spec, dict):
                self.trials -= 1
                self.of_first.add(trial_id)
            if spec != Searcher.FINISHED:
                return spec
            self.trials = 0  # it has no more: the later stages follow
        if self.queue:
            return self.queue.pop(0)
        if self.live or not self.awaited <= {r.trial_id for r in self.run_dir.records()[0]}:
            return None  # the stage before is still running, or its last records are on their way
        stage = next(self.later, None)
        if stage is None:
            self.done = True
            return Searcher.FINISHED
        self.awaited = set()
        self.queue = [job.spec() for job in stage[1]]
        return self.queue.pop(0)

    def on_trial_result(self, trial_id: str, result: dict[str, Any]) -> None:
        if trial_id in self.of_first:
            self.first.on_trial_result(trial_id, result)  # type: ignore[union-attr]

    def on_trial_complete(self, trial_id: str, result: dict[str, Any] | None = None, error: bool = False) -> None:
        self.live.discard(trial_id)
        if trial_id in self.of_first:
            self.first.on_trial_complete(trial_id, result, error)  # type: ignore[union-attr]

    def save(self, checkpoint_path: str) -> None:
        """Nothing: a search resumes from its records and its study, never from Tune's state."""

    def restore(self, checkpoint_path: str) -> None:
        raise NotImplementedError("a search resumes from its records and its study")
