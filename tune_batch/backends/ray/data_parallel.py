"""Data-parallel trials: ``num_gpus`` = n > 1 workers on a worker group of Ray actors
(``group``) launched from the Tune trial (nccl on CUDA; gloo CPU worker processes without GPUs,
so the same path runs everywhere).

Every rank runs the same measured training (``trial.measure``); a fault on any rank is raised,
the trial's process ends the whole group at once (no rank waits in a collective), and turns the
workers' exceptions into one record with ``trial.classify``: ``oom`` when any worker ran out of
memory, ``failed`` otherwise.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

import ray
from ray.exceptions import RayTaskError

from tune_batch.backends.ray.group import Rank, run_group
from tune_batch.backends.ray.watchdog import hang_grace_s, seconds_from_env
from tune_batch.config import Config, config_from_dict
from tune_batch.config.callables import install, registered
from tune_batch.errors import TrialConfigError
from tune_batch.measure.oom import is_oom_error
from tune_batch.store.records import Params, Status, TrialInfo, TrialResult
from tune_batch.trial.faults import (
    NonFiniteError,
    TrialTimeout,
    classify,
    first_line,
    inner_errors,
    memory_monitor_reason,
)

LAUNCHER = "tune_batch.backends.ray.group.run_group"
KV_NAMESPACE = "tune_batch"  # Ray's key-value store (GCS): every node and Ray Client see it


def _started_prefix(token: str) -> str:
    return f"group-started:{token}:"


class GroupStart:
    """When the driver saw every rank of a worker group enter the training function: each rank
    writes a key to Ray's key-value store on entry (a file would not reach the driver from
    another node). Starting a group costs seconds (fresh processes that import torch, the
    rendezvous), more on a busy machine, so a group's clock for ``budget.trial_timeout_s`` starts
    here, not when the group was asked for."""

    def __init__(self, n: int, token: str) -> None:
        self.n, self.token = n, token
        self.at: float | None = None  # seconds after the group was asked for
        self.seen = 0

    def poll(self, elapsed: float) -> float | None:
        if self.at is None:
            from ray.experimental.internal_kv import _internal_kv_list

            self.seen = len(_internal_kv_list(_started_prefix(self.token), namespace=KV_NAMESPACE))
            if self.seen >= self.n:
                self.at = elapsed
        return self.at

    def clear(self) -> None:
        from ray.experimental.internal_kv import _internal_kv_del

        _internal_kv_del(_started_prefix(self.token), del_by_prefix=True, namespace=KV_NAMESPACE)


def _mark_started(token: str, rank: int) -> None:
    from ray.experimental.internal_kv import _internal_kv_put

    _internal_kv_put(f"{_started_prefix(token)}{rank}", b"1", namespace=KV_NAMESPACE)


def _worker_loop(loop_config: dict[str, Any], rank: Rank) -> dict[str, Any] | None:
    import torch

    from tune_batch.trial import Placement, measure

    _mark_started(loop_config["start_token"], rank.rank)
    placement = Placement(rank=rank.rank, world=rank.world, threads=loop_config["threads"],
                          node_id=str(ray.get_runtime_context().get_node_id()))
    torch.set_num_threads(loop_config["threads"])
    install(loop_config.get("callables"))  # Python callables the driver's config names
    config, params = config_from_dict(loop_config["config"]), Params.of(loop_config["params"])
    if config.train.loop != "tune_batch":  # the user's trainer, one rank of its data-parallel run
        res = _trainer_rank(config, params, loop_config, rank.world)
        return res.to_record() if placement.rank == 0 else None
    if loop_config.get("confirm_of") is not None:  # a confirmation run of the group's config
        from tune_batch.trial.curve import confirm_measure, stop_at_target

        res = confirm_measure(config, params, placement, confirm_of=loop_config["confirm_of"],
                              extra=loop_config.get("extra"), until=stop_at_target(config)
                              ).replace(trial_id=loop_config["trial_id"])
    else:
        res = measure(config, params, placement, extra=loop_config.get("extra"), run_dir=loop_config["run_dir"],
                      trial_id=loop_config["trial_id"], validate=loop_config["validate"])
    return res.to_record() if placement.rank == 0 else None


def _trainer_rank(config: Config, params: Params, loop_config: dict[str, Any], world: int) -> TrialResult:
    """One rank of a trial or confirmation run in the user's trainer (``trial.trainers.MULTI_DEVICE``)."""
    from tune_batch.trial.curve import confirm_timeout_s, stop_at_target
    from tune_batch.trial.trainers import measure_trainer
    from tune_batch.trial.trainers.curve import confirm_trainer

    if loop_config.get("confirm_of") is not None:
        res = confirm_trainer(config, params, confirm_timeout_s(config), confirm_of=loop_config["confirm_of"],
                              until=stop_at_target(config), world=world)
    else:
        res = measure_trainer(config, params, validate=loop_config["validate"], world=world)
    return res.replace(trial_id=loop_config["trial_id"])


