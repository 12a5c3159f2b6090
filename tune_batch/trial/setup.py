"""A trial's set-up: where it runs, its step plan, its data, model and optimizer."""

from __future__ import annotations

import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader

from tune_batch.config import Config
from tune_batch.measure.oom import cap_bytes
from tune_batch.store.records import Params
from tune_batch.workload import Datasets, build_datasets, build_model
from tune_batch.workload.batches import collate_of


@dataclass(frozen=True)
class Placement:
    """Where this worker runs: its rank in a data-parallel group of ``world`` (1: alone), its
    torch threads, and the cluster node it is on (the backend knows it; the host name otherwise)."""

    rank: int = 0
    world: int = 1
    threads: int | None = None
    node_id: str | None = None

    @property
    def node(self) -> str:
        return self.node_id or socket.gethostname()


@dataclass(frozen=True)
class StepPlan:
    """How the trial's ``train_samples // batch_size`` steps are spent (``total`` = ``warmup`` +
    ``timed``), and the profiled steps that run after validation, outside the budget."""

    total: int
    warmup: int
    timed: int
    profiled: int


def plan_steps(config: Config, params: Params, profiling: bool) -> StepPlan:
    """Raises ValueError when the budget gives fewer than two steps."""
    short = config.budget.steps_short(params.batch_size)
    if short:
        raise ValueError(short)
    total = config.budget.train_samples // params.batch_size
    warmup = min(config.budget.warmup_steps, total - 1)
    if config.train.compile:  # the first step compiles; a compiled trial warms up 3 steps at least
        warmup = min(max(warmup, 3), total - 1)
    p = config.profile
    profiled = (p.wait + p.warmup + p.active) * p.repeat if p.enabled and profiling else 0
    return StepPlan(total, warmup, total - warmup, profiled)


def pick_device() -> torch.device:
    return torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")


def device_name(device: torch.device, threads: int) -> str:
    if device.type == "cuda":
        return f"cuda:{device.index} {torch.cuda.get_device_name(device)}"
    return f"cpu ({threads} threads)"


@dataclass(frozen=True)
class MemoryCap:
    """The per-device cap in bytes (None: uncapped) and, when it cannot be enforced, why; the
    memory limit a trial runs under (the cap, or on CUDA the device less other processes' memory
    at the start, whichever is smaller; None: unknown) and what it was taken from."""

    bytes: int | None
    note: str | None
    limit_bytes: int | None = None
    device_total_bytes: int | None = None
    others_bytes: int | None = None  # CUDA: other processes' memory on the device at the start (NVML)
    others_note: str | None = None


def apply_memory_cap(config: Config, device: torch.device) -> MemoryCap:
    """The cap of ``resources.device_memory`` on ``device``; on CUDA the allocator is limited to
    it and to the memory other processes leave (undone by the trial's clean-up), and the peak
    statistics are reset."""
    total = torch.cuda.get_device_properties(device).total_memory if device.type == "cuda" else None
    cap = cap_bytes(config.resources.device_memory, total)
    note = None
    if config.resources.device_memory is not None and cap is None:
        note = "a fractional cap needs a device with known total memory: not enforced on CPU"
    if device.type != "cuda" or not total:
        return MemoryCap(cap, note, cap)
    from tune_batch.measure.tenants import others_bytes, usable_bytes

    others, why = others_bytes(device.index or 0)
    limit = usable_bytes(total, cap, others)
    torch.cuda.reset_peak_memory_stats(device)
    if limit < total:
        torch.cuda.set_per_process_memory_fraction(min(1.0, limit / total), device)
    return MemoryCap(cap, note, limit, total, others, why)


def load_data(config: Config, params: Params, placement: Placement, device: torch.device,
              extra: dict[str, Any] | None) -> tuple[Datasets, DataLoader, Any]:
    """The data sets, the training loader (drop_last: no short batch, ever) and, with several
    workers, its DistributedSampler. Raises ValueError when a batch cannot be filled."""
    seed = config.search.seed
    batch = params.batch_size // placement.world
    ds = build_datasets(config.data, num_classes=config.model.num_classes, seed=seed, extra=extra)
    if len(ds.train) < batch:  # type: ignore[arg-type]
        raise ValueError(f"the training set has {len(ds.train)} samples, fewer than batch_size {batch}")  # type: ignore[arg-type]
    sampler = None
    if placement.world > 1:
        from torch.utils.data.distributed import DistributedSampler

        # every rank gets the same number of full batches: no short or empty last batch (the
        # seed's NaN-BatchNorm failure on multiple GPUs)
        sampler = DistributedSampler(ds.train, num_replicas=placement.world, rank=placement.rank, shuffle=True,
                                     seed=seed, drop_last=True)
    nw = config.data.num_workers
    loader = DataLoader(ds.train, batch_size=batch, shuffle=sampler is None, sampler=sampler, drop_last=True,
                        num_workers=nw, pin_memory=device.type == "cuda", collate_fn=collate_of(ds.train),
                        generator=torch.Generator().manual_seed(seed) if sampler is None else None,
                        persistent_workers=nw > 0)
    return ds, loader, sampler


def build_net(config: Config, device: torch.device, world: int,
              extra: dict[str, Any] | None) -> tuple[nn.Module, nn.Module]:
    """(the model, what trains it: the model itself, or its DistributedDataParallel wrapper)."""
    model = build_model(config.model, extra).to(device)
    if config.train.channels_last:
        model = model.to(memory_format=torch.channels_last)
    model.train()
    net: nn.Module = model
    if world > 1:
        from torch.nn.parallel import DistributedDataParallel

        net = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    if config.train.compile:  # compiled on its first step (timed apart: compile_s); `model` stays eager
        net = torch.compile(net, mode=None if config.train.compile == "default" else config.train.compile)
    return model, net


def trace_dir_of(run_dir: str | Path | None, trial_id: Any) -> Path | None:
    return Path(run_dir) / "traces" / str(trial_id) if run_dir is not None else None
