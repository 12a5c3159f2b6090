"""Trials in the user's own trainer (``train.loop``: lightning, transformers, keras): the user's
builder gives the pieces, the trainer runs the trial's steps at the searched batch size and
learning rate, and a measurement callback (:class:`~tune_batch.trial.trainers.meter.Meter`)
gives the same window, peak memory, out-of-memory rule and record fields as tune_batch's loop.

``trial.run.run_trial`` sends a trainer loop here (:func:`measure_trainer`) inside its own
trial boundary, so faults become records exactly as in tune_batch's loop.
"""

from __future__ import annotations

import importlib
import time
from typing import Any

from tune_batch.config import Config
from tune_batch.config.advice import short_goal_epochs, too_few_samples
from tune_batch.errors import ConfigError, TrialConfigError, WorkloadError
from tune_batch.store.records import Params, TrialResult
from tune_batch.trial.evaluate import not_given


def loop_module(loop: str) -> Any:
    """The module of ``loop`` (``trial/trainers/<loop>.py``, which imports the trainer);
    WorkloadError with an install hint when the trainer's package is missing."""
    try:
        return importlib.import_module(f"tune_batch.trial.trainers.{loop}")
    except ModuleNotFoundError as e:
        raise WorkloadError(f"train.loop = {loop} needs the {e.name!r} package: pip install "
                            f"'tune-batch[{loop}]'") from e


#: The trainer loops that run a data-parallel trial (``num_gpus`` > 1) on a worker group.
MULTI_DEVICE = ("lightning", "transformers")


def group_kwargs(config: Config, world: int) -> dict[str, Any]:
    """What a trainer module's ``train`` is told of a worker group: nothing alone; ValueError for a
    loop that runs one device per trial."""
    if world <= 1:
        return {}
    if config.train.loop not in MULTI_DEVICE:
        raise ValueError(f"train.loop = {config.train.loop} runs one device per trial; space.num_gpus allowed: [1]")
    return {"world": world}


def measure_trainer(config: Config, params: Params, *, start: float | None = None,
                    validate: bool = True, world: int = 1) -> TrialResult:
    """Train ``params`` in the user's trainer and measure it; the ``ok`` record. Raises on any
    fault (the caller's trial boundary turns it into a record). ``world`` > 1: this process is one
    rank of the trial's worker group (``MULTI_DEVICE`` loops)."""
    from tune_batch.trial.setup import apply_memory_cap, pick_device, plan_steps
    from tune_batch.trial.trainers.common import quiet, seed_everything, trainer_record

    start = time.perf_counter() if start is None else start
    device = pick_device()
    plan = plan_steps(config, params, profiling=False)
    cap = apply_memory_cap(config, device)
    seed_everything(config.search.seed)
    module = loop_module(config.train.loop)
    with quiet(module.LOGGERS):
        run = module.train(config, params, plan, device, cap, start + config.budget.trial_timeout_s, validate,
                           **group_kwargs(config, world))
    record = trainer_record(config, params, plan, device, run, cap, start, world)
    missing = not_given(config, run.scores)
    if validate and "val_acc" in config.metric_names and record.metrics.val_acc is None:
        missing.insert(0, "val_acc")
    if validate and missing:
        logged = ", ".join(sorted(run.scores)) or "nothing"
        raise TrialConfigError(f"objective {missing[0]!r} is not among what the trainer's evaluation logged "
                               f"({logged}); log it there or choose one of those in objectives")
    return record


def preflight_trainer(config: Config, batch_size: int | None = None) -> str:
    """What a search checks before it writes anything, for a trainer loop: one device per trial
    (but for ``MULTI_DEVICE`` loops),
    a confirmation it can run, and the builder's pieces (built once).
    Returns a one-line description. Raises ConfigError / WorkloadError (one line)."""
    loop = config.train.loop
    if loop not in MULTI_DEVICE and list(config.space.num_gpus) != [1]:
        raise ConfigError(f"space.num_gpus = {list(config.space.num_gpus)}: train.loop = {loop} runs one device per "
                          f"trial in this version (more: {', '.join(MULTI_DEVICE)}); allowed: [1]")
    if loop not in MULTI_DEVICE and config.baseline is not None and config.baseline.num_gpus != 1:
        raise ConfigError(f"baseline.num_gpus = {config.baseline.num_gpus}: train.loop = {loop} runs one device per "
                          f"run in this version (more: {', '.join(MULTI_DEVICE)}); allowed: 1")
    if config.confirm.candidates and config.confirm_metric is None:
        raise ConfigError(f"confirm.candidates = {config.confirm.candidates}: no objective to read time to target on; "
                          f"add val_acc or a metric the trainer's evaluation logs to objectives")
    few = too_few_samples(config, batch_size)
    if few:
        raise ConfigError(few)
    from tune_batch.trial.trainers.common import quiet

    module = loop_module(loop)
    with quiet(module.LOGGERS):
        description, train_size = module.describe(config)
    short = short_goal_epochs(config, train_size)  # a length in epochs: passes over the builder's training set
    if short:
        raise ConfigError(short)
    return description
