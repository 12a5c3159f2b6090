"""Data-parallel trials: ``num_gpus`` = n > 1 workers through a Ray Train ``TorchTrainer``
launched from the Tune trial (nccl on CUDA; gloo CPU worker processes without GPUs, so the same
path runs everywhere).

Every rank runs the same measured training (``trial.run_trial`` with ``rank``/``world``); a fault
on any rank is raised, so Ray Train tears the whole group down at once (no rank waits in a
collective), and the driver turns the workers' exceptions into one record: ``oom`` when any
worker ran out of memory, ``failed`` otherwise.
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from tune_batch.config import Config, config_from_dict
from tune_batch.oom import is_oom_error
from tune_batch.trial import TrialResult, normalize_params, run_trial, skip_result


def _worker_loop(loop_config: dict[str, Any]) -> dict[str, Any] | None:
    import ray.train

    ctx = ray.train.get_context()
    rank, world = ctx.get_world_rank(), ctx.get_world_size()
    config = config_from_dict(loop_config["config"])
    res = run_trial(config, loop_config["params"], trial_id=loop_config["trial_id"], threads=loop_config["threads"],
                    run_dir=loop_config["run_dir"], validate=loop_config["validate"], rank=rank, world=world,
                    extra=loop_config.get("extra"))
    return res.to_record() if rank == 0 else None


def _failures(exc: BaseException) -> list[BaseException]:
    """The workers' own exceptions inside a Ray Train failure (pinned Ray: ``worker_failures``)."""
    found: list[BaseException] = []
    seen: set[int] = set()
    stack: list[BaseException] = [exc]
    while stack:
        e = stack.pop()
        if id(e) in seen:
            continue
        seen.add(id(e))
        found.append(e)
        wf = getattr(e, "worker_failures", None)
        if isinstance(wf, dict):
            stack.extend(v for v in wf.values() if isinstance(v, BaseException))
        for attr in ("cause", "__cause__", "__context__"):
            inner = getattr(e, attr, None)
            if isinstance(inner, BaseException):
                stack.append(inner)
    return found


def classify_failure(exc: BaseException) -> tuple[str, str]:
    """(status, reason) of a failed worker group."""
    errors = _failures(exc)
    for e in errors:
        if is_oom_error(e):
            return "oom", f"a worker ran out of memory: {type(e).__name__}: {str(e).splitlines()[0][:250]}"
    for e in errors[1:] + errors[:1]:  # the workers' own errors before Ray's wrapper
        name = type(e).__name__
        if name in ("TrialTimeout", "NonFiniteError"):
            return "failed", str(e).splitlines()[0][:300]
    inner = errors[1] if len(errors) > 1 else errors[0]
    return "failed", f"worker group: {type(inner).__name__}: {str(inner).splitlines()[0][:300] if str(inner) else ''}"


def group_start_slack_s() -> float:
    """Seconds a worker group may take to start, beyond ``budget.trial_timeout_s``, before a
    group still running counts as hung (20-25 s were measured on a 2-core machine).
    ``TUNE_BATCH_GROUP_START_SLACK_S`` overrides it (the tests shorten it)."""
    try:
        return max(0.0, float(os.environ.get("TUNE_BATCH_GROUP_START_SLACK_S", "60")))
    except ValueError:
        return 60.0