def classify_failure(exc: BaseException) -> tuple[Status, str]:
    """(status, reason) of a failed worker group, from the workers' exception types."""
    errors = inner_errors(exc)
    for e in errors:  # before the OOM test: Ray's message reads "out of memory" too
        if (killed := memory_monitor_reason(str(e))) is not None:
            return Status.FAILED, f"a worker was {killed}"
    for e in errors:
        if is_oom_error(e):
            return Status.OOM, f"a worker ran out of memory: {type(e).__name__}: {first_line(e, 250)}"
    # the worker's own exception before Ray's wrapper of it (an instance of its class too, whose
    # first line names the actor, not the fault)
    for e in sorted(errors, key=lambda x: isinstance(x, RayTaskError)):
        if isinstance(e, TrialTimeout | NonFiniteError | TrialConfigError):
            return classify(e)[:2]
    inner = errors[1] if len(errors) > 1 else errors[0]  # the workers' own error before Ray's wrapper
    return Status.FAILED, f"worker group: {type(inner).__name__}: {first_line(inner)}"


def group_start_slack_s() -> float:
    """Seconds a worker group may take until every worker runs the training function (up to 22 s
    were measured on a busy 2-core machine); ``TUNE_BATCH_GROUP_START_SLACK_S`` overrides it."""
    return seconds_from_env("TUNE_BATCH_GROUP_START_SLACK_S", 60.0)


def run_data_parallel(config: Config, params: Params, *, trial_id: Any, run_dir: str | Path, cpus_per_worker: float,
                      threads_per_worker: int, use_gpu: bool, validate: bool = True,
                      extra: dict[str, Any] | None = None, confirm_of: Any = None) -> TrialResult:
    """One ``num_gpus`` > 1 trial (or, with ``confirm_of``, a confirmation run at length) on a
    worker group; never raises for trial faults. A group whose workers are not all running after
    the start-up slack, or still running its time limit (``budget.trial_timeout_s``; a
    confirmation run's scaled to its length) + the hang grace after they all started, is ended
    and recorded as failed. The group's processes and reservation are released before it
    returns."""
    start = time.perf_counter()
    n = params.num_gpus
    token = uuid.uuid4().hex
    loop_config = {"config": config.to_dict(), "params": params.to_dict(), "trial_id": trial_id, "start_token": token,
                   "callables": registered(), "threads": threads_per_worker, "run_dir": str(run_dir),
                   "validate": validate, "extra": extra, "confirm_of": confirm_of}
    slack, grace = group_start_slack_s(), hang_grace_s()
    if confirm_of is not None:
        from tune_batch.trial.curve import confirm_timeout_s

        run_s = confirm_timeout_s(config) + grace
    else:
        run_s = config.budget.trial_timeout_s + grace
    started = GroupStart(n, token)

    def allowance(elapsed: float) -> float:
        at = started.poll(elapsed)
        return slack if at is None else at + run_s

    try:
        outcome = run_group(_worker_loop, loop_config, n=n, cpus_per_worker=cpus_per_worker, use_gpu=use_gpu,
                            allowance=allowance)
    finally:
        started.clear()
    took = time.perf_counter() - start
    info = TrialInfo(world_size=n, launcher=LAUNCHER, group_start_s=started.at, confirm_of=confirm_of,
                     seed=config.search.seed if confirm_of is not None else None)
    if outcome.hung:
        if started.at is None:
            reason = (f"timeout: {started.seen} of the {n}-worker group's workers had started after {slack:g} s "
                      f"(TUNE_BATCH_GROUP_START_SLACK_S changes it); its workers were stopped")
        else:
            reason = (f"timeout: the {n}-worker group was still running {run_s:g} s after its workers started "
                      f"({'the confirmation run' if confirm_of is not None else 'budget.trial_timeout_s'}'s limit + "
                      f"{grace:g} s grace); "
                      f"its workers were stopped")
        return TrialResult(trial_id, params, Status.FAILED, reason, duration_s=took, info=info)
    if outcome.error is not None:
        status, reason = classify_failure(outcome.error)
        return TrialResult(trial_id, params, status, reason, duration_s=took, info=info)
    rec = outcome.value
    if not isinstance(rec, dict):
        return TrialResult(trial_id, params, Status.FAILED, "the worker group returned no record", duration_s=took,
                           info=info)
    res = TrialResult.from_record(rec)
    return res.replace(duration_s=took, info=res.info.with_(world_size=n, launcher=LAUNCHER, group_start_s=started.at))
