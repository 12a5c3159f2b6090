"""A whole search: check the input, prepare the run directory, run a backend, write reports.

``search(config) -> SearchResult`` is the library entry point; the CLI is a thin layer on it.
A search started again on the same run directory continues: finished trials count towards
``budget.trials`` and are neither rerun nor lost; trials a killed process left RUNNING in
the study are marked FAIL and run again.
"""

from __future__ import annotations

import os
import signal
import time
import warnings
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from tune_batch.analysis.pareto import Prefer
from tune_batch.analysis.report import Report, latest_per_trial
from tune_batch.backends.address import check_address, ray_address
from tune_batch.backends.progress import Progress
from tune_batch.backends.signals import config_fault, received
from tune_batch.config import Config
from tune_batch.config.advice import config_notes
from tune_batch.decide.recommend import decide
from tune_batch.errors import ConfigError, NothingRecorded, SearchInterrupted, TrialConfigError, UserError
from tune_batch.output.files import write_files
from tune_batch.output.text import render_summary
from tune_batch.pipeline import stages
from tune_batch.pipeline.preflight import one_worker_notes, preflight
from tune_batch.pipeline.quiet import environment_restored, quiet_libraries
from tune_batch.pipeline.stages import Backend, run_stages
from tune_batch.store.records import TrialResult, budget_used, config_mistake, failing_alike
from tune_batch.store.rundir import RunDir
from tune_batch.study.admission import Policy


@dataclass(frozen=True)
class SearchResult:
    run_dir: Path
    records: list[TrialResult]
    front: list[TrialResult]
    recommended: TrialResult | None
    report: Report = field(repr=False)

    def dataframe(self) -> Any:
        """Every record of the run (trials, repeats, confirmation runs) as a pandas DataFrame."""
        from tune_batch.output.frames import to_frame

        return to_frame([*self.records, *self.report.repeats, *self.report.confirm_runs], self.report)


def default_output(config: Config) -> Path:
    return Path("runs") / f"{config.name}-{time.strftime('%Y%m%d-%H%M%S')}"


def local_capacity() -> tuple[int, str]:
    """The most workers a group can have on this machine (its GPUs, or without GPUs its CPUs, one
    CPU worker process each), and that in words."""
    import torch

    gpus = torch.cuda.device_count()
    capacity = gpus or (os.cpu_count() or 1)
    return capacity, f"{gpus} GPU(s)" if gpus else f"{capacity} CPU(s) for CPU worker processes"


def _check_local_gpu_choices(config: Config) -> None:
    """A local search whose every ``num_gpus`` choice this machine can never give (GPUs, or CPU
    worker processes without GPUs) is refused before anything is written."""
    capacity, what = local_capacity()
    if not any(n == 1 or n <= capacity for n in config.space.num_gpus):
        raise ConfigError(f"space.num_gpus = {list(config.space.num_gpus)}: this machine has {what}; "
                          f"include 1 (or a count it has), or search on a cluster with --address")


def check_device_util(config: Config, gpus: int) -> None:
    """With ``device_util`` an objective on a machine with GPUs, NVML must open here; else every
    trial would end without it and none could be on the front: refused before anything runs."""
    if "device_util" not in config.metric_names or gpus == 0:
        return
    from tune_batch.errors import DeviceMonitorError
    from tune_batch.measure.nvml import NvmlReader

    try:
        NvmlReader([0])
    except DeviceMonitorError as e:
        others = [m for m in config.metric_names if m != "device_util"] or ["samples_per_s"]
        raise ConfigError(f"objectives: device_util is read through NVML, which does not work here ({e}); "
                          f"fix the driver or nvidia-ml-py, or search without it: --set "
                          f"'objectives=[{', '.join('{metric: ' + m + '}' for m in others)}]'") from e


def _one_worker_only(config: Config, progress: Progress) -> Config:
    """The in-process Optuna backend runs one-worker trials: other num_gpus choices dropped (and
    a baseline on more than one worker said not to be compared; its runs end failed, saying why)."""
    for note in one_worker_notes(config):
        progress.warn(note)
    if all(n == 1 for n in config.space.num_gpus):
        return config
    return config.model_copy(update={"space": config.space.model_copy(update={"num_gpus": [1]})})