def run_data_parallel(config: Config, params: dict[str, Any], *, trial_id: Any, run_dir: str | Path,
                      cpus_per_worker: float, threads_per_worker: int, use_gpu: bool,
                      skip_reason: str | None = None, validate: bool = True,
                      extra: dict[str, Any] | None = None) -> TrialResult:
    """One ``num_gpus`` > 1 trial on a Ray Train worker group; never raises for trial faults.
    A group still running after ``budget.trial_timeout_s`` (plus start-up slack) ends as failed."""
    import ray.train
    from ray.train.torch import TorchTrainer

    start = time.perf_counter()
    params = normalize_params(params)
    skipped = skip_result(config, params, trial_id, skip_reason)
    if skipped is not None:  # the batch rules or the memory model: no group is started
        return skipped
    n = params["num_gpus"]
    resources: dict[str, float] = {"CPU": cpus_per_worker}
    if use_gpu:
        resources["GPU"] = 1.0
    trainer = TorchTrainer(
        _worker_loop,
        train_loop_config={"config": config.to_dict(), "params": params, "trial_id": trial_id,
                           "threads": threads_per_worker, "run_dir": str(run_dir), "validate": validate, "extra": extra},
        scaling_config=ray.train.ScalingConfig(num_workers=n, use_gpu=use_gpu, resources_per_worker=resources),
        run_config=ray.train.RunConfig(name=f"trial-{trial_id}-{uuid.uuid4().hex[:8]}",
                                       storage_path=str((Path(run_dir) / "ray_train").resolve()),
                                       failure_config=ray.train.FailureConfig(max_failures=0)),
    )
    box: dict[str, Any] = {}

    def fit() -> None:
        try:
            box["result"] = trainer.fit()
        except BaseException as e:  # handed to the caller's thread below
            box["error"] = e

    thread = threading.Thread(target=fit, name=f"tune_batch-dp-{trial_id}", daemon=True)
    thread.start()
    slack = group_start_slack_s()
    thread.join(config.budget.trial_timeout_s + slack)  # + worker group start-up
    info: dict[str, Any] = {"world_size": n, "launcher": "ray.train.torch.TorchTrainer"}
    took = time.perf_counter() - start
    if thread.is_alive():
        # the group still holds its workers: the caller must end this process (Ray then ends
        # the actors it owns, the Train controller and through it the worker group)
        info["group_alive"] = True
        return TrialResult(trial_id, params, "failed", f"timeout: the {n}-worker group was still running after "
                           f"budget.trial_timeout_s + {slack:g} s start-up; its workers were stopped", {}, took, info)
    if "error" in box:
        status, reason = classify_failure(box["error"])
        return TrialResult(trial_id, params, status, reason, {}, took, info)
    rec = getattr(box["result"], "return_value", None)
    if not isinstance(rec, dict):
        return TrialResult(trial_id, params, "failed", "the worker group returned no record", {}, took, info)
    res = TrialResult.from_record(rec)
    return TrialResult(res.trial_id, res.params, res.status, res.reason, res.metrics, took,
                       {**res.info, **info, "group_start_s": took - res.duration_s}, res.traceback)


def release_orphaned_groups() -> list[str]:
    """Remove the placement groups whose creating actor is dead: the worker group reservation of
    a Ray Train controller that died with its trial's process (a hung group's trial is ended by
    raising, see ``backends/ray.py``). Ray Train's own cleaner asks the state API whether the
    controller is alive, and that API is served by Ray's dashboard, which tune_batch does not
    start; without this sweep the group's CPUs and GPUs stay reserved and the search waits
    forever. Only this job's placement groups are looked at, and one made by a driver (Tune's
    own) or a detached actor is never touched. Uses Ray 2.60's private GCS table (Ray is
    pinned). Returns the removed ids."""
    import ray
    from ray._private.state import state
    from ray.core.generated import gcs_pb2
    from ray.util.placement_group import PlacementGroup, remove_placement_group

    removed = []
    job = ray.get_runtime_context().get_job_id()  # only this search's own: never another job's on a shared cluster
    for raw in state._connect_and_get_accessor().get_placement_group_table():
        pg = gcs_pb2.PlacementGroupTableData.FromString(raw)
        made_by_an_actor = bool(pg.creator_actor_id) and not ray.ActorID(pg.creator_actor_id).is_nil()
        orphaned = (made_by_an_actor and pg.creator_actor_dead and not pg.is_detached
                    and pg.state != gcs_pb2.PlacementGroupTableData.REMOVED and ray.JobID(pg.creator_job_id).hex() == job)
        if not orphaned:
            continue
        pg_id = ray.PlacementGroupID(pg.placement_group_id)
        remove_placement_group(PlacementGroup(pg_id))
        removed.append(pg_id.hex())
    return removed

