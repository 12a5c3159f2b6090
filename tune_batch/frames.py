"""A run as a pandas DataFrame: one row per record (searched trials, repeats, confirmation
runs), params and metrics flattened, typed columns. ``load_run(RUN_DIR)`` reads a finished or
interrupted run; ``SearchResult.dataframe()`` is the same for a search just run."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tune_batch.records import TrialResult

#: info fields worth a column beside the metrics (the rest stays in trials.jsonl)
INFO_COLUMNS = ("seed", "repeat_of", "confirm_of", "precision", "optimizer", "accumulation_steps",
                "micro_batch_size", "statistical_efficiency", "chance_acc", "final_loss", "disturbed", "device",
                "bottleneck", "world_size", "train_s")


def _row(r: TrialResult) -> dict[str, Any]:
    kind = "repeat" if r.info.repeat_of is not None else "confirm" if r.info.confirm_of is not None else "trial"
    out: dict[str, Any] = {"trial_id": str(r.trial_id), "kind": kind, "status": r.status.value, "reason": r.reason,
                           "batch_size": r.params.batch_size, "lr": r.params.lr, "num_gpus": r.params.num_gpus}
    out.update({f"param_{k}": v for k, v in r.params.extra.items()})
    out.update(r.metrics.to_dict())
    out["duration_s"] = r.duration_s
    out.update({k: r.info.get(k) for k in INFO_COLUMNS})
    return out


def to_frame(records: Sequence[TrialResult]) -> Any:
    """The records as a DataFrame (pandas is imported here, not by ``import tune_batch``)."""
    import pandas as pd

    rows = [_row(r) for r in records]
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
    from tune_batch.errors import RunDirError
    from tune_batch.report import latest_per_trial
    from tune_batch.results import RunDir

    run = RunDir(run_dir)
    if not run.trials_path.exists():
        raise RunDirError(f"{run_dir}: no trials.jsonl here: not a tune_batch run directory")
    records, _ = run.records()
    return to_frame(latest_per_trial(records))
