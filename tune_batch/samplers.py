"""Optuna samplers by name (``search.sampler``), shared by both backends."""

from __future__ import annotations

from typing import Any

import optuna


def startup_trials(n_trials: int) -> int:
    """Random trials before a model-based sampler starts modelling: a third of the budget,
    between 3 and 10."""
    return min(10, max(3, n_trials // 3))


class BudgetStartup(optuna.samplers.BaseSampler):
    """A model-based Optuna sampler whose random start-up is counted in trials of the budget.

    A proposal the feasibility model skips is told to the study (COMPLETE, infeasible: the
    sampler learns the memory boundary from it) but uses no trial (``free_skip``). Optuna's
    samplers count every COMPLETE trial towards ``n_startup_trials``, so under a tight memory
    cap such skips ended the random start early: replayed at 25 % of the mlp and mlp_adam grids
    under the 40 % and 60 %-over caps, 3 or 4 of 10 GP seeds had 1 or 2 measured random trials
    instead of 3. Here the start-up lasts until ``n_startup`` trials that are not free skips
    are complete; the model (built with ``n_startup_trials=0``) then sees every trial, skips
    included.
    """

    def __init__(self, model: optuna.samplers.BaseSampler, n_startup: int, seed: int) -> None:
        self._model = model
        self._random = optuna.samplers.RandomSampler(seed=seed)
        self._n_startup = n_startup

    def _starting(self, study: optuna.Study) -> bool:
        done = study._get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,), use_cache=True)
        return sum(1 for t in done if not t.user_attrs.get("free_skip")) < self._n_startup

    def infer_relative_search_space(self, study: Any, trial: Any) -> dict[str, Any]:
        return {} if self._starting(study) else self._model.infer_relative_search_space(study, trial)

    def sample_relative(self, study: Any, trial: Any, search_space: dict[str, Any]) -> dict[str, Any]:
        return self._model.sample_relative(study, trial, search_space) if search_space else {}

    def sample_independent(self, study: Any, trial: Any, param_name: str, param_distribution: Any) -> Any:
        sampler = self._random if self._starting(study) else self._model
        return sampler.sample_independent(study, trial, param_name, param_distribution)

    def before_trial(self, study: Any, trial: Any) -> None:
        self._model.before_trial(study, trial)

    def after_trial(self, study: Any, trial: Any, state: Any, values: Any) -> None:
        self._model.after_trial(study, trial, state, values)

    def reseed_rng(self) -> None:
        self._model.reseed_rng()
        self._random.reseed_rng()


def make_sampler(name: str, seed: int, n_trials: int) -> Any:
    """An Optuna sampler for a multi-objective, constrained study.

    tpe: multivariate TPE with constant liar (parallel trials); nsga2: NSGA-II with a
    population sized to the budget; gp: Gaussian-process sampler; random: uniform. The random
    start of tpe and gp counts trials of the budget only (BudgetStartup).
    """
    n_startup = startup_trials(n_trials)
    if name == "tpe":
        tpe = optuna.samplers.TPESampler(seed=seed, multivariate=True, constant_liar=True, n_startup_trials=0)
        return BudgetStartup(tpe, n_startup, seed)
    if name == "nsga2":
        return optuna.samplers.NSGAIISampler(seed=seed, population_size=max(4, min(50, n_trials // 3)))
    if name == "gp":
        return BudgetStartup(optuna.samplers.GPSampler(seed=seed, n_startup_trials=0), n_startup, seed)
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    raise ValueError(f"search.sampler = {name!r}: allowed: tpe, nsga2, gp, random")
