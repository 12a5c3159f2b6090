"""Optuna samplers by name (``search.sampler``), shared by both backends."""

from __future__ import annotations

from typing import Any


def startup_trials(n_trials: int) -> int:
    """Random trials before a model-based sampler starts modelling: a third of the budget,
    between 3 and 10."""
    return min(10, max(3, n_trials // 3))


def make_sampler(name: str, seed: int, n_trials: int) -> Any:
    """An Optuna sampler for a multi-objective, constrained study.

    tpe: multivariate TPE with constant liar (parallel trials); nsga2: NSGA-II with a
    population sized to the budget; gp: Gaussian-process sampler; random: uniform.
    """
    import optuna

    n_startup = startup_trials(n_trials)
    if name == "tpe":
        return optuna.samplers.TPESampler(seed=seed, multivariate=True, constant_liar=True,
                                          n_startup_trials=n_startup)
    if name == "nsga2":
        return optuna.samplers.NSGAIISampler(seed=seed, population_size=max(4, min(50, n_trials // 3)))
    if name == "gp":
        return optuna.samplers.GPSampler(seed=seed, n_startup_trials=n_startup)
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    raise ValueError(f"search.sampler = {name!r}: allowed: tpe, nsga2, gp, random")
