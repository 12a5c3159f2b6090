"""Driver-side Tune callback: each finished trial's record appended to the run directory,
progress shown, and errors Ray reports turned into records by their exception types."""

from __future__ import annotations

import contextlib
import json
import re
from pathlib import Path
from typing import Any

from ray import tune

from tune_batch.analysis.points import one_worker_sps, scaling_efficiency
from tune_batch.backends.progress import Progress
from tune_batch.backends.ray.trainable import CONTROL_KEYS
from tune_batch.errors import RecordNotWritten, TuneBatchError
from tune_batch.store.records import Params, Status, TrialInfo, TrialResult
from tune_batch.store.rundir import RunDir
from tune_batch.trial.faults import NonFiniteError, TrialTimeout, first_line, inner_errors, memory_monitor_reason

#: Exceptions whose message is already the one-line reason of a trial record.
OWN_FAULTS = (TrialTimeout, NonFiniteError, TuneBatchError)
_ANSI = re.compile(r"\x1b\[[0-9;]*m")  # Ray colours its task names


def error_reason(err: BaseException | str | None) -> str:
    """One line for a Ray trial error: the trial's own fault when Ray wrapped one (found by
    type along the cause chain), Ray's memory monitor's kill, else Ray's error type and first line."""
    if err is None:
        return "ray: the trial errored (no error was stored)"
    texts = [err] if isinstance(err, str) else [str(e) for e in inner_errors(err)]
    if (killed := next(filter(None, map(memory_monitor_reason, texts)), None)) is not None:
        return killed
    if isinstance(err, str):  # only the text was kept: its last line
        lines = [line for line in err.strip().splitlines() if line.strip()]
        return f"ray: {lines[-1][:300]}" if lines else "ray: the trial errored"
    seen: set[int] = set()
    e: BaseException | None = err
    last = err
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        last = e
        inner = getattr(e, "cause", None)
        if isinstance(e, OWN_FAULTS) and not isinstance(inner, BaseException):
            return first_line(e)  # (a RayTaskError(ConfigError) is one too: its cause has the message)
        e = inner if isinstance(inner, BaseException) else (e.__cause__ or e.__context__)
    # the innermost error is what went wrong (Ray's wrapper's first line names only the actor, in colour)
    return f"ray: {type(last).__name__}: {_ANSI.sub('', first_line(last))}"


def trial_error(trial: Any) -> BaseException | str | None:
    """The error a trial raised: the pickled exception, else its text trace. Read from the
    trial's local files first: when Tune calls ``on_trial_error`` they are written there, but
    not yet synced to the storage path ``get_pickled_error`` reads."""
    from ray import cloudpickle

    for attr, read in (("pickled_error_file", lambda f: cloudpickle.loads(f.read_bytes())),
                       ("error_file", lambda f: f.read_text(errors="replace"))):
        with contextlib.suppress(Exception):
            path = getattr(trial, attr)
            if path and Path(path).exists():
                return read(Path(path))
    for getter in ("get_pickled_error", "get_error"):
        with contextlib.suppress(Exception):
            err = getattr(trial, getter)()
            if err is not None:
                return err
    return None


def failed_record(trial: Any, reason: str) -> TrialResult:
    spec = dict(trial.config)
    params = Params.of({k: v for k, v in spec.items() if k not in CONTROL_KEYS})
    # a repeat or a confirmation run keeps its lineage: never counted as a trial of the search
    info = TrialInfo(seed=spec.get("seed"), repeat_of=spec.get("repeat_of"), confirm_of=spec.get("confirm_of"),
                     rung=spec.get("rung"))
    return TrialResult(spec.get("trial_number"), params, Status.FAILED, reason, info=info,
                       ray_trial_id=trial.trial_id)


class Halt(tune.Stopper):
    """Stops the whole experiment once ``records`` could not write a record."""

    def __init__(self, records: Records) -> None:
        self.records = records

    def __call__(self, trial_id: str, result: dict[str, Any]) -> bool:
        return False

    def stop_all(self) -> bool:
        return self.records.lost is not None


class Records(tune.Callback):
    """Appends each finished trial's record to trials.jsonl and shows progress; adds
    ``scaling_efficiency`` = sps(n) / (n x sps(1)) at the same per-worker batch, when measured."""

    def __init__(self, run_dir: RunDir, progress: Progress) -> None:
        self.run_dir = run_dir
        self.progress = progress
        self.lost: RecordNotWritten | None = None  # a record trials.jsonl refused (it was kept elsewhere)
        self._one_worker_sps: dict[int, float] = {}  # per-worker batch -> best samples/s at num_gpus 1
        for rec in progress.records:
            self._learn(rec)

    def _learn(self, rec: TrialResult) -> None:
        for b, sps in one_worker_sps([rec]).items():
            self._one_worker_sps[b] = max(self._one_worker_sps.get(b, 0.0), sps)

    def _scaling(self, rec: TrialResult) -> TrialResult:
        eff = scaling_efficiency(rec, self._one_worker_sps)
        return rec if eff is None else rec.replace(metrics=rec.metrics.with_(scaling_efficiency=eff))

    def _write(self, rec: TrialResult) -> None:
        self._learn(rec)
        rec = self._scaling(rec)
        try:
            self.run_dir.append(rec)
        except RecordNotWritten as e:  # Tune would swallow it: kept (first one) for the driver, the run halted
            self.lost = self.lost or e
            return
        self.progress.finished(rec)

    def free_skip(self, rec: TrialResult) -> None:
        """A proposal the searcher skipped without starting a trial (no budget used)."""
        self.progress.started()
        self._write(rec)

    def on_trial_start(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        self.progress.started()

    def on_trial_complete(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        last = trial.last_result or {}
        if "tb_record" in last:
            rec = TrialResult.from_record(json.loads(last["tb_record"])).replace(ray_trial_id=trial.trial_id)
        else:
            rec = failed_record(trial, "the trial ended without reporting a result")
        self._write(rec)

    def on_trial_error(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        last = trial.last_result or {}
        if "tb_record" in last:  # the trial reported its record, then errored on purpose (watchdog)
            self._write(TrialResult.from_record(json.loads(last["tb_record"])).replace(ray_trial_id=trial.trial_id))
            return
        self._write(failed_record(trial, error_reason(trial_error(trial))))
