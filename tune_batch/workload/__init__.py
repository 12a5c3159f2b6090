"""Workloads: the model and the data a trial trains on."""

from __future__ import annotations

from tune_batch.workload.data import Datasets, build_datasets
from tune_batch.workload.models import build_model
from tune_batch.workload.resolve import resolve_callable

__all__ = ["Datasets", "build_datasets", "build_model", "resolve_callable"]