def _run_backend(config: Config, run_dir: RunDir, done: list[TrialResult], progress: Progress, *,
                 address: str | None, storage_url: str | None, study_name: str | None, verbose: bool) -> None:
    """Open the study and run what is still to run, stage by stage (``pipeline.stages``), on
    the configured backend."""
    from tune_batch.study import seam

    storage = seam.open_storage(storage_url or run_dir.study_url)
    name = study_name or config.name
    fresh = seam.prepare(storage, name, config)
    if fresh and done:
        # study.db lost (or emptied): rebuilt from the records, so trial numbers go on after them
        n = seam.rebuild(storage, name, config, done)
        progress.warn(f"the Optuna study {name!r} was empty or missing (study.db deleted?): rebuilt from "
                      f"{run_dir.trials_path} ({n} trial(s)); trial numbers go on after them")
        fresh = False
    # a continued search draws other random proposals than its first part did (the same seed
    # would start the sampler's random stream again and re-propose points already measured)
    common = {"storage": storage, "study_name": name, "progress": progress, "policy": Policy(config, done),
              "fresh": fresh, "sampler_seed": config.search.seed + len(done)}
    open_backend: Callable[[], AbstractContextManager[Backend]]
    if config.search.backend == "optuna":
        from tune_batch.backends import local

        config = _one_worker_only(config, progress)
        open_backend = partial(local.session, run_dir, **common)
    else:
        from tune_batch.backends.ray.search import session as ray_session

        trials_left = max(0, config.budget.trials - budget_used(done))
        open_backend = partial(ray_session, config, run_dir, address=address or config.search.address,
                               verbose=verbose, trials_left=trials_left, **common)
    with quiet_libraries(verbose):
        run_stages(config, run_dir, open_backend, progress)


def search(config: Config, output: str | Path | None = None, *, address: str | None = None,
           storage_url: str | None = None, study_name: str | None = None, force: bool = False,
           quiet: bool = False, verbose: bool = False, prefer: Prefer = None) -> SearchResult:
    """Run the search of ``config`` (or continue it) and write its reports.

    Raises UserError (ConfigError, WorkloadError, RunDirError) for user mistakes, before
    anything is written to ``output``. Logger levels, warning filters, environment variables
    and Optuna's verbosity are as they were when it returns, and so are torch's global random
    state (the workload check builds the model; samplers draw from it) and its thread count.
    """
    import torch

    address = ray_address(config, address)
    threads = torch.get_num_threads()
    with environment_restored(), warnings.catch_warnings(), torch.random.fork_rng(devices=[]):
        try:
            return _search(config, output, address=address, storage_url=storage_url, study_name=study_name,
                           force=force, quiet=quiet, verbose=verbose, prefer=prefer)
        finally:
            torch.set_num_threads(threads)


def _search(config: Config, output: str | Path | None, *, address: str | None, storage_url: str | None,
            study_name: str | None, force: bool, quiet: bool, verbose: bool, prefer: Prefer) -> SearchResult:
    started = time.perf_counter()  # the search's wall time, start-up included
    run_dir = RunDir(default_output(config) if output is None else output)
    RunDir.check_writable(run_dir.path)
    if config.search.backend == "optuna" and (address or config.search.address):
        raise ConfigError("search.address: a cluster address needs search.backend = 'ray'")
    made_here = not run_dir.path.exists()
    try:
        return _checked_search(config, run_dir, made_here, started, address=address, storage_url=storage_url,
                               study_name=study_name, force=force, quiet=quiet, verbose=verbose, prefer=prefer)
    except KeyboardInterrupt as e:  # a hard stop: what was recorded stays; before anything was, nothing does
        if run_dir.has_records():
            raise
        if made_here:
            run_dir.discard_unused()
        raise e if isinstance(e, NothingRecorded) else NothingRecorded() from e


def _checked_search(config: Config, run_dir: RunDir, made_here: bool, started: float, *, address: str | None,
                    storage_url: str | None, study_name: str | None, force: bool, quiet: bool, verbose: bool,
                    prefer: Prefer) -> SearchResult:
    """The search once its run directory is named: the checks before anything is written, then
    the search under the directory's lock."""
    progress = Progress(config, config.budget.trials, quiet=quiet)
    progress.say(f"workload: {preflight(config, address=address, warn=progress.warn)}")
    if storage_url:  # a bad URL, or a study of another space, is refused before anything is written
        from tune_batch.study import seam

        # (num_gpus: its choices are the backend's, the cluster's on Ray: checked where they are known)
        seam.check_space(seam.open_storage(storage_url), study_name or config.name, config, gpus=False)
    check_address(address or config.search.address)
    if not (address or config.search.address):
        import torch

        check_device_util(config, torch.cuda.device_count())
        if config.search.backend == "ray":
            _check_local_gpu_choices(config)
    try:
        with run_dir.lock():  # one writer: a second search (or a probe) on this directory is refused
            return _locked_search(config, run_dir, progress, address=address, storage_url=storage_url,
                                  study_name=study_name, force=force, quiet=quiet, verbose=verbose, prefer=prefer,
                                  started=started)
    except UserError:  # refused before a trial ran (a cluster nothing answers at): no empty directory left behind
        if made_here:
            run_dir.discard_unused()
        raise


def _annotate_study(config: Config, run_dir: RunDir, report: Report, storage_url: str | None,
                    study_name: str | None) -> None:
    """Name the study's objectives (where it has no names) and record the recommendation and
    the run directory on it, so Optuna's own views and plots read like the report."""
    if not run_dir.has_records():
        return
    from tune_batch.study import seam

    seam.annotate_study(seam.open_storage(storage_url or run_dir.study_url), study_name or config.name, config,
                        report.recommended.trial_id if report.recommended else None, str(run_dir.path.resolve()),
                        [r.trial_id for r in report.front],
                        report.baseline.to_dict() if report.baseline is not None else None)


