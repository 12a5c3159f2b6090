"""Plain Optuna: a tune_batch objective for ``study.optimize`` on any study (the user's own, with
their sampler, storage and extra hyperparameters), and the in-process ``optuna`` backend.

No Ray is started here. ``oom`` and ``skipped`` trials return sentinel values with a
constraint > 0 (infeasible); ``failed`` trials end as Optuna FAIL with the reason kept in the
trial's user attributes (see ``tune_batch.study.seam``, the one seam to Optuna).
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any, Protocol

import optuna

from tune_batch.analysis.objectives import utilization_warning
from tune_batch.backends import Later
from tune_batch.backends.progress import Progress
from tune_batch.backends.signals import graceful, stopping
from tune_batch.config import Config, SpaceConfig
from tune_batch.errors import ConfigError, TrialConfigError
from tune_batch.measure.memory import settled_heap
from tune_batch.store.jobs import Job, JobKind
from tune_batch.store.records import Params, Status, TrialResult, budget_used, config_mistake, failing_alike
from tune_batch.store.rundir import RunDir
from tune_batch.study import seam
from tune_batch.study import space as space_mod
from tune_batch.study.admission import FREE_SKIPS_IN_A_ROW, Policy
from tune_batch.study.samplers import make_sampler, probe_rule


class TrialRunner(Protocol):
    """What measures one trial: ``run_trial``'s signature (a replay looks results up instead)."""

    def __call__(self, config: Config, params: Params, *, trial_id: Any, extra: dict[str, Any] | None,
                  run_dir: Any) -> TrialResult: ...


def _run_trial(config: Config, params: Params, *, trial_id: Any, extra: dict[str, Any] | None,
               run_dir: Any) -> TrialResult:
    from tune_batch.trial import run_trial

    return run_trial(config, params, trial_id=trial_id, extra=extra, run_dir=run_dir)


def suggest(trial: optuna.Trial, space: SpaceConfig) -> dict[str, Any]:
    """Suggest ``batch_size``, ``lr`` and ``num_gpus`` on ``trial``. Combinations that break the
    batch rules are not trained by tune_batch's objective: they end as infeasible (``space``)."""
    return space_mod.suggest(trial, space)


check_directions = seam.check_directions

#: One trial at a time in this process: trials run side by side (``study.optimize(n_jobs=2)``, or
#: threads) share its cores and device, and each reads the other's load as its own throughput (a
#: third of it, measured on 2 cores: 1950 samples/s against 6100 alone).
_ONE_AT_A_TIME = threading.Lock()
_SAID = threading.Event()
#: Where trials called from threads other than the main one are measured: one long-lived thread.
#: On a CPU, each thread that ran torch keeps an OpenMP team, and with two teams alive the
#: runtime stops spinning between parallel regions: trials measured one at a time, but each from
#: its own Optuna worker thread, read 2100-2500 samples/s against 6100 (2 cores).
_MEASURER: list[ThreadPoolExecutor] = []


def _measured(fn: Callable[[], TrialResult]) -> TrialResult:
    """``fn()`` in this thread when it is the main one, else in the process's measuring thread."""
    if threading.current_thread() is threading.main_thread():
        return fn()
    if not _MEASURER:  # (under _ONE_AT_A_TIME: made once)
        _MEASURER.append(ThreadPoolExecutor(max_workers=1, thread_name_prefix="tune_batch-trial"))
    return _MEASURER[0].submit(fn).result()


@contextmanager
def _alone() -> Iterator[None]:
    """Hold the process's trial lock; the first time a trial had to wait for it, say why."""
    if not _ONE_AT_A_TIME.acquire(blocking=False):
        if not _SAID.is_set():
            _SAID.set()
            warnings.warn("tune_batch measures the trials of one process one at a time, in one thread "
                          "(study.optimize with n_jobs > 1, or threads): side by side they would share its cores and "
                          "device, and each would read the other's load as its throughput. For trials side by side, "
                          "run tune_batch.search on the ray backend. On a CPU, keep n_jobs=1 where this process ran "
                          "torch outside the trials: OpenMP then slows every trial measured off the main thread (to "
                          "a third on 2 cores)", RuntimeWarning, stacklevel=4)
        _ONE_AT_A_TIME.acquire()
    try:
        yield
    finally:
        _ONE_AT_A_TIME.release()


