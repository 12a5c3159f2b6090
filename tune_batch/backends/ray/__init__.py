"""The Ray backend, the only place that imports ray: ``session`` (connect or start a local
instance), ``resources`` (what a trial asks for), ``searcher`` (OptunaSearch through the Optuna
seam), ``trainable`` (one trial, with the ``watchdog``), ``data_parallel`` (data-parallel
trials on a ``group`` of Ray actors), ``callbacks`` (records and progress on the driver), ``cleanup`` (orphaned worker
groups) and ``search`` (the Tuner, and the session whose two verbs run trials and planned jobs)."""

from __future__ import annotations

from tune_batch.backends.ray.resources import ResourcePlan, plan_resources

# the session (which imports ray, seconds) is ``tune_batch.backends.ray.search.session``: imported from
# there by the search that runs on Ray, so that the resource plan (validate's notes) is read without Ray.
# (Not re-exported lazily here: the package's attribute ``session`` is its ``session`` module once that loads.)
__all__ = ["ResourcePlan", "plan_resources"]
