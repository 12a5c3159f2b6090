"""One measured trial, in parts: ``setup`` (placement, step plan, data, model), ``loop`` (the
training step), ``window`` (what exists only to measure), ``evaluate``, ``collective`` (data-
parallel helpers), ``derive`` (MFU, bottleneck), ``faults`` and ``run`` (the whole trial)."""

from __future__ import annotations

from tune_batch.trial.derive import bottleneck
from tune_batch.trial.faults import NonFiniteError, TrialTimeout, classify
from tune_batch.trial.run import measure, run_trial
from tune_batch.trial.setup import Placement

__all__ = ["NonFiniteError", "Placement", "TrialTimeout", "bottleneck", "classify", "measure", "run_trial"]
