"""A run as a pandas DataFrame: one row per record (searched trials, repeats, confirmation
runs), params and metrics flattened, typed columns. ``load_run(RUN_DIR)`` reads a finished or
interrupted run; ``SearchResult.dataframe()`` is the same for a search just run; ``results.csv``
is this frame written out (with the report's per-config mean, half-width and run count of each
objective beside each record)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tune_batch.decide.horizon import is_horizon
from tune_batch.store.records import TrialResult
from tune_batch.store.rundir import replace_file

if TYPE_CHECKING:  # the report is passed in, never imported here
    from tune_batch.analysis.report import Report

#: info fields worth a column beside the metrics (the rest stays in trials.jsonl)
INFO_COLUMNS = ("seed", "repeat_of", "confirm_of", "precision", "optimizer", "accumulation_steps",
                "micro_batch_size", "statistical_efficiency", "chance_acc", "final_loss", "disturbed", "device",
                "bottleneck", "world_size", "train_s", "others_cpu_frac", "other_gpu_processes", "sm_active",
                "tensor_active", "host")


def _row(r: TrialResult, report: Report | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"trial_id": str(r.trial_id), "kind": r.kind, "status": r.status.value, "reason": r.reason,
                           "batch_size": r.params.batch_size, "lr": r.params.lr, "num_gpus": r.params.num_gpus}
    out.update({f"param_{k}": v for k, v in r.params.extra.items()})
    metrics = {f.name: getattr(r.metrics, f.name) for f in fields(r.metrics) if f.name != "other"}
    metrics.update(r.metrics.other)  # every metric a column, also where no record has it
    # the window's own scatter; "<objective>_ci" is the spread over a config's runs (below)
    metrics["samples_per_s_window_ci"] = metrics.pop("samples_per_s_ci", None)
    out.update(metrics)
    if report is not None:
        point = report.points.get(r.trial_id)
        out["runs"] = point.n if point is not None else None
        out["step_runs"] = point.step_runs if point is not None else None  # samples/s: every run of the step
        for m in report.config.metric_names:
            out[f"{m}_mean"], out[f"{m}_ci"] = report.stat(r, m) if point is not None else (None, None)
        # the searched trial's row only (a repeat or confirmation run is a run of it, not a config)
        out["on_front"] = r.searched and any(f.trial_id == r.trial_id for f in report.front)
        rec = report.recommended  # a kept baseline is its first confirmation run's row
        out["recommended"] = (rec is not None and rec.trial_id == r.trial_id and (r.searched or report.baseline_kept))
        if rec is not None and is_horizon(rec):  # a horizon-scaled config: the run standing for it
            out["recommended"] = (r.info.confirm_of == rec.trial_id and r.info.seed == rec.info.seed
                                  and r.info.rung == rec.info.rung)
    out["duration_s"] = r.duration_s
    out.update({k: r.info.get(k) for k in INFO_COLUMNS})
    return out


def to_frame(records: Sequence[TrialResult], report: Report | None = None) -> Any:
    """The records as a DataFrame (pandas is imported here, not by ``import tune_batch``); with
    the run's report, each objective's mean over the config's runs, its 95 % half-width and the
    number of runs as ``<metric>_mean``, ``<metric>_ci`` and ``runs``, and whether the trial is
    on the front (``on_front``) and the recommended one (``recommended``: with confirmation it
    can be off the front)."""
    import pandas as pd

    rows = [_row(r, report) for r in records]
    frame = pd.DataFrame(rows)
    if frame.empty:
        return frame
    for col in ("batch_size", "num_gpus"):
        frame[col] = frame[col].astype("int64")
    for col in ("status", "kind"):
        frame[col] = frame[col].astype("category")
    return frame


def load_run(run_dir: str | Path) -> Any:
    """Every record of a run directory (finished or interrupted) as a DataFrame; the last record
    of a trial id wins, as in the reports. Raises RunDirError when it is not a run directory."""
    from tune_batch.analysis.report import latest_per_trial
    from tune_batch.errors import RunDirError
    from tune_batch.store.rundir import RunDir

    run = RunDir(run_dir)
    if not run.trials_path.exists():
        raise RunDirError(f"{run_dir}: no trials.jsonl here: not a tune_batch run directory")
    records, _ = run.records()
    return to_frame(latest_per_trial(records))


def write_csv(records: Sequence[TrialResult], report: Report, path: Path) -> None:
    """``results.csv``: the frame of ``records`` with the report's columns (a header alone when
    there is no record)."""
    frame = to_frame(records, report)
    if frame.empty:
        cols = ["trial_id", "kind", "status", "reason", "batch_size", "lr", "num_gpus", *report.config.metric_names]
        replace_file(path, ",".join(cols) + "\n")
        return
    replace_file(path, frame.to_csv(index=False))
