"""Experiment trackers: a finished (or interrupted) search sent to MLflow (``search.log_to:
[mlflow]`` or ``--log-to mlflow``).

One MLflow run per search (the experiment is the config's name), tagged with its run directory,
holding the front, the recommendation, the noise and the run's files as artifacts; under it one
nested run per record (searched trials, repeats, confirmation runs) with its params, every
numeric metric, and its status and reason as tags. Sending again (a resumed search) reuses the
search's run and adds only records not sent before, so nothing is logged twice.

Why not Ray Tune's ``MLflowLoggerCallback`` or Optuna's ``MLflowCallback``: each sees only its own
backend's trials, neither sees the repeats and confirmation runs made after the search, and both
log Tune's or Optuna's state (a trial out of memory is a finished Tune trial, or a COMPLETE
Optuna trial with made-up values) instead of the record's status. The default store is a local
SQLite file in the run directory: MLflow 3 refuses its plain-file store (``./mlruns``) unless
``MLFLOW_ALLOW_FILE_STORE=true`` is set.
"""

from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path
from typing import Any

from tune_batch.errors import ConfigError

_RUN_DIR_TAG = "tune_batch.run_dir"


def default_uri(run_dir: Path) -> str:
    return f"sqlite:///{Path(run_dir).resolve() / 'mlflow.db'}"


def check_trackers(names: list[str]) -> None:
    """Refuse, before anything runs, a tracker whose package is missing."""
    for name in names:
        if name == "mlflow":
            try:
                import mlflow  # noqa: F401
            except ImportError:
                raise ConfigError("search.log_to: mlflow needs the mlflow package: pip install mlflow-skinny "
                                  "(or pip install 'tune-batch[mlflow]')") from None


def _numeric(d: dict[str, Any]) -> dict[str, float]:
    return {k: float(v) for k, v in d.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(float(v))}


def tracking_uri(uri: str | None, run_dir: Path) -> str:
    """Where the records go: ``search.tracking_uri``, else ``MLFLOW_TRACKING_URI`` (the user's
    tracking server, as every MLflow tool reads it), else the run directory's SQLite store."""
    return uri or os.environ.get("MLFLOW_TRACKING_URI") or default_uri(run_dir)


def log_to_mlflow(report: Any, run_dir: Path, uri: str | None = None) -> tuple[str, str, int]:
    """Send the report's records to MLflow at ``uri`` (default: ``tracking_uri``'s). Returns (the
    tracking URI used, the search's MLflow run id, records newly sent)."""
    import logging

    from mlflow import MlflowClient
    from mlflow.entities import Metric, Param, RunTag

    logging.getLogger("mlflow").setLevel(logging.WARNING)  # "Creating initial MLflow database tables..."
    run_dir = Path(run_dir).resolve()
    used = tracking_uri(uri, run_dir)
    client = MlflowClient(used)
    name = report.config.name
    exp = client.get_experiment_by_name(name)
    exp_id = exp.experiment_id if exp else client.create_experiment(
        name, artifact_location=(run_dir / "mlflow-artifacts").as_uri() if used == default_uri(run_dir) else None)
    found = client.search_runs([exp_id], filter_string=f"tags.`{_RUN_DIR_TAG}` = '{run_dir}'")
    parent = next((r for r in found if "mlflow.parentRunId" not in r.data.tags), None)
    if parent is None:
        parent = client.create_run(exp_id, run_name=f"search {run_dir.name}", tags={_RUN_DIR_TAG: str(run_dir)})
    pid = parent.info.run_id
    sent = {r.data.tags.get("tune_batch.trial_id") for r in found if r.data.tags.get("mlflow.parentRunId") == pid}
    now, new = int(time.time() * 1000), 0
    front = {r.trial_id for r in report.front}
    rec = report.recommended
    for r in [*report.records, *report.repeats, *report.confirm_runs]:
        if str(r.trial_id) in sent:
            continue
        tags = {"mlflow.parentRunId": pid, _RUN_DIR_TAG: str(run_dir), "tune_batch.trial_id": str(r.trial_id),
                "status": r.status.value, "kind": r.kind, "reason": (r.reason or "")[:4000]}
        child = client.create_run(exp_id, run_name=f"{r.kind} {r.trial_id}", tags=tags)
        params = [Param(k, str(v)) for k, v in r.params.to_dict().items()]
        metrics = [Metric(k, v, now, 0) for k, v in _numeric(r.metrics.to_dict()).items()]
        client.log_batch(child.info.run_id, metrics=metrics, params=params)
        client.set_terminated(child.info.run_id, "FINISHED" if r.status.value == "ok" else "FAILED")
        new += 1
    tags = [RunTag("front", ",".join(str(t) for t in sorted(front, key=str))),
            RunTag("recommended_trial", "" if rec is None else str(rec.trial_id)),
            RunTag("recommendation_method", report.method or ""),
            RunTag("objectives", ",".join(report.config.metric_names))]
    params = [] if parent.data.params else [
        Param("sampler", report.config.search.sampler), Param("seed", str(report.config.search.seed)),
        Param("trials", str(report.config.budget.trials)),
        Param("train_samples", str(report.config.budget.train_samples))]
    if rec is not None:  # tags, not params: a resumed search may recommend another config
        tags += [RunTag(f"recommended_{k}", str(v)) for k, v in rec.params.to_dict().items()]
    metrics = [Metric("hypervolume", float(report.hypervolume), now, 0)] if report.hypervolume is not None else []
    metrics += [Metric("records", float(len(report.records)), now, 0), Metric("front_size", float(len(front)), now, 0)]
    if rec is not None:  # the recommendation's figures as the front gives them: means over its runs, half-widths
        for m in report.config.metric_names:
            mean, ci = report.stat(rec, m)
            metrics += [Metric(f"recommended_{k}", v, now, 0)
                        for k, v in _numeric({m: mean, f"{m}_ci": ci}).items()]
    b = report.baseline
    if b is not None:  # the summary's first line, comparable across searches in MLflow
        low, high = b.speedup_interval or (None, None)
        metrics += [Metric(f"baseline_{k}", v, now, 0) for k, v in _numeric(
            {"speedup": b.speedup, "speedup_ci": b.speedup_ci, "time_to_target_s": b.time_to_target_s,
             "speedup_low": low, "speedup_high": high,
             "speedup_at_least": b.speedup_at_least, "recommended_time_to_target_s": b.recommended_s}).items()]
        tags += [RunTag("baseline_kept", str(b.kept)),
                 RunTag("baseline_params", json.dumps(b.params.to_dict(), sort_keys=True))]
    client.log_batch(pid, metrics=metrics, params=params, tags=tags)
    for f in ("pareto.json", "results.csv", "report.html", "best.yaml"):
        if (run_dir / f).exists():
            client.log_artifact(pid, str(run_dir / f))
    client.set_terminated(pid, "FINISHED")
    return used, pid, new
