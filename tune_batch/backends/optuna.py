"""Plain Optuna: a tune_batch objective for ``study.optimize`` on any study (the user's own, with
their sampler, storage and extra hyperparameters), and the in-process ``optuna`` backend.

No Ray is started here. ``oom`` and ``skipped`` trials return sentinel values with a
constraint > 0 (infeasible); ``failed`` trials end as Optuna FAIL with the reason kept in the
trial's user attributes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import optuna

from tune_batch import objectives
from tune_batch import space as space_mod
from tune_batch.config import Config, SpaceConfig
from tune_batch.errors import UserError
from tune_batch.oom import FeasibilityModel, cap_bytes
from tune_batch.progress import Progress
from tune_batch.results import RunDir
from tune_batch.samplers import make_sampler


def suggest(trial: optuna.Trial, space: SpaceConfig) -> dict[str, Any]:
    """Suggest ``batch_size``, ``lr`` and ``num_gpus`` on ``trial``. Combinations that break the
    batch rules are not trained by tune_batch's objective: they end as infeasible (``space``)."""
    return space_mod.suggest(trial, space)


def _directions(config: Config) -> list[optuna.study.StudyDirection]:
    return [optuna.study.StudyDirection.MAXIMIZE if d == "maximize" else optuna.study.StudyDirection.MINIMIZE
            for d in config.directions]


def check_directions(study: optuna.Study, config: Config) -> None:
    """Raise UserError when the study's directions do not match the config's objectives."""
    if list(study.directions) != _directions(config):
        have = [d.name.lower() for d in study.directions]
        raise UserError(
            f"study {study.study_name!r} has directions {have}, but the objectives ({', '.join(config.metric_names)}) "
            f"need {list(config.directions)}; create the study with directions={list(config.directions)}"
        )


class Objective:
    """``study.optimize(Objective(config), n_trials=...)``: each call runs one measured trial.

    Returns the objective values in the config's order; sets the ``memory`` and ``space``
    constraints (``trial.set_constraint``) and the user attributes ``status``, ``reason`` and
    ``metrics``. ``extra_space(trial) -> dict`` suggests the user's own hyperparameters in the
    same trial; they are passed to ``pkg.module:function`` model and data builders as keyword
    arguments and kept in the record's params. ``run_dir``: also append each record there.
    """

    def __init__(self, config: Config, extra_space: Callable[[optuna.Trial], dict[str, Any]] | None = None, *,
                 run_dir: RunDir | None = None, progress: Progress | None = None,
                 feasibility: FeasibilityModel | None = None) -> None:
        self.config = config
        self.extra_space = extra_space
        self.run_dir = run_dir
        self.progress = progress
        if feasibility is None and config.resources.feasibility_model:
            feasibility = FeasibilityModel(cap_bytes(config.resources.device_memory, None))
        self.feasibility = feasibility
        self.records: list[dict[str, Any]] = []
        self._checked: set[int] = set()

    def __call__(self, trial: optuna.Trial) -> list[float] | None:
        from tune_batch.trial import run_trial

        if id(trial.study) not in self._checked:
            check_directions(trial.study, self.config)
            self._checked.add(id(trial.study))
        params = suggest(trial, self.config.space)
        extra = dict(self.extra_space(trial)) if self.extra_space else {}
        skip = self.feasibility.skip_reason(params) if self.feasibility else None
        if self.progress:
            self.progress.started()
        result = run_trial(self.config, params, trial_id=trial.number, extra=extra or None, skip_reason=skip,
                           run_dir=self.run_dir.path if self.run_dir else None)
        record = result.to_record()
        record["params"].update(extra)
        for key, value in objectives.constraints(record).items():
            trial.set_constraint(key, value)
        trial.set_user_attr("status", record["status"])
        trial.set_user_attr("reason", record["reason"])
        trial.set_user_attr("metrics", record["metrics"])
        if self.feasibility:
            self.feasibility.observe(record)
        if self.run_dir:
            self.run_dir.append(record)
        self.records.append(record)
        if self.progress:
            self.progress.finished(record)
        if record["status"] == "failed":
            return None  # Optuna records the trial as FAIL; the reason is in user_attrs
        return objectives.values(self.config, record)


def create_study(config: Config, storage: Any, study_name: str) -> optuna.Study:
    study = optuna.create_study(storage=storage, study_name=study_name, directions=list(config.directions),
                                sampler=make_sampler(config.search.sampler, config.search.seed, config.budget.trials),
                                load_if_exists=True)
    check_directions(study, config)
    return study


def run_search(config: Config, run_dir: RunDir, *, storage: Any, study_name: str, progress: Progress,
               feasibility: FeasibilityModel | None = None, verbose: bool = False, fresh: bool = True) -> None:
    """Run ``config.budget.trials`` trials in this process on the stored study."""
    if not verbose:
        optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = create_study(config, storage, study_name)
    if fresh and not study.trials:
        for point in space_mod.seed_points(config, [1]):
            study.enqueue_trial(point)
    progress.say(f"optuna: in-process, sampler {config.search.sampler}, study {study_name!r}")
    objective = Objective(config, run_dir=run_dir, progress=progress, feasibility=feasibility)
    study.optimize(objective, n_trials=config.budget.trials, gc_after_trial=True)
