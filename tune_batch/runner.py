"""A whole search: check the input, prepare the run directory, run a backend, write reports.

``search(config) -> SearchResult`` is the library entry point; the CLI is a thin layer on it.
A search started again on the same run directory continues: finished trials count towards
``budget.trials`` and are neither rerun nor lost; trials a killed process left RUNNING in
the study are marked FAIL and run again.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tune_batch.config import Config
from tune_batch.errors import ConfigError
from tune_batch.oom import FeasibilityModel
from tune_batch.progress import Progress
from tune_batch.report import Report, build_report, latest_per_trial, render_summary, write_files
from tune_batch.results import RunDir


@dataclass(frozen=True)
class SearchResult:
    run_dir: Path
    records: list[dict[str, Any]]
    front: list[dict[str, Any]]
    recommended: dict[str, Any] | None
    report: Report = field(repr=False)


def default_output(config: Config) -> Path:
    return Path("runs") / f"{config.name}-{time.strftime('%Y%m%d-%H%M%S')}"


def preflight(config: Config) -> str:
    """Build the data sets and the model once, so user mistakes (unknown model, missing files,
    offline weights, bad ``pkg.module:function``) fail before anything is written or run.
    Returns a one-line description of the workload."""
    from tune_batch.workload import build_datasets, build_model

    ds = build_datasets(config.data, num_classes=config.model.num_classes, seed=config.search.seed)
    model = build_model(config.model)
    n_params = sum(p.numel() for p in model.parameters())
    smallest = min(config.space.batch_choices())
    if len(ds.train) < smallest:  # type: ignore[arg-type]
        raise ConfigError(f"space.batch_size: the smallest batch ({smallest}) is larger than the training set ({len(ds.train)} samples)")  # type: ignore[arg-type]
    if config.budget.train_samples < 2 * smallest:
        raise ConfigError(f"budget.train_samples = {config.budget.train_samples}: must be at least 2 x the smallest batch_size ({2 * smallest})")
    return f"{config.model.name} ({n_params / 1e6:.2f}M parameters) on {ds.description}"


def open_storage(url: str) -> Any:
    import optuna

    return optuna.storages.RDBStorage(url, engine_kwargs={"connect_args": {"timeout": 30}})


def check_study(storage: Any, study_name: str, config: Config) -> bool:
    """Refuse a study whose directions differ from the objectives (OptunaSearch would silently
    ignore them), and mark trials a dead process left RUNNING as FAIL so they are run again.
    Returns True when the study is new or empty (a fresh search: seed points are added)."""
    import optuna

    from tune_batch.backends.optuna import check_directions

    try:
        study = optuna.load_study(study_name=study_name, storage=storage)
    except KeyError:
        return True
    check_directions(study, config)
    for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
        storage.set_trial_state_values(t._trial_id, optuna.trial.TrialState.FAIL)
    return not study.trials


def feasibility_model(config: Config, records: list[dict[str, Any]]) -> FeasibilityModel | None:
    """The memory feasibility model of a search, taught by the records already in the run
    directory (so a continued search remembers its boundary); None when switched off."""
    if not config.resources.feasibility_model:
        return None
    from tune_batch.oom import cap_bytes

    model = FeasibilityModel(cap_bytes(config.resources.device_memory, None))
    for rec in records:
        model.observe(rec)
    return model


def search(config: Config, output: str | Path | None = None, *, address: str | None = None,
           storage_url: str | None = None, study_name: str | None = None, force: bool = False,
           quiet: bool = False, verbose: bool = False, prefer: str | dict[str, float] | None = None) -> SearchResult:
    """Run the search of ``config`` (or continue it) and write its reports.

    Raises UserError (ConfigError, WorkloadError, RunDirError) for user mistakes, before
    anything is written to ``output``.
    """
    run_dir = RunDir(output or default_output(config))
    RunDir.check_writable(run_dir.path)
    if config.search.backend == "optuna" and (address or config.search.address):
        raise ConfigError("search.address: a cluster address needs search.backend = 'ray'")
    progress = Progress(config, config.budget.trials, quiet=quiet)
    progress.say(f"workload: {preflight(config)}")
    resumed = run_dir.prepare(config, force=force)
    previous, warnings = run_dir.records()
    done = latest_per_trial(previous)
    for w in warnings:
        progress.say(f"warning: {w}")
    remaining = config.budget.trials - len(done)
    progress.records = list(done)  # the front and counts include trials already finished
    if resumed:
        progress.say(f"continuing {run_dir.path}: {len(done)} trial(s) already finished, {max(0, remaining)} to run")
    if remaining > 0:
        storage = open_storage(storage_url or run_dir.study_url)
        name = study_name or config.name
        fresh = check_study(storage, name, config)
        budget = config.budget.model_copy(update={"trials": remaining})
        run_config = config.model_copy(update={"budget": budget})
        feasibility = feasibility_model(config, done)
        if config.search.backend == "optuna":
            from tune_batch.backends import optuna as optuna_backend

            if any(n > 1 for n in config.space.num_gpus):
                progress.say("warning: space.num_gpus: choices > 1 dropped: search.backend 'optuna' runs one-worker "
                             "trials in this process; use backend 'ray' for data-parallel trials")
                space = run_config.space.model_copy(update={"num_gpus": [1]})
                run_config = run_config.model_copy(update={"space": space})

            optuna_backend.run_search(run_config, run_dir, storage=storage, study_name=name, progress=progress,
                                      feasibility=feasibility, verbose=verbose, fresh=fresh)
        else:
            from tune_batch.backends import ray as ray_backend

            ray_backend.run_search(run_config, run_dir, storage=storage, study_name=name, progress=progress,
                                   address=address or config.search.address, verbose=verbose, feasibility=feasibility,
                                   fresh=fresh)
    records, warnings = run_dir.records()
    report = build_report(config, records, warnings, prefer=prefer)
    write_files(report, run_dir.path)
    if not quiet:
        print(render_summary(report), flush=True)
        print(f"results: {run_dir.path}/ (trials.jsonl, results.csv, pareto.json, best.yaml, report.html, study.db)", flush=True)
    return SearchResult(run_dir.path, report.records, report.front, report.recommended, report)
