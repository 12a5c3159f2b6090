"""Metric names and their natural directions: the one vocabulary of records and objectives.

Definitions live in DESIGN.md; units are in the names. Statuses are ``store.records.Status``.
"""

from __future__ import annotations

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
