"""Ray Tune backend: one Tuner per search, whose OptunaSearch (multi-objective, constrained)
proposes the trials, followed in the same experiment by the later stages' planned jobs."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from typing import Any

from ray import tune

from tune_batch.analysis.objectives import is_maximize, utilization_warning
from tune_batch.backends import Later
from tune_batch.backends.address import address_origin
from tune_batch.backends.progress import Progress
from tune_batch.backends.ray.callbacks import Halt, Records
from tune_batch.backends.ray.cleanup import GroupSweeper
from tune_batch.backends.ray.resources import ResourcePlan, plan_resources
from tune_batch.backends.ray.searcher import ConstrainedOptunaSearch, Staged
from tune_batch.backends.ray.session import check_client_run_dir, node_cpus, ray_session
from tune_batch.backends.ray.trainable import ray_trainable
from tune_batch.backends.signals import graceful
from tune_batch.config import Config
from tune_batch.config.callables import registered
from tune_batch.store.records import Params, TrialResult
from tune_batch.store.rundir import RunDir
from tune_batch.study.admission import Policy
from tune_batch.study.samplers import make_sampler, probe_rule
from tune_batch.study.seam import check_space
from tune_batch.study.space import define_by_run, seed_points

EXPERIMENT = "tune"


def _announce(config: Config, plan: ResourcePlan, cluster: dict[str, float], progress: Progress,
              address: str | None = None) -> None:
    for n in [*plan.notes, utilization_warning(config, plan.gpus)]:
        if n:
            progress.warn(n)
    base = config.baseline.num_gpus if config.baseline is not None and config.confirm.candidates else 1
    counts = sorted({n for n in [*plan.gpu_choices, base] if n > 1 and plan.fits(n)})
    groups = ", ".join(f"num_gpus {n}: {n} x {plan.worker_cpus(n):.2f} CPU" + (" + 1 GPU" if plan.gpus else "")
                       + (" (the baseline)" if n not in plan.gpu_choices else "") for n in counts)
    at = f"the cluster at {_named(address)}: " if address else ""
    progress.say(f"ray: {at}{cluster.get('CPU', 0):g} CPU, {int(cluster.get('GPU', 0))} GPU; a one-worker trial asks "
                 f"{plan.request(1)}; up to {plan.concurrent} at a time"
                 + (f"; worker groups: {groups}" if groups else ""))


def _named(address: str) -> str:
    """A cluster address as the user gave it, and where from when it was the environment."""
    return address + (" (RAY_ADDRESS)" if address_origin(address) == "RAY_ADDRESS" else "")


@contextmanager
def _env(**values: str) -> Iterator[None]:
    """Environment variables set for the duration, then as they were."""
    before = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in before.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _tuner_run(trainable: Any, run_dir: RunDir, callbacks: list[tune.Callback], tune_config: tune.TuneConfig,
               verbose: bool) -> None:
    # a fresh experiment per invocation: a continued search joins the same Optuna study
    records = next(c for c in callbacks if isinstance(c, Records))
    run_config = tune.RunConfig(name=f"{EXPERIMENT}-{time.strftime('%Y%m%d-%H%M%S')}",
                                storage_path=str((run_dir.path / "ray").resolve()), verbose=2 if verbose else 0,
                                callbacks=callbacks, failure_config=tune.FailureConfig(max_failures=0),
                                stop=Halt(records))
    tune.Tuner(trainable, tune_config=tune_config, run_config=run_config).fit()
    if records.lost is not None:  # trials.jsonl refused a record: stop here, in one line
        raise records.lost


def _searcher(config: Config, plan: ResourcePlan, records: Records, *, storage: Any, study_name: str,
              policy: Policy, fresh: bool, sampler_seed: int) -> ConstrainedOptunaSearch:
    """The study's searcher for ``config.budget.trials`` trials (multi-objective, constrained)."""
    check_space(storage, study_name, config, plan.gpu_choices)
    return ConstrainedOptunaSearch(
        partial(define_by_run, space=config.space, gpu_choices=plan.gpu_choices),
        points_to_evaluate=seed_points(config, plan.gpu_choices) if fresh else None,
        metric=config.metric_names,
        mode=["max" if is_maximize(d) else "min" for d in config.directions],
        sampler=make_sampler(config.search.sampler, sampler_seed, config.budget.trials, probe_rule(config)),
        storage=storage, study_name=study_name, config=config, policy=policy, on_skip=records.free_skip,
    )


