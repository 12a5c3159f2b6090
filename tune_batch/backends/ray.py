"""Ray Tune backend: a Tuner whose OptunaSearch (multi-objective, constrained) proposes trials.

Only this module imports ray. One-worker trials train inside the Tune function itself.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import secrets
import shutil
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial
from typing import Any

import ray
from ray import tune
from ray.tune.search.optuna import OptunaSearch

from tune_batch import objectives
from tune_batch.config import Config, config_from_dict
from tune_batch.errors import UserError
from tune_batch.oom import FeasibilityModel
from tune_batch.progress import Progress
from tune_batch.results import RunDir
from tune_batch.samplers import make_sampler
from tune_batch.space import define_by_run, seed_points

EXPERIMENT = "tune"
HANG_GRACE_S = 10.0  # beyond budget.trial_timeout_s before a hung one-worker trial is stopped
log = logging.getLogger("tune_batch")


class ConstrainedOptunaSearch(OptunaSearch):
    """OptunaSearch that tells Optuna what a tune_batch trial really was.

    ``oom`` and ``skipped`` trials are told COMPLETE with sentinel values and a constraint > 0
    (infeasible: the sampler learns the boundary, the front never shows them); ``failed`` trials
    are told FAIL; every trial carries its status, reason and metrics as user attributes.
    Uses OptunaSearch internals (``_ot_trials``, ``_ot_study``, ``_completed_trials``) of the
    pinned Ray minor version; tests exercise it.
    """

    def __init__(self, *args: Any, feasibility: FeasibilityModel | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.feasibility = feasibility

    def suggest(self, trial_id: str) -> dict[str, Any] | None:
        params = super().suggest(trial_id)
        if params is not None and self.feasibility is not None:
            reason = self.feasibility.skip_reason(params)
            if reason:
                params["skip_reason"] = reason
        return params

    def on_trial_complete(self, trial_id: str, result: dict[str, Any] | None = None, error: bool = False) -> None:
        import optuna

        ot_trial = self._ot_trials.get(trial_id)
        status = (result or {}).get("tb_status")
        if ot_trial is None or status is None or trial_id in self._completed_trials:
            super().on_trial_complete(trial_id, result, error)
            return
        record = json.loads(result["tb_record"])  # type: ignore[index]
        if self.feasibility is not None:
            self.feasibility.observe(record)
        for key in objectives.CONSTRAINT_KEYS:
            ot_trial.set_constraint(key, float(result[f"constraint_{key}"]))  # type: ignore[index]
        ot_trial.set_user_attr("status", status)
        ot_trial.set_user_attr("reason", record.get("reason"))
        ot_trial.set_user_attr("metrics", record.get("metrics") or {})
        try:
            if status == "failed":
                self._ot_study.tell(ot_trial, None, state=optuna.trial.TrialState.FAIL)
            else:
                self._ot_study.tell(ot_trial, [float(result[m]) for m in self.metric],  # type: ignore[index]
                                    state=optuna.trial.TrialState.COMPLETE)
        finally:
            self._completed_trials.add(trial_id)


def ray_trainable(params: dict[str, Any], *, config_dict: dict[str, Any], run_dir: str, plan: ResourcePlan) -> None:
    """The Tune function of one trial: measure (here for one worker, on a Ray Train worker group
    for several), then report objectives, constraints and the record."""
    from tune_batch.trial import TrialResult, TrialTimeout, normalize_params, run_trial

    config = config_from_dict(config_dict)
    params = dict(params)
    trial_number = params.pop("trial_number", None)
    skip_reason = params.pop("skip_reason", None)
    n = int(params.get("num_gpus", 1))
    if n > 1:
        from tune_batch.distributed import run_data_parallel

        result = run_data_parallel(config, params, trial_id=trial_number, run_dir=run_dir,
                                   cpus_per_worker=plan.worker_cpus(n), threads_per_worker=plan.threads_per_worker[n],
                                   use_gpu=plan.gpus > 0, skip_reason=skip_reason)
        # a hung group keeps its workers (and their CPUs/GPUs) while this process lives
        hung = bool(result.info.get("group_alive"))
    else:
        cpus = ray.get_runtime_context().get_assigned_resources().get("CPU")
        box: dict[str, Any] = {}

        def work() -> None:
            box["result"] = run_trial(config, params, trial_id=trial_number, threads=int(cpus) if cpus else None,
                                      run_dir=run_dir, skip_reason=skip_reason)

        # the trial checks its deadline between steps; a step that never returns (a hung data
        # loader, a deadlock) is caught here: raising ends the Tune trial as an error, and Ray
        # stops its process (an errored trial's actor is not reused), hung thread and all
        worker = threading.Thread(target=work, name=f"tune_batch-trial-{trial_number}", daemon=True)
        worker.start()
        worker.join(config.budget.trial_timeout_s + HANG_GRACE_S)
        hung = worker.is_alive()
        if hung:
            reason = (f"timeout: still running {config.budget.trial_timeout_s + HANG_GRACE_S:g} s after it started "
                      f"(budget.trial_timeout_s + {HANG_GRACE_S:g} s grace); its process was stopped")
            result = TrialResult(trial_number, normalize_params(params), "failed", reason, {},
                                 config.budget.trial_timeout_s + HANG_GRACE_S, {"node_ids": [], "watchdog": True})
        else:
            result = box["result"]
    tune.report(_report(config, result.to_record()))  # the record reaches the driver first,
    if hung:  # then the error makes Ray discard this process, with what hangs in it and what it owns
        raise TrialTimeout(result.reason)


def _report(config: Config, record: dict[str, Any]) -> dict[str, Any]:
    """What a trial reports to Tune: every objective (sentinels unless ok), the constraints,
    the status and the whole record."""
    report: dict[str, Any] = dict(zip(config.metric_names, objectives.values(config, record)))
    report.update({f"constraint_{k}": v for k, v in objectives.constraints(record).items()})
    report["tb_status"] = record["status"]
    report["tb_record"] = json.dumps(record, default=str)
    return report


class _GroupSweeper(tune.Callback):
    """On the driver, while data-parallel trials can run: every few seconds, remove worker-group
    reservations orphaned by a trial process that was ended (``release_orphaned_groups``)."""

    def __init__(self, every_s: float = 5.0) -> None:
        self.every_s = every_s
        self._last = 0.0
        self._warned = False

    def on_step_begin(self, iteration: int, trials: list[Any], **info: Any) -> None:
        now = time.monotonic()
        if now - self._last < self.every_s:
            return
        self._last = now
        from tune_batch.distributed import release_orphaned_groups

        try:
            for pg in release_orphaned_groups():
                log.warning("released the worker-group reservation %s of a trial process that was ended", pg)
        except Exception as e:  # a sweep that fails must not stop the search; say why once
            if not self._warned:
                self._warned = True
                log.warning("could not check for orphaned worker groups: %s: %s", type(e).__name__, e)


class _Records(tune.Callback):
    """On the driver: append each finished trial's record to trials.jsonl and show progress."""

    def __init__(self, run_dir: RunDir, progress: Progress) -> None:
        self.run_dir = run_dir
        self.progress = progress
        self._one_worker_sps: dict[int, float] = {}  # per-worker batch -> best samples/s at num_gpus 1
        for rec in progress.records:
            self._learn(rec)

    def _learn(self, rec: dict[str, Any]) -> None:
        p, m = rec.get("params") or {}, rec.get("metrics") or {}
        if rec.get("status") == "ok" and int(p.get("num_gpus", 1)) == 1 and "samples_per_s" in m:
            b = int(p["batch_size"])
            self._one_worker_sps[b] = max(self._one_worker_sps.get(b, 0.0), float(m["samples_per_s"]))

    def _scaling(self, rec: dict[str, Any]) -> None:
        """scaling_efficiency = sps(n) / (n x sps(1)) at the same per-worker batch, when measured."""
        p, m = rec.get("params") or {}, rec.get("metrics") or {}
        n = int(p.get("num_gpus", 1))
        if rec.get("status") == "ok" and n > 1 and "samples_per_s" in m:
            one = self._one_worker_sps.get(int(p["batch_size"]) // n)
            if one:
                m["scaling_efficiency"] = float(m["samples_per_s"]) / (n * one)

    def on_trial_start(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        self.progress.started()

    def _write(self, rec: dict[str, Any]) -> None:
        self._learn(rec)
        self._scaling(rec)
        self.run_dir.append(rec)
        self.progress.finished(rec)

    def on_trial_complete(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        last = trial.last_result or {}
        if "tb_record" in last:
            rec = json.loads(last["tb_record"])
        else:
            rec = _failed_record(trial, "the trial ended without reporting a result")
        rec["ray_trial_id"] = trial.trial_id
        self._write(rec)

    def on_trial_error(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        last = trial.last_result or {}
        if "tb_record" in last:  # the trial reported its record, then errored on purpose (watchdog)
            rec = json.loads(last["tb_record"])
            rec["ray_trial_id"] = trial.trial_id
            self._write(rec)
            return
        err: Any = None
        for getter in ("get_pickled_error", "get_error"):  # the exception, else its text trace
            with contextlib.suppress(Exception):
                err = err or getattr(trial, getter)()
        self._write(_failed_record(trial, _error_reason(err)))


def _error_reason(err: BaseException | str | None) -> str:
    """One line for a Ray trial error: the trial's own exception when Ray wrapped it."""
    if err is None:
        return "ray: the trial errored (no error was stored)"
    if isinstance(err, str):
        lines = [line for line in err.strip().splitlines() if line.strip()]
        for line in reversed(lines):
            if "TrialTimeout: " in line:
                return line.split("TrialTimeout: ", 1)[1][:300]
        return f"ray: {lines[-1][:300]}" if lines else "ray: the trial errored"
    inner = getattr(err, "cause", None) or err.__cause__
    if isinstance(inner, BaseException) and type(inner).__name__ == "TrialTimeout":
        return str(inner).splitlines()[0][:300]
    text = str(err).strip().splitlines()
    last = next((line for line in reversed(text) if line.strip() and not line.startswith(" ")), text[0] if text else "")
    if "TrialTimeout: " in last:
        return last.split("TrialTimeout: ", 1)[1][:300]
    return f"ray: {type(err).__name__}: {last[:300]}"


def _failed_record(trial: Any, reason: str) -> dict[str, Any]:
    params = {k: v for k, v in dict(trial.config).items() if k not in ("trial_number", "skip_reason")}
    return {"trial_id": trial.config.get("trial_number"), "params": params, "status": "failed", "reason": reason,
            "metrics": {}, "duration_s": 0.0, "info": {}, "traceback": None, "ray_trial_id": trial.trial_id}


def _reload_auth() -> None:
    """Make Ray re-read RAY_AUTH_MODE / RAY_AUTH_TOKEN: it caches them per process (pinned
    Ray internals; without this a second search in one process presents a stale token)."""
    try:
        from ray._raylet import AuthenticationTokenLoader
        from ray._raylet import Config as RayletConfig

        RayletConfig.initialize("")
        AuthenticationTokenLoader.instance().reset_cache()
    except (ImportError, AttributeError):  # another Ray version: it reads the env at start
        pass


@contextlib.contextmanager
def ray_session(address: str | None, *, verbose: bool = False) -> Iterator[dict[str, float]]:
    """Connect to ``address`` or start a local Ray instance bound to 127.0.0.1 with its temp
    dir under a short private path; shut down (and remove that path) afterwards. Yields the
    cluster's resources."""
    if ray.is_initialized():  # a caller (notebook, test) already connected: use it, leave it up
        yield dict(ray.cluster_resources())
        return
    temp = None
    kwargs: dict[str, Any] = {"logging_level": logging.INFO if verbose else logging.WARNING,
                              "log_to_driver": verbose, "include_dashboard": False}
    # user `pkg.module:function` entries must import in the trial processes too
    env_path = os.pathsep.join(p for p in [os.getcwd(), *sys.path] if p)
    kwargs["runtime_env"] = {"env_vars": {"PYTHONPATH": env_path}}
    saved_env = {k: os.environ.get(k) for k in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN")}
    if address:
        kwargs["address"] = address
    else:
        # token auth with a per-run token held in memory: nothing written to ~/.ray
        if saved_env["RAY_AUTH_MODE"] is None and saved_env["RAY_AUTH_TOKEN"] is None:
            os.environ["RAY_AUTH_MODE"] = "token"
            os.environ["RAY_AUTH_TOKEN"] = secrets.token_hex(32)
            _reload_auth()
        # socket paths have a length limit: keep the temp dir short
        temp = tempfile.mkdtemp(prefix="tb-", dir="/tmp" if os.path.isdir("/tmp") else None)
        kwargs.update(_temp_dir=temp, num_cpus=os.cpu_count(), dashboard_host="127.0.0.1",
                      _node_ip_address="127.0.0.1")
    try:
        try:
            ray.init(**kwargs)
        except ConnectionError as e:
            raise UserError(f"--address {address!r}: cannot connect to a Ray cluster there ({str(e).splitlines()[0]})") from e
        try:
            yield dict(ray.cluster_resources())
        finally:
            ray.shutdown()
    finally:
        if any(os.environ.get(k) != v for k, v in saved_env.items()):
            for k, v in saved_env.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
            _reload_auth()
        if temp:
            shutil.rmtree(temp, ignore_errors=True)


TRIAL_CPU_FOR_GROUP = 0.001  # a multi-worker trial's own bundle: it only waits on its worker group


@dataclass(frozen=True)
class ResourcePlan:
    """What each trial asks Ray for, derived from ``num_gpus`` and the cluster."""

    gpus: int  # GPUs in the cluster (0: CPU worker processes stand in for GPUs)
    cpus_one_worker: float  # CPUs of a one-worker trial (or of each worker of a group)
    cluster_cpus: float
    threads_per_worker: dict[int, int]
    concurrent: int
    gpu_choices: list[int]
    notes: list[str]

    def worker_cpus(self, n: int) -> float:
        """CPUs of each worker of an n-worker group: one node's share, less the trial's own
        sliver, so the group and its trial fit exactly (a worker group that cannot be placed
        would wait forever)."""
        if self.gpus:
            return max(TRIAL_CPU_FOR_GROUP, self.cpus_one_worker - TRIAL_CPU_FOR_GROUP)
        if n <= self.cpus_one_worker:  # the group fits on one node
            return round((self.cpus_one_worker - TRIAL_CPU_FOR_GROUP) / n, 4)
        return round(max(TRIAL_CPU_FOR_GROUP, min(self.cpus_one_worker, self.cluster_cpus / n) - TRIAL_CPU_FOR_GROUP), 4)

    def request(self, n: int) -> dict[str, float]:
        """The Tune trial's own bundle; a group's workers are placed by Ray Train."""
        if n == 1:
            return {"CPU": self.cpus_one_worker, **({"GPU": 1.0} if self.gpus else {})}
        return {"CPU": TRIAL_CPU_FOR_GROUP}


def _trial_resources(spec: dict[str, Any], plan: ResourcePlan) -> dict[str, float]:
    return plan.request(int(spec.get("num_gpus", 1)))


def plan_resources(config: Config, cluster: dict[str, float], node_cpus: float) -> ResourcePlan:
    """Per-trial resources, concurrency and the ``num_gpus`` choices the cluster can ever give.

    Without GPUs a one-worker trial gets ``cpus_per_trial`` CPUs (auto: a whole node, so
    concurrent trials never share cores and distort each other's throughput), and an n-worker
    trial n CPU worker processes sharing those CPUs (gloo). With GPUs one GPU per worker.
    """
    notes: list[str] = []
    gpus = int(cluster.get("GPU", 0))
    cpus = float(cluster.get("CPU", 1))
    if config.resources.cpus_per_trial == "auto":
        per = max(1.0, float(cpus // gpus)) if gpus else float(node_cpus)
    else:
        per = float(config.resources.cpus_per_trial)
        limit = float(cpus // gpus) if gpus else float(node_cpus)
        if per > limit:
            notes.append(f"resources.cpus_per_trial = {per:g} is more than {'a GPU' if gpus else 'a node'} can have "
                         f"({limit:g}); using {limit:g}")
            per = limit
    per = max(1.0, per)
    capacity = gpus if gpus else int(cpus)
    kept = [n for n in config.space.num_gpus if n == 1 or n <= capacity]
    dropped = [n for n in config.space.num_gpus if n not in kept]
    if dropped:
        what = f"{gpus} GPU(s)" if gpus else f"{int(cpus)} CPU(s) for CPU worker processes"
        notes.append(f"space.num_gpus: {dropped} dropped: the cluster has {what}")
    if not kept:
        raise UserError("space.num_gpus: no choice left after filtering to the cluster; include 1")
    threads = {n: max(1, int(per // n)) if not gpus else max(1, int(per)) for n in kept}
    concurrent = max(1, gpus if gpus else int(cpus // per))
    return ResourcePlan(gpus, per, cpus, threads, min(concurrent, config.budget.trials), kept, notes)


def _node_cpus() -> float:
    nodes = [n for n in ray.nodes() if n.get("Alive")]
    return max((n.get("Resources", {}).get("CPU", 0) for n in nodes), default=1.0) or 1.0


def run_search(config: Config, run_dir: RunDir, *, storage: Any, study_name: str, progress: Progress,
               address: str | None = None, verbose: bool = False, feasibility: FeasibilityModel | None = None,
               fresh: bool = True) -> None:
    """Run (or continue) the search of ``config`` on Ray Tune; records go to ``run_dir``."""
    if not verbose:
        for name in ("ray", "ray.tune", "ray.train"):
            logging.getLogger(name).setLevel(logging.ERROR)
        warnings.filterwarnings("ignore", module="ray")
        os.environ["RAY_AIR_NEW_OUTPUT"] = "0"  # the legacy reporter honours verbose=0
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
    with ray_session(address, verbose=verbose) as cluster:
        plan = plan_resources(config, cluster, _node_cpus())
        for n in plan.notes:
            progress.say(f"warning: {n}")
        groups = ", ".join(f"num_gpus {n}: {n} x {plan.worker_cpus(n):.2f} CPU" + (" + 1 GPU" if plan.gpus else "")
                           for n in plan.gpu_choices if n > 1)
        progress.say(f"ray: {cluster.get('CPU', 0):g} CPU, {int(cluster.get('GPU', 0))} GPU; a one-worker trial asks "
                     f"{plan.request(1)}; up to {plan.concurrent} at a time" + (f"; worker groups: {groups}" if groups else ""))
        gpu_choices = plan.gpu_choices
        searcher = ConstrainedOptunaSearch(
            partial(define_by_run, space=config.space, gpu_choices=gpu_choices),
            points_to_evaluate=seed_points(config, gpu_choices) if fresh else None,
            metric=config.metric_names,
            mode=["max" if d == "maximize" else "min" for d in config.directions],
            sampler=make_sampler(config.search.sampler, config.search.seed, config.budget.trials),
            storage=storage, study_name=study_name, feasibility=feasibility,
        )
        trainable = tune.with_resources(
            tune.with_parameters(ray_trainable, config_dict=config.to_dict(), run_dir=str(run_dir.path.resolve()), plan=plan),
            partial(_trial_resources, plan=plan),
        )
        storage_path = str((run_dir.path / "ray").resolve())
        callbacks: list[tune.Callback] = [_Records(run_dir, progress)]
        if any(n > 1 for n in plan.gpu_choices):
            callbacks.append(_GroupSweeper())
        # a fresh experiment per invocation: a continued search joins the same Optuna study
        name = f"{EXPERIMENT}-{time.strftime('%Y%m%d-%H%M%S')}"
        run_config = tune.RunConfig(name=name, storage_path=storage_path, verbose=2 if verbose else 0,
                                    callbacks=callbacks, failure_config=tune.FailureConfig(max_failures=0))
        tune_config = tune.TuneConfig(search_alg=searcher, num_samples=config.budget.trials,
                                      max_concurrent_trials=plan.concurrent, reuse_actors=True)
        tuner = tune.Tuner(trainable, tune_config=tune_config, run_config=run_config)
        tuner.fit()
