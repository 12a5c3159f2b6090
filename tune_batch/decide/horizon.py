"""A candidate's config at a lower learning rate for the longer run (``confirm.horizon_beta``):
the best rate of a short run is often too high for a long one with Adam-like optimizers
(docs/benchmarks.md, ``scripts/bench_lr_horizon.py``), so the first candidate's config at
lr x (confirmation samples / trial samples)^-beta is confirmed beside it, ``<trial>h``. No short
trial measures it: its first confirmation run stands for it in the decision."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from tune_batch.config import Config
from tune_batch.store.records import Params, Status, TrialResult

#: The suffix of a candidate's config at its horizon-scaled learning rate (``confirm.horizon_beta``):
#: ``<trial>h``, its runs ``<trial>hc<seed>``.
HORIZON = "h"


def horizon_factor(config: Config) -> float | None:
    """The learning-rate factor of ``confirm.horizon_beta``: (confirmation samples / trial
    samples)^-beta; None when off, or when the confirmation's length is in epochs."""
    beta, length = config.confirm.horizon_beta, config.confirm_samples(None)
    if beta is None or length is None:
        return None
    return (length / config.budget.train_samples) ** -beta


def horizon_config(config: Config, trial: TrialResult) -> Params | None:
    """``trial``'s params at its horizon-scaled learning rate (None when the option is off)."""
    factor = horizon_factor(config)
    return None if factor is None else replace(trial.params, lr=trial.params.lr * factor)


def with_horizon(order: Sequence[TrialResult], runs: Sequence[TrialResult]) -> list[TrialResult]:
    """``order`` (the candidates in short-budget rank order) with, after each candidate whose
    horizon-scaled config has runs, that config: its first finished run, under the config's id
    (``<trial>h``), stands for it (no short trial measured it)."""
    derived: dict[str, TrialResult] = {}
    for r in runs:
        of = r.info.confirm_of
        if isinstance(of, str) and of.endswith(HORIZON) and r.status is Status.OK and of not in derived:
            derived[of] = replace(r, trial_id=of)
    out = []
    for t in order:
        out.append(t)
        if f"{t.trial_id}{HORIZON}" in derived:
            out.append(derived[f"{t.trial_id}{HORIZON}"])
    return out


def is_horizon(trial: TrialResult) -> bool:
    """Whether ``trial`` stands for a candidate's horizon-scaled config (``with_horizon``)."""
    return isinstance(trial.trial_id, str) and trial.trial_id.endswith(HORIZON) and trial.info.confirm_of == \
        trial.trial_id
