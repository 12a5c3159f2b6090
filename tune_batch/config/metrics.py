"""Metric names and their natural directions: the one vocabulary of records and objectives.

Definitions live in DESIGN.md; units are in the names. Statuses are ``store.records.Status``.
"""

from __future__ import annotations

import re

#: Metrics a trial measures that can be chosen as objectives, with their natural direction.
OBJECTIVE_METRICS: dict[str, str] = {
    "samples_per_s": "maximize",
    "device_util": "maximize",
    "val_acc": "maximize",
    "mfu": "maximize",
    "peak_mem_bytes": "minimize",
    "data_wait_frac": "minimize",
    "duration_s": "minimize",
    "goodput": "maximize",
}


def reached(value: float, target: float, maximize: bool) -> bool:
    """Whether ``value`` is at ``target`` or past it in the metric's direction."""
    return value >= target if maximize else value <= target


def is_evaluated(name: str) -> bool:
    """Whether ``name`` is a metric the user's evaluation returns (val_* / eval_*), not a built-in one."""
    return name not in OBJECTIVE_METRICS and re.fullmatch(r"(val|eval)_\w+", name) is not None
