"""The confirmation's target: ``goal.target``, ``confirm.target``, or by default a fraction of
the best candidate's level (where its runs levelled off) or of the best value any run reached
(``confirm.target_from``)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

from tune_batch.analysis.noise import chance_floor
from tune_batch.config import Config
from tune_batch.config.schema import ConfirmConfig
from tune_batch.store.records import TrialResult

# the default fraction for each reference: chosen on the development workloads by replaying the
# choice on their 3-seed grids (scripts/bench_confirm_target.py, docs/benchmarks.md)
DEFAULT_FRACTION = {"level": 0.99, "best": 0.95}


def fraction(confirm: ConfirmConfig) -> float:
    """``confirm.target_fraction``, or its default for ``confirm.target_from``."""
    given = confirm.target_fraction
    return given if given is not None else DEFAULT_FRACTION[confirm.target_from]


def level(curve: Sequence[Sequence[float]]) -> float:
    """Where a run's curve levelled off: the mean of its last quarter of validations (at least
    the last one); nan without a finite value."""
    values = [p[2] for p in curve if math.isfinite(p[2])]
    if not values:
        return math.nan
    return statistics.fmean(values[-max(1, len(values) // 4):])


def default_target(config: Config, name: str, up: bool, best: float, best_level: float | None,
                   firsts: list[float], runs: list[TrialResult],
                   described: str | None = None) -> tuple[float | None, str]:
    """(the target, how it was set): ``goal.target``, ``confirm.target``, else by default
    ``fraction(confirm)`` of the reference ``confirm.target_from`` names: the best candidate's
    level (``best_level``: each candidate's median over its runs of ``level``) or the best value
    any run reached (``best``). For val_acc, that fraction x the reference (None when the best
    reached is within noise of chance); for another metric, that fraction of the way from the
    first validation (the median over the runs) to the reference (None when no run improved on it).
    ``described``: what ``best_level`` is, where it is not the best candidate's median level."""
    c = config.confirm
    if config.goal is not None and config.goal.target is not None:
        return config.goal.target, "goal.target"
    if c.target is not None:
        return c.target, "confirm.target"
    f = fraction(c)
    by_level = c.target_from == "level" and best_level is not None
    ref = best_level if by_level else best

    def of(value: str) -> str:
        if described is not None and by_level:
            return f"{described} ({value})"
        return (f"the best candidate's level ({value}: the mean of its runs' last quarter of validations)"
                if by_level else f"the best {name} any candidate reached ({value})")

    if name == "val_acc":
        chance, floor = chance_floor(config, runs)
        if best <= floor:
            return None, (f"none: nothing was learned in the confirmation runs either (best val_acc {best:.3f}, "
                          f"chance {chance:.3f})")
        return max(floor, f * ref), f"{f:g} x {of(f'{ref:.3f}')}"
    start = statistics.median(firsts)
    if not (ref > start if up else ref < start):
        return None, f"none: no run improved {name} on its first validation ({start:.4g})"
    return (start + f * (ref - start),
            f"{f:g} of the way from the first validation's {name} ({start:.4g}) to {of(f'{ref:.4g}')}")


def lowest_run_levels(per_run: list[list[float]], up: bool) -> float | None:
    """The best, over candidates, of a candidate's worst run level (``per_run``: each candidate's
    runs' levels; a loss: the least of the highest): a level every run of that candidate reached,
    since each run has a validation at or past its own level. None without a candidate whose every
    run has one."""
    worst = [(min if up else max)(lv) for lv in per_run if lv and all(map(math.isfinite, lv))]
    return (max if up else min)(worst) if worst else None