class Objective:
    """``study.optimize(Objective(config), n_trials=...)``: each call runs one measured trial.

    Returns the objective values in the config's order; sets the ``memory`` and ``space``
    constraints (the ``constraints`` list, see ``study.seam.CONSTRAINTS_ATTR``) and the user attributes ``status``,
    ``reason`` and
    ``metrics``. ``extra_space(trial) -> dict`` suggests the user's own hyperparameters in the
    same trial; they are passed to ``pkg.module:function`` model and data builders as keyword
    arguments and kept in the record's params. ``run_dir``: also append each record there.
    ``runner``: what measures a trial (default: ``run_trial``; a replay passes a lookup).
    """

    def __init__(self, config: Config, extra_space: Callable[[optuna.Trial], dict[str, Any]] | None = None, *,
                 run_dir: RunDir | None = None, progress: Progress | None = None, policy: Policy | None = None,
                 runner: TrialRunner = _run_trial, free_skips: bool = False) -> None:
        many = [n for n in config.space.num_gpus if n > 1]
        if many and runner is _run_trial:  # (a replay's runner looks any count up)
            raise ConfigError(f"space.num_gpus = {list(config.space.num_gpus)}: Objective measures one worker in this "
                              f"process, {many} would all fail; give [1], or run tune_batch.search on the ray backend "
                              f"(search --storage URL --study-name NAME adds its trials to your study)")
        self.config = config
        self.free_skips = free_skips  # skipped proposals marked free_skip (see optimize)
        self.extra_space = extra_space
        self.run_dir = run_dir
        self.progress = progress
        self.policy = policy or Policy(config)
        self.runner = runner
        self.records: list[TrialResult] = []
        self._checked: set[int] = set()

    def __call__(self, trial: optuna.Trial) -> list[float] | None:
        if id(trial.study) not in self._checked:
            seam.check_directions(trial.study, self.config)
            seam.check_study_space(trial.study, self.config)  # (a replay's runner looks any space up)
            self._checked.add(id(trial.study))
        searched = suggest(trial, self.config.space)
        extra = dict(self.extra_space(trial)) if self.extra_space else {}
        params = Params.of({**searched, **extra})
        with _alone():  # measured alone; the policy, the record file and the records shared in order
            if self.progress:
                self.progress.started()
            result = self.policy.skip(params, trial.number, free=self.free_skips) or _measured(lambda: self.runner(
                self.config, params, trial_id=trial.number, extra=extra or None,
                run_dir=self.run_dir.path if self.run_dir else None))
            self.policy.observe(result)
            seam.annotate(trial, result)
            if self.run_dir:
                self.run_dir.append(result)
            self.records.append(result)
        if self.progress:
            self.progress.finished(result)  # (a search stops after a config fault: signals.stopping)
        elif why := config_mistake(result) or failing_alike(self.records):  # the user's own study: optimize() stops
            raise TrialConfigError(f"{why} (trial {trial.number}; every trial would end the same way)")
        floor = None if result.status is Status.OK else seam.feasible_floor(trial.study)
        # told: throughput as its step's mean so far (Policy.told); the record keeps the reading
        return seam.answer(self.config, self.policy.told(result), floor)  # None: Optuna records a FAIL


