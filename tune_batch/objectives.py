"""Objectives: which metrics, which directions, the values told to the sampler, and the
constraint values that mark a trial infeasible (Optuna: feasible when every value <= 0)."""

from __future__ import annotations

from typing import Any

from tune_batch.config import Config

#: Finite stand-ins for infeasible / failed trials (Ray warns on inf; Optuna needs every value).
SENTINEL_MAXIMIZE = 0.0
SENTINEL_MINIMIZE = 1e18

CONSTRAINT_KEYS = ("memory", "space")


def sentinel(direction: str) -> float:
    return SENTINEL_MAXIMIZE if direction == "maximize" else SENTINEL_MINIMIZE


def values(config: Config, record: dict[str, Any]) -> list[float]:
    """The objective values of a record, in the config's order; sentinels unless ``ok``."""
    metrics = record.get("metrics") or {}
    out = []
    for obj in config.objectives:
        v = metrics.get(obj.metric)
        out.append(float(v) if record.get("status") == "ok" and v is not None else sentinel(obj.direction))
    return out


def constraints(record: dict[str, Any]) -> dict[str, float]:
    """Constraint values: ``memory`` > 0 for oom and memory-skipped trials, ``space`` > 0 for
    combinations that break the batch rules; 0 (feasible) otherwise."""
    status, reason = record.get("status"), record.get("reason") or ""
    space_bad = status == "skipped" and reason.startswith("space:")
    memory_bad = status == "oom" or (status == "skipped" and not space_bad)
    return {"memory": 1.0 if memory_bad else 0.0, "space": 1.0 if space_bad else 0.0}


def is_feasible(record: dict[str, Any]) -> bool:
    """Only ``ok`` trials with every objective present and finite can be on a front."""
    return record.get("status") == "ok"
