"""What a search checks before it writes anything or starts Ray: the model and the data load,
the model takes a batch of the data, the evaluation returns the objectives, and (a warning) the
trials can train their samples within their time limit on this machine."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from tune_batch.config import Config
from tune_batch.config.advice import short_goal_epochs, too_few_samples
from tune_batch.errors import ConfigError, TrialConfigError
from tune_batch.output.tracking import check_trackers

#: The most samples the timed forward pass takes (the space's smallest batch, if fewer). Without
#: gradients, at the smallest batch, it is cheaper per sample than training at any batch measured
#: here: quickstart's CNN 0.17-0.19 ms a sample forward at batch 16-64 against 0.30-0.45 training at
#: 16-256; ResNet-18 at 224 px 37 ms (batch 2) against 93-100. At batch 2 it is not (the CNN: 0.45 ms)
FLOOR_SAMPLES = 32


def preflight(config: Config, batch_size: int | None = None, *, address: str | None = None,
              warn: Callable[[str], None] | None = None) -> str:
    """Build the data sets and the model once, so user mistakes (unknown model, missing files,
    offline weights, bad ``pkg.module:function``) fail before anything is written or run.
    Returns a one-line description of the workload. Where the trials run elsewhere than this
    machine's CPU (its GPUs, or a cluster at ``address`` / search.address), a model that fails on
    the CPU is ``warn``-ed about instead: it may need the GPU (a CUDA-only kernel)."""
    from tune_batch.workload import build_datasets, build_model

    check_trackers(config.search.log_to)
    beta = config.confirm.horizon_beta
    if beta is not None and config.confirm_samples(None) is None:
        where = "goal" if config.goal is not None and config.goal.length_given else "confirm"
        raise ConfigError(f"confirm.horizon_beta = {beta} needs the confirmation runs' length in samples, not "
                          f"{where}.epochs; allowed: {where}.train_samples, or no confirm.horizon_beta")
    if config.train.loop != "tune_batch":  # the user's trainer: its builder's pieces are checked instead
        from tune_batch.trial.trainers import preflight_trainer

        return preflight_trainer(config, batch_size)
    ds = build_datasets(config.data, num_classes=config.model.num_classes, seed=config.search.seed)
    model = build_model(config.model)
    n_params = sum(p.numel() for p in model.parameters())
    smallest = batch_size or min(config.space.batch_choices())
    if len(ds.train) < smallest:  # type: ignore[arg-type]
        raise ConfigError(f"batch size {smallest} is larger than the training set "
                          f"({len(ds.train)} samples)")  # type: ignore[arg-type]
    few = too_few_samples(config, batch_size)
    if few:
        raise ConfigError(few)
    import torch

    elsewhere = ("the cluster at search.address" if address or config.search.address else
                 "this machine's GPUs" if torch.cuda.is_available() else None)
    if elsewhere is None and config.train.precision in ("bf16", "fp16") and warn is not None:
        warn(f"train.precision = {config.train.precision} on this machine's CPU: its autocast is slow there (the "
             f"quickstart read 383 samples/s against 2500 in fp32), and the trials measure that")
    try:
        _check_first_loss(config, ds.train, ds.val, model, smallest)
    except ConfigError as e:
        if elsewhere is None or isinstance(e.__cause__, TrialConfigError):
            raise
        if warn is not None:
            warn(f"{e} (on this machine's CPU; the trials run on {elsewhere}, where it may work: not refused)")
    else:
        if elsewhere is None and warn is not None:
            _warn_slow_trials(config, ds.train, model, min(smallest, FLOOR_SAMPLES), warn)
    short = short_goal_epochs(config, len(ds.train))  # type: ignore[arg-type]
    if short:  # a length in epochs is known now, from the training set
        raise ConfigError(short)
    return f"{config.model.name} ({n_params / 1e6:.2f}M parameters) on {ds.description}"


def _check_first_loss(config: Config, train: Any, val: Any, model: Any, smallest: int) -> None:
    """ConfigError, in one line, where the model cannot take 2 of the training samples (each
    trial would fail the same way after Ray and a trial process started)."""
    from tune_batch.trial.loop import first_loss

    try:
        first_loss(config, train, val, model, smallest)
    except TrialConfigError as e:  # a mistake said in full already (an objective the evaluation lacks)
        raise ConfigError(str(e)) from e
    except Exception as e:  # the user's model, data or step: whatever it raises is the message
        what = (str(e).strip().splitlines() or [""])[0][:300]
        raise ConfigError(f"the model cannot take a batch of the data ({type(e).__name__}: {what}); "
                          f"check model, data (its size: data.resize), train.step and train.evaluate") from e


def _warn_slow_trials(config: Config, train: Any, model: Any, samples: int, warn: Callable[[str], None]) -> None:
    """Warn where a trial's samples cannot train within budget.trial_timeout_s on this machine: the
    forward pass alone of ``samples`` training samples (no gradients, the second of two passes) per
    sample, times budget.train_samples, is already past it (the GPU config on a laptop: every trial
    would time out, hours of them, and timeouts do not stop a search as failures alike do)."""
    import torch

    from tune_batch.trial.loop import forward_pass

    try:
        forward_pass(config, train, model, samples)  # the first pass pays one-off costs
        start = time.perf_counter()
        forward_pass(config, train, model, samples)
    except Exception:  # noqa: BLE001 - a train.step that needs more samples (the loss check passed): no floor
        return
    per_sample = (time.perf_counter() - start) / samples
    floor = per_sample * config.budget.train_samples
    if floor > config.budget.trial_timeout_s:
        warn(f"a trial may not finish on this machine's CPU ({torch.get_num_threads()} threads): the forward pass "
             f"alone takes {per_sample * 1e3:.1f} ms a sample (batch {samples}), so budget.train_samples = "
             f"{config.budget.train_samples} need at least {floor:.0f} s of training, past budget.trial_timeout_s = "
             f"{config.budget.trial_timeout_s:g}; lower budget.train_samples (or data.resize), or raise "
             f"budget.trial_timeout_s")


def local_notes(config: Config) -> list[str]:
    """What a search on this machine (no search.address) will say of its resources before its
    first trial: the ``num_gpus`` choices it drops (more than the machine has; above 1 in process
    with search.backend optuna), and ``device_util`` as an objective without GPUs (``validate``
    shows them; the search's backend warns of them itself)."""
    if config.search.address:
        return []
    import os

    import torch

    from tune_batch.analysis.objectives import utilization_warning

    gpus = torch.cuda.device_count()
    notes = [x for x in (utilization_warning(config, gpus),) if x]
    if config.search.backend == "optuna":
        notes += one_worker_notes(config)
    else:
        from tune_batch.backends.ray.resources import plan_resources

        cpus = float(os.cpu_count() or 1)  # no choice left: refused in the search's words (UserError)
        notes += plan_resources(config, {"CPU": cpus, "GPU": float(gpus)}, node_cpus=cpus).notes
    return notes


def one_worker_notes(config: Config) -> list[str]:
    """What the in-process Optuna backend (one-worker trials) leaves out of ``config``: a baseline
    on more than one worker (its runs end failed, saying why), and the num_gpus choices above 1."""
    out = []
    b = config.baseline
    if b is not None and b.num_gpus > 1 and config.confirm.candidates:
        out.append(f"baseline.num_gpus = {b.num_gpus}: search.backend 'optuna' runs one worker in this process; "
                   f"the baseline cannot run here and is not compared; use backend 'ray' for a worker group")
    if any(n != 1 for n in config.space.num_gpus):
        out.append("space.num_gpus: choices > 1 dropped: search.backend 'optuna' runs one-worker "
                   "trials in this process; use backend 'ray' for data-parallel trials")
    return out
