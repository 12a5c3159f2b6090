"""Objectives: which metrics, which directions, the values told to a sampler, and the
constraint values that mark a trial infeasible (Optuna: feasible when every value <= 0).

Directions are interpreted here and nowhere else: :func:`to_minimize` turns values into
"smaller is better", the form the Pareto code and the hypervolume work in.
"""

from __future__ import annotations

from collections.abc import Sequence

from tune_batch.config import Config
from tune_batch.store.records import Status, TrialResult

#: Finite stand-ins for infeasible / failed trials (Ray warns on inf; Optuna needs every value).
SENTINEL_MAXIMIZE = 0.0
SENTINEL_MINIMIZE = 1e18

CONSTRAINT_KEYS = ("memory", "space", "diverged")


def is_maximize(direction: str) -> bool:
    """The one reading of a direction ("maximize" | "minimize"); raises ValueError otherwise."""
    if direction not in ("maximize", "minimize"):
        raise ValueError(f"direction {direction!r}: allowed: maximize, minimize")
    return direction == "maximize"


def to_minimize(values: Sequence[float], directions: Sequence[str]) -> list[float]:
    """``values`` as "smaller is better" (maximised objectives negated)."""
    return [-float(v) if is_maximize(d) else float(v) for v, d in zip(values, directions)]


def utilization_warning(config: Config, gpus: int) -> str | None:
    """Why ``device_util`` as an objective means nothing on a machine without GPUs, or None."""
    if gpus or "device_util" not in config.metric_names:
        return None
    return ("objectives: device_util on a CPU measures the machine, not the config (every config keeps the cores "
            "busy: 0.93-0.999 on the quickstart grid, and it drops when other processes run); it is kept in every "
            "record as a diagnostic; remove it from objectives here")


def sentinel(direction: str) -> float:
    """The worst finite value of an objective: what an infeasible trial reports."""
    return SENTINEL_MAXIMIZE if is_maximize(direction) else SENTINEL_MINIMIZE


def values(config: Config, result: TrialResult) -> list[float]:
    """The objective values of a result, in the config's order; sentinels unless ``ok``."""
    out = []
    for obj in config.objectives:
        v = result.metrics.value(obj.metric)
        out.append(v if result.status is Status.OK and v is not None else sentinel(obj.direction))
    return out


#: The reason's start of a proposal skipped because a search trial already measured its params.
DUPLICATE = "duplicate:"


def is_duplicate(result: TrialResult) -> bool:
    """A proposal skipped as a repeat of a measured search trial's params (``study.admission``)."""
    return result.status is Status.SKIPPED and (result.reason or "").startswith(DUPLICATE)


def constraints(result: TrialResult) -> dict[str, float]:
    """Constraint values: ``memory`` > 0 for oom and memory-skipped trials, ``space`` > 0 for
    combinations that break the batch rules, ``diverged`` > 0 for a non-finite loss (so the
    sampler learns the learning-rate boundary as it learns the memory boundary); 0 (feasible)
    otherwise, and for a proposal skipped as a duplicate of a measured trial."""
    if is_duplicate(result):  # told as the trial it repeats: feasible
        return {"memory": 0.0, "space": 0.0, "diverged": 0.0}
    status, reason = result.status, result.reason or ""
    space_bad = status is Status.SKIPPED and reason.startswith("space:")
    diverged = status is Status.DIVERGED or (status is Status.SKIPPED and reason.startswith("diverged:"))
    memory_bad = status is Status.OOM or (status is Status.SKIPPED and not space_bad and not diverged)
    return {"memory": float(memory_bad), "space": float(space_bad), "diverged": float(diverged)}


def is_feasible(result: TrialResult, metrics: Sequence[str]) -> bool:
    """Only ``ok`` trials with every objective present and finite can be on a front."""
    return result.status is Status.OK and result.metrics.has_finite(list(metrics))
