"""OptunaSearch that tells Optuna what a tune_batch trial really was, through the one seam."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from ray.tune.search.optuna import OptunaSearch

from tune_batch.config import Config
from tune_batch.store.records import Params, TrialResult
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
            seam.tell(self._ot_study, ot_trial, self.tb_config, rec)
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