def optimize(study: optuna.Study, objective: Objective, trials: int,
             callbacks: Sequence[Callable[..., None]] = ()) -> None:
    """Run ``objective`` (built with ``free_skips=True``) on ``study`` until ``trials`` trials of
    the budget are used: a proposal the policy skips is told to Optuna and recorded, then the
    sampler is asked again without using up a trial (up to FREE_SKIPS_IN_A_ROW in a row)."""

    def enough(study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
        if budget_used(objective.records) >= trials:
            study.stop()

    if trials > 0:
        # no gc_after_trial: each trial's boundary (trial.run) has collected already
        study.optimize(objective, n_trials=trials * (FREE_SKIPS_IN_A_ROW + 1), callbacks=[*callbacks, enough])


def run_jobs(config: Config, run_dir: RunDir, jobs: Sequence[Job], progress: Progress) -> None:
    """Run each job in this process: a repeat (a searched config with another seed) or a
    confirmation run (at length), until a signal stops them."""
    from tune_batch.trial import run_trial
    from tune_batch.trial.curve import confirm_run

    for job in jobs:
        if stopping():
            return
        progress.started()
        cfg = job.config_for(config)
        if job.kind is JobKind.CONFIRM:
            res = confirm_run(cfg, job.params, trial_id=job.trial_id, confirm_of=job.of,
                              extra=job.params.extra or None)
            if job.rung > 1:
                res = res.replace(info=res.info.with_(rung=job.rung))
        else:
            res = run_trial(cfg, job.params, trial_id=job.trial_id, extra=job.params.extra or None,
                            run_dir=run_dir.path)
            res = res.replace(info=res.info.with_(repeat_of=job.of, seed=job.seed))
        run_dir.append(res)
        progress.finished(res)


def _search_stage(config: Config, run_dir: RunDir, *, storage: Any, study_name: str, progress: Progress,
                  policy: Policy, fresh: bool, sampler_seed: int | None) -> None:
    """The search itself: ``config.budget.trials`` trials on the stored study, in this process."""
    seed = config.search.seed if sampler_seed is None else sampler_seed
    sampler = make_sampler(config.search.sampler, seed, config.budget.trials, probe_rule(config))
    study = seam.create(config, storage, study_name, sampler)
    if fresh and not study.trials:
        for point in space_mod.seed_points(config, [1]):
            study.enqueue_trial(point)
    progress.say(f"optuna: in-process, sampler {config.search.sampler}, study {study_name!r}")
    import torch

    warning = utilization_warning(config, torch.cuda.device_count())
    if warning:
        progress.warn(warning)
    objective = Objective(config, run_dir=run_dir, progress=progress, policy=policy, free_skips=True)

    def stop_if_signalled(study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
        if stopping():
            study.stop()  # after the running trial, which is recorded

    with graceful():
        optimize(study, objective, config.budget.trials, [stop_if_signalled])


class LocalBackend:
    """The in-process backend (see ``pipeline.stages``) on one stored study: the search, then
    each later stage, in turn."""

    def __init__(self, run_dir: RunDir, *, storage: Any, study_name: str, progress: Progress, policy: Policy,
                 fresh: bool, sampler_seed: int | None) -> None:
        self.run_dir, self.storage, self.study_name = run_dir, storage, study_name
        self.progress, self.policy, self.fresh, self.sampler_seed = progress, policy, fresh, sampler_seed

    def run_trials(self, config: Config, trials: int) -> None:
        """``trials`` trials proposed by the study's sampler, in this process."""
        searching = config.model_copy(update={"budget": config.budget.model_copy(update={"trials": trials})})
        _search_stage(searching, self.run_dir, storage=self.storage, study_name=self.study_name,
                      progress=self.progress, policy=self.policy, fresh=self.fresh, sampler_seed=self.sampler_seed)

    def run_jobs(self, config: Config, jobs: Sequence[Job], kind: JobKind) -> None:
        with graceful():
            run_jobs(config, self.run_dir, jobs, self.progress)

    def run(self, config: Config, trials: int, later: Later) -> None:
        """The search's ``trials`` (if any), then each later stage's jobs, in turn, on a settled
        heap (``measure.memory.settled_heap``: the collection after each run walks what it made)."""
        with settled_heap():
            if trials > 0:
                self.run_trials(config, trials)
            for kind, jobs in later:
                self.run_jobs(config, jobs, kind)


@contextmanager
def session(run_dir: RunDir, **kwargs: Any) -> Iterator[LocalBackend]:
    """The in-process backend (nothing to start or stop)."""
    yield LocalBackend(run_dir, **kwargs)
