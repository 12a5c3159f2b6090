"""What every trainer loop shares: the user's builder and its pieces, the searched batch size
and learning rate put where a trainer takes them, and the trial's record.

The trainers themselves (``lightning``, ``transformers``, ``keras``) are imported only by the
module of their loop, inside the trial.
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
import socket
import time
import warnings
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset, RandomSampler

from tune_batch.analysis.noise import rate_ci
from tune_batch.config import Config
from tune_batch.errors import WorkloadError
from tune_batch.store.records import Metrics, Params, Status, TrialInfo, TrialResult
from tune_batch.trial import derive
from tune_batch.trial.setup import MemoryCap, StepPlan, device_name
from tune_batch.trial.window import Window
from tune_batch.workload.resolve import call_builder, resolve_callable

#: What each loop's builder returns: a dict with these keys (required, optional).
PIECES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "lightning": (("module", "train"), ("val", "trainer")),
    "transformers": (("model", "train_dataset"), ("eval_dataset", "args", "data_collator", "compute_metrics",
                                                  "callbacks", "processing_class", "optimizers")),
    "keras": (("model", "x"), ("y", "validation_data", "callbacks")),
}


def build_pieces(config: Config) -> dict[str, Any]:
    """Call ``train.builder`` with ``train.builder_kwargs``; its pieces, checked against
    :data:`PIECES`. Raises WorkloadError (one line, naming the field and what is allowed)."""
    loop, spec = config.train.loop, config.train.builder or ""
    fn = resolve_callable(spec, "train.builder")
    out = call_builder(fn, "train.builder", spec, **config.train.builder_kwargs)
    required, optional = PIECES[loop]
    allowed = f"a dict with keys {', '.join(required)} (optional: {', '.join(optional)})"
    if not isinstance(out, Mapping):
        raise WorkloadError(f"train.builder = {spec!r} returned {type(out).__name__}; with train.loop = {loop} "
                            f"allowed: {allowed}")
    missing = [k for k in required if out.get(k) is None]
    unknown = [k for k in out if k not in required + optional]
    if missing or unknown:
        what = f"no {missing[0]!r}" if missing else f"an unknown key {unknown[0]!r}"
        raise WorkloadError(f"train.builder = {spec!r} returned {what}; with train.loop = {loop} allowed: {allowed}")
    return dict(out)


def wrong_piece(config: Config, key: str, value: Any, allowed: str) -> WorkloadError:
    """The one-line error for a piece of the wrong kind."""
    return WorkloadError(f"train.builder = {config.train.builder!r} returned {key} = {type(value).__name__}; with "
                         f"train.loop = {config.train.loop} allowed: {allowed}")


def seed_everything(seed: int) -> None:
    """Python's, NumPy's and torch's generators (what the user's builder and trainer draw from)."""
    import numpy as np

    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def micro_batch(config: Config, batch_size: int, accumulation: int, setting: str) -> int:
    """The per-step micro-batch of a global ``batch_size`` split into ``accumulation`` micro-batches
    (the trainer's own ``setting``); ValueError when it does not divide."""
    if accumulation < 1 or batch_size % accumulation:
        raise ValueError(f"batch_size {batch_size} is not a multiple of the trainer's {setting} = {accumulation}: "
                         f"choose batch sizes divisible by it (space.batch_size)")
    return batch_size // accumulation


def set_size(data: Any) -> int:
    """Samples in a data piece: a Dataset's, a DataLoader's dataset's, an array's length."""
    return len(data.dataset if isinstance(data, DataLoader) else data)


def loader_of(data: Any, batch: int, *, train: bool, seed: int) -> DataLoader:
    """``data`` (a Dataset, or the user's DataLoader) as a DataLoader of ``batch`` samples: a
    DataLoader keeps its collate function, workers and pinning; a training loader shuffles
    (seeded) and drops the short last batch, as tune_batch's own loop does."""
    kwargs: dict[str, Any] = {}
    if isinstance(data, DataLoader):
        kwargs = {"collate_fn": data.collate_fn, "num_workers": data.num_workers, "pin_memory": data.pin_memory,
                  "persistent_workers": data.persistent_workers}
        shuffle = isinstance(data.sampler, RandomSampler) if not train else True
        data = data.dataset
    elif not isinstance(data, Dataset):
        raise TypeError(f"{type(data).__name__} is not a torch Dataset or DataLoader")
    else:
        shuffle = train
    if train and len(data) < batch:  # type: ignore[arg-type]
        raise ValueError(f"the training set has {len(data)} samples, fewer than batch_size {batch}")  # type: ignore[arg-type]
    return DataLoader(data, batch_size=batch, shuffle=shuffle, drop_last=train,
                      generator=torch.Generator().manual_seed(seed) if shuffle else None, **kwargs)


_LR_KEYS = ("lr", "initial_lr", "max_lr", "min_lr")


def scale_lr(optimizers: list[Any], schedulers: list[Any], lr: float) -> float:
    """Put the searched ``lr`` into torch optimizers: the first param group's base learning rate
    becomes ``lr``; every other group, and each scheduler's base rates, keep their ratio to it.
    Returns the factor applied."""
    if not optimizers or not optimizers[0].param_groups:
        raise ValueError("the trainer has no optimizer to set the learning rate of")
    first = optimizers[0].param_groups[0]
    base = float(first.get("initial_lr", first["lr"]))
    if base <= 0:
        raise ValueError(f"the optimizer's learning rate is {base}: cannot scale it to lr = {lr}")
    factor = lr / base
    for opt in optimizers:
        for group in opt.param_groups:
            for key in _LR_KEYS:
                if isinstance(group.get(key), float | int):
                    group[key] = group[key] * factor
    for sched in schedulers:
        for attr in ("base_lrs", "max_lrs"):
            if isinstance(getattr(sched, attr, None), list):
                setattr(sched, attr, [v * factor for v in getattr(sched, attr)])
    return factor


def chance_of(labels: Any) -> float | None:
    """The majority-class share of integer ``labels`` (a tensor, array or list); None otherwise."""
    try:
        t = torch.as_tensor(labels).reshape(-1)
    except (TypeError, ValueError, RuntimeError):
        return None
    if t.numel() == 0 or t.is_floating_point() or t.is_complex():
        return None
    return float(torch.unique(t, return_counts=True)[1].max()) / t.numel()


@contextlib.contextmanager
def quiet(loggers: tuple[str, ...]) -> Iterator[None]:
    """A trainer's log lines (errors kept) and warnings kept out of the search's terminal for the
    trial's duration (levels and filters put back after)."""
    saved = {name: logging.getLogger(name).level for name in loggers}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for name in loggers:
                logging.getLogger(name).setLevel(logging.ERROR)
            yield
    finally:
        for name, level in saved.items():
            logging.getLogger(name).setLevel(level)


@dataclass(frozen=True)
class TrainerRun:
    """What a trainer-run trial measured (before it becomes a record)."""

    window: Window
    peak_bytes: float
    peak_method: str
    scores: dict[str, float]  # the trainer's own evaluation, by metric name
    final_loss: float
    data: str
    steps: int
    samples_done: int
    window_samples: int
    accumulation: int
    micro_batch: int
    precision: str | None
    data_workers: int = 0
    chance_acc: float | None = None
    short_batches: int = 0  # steps of fewer samples than the batch (a trainer that keeps short last batches)
    curve: list[list[float]] | None = None  # a confirmation run's evaluations (trainers.curve)
    kept: list[list[float]] | None = None  # a confirmation run's memory kept between steps, at each evaluation
    notes: dict[str, Any] = field(default_factory=dict)  # the loop's own facts, kept in the record's info


def _utilization(w: Window, device: torch.device) -> tuple[float | None, dict[str, Any]]:
    if device.type != "cuda":
        return w.cpu.util, {"device_util_raw": w.cpu.util_raw}
    if w.gpu is None:
        return None, {"nvml_samples": 0, "device_util_note": w.gpu_note}
    return w.gpu.device_util, dict(w.gpu.telemetry())


def trainer_record(config: Config, params: Params, plan: StepPlan, device: torch.device, run: TrainerRun,
                   cap: MemoryCap, start: float, world: int = 1) -> TrialResult:
    """The ``ok`` record of a trainer-run trial: the fields of tune_batch's loop that a trainer
    can give (no MFU, no gradient noise scale: they need tune_batch's own step). ``world``: the
    ranks of its worker group (``run``'s samples are the group's)."""
    w = run.window
    util, telemetry = _utilization(w, device)
    sps = run.window_samples / w.seconds
    step_s = w.seconds / w.steps
    wait_frac = min(1.0, w.wait_s / w.seconds)
    verdict = derive.bottleneck(wait_frac, util, step_s, device.type, run.data_workers)
    energy = telemetry.get("energy_j") if device.type == "cuda" else None
    scores = dict(run.scores)
    val_acc = scores.pop("val_acc", None)
    metrics = Metrics(samples_per_s=sps, samples_per_s_ci=rate_ci(w.blocks, sps), device_util=util, val_acc=val_acc,
                      peak_mem_bytes=run.peak_bytes, data_wait_frac=wait_frac, timed_s=w.seconds, step_time_s=step_s,
                      energy_j_per_sample=energy / run.window_samples if energy is not None else None,
                      duration_s=time.perf_counter() - start, other=scores)
    threads = torch.get_num_threads()
    info = TrialInfo(
        host=socket.gethostname(), pid=os.getpid(), device=device_name(device, threads), data=run.data,
        seed=config.search.seed, loop=config.train.loop, chance_acc=run.chance_acc,
        others_cpu_frac=w.cpu.others_cpu_frac, steal_frac=w.cpu.steal_frac,
        disturbed=w.cpu.disturbed or bool(telemetry.get("other_gpu_processes")),
        world_size=world, per_worker_batch=params.batch_size // world, nodes=[socket.gethostname()],
        steps=run.steps, warmup_steps=plan.warmup, timed_steps=w.steps, timed_samples=run.window_samples,
        train_samples_done=run.samples_done, short_batches=run.short_batches,
        final_loss=run.final_loss, memory_cap_bytes=cap.bytes, memory_cap=cap.note, peak_mem_method=run.peak_method,
        bottleneck=verdict[0], suggestion=verdict[1], precision=run.precision, accumulation_steps=run.accumulation,
        micro_batch_size=run.micro_batch,
        mfu_flag=f"not measured: train.loop = {config.train.loop} (MFU counts tune_batch's own step)",
        gns_note=f"not estimated: train.loop = {config.train.loop} (needs tune_batch's own step)",
    ).with_(**telemetry)
    info = info.with_(other={**info.other, **run.notes})
    return TrialResult(None, params, Status.OK, None, metrics, metrics.duration_s or 0.0, info)


def group_totals(peak: int | None, points: list | None, world: int) -> tuple[int | None, list | None]:
    """A worker group rank's peak memory and curve as the record's: the largest rank's peak, and
    the group's samples at each validation (every rank trains as many). As they are alone."""
    if world <= 1:
        return peak, points
    from tune_batch.trial import collective

    peak = collective.group_max(peak, world)
    return peak, [[p[0] * world, *p[1:]] for p in points] if points is not None else None