class RayBackend:
    """The Ray backend (see ``pipeline.stages``) inside one Ray session: a whole search, its
    later stages included, as one Tune experiment (``searcher.Staged``)."""

    def __init__(self, run_dir: RunDir, plan: ResourcePlan, *, storage: Any, study_name: str, progress: Progress,
                 policy: Policy, verbose: bool, fresh: bool, sampler_seed: int) -> None:
        self.run_dir, self.plan, self.storage, self.study_name = run_dir, plan, storage, study_name
        self.progress, self.policy, self.verbose, self.fresh = progress, policy, verbose, fresh
        self.sampler_seed = sampler_seed

    def run(self, config: Config, trials: int, later: Later) -> None:
        """``trials`` trials proposed by the study's sampler, then the stages ``later`` plans."""
        records = Records(self.run_dir, self.progress)
        first = None
        if trials > 0:
            searching = config.model_copy(update={"budget": config.budget.model_copy(update={"trials": trials})})
            first = _searcher(searching, self.plan, records, storage=self.storage, study_name=self.study_name,
                              policy=self.policy, fresh=self.fresh, sampler_seed=self.sampler_seed)
        staged = Staged(first, trials, later, self.run_dir)
        plan = self.plan
        trainable = tune.with_resources(
            tune.with_parameters(ray_trainable, config_dict=config.to_dict(), run_dir=str(self.run_dir.path.resolve()),
                                 plan=plan, callables=registered()),
            plan.for_trial,
        )
        callbacks: list[tune.Callback] = [records]
        baseline = config.baseline.num_gpus if config.baseline is not None else 1
        if any(n > 1 for n in [*plan.gpu_choices, baseline]):
            callbacks.append(GroupSweeper())
        tune_config = tune.TuneConfig(search_alg=staged, num_samples=-1, max_concurrent_trials=plan.concurrent,
                                      reuse_actors=True)
        # the first Ctrl-C / SIGTERM: no new trial (Staged), the running ones finish and are recorded; Tune's
        # own handler would stop them unrecorded. A second one stops at once (KeyboardInterrupt).
        with graceful(), _env(TUNE_DISABLE_SIGINT_HANDLER="1"):
            _tuner_run(trainable, self.run_dir, callbacks, tune_config, self.verbose)
        if staged.error is not None:  # a stage could not be planned: raised here, not inside Tune
            raise staged.error


@contextmanager
def session(config: Config, run_dir: RunDir, *, address: str | None, verbose: bool, trials_left: int,
            **kwargs: Any) -> Iterator[RayBackend]:
    """A Ray session (started here, or joined at ``address``) with the resource plan of
    ``config``'s trials, announced once; closed (and cleaned up) on leaving."""
    planning = config.model_copy(update={"budget": config.budget.model_copy(update={"trials": max(1, trials_left)})})
    if address:  # a connection can take a while (Ray Client's proxy waits up to 30 s for a session's server)
        kwargs["progress"].say(f"ray: connecting to the cluster at {_named(address)} ...")
    with ray_session(address, verbose=verbose) as cluster:
        check_client_run_dir(address, str(run_dir.path.resolve()))
        plan = plan_resources(planning, cluster, node_cpus())
        _announce(config, plan, cluster, progress=kwargs["progress"], address=address)
        yield RayBackend(run_dir, plan, verbose=verbose, **kwargs)


def measure_group(config: Config, params: Params, run_dir: RunDir, *, address: str | None = None) -> TrialResult:
    """One data-parallel trial (``params.num_gpus`` > 1) on a worker group of Ray actors, on the path
    a search's trial takes, from this process (``probe --num-gpus``): a local Ray instance started
    here, or the cluster at ``address``. UserError where the cluster has too few GPUs (or CPUs)."""
    from tune_batch.backends.ray.data_parallel import run_data_parallel
    from tune_batch.errors import UserError

    n = params.num_gpus
    with ray_session(address) as cluster:
        check_client_run_dir(address, str(run_dir.path.resolve()))
        plan = plan_resources(config, cluster, node_cpus())
        if not plan.fits(n):
            raise UserError(f"--num-gpus {n}: the cluster has {plan.what()}; give a count it has, or a cluster "
                            f"with --address")
        return run_data_parallel(config, params, trial_id="probe", run_dir=run_dir.path.resolve(),
                                 cpus_per_worker=plan.worker_cpus(n), threads_per_worker=plan.threads(n),
                                 use_gpu=plan.gpus > 0)
