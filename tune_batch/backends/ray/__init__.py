"""The Ray backend, the only place that imports ray: ``session`` (connect or start a local
instance), ``resources`` (what a trial asks for), ``searcher`` (OptunaSearch through the Optuna
seam), ``trainable`` (one trial, with the ``watchdog``), ``data_parallel`` (Ray Train worker
groups), ``callbacks`` (records and progress on the driver), ``cleanup`` (orphaned worker
groups) and ``search`` (the Tuner, and the session whose two verbs run trials and planned jobs)."""

from __future__ import annotations

from typing import Any

from tune_batch.backends.ray.resources import ResourcePlan, plan_resources

__all__ = ["ResourcePlan", "plan_resources", "session"]


def __getattr__(name: str) -> Any:
    """``session`` imports ray (seconds): only when asked for, so that the resource plan
    (``validate``'s notes) is read without it."""
    if name == "session":
        from tune_batch.backends.ray.search import session

        return session
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
