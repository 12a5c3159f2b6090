"""The joint search space: batch_size x lr x num_gpus, and the seed's constraints.

Both categorical dimensions keep one fixed list of choices in every trial, so every Optuna
sampler models them; a combination that breaks the batch rules is never trained: the trial
ends as ``skipped`` (infeasible, zero compute) and the sampler learns to avoid it.
"""

from __future__ import annotations

from typing import Any

from tune_batch.config import SpaceConfig
from tune_batch.store.records import Params

#: The searched parameters, spelled the same in config, space, records and reports.
PARAMS = ("batch_size", "lr", "num_gpus")


def violation(params: Params | dict[str, Any], space: SpaceConfig) -> str | None:
    """Why ``params`` break the seed's batch rules, or None when they are fine."""
    p = Params.of(params)
    b, n = p.batch_size, p.num_gpus
    if b % n:
        return f"batch_size {b} is not divisible by num_gpus {n}"
    need = space.min_batch_per_gpu * n
    if b < need:
        return f"batch_size {b} < min_batch_per_gpu {space.min_batch_per_gpu} x num_gpus {n} = {need}"
    return None


def suggest(trial: Any, space: SpaceConfig, gpu_choices: list[int] | None = None) -> dict[str, Any]:
    """Suggest batch_size, lr and num_gpus on an ``optuna.Trial`` (or anything with its
    ``suggest_*`` methods). ``gpu_choices`` overrides ``space.num_gpus`` (e.g. filtered to
    what the cluster has)."""
    gpus = gpu_choices or list(space.num_gpus)
    batch_size, lr, num_gpus = PARAMS
    return {
        batch_size: trial.suggest_categorical(batch_size, space.batch_choices()),
        lr: trial.suggest_float(lr, space.lr.low, space.lr.high, log=space.lr.log),
        num_gpus: trial.suggest_categorical(num_gpus, gpus),
    }


def define_by_run(trial: Any, space: SpaceConfig, gpu_choices: list[int]) -> dict[str, Any]:
    """The define-by-run function given to Ray's OptunaSearch (importable, so it pickles by
    reference). Returns the Optuna trial number so records line up with ``study.db``."""
    suggest(trial, space, gpu_choices)
    return {"trial_number": trial.number}


def ladder(space: SpaceConfig, gpu_choices: list[int] | None = None, limit: int | None = None,
           rule: str = "sqrt") -> list[dict[str, Any]]:
    """Seed points: the powers-of-two ladder of batch sizes (smallest, largest and every other
    one between), each with the learning rate scaled from the geometric middle of the lr range at
    the smallest batch by ``rule``: "linear" (Goyal et al. 2017, for SGD) or "sqrt" (for
    adaptive optimizers such as Adam, whose steps are normalised per parameter); one worker."""
    import math

    choices = space.batch_choices()
    picks = sorted(set(choices[::2] + [choices[-1]]))
    lo, hi = space.lr.low, space.lr.high
    base = math.sqrt(lo * hi)
    n = min(gpu_choices or space.num_gpus)
    out = []
    for b in picks:
        ratio = b / choices[0]
        lr = min(hi, max(lo, base * (ratio if rule == "linear" else math.sqrt(ratio))))
        p = {"batch_size": b, "lr": lr, "num_gpus": n}
        if violation(p, space) is None:
            out.append(p)
    return out[:limit] if limit is not None else out


def seed_points(config: Any, gpu_choices: list[int] | None = None) -> list[dict[str, Any]]:
    """The ladder points a new search starts with (``search.seed_ladder``), at most a third of
    the trial budget."""
    if not config.search.seed_ladder:
        return []
    rule = "sqrt" if config.optimizer.adaptive else "linear"
    return ladder(config.space, gpu_choices, limit=max(1, config.budget.trials // 3), rule=rule)