def _send_to_trackers(config: Config, report: Report, run_dir: RunDir, progress: Progress) -> None:
    """search.log_to: the records, front and recommendation to each tracker. A tracker that
    fails costs one warning line: the run directory already holds everything."""
    if "mlflow" not in config.search.log_to or not run_dir.has_records():
        return
    from tune_batch.output.tracking import log_to_mlflow, tracking_uri

    try:
        uri, run_id, new = log_to_mlflow(report, run_dir.path, config.search.tracking_uri)
    except Exception as e:  # the tracker's server, store or package: never the search's results
        where = tracking_uri(config.search.tracking_uri, run_dir.path)
        progress.warn(f"mlflow: could not log to {where}: {type(e).__name__}: {str(e).splitlines()[0][:200]}")
        return
    import shlex

    progress.say(f"mlflow: {new} record(s) sent to {uri} (experiment {config.name!r}, run {run_id}); "
                 f"to browse: mlflow ui --backend-store-uri {shlex.quote(uri)}")  # a path with a space: one word


def _locked_search(config: Config, run_dir: RunDir, progress: Progress, *, address: str | None,
                   storage_url: str | None, study_name: str | None, force: bool, quiet: bool, verbose: bool,
                   prefer: Prefer, started: float) -> SearchResult:
    resumed = run_dir.prepare(config, force=force)
    run_dir.check_appendable()
    for note in run_dir.set_aside_broken() if resumed else []:
        progress.warn(note)
    previous, warnings = run_dir.records()
    done = [r for r in latest_per_trial(previous) if r.searched]
    for w in warnings:
        progress.warn(w)
    progress.records = list(done)  # the front and counts include trials already finished
    for note in config_notes(config):
        progress.warn(note)
    if config.confirm_metric is None and config.confirm.candidates > 0:
        progress.say("confirmation: off: none of the objectives is a metric train.evaluate returns, to read time to "
                     "target on (confirm.metric)")
    used_before = budget_used(done)
    if resumed:
        progress.say(f"continuing {run_dir.path}: {used_before} trial(s) already finished, "
                     f"{max(0, config.budget.trials - used_before)} to run")
    stopped = False
    received["signal"] = config_fault["record"] = None
    todo = stages.pending(config, previous)
    if todo:  # marked running, so that a killed invocation's time still counts in the search's cost
        killed = run_dir.open_search(time.time() - (time.perf_counter() - started))
        if killed:
            progress.warn(killed)
        try:
            _run_backend(config, run_dir, done, progress, address=address, storage_url=storage_url,
                         study_name=study_name, verbose=verbose)
        except KeyboardInterrupt:  # the in-process backend; Ray Tune stops on its own and returns
            stopped = True
    records, warnings = run_dir.records()
    if not records:  # every trial that ends is recorded: stopped before the first ended (Ray was starting)
        raise NothingRecorded()
    ran = config.budget.trials > used_before or len(records) > len(previous)
    wall = (run_dir.add_search_wall_s(time.perf_counter() - started if ran else 0.0) if todo or ran
            else run_dir.search_wall_s())
    report = decide(config, records, warnings, prefer=prefer, search_wall_s=wall)
    write_files(report, run_dir.path)
    _annotate_study(config, run_dir, report, storage_url, study_name)
    _send_to_trackers(config, report, run_dir, progress)
    # fewer searched records than the budget: the search was stopped (every trial that ends,
    # however it ends, is recorded), whichever backend caught the signal
    used = budget_used(report.records)
    cut = stages.pending_stage(config, records)  # planned once: each plan builds a report
    interrupted = stopped or used < config.budget.trials or cut is not None
    print(render_summary(report), flush=True)  # --quiet too: it keeps errors and the final table
    if not quiet:
        print(f"results: {run_dir.path}/ (trials.jsonl, results.csv, pareto.json, best.yaml, report.html, study.db)",
              flush=True)
    fault, config_fault["record"] = config_fault["record"], None  # no state left behind for the next search
    if fault is not None:  # every trial would have failed the same way: no use training them
        mistake = config_mistake(fault)
        why = mistake or failing_alike(report.records) or fault.reason
        raise TrialConfigError(f"{why} (trial {fault.trial_id}); every "
                               f"trial would end the same way, so the search stopped after {used} of "
                               f"{config.budget.trials} trial(s) (kept in {run_dir.path}); fix "
                               f"{'the config' if mistake else 'what they failed on'} and run it with a new --output")
    if interrupted:
        raise SearchInterrupted(used, config.budget.trials, str(run_dir.path),
                                received["signal"] or signal.SIGINT, cut)
    return SearchResult(run_dir.path, report.records, report.front, report.recommended, report)
