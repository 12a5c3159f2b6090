"""One trial: build the workload, warm up, time a window, (optionally) profile, validate.

``run_trial(config, params) -> TrialResult`` never raises for trial faults: OOM ends as
``oom``, an invalid combination as ``skipped``, everything else as ``failed`` with the reason
and traceback kept. Only this boundary catches broad exceptions.
"""

from __future__ import annotations

import contextlib
import gc
import math
import os
import socket
import time
import traceback
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader

from tune_batch import space as space_mod
from tune_batch.config import Config
from tune_batch.errors import DeviceMonitorError
from tune_batch.measure.cpu import CpuUtilWindow, PeakRss
from tune_batch.measure.memory import _quiet_native_stderr, step_peak_bytes
from tune_batch.oom import MemoryCapExceeded, cap_bytes, is_oom_error
from tune_batch.workload import build_datasets, build_model


class TrialTimeout(RuntimeError):
    """The trial ran past ``budget.trial_timeout_s``."""


class NonFiniteError(RuntimeError):
    """The loss or a BatchNorm running statistic became NaN or infinite."""


@dataclass(frozen=True)
class TrialResult:
    """What one trial measured. Units are in the metric names (see DESIGN.md)."""

    trial_id: int | str | None
    params: dict[str, Any]
    status: str
    reason: str | None = None
    metrics: dict[str, float] = field(default_factory=dict)
    duration_s: float = 0.0
    info: dict[str, Any] = field(default_factory=dict)
    traceback: str | None = None

    def to_record(self) -> dict[str, Any]:
        """The JSON-able record written to ``trials.jsonl``."""
        return asdict(self)

    @classmethod
    def from_record(cls, rec: dict[str, Any]) -> TrialResult:
        known = {k: rec[k] for k in ("trial_id", "params", "status", "reason", "metrics",
                                      "duration_s", "info", "traceback") if k in rec}
        return cls(**known)


def normalize_params(params: dict[str, Any]) -> dict[str, Any]:
    """batch_size and num_gpus as int, lr as float; other keys (user extras) kept."""
    out = dict(params)
    out["batch_size"] = int(params["batch_size"])
    out["lr"] = float(params["lr"])
    out["num_gpus"] = int(params.get("num_gpus", 1))
    return out


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _cycle(loader: DataLoader, sampler: Any = None) -> Iterator[Any]:
    """Batches forever, reshuffling at each epoch (the loader drops the short last batch)."""
    epoch = 0
    while True:
        if sampler is not None:
            sampler.set_epoch(epoch)
        epoch += 1
        yielded = False
        for batch in loader:
            yielded = True
            yield batch
        if not yielded:
            raise RuntimeError("the DataLoader yields no full batch: the data set is smaller than the batch")


def _extension_steps(remaining_s: float, step_s: float, room_s: float) -> int:
    """Extra steps of ``step_s`` seconds that cover ``remaining_s`` more seconds of window,
    within ``room_s`` (half of the time left before the trial's deadline); at least one while
    any window is missing and there is room."""
    if remaining_s <= 0 or room_s <= 0:
        return 0
    return max(1, math.ceil(min(remaining_s, room_s) / max(step_s, 1e-6)))


def _group_max(value: float, world: int) -> float:
    return _all_reduce([value], ["max"])[0] if world > 1 else value


def _lengthen_window(stepper: _Stepper, window_s: float, timed_steps: int, min_window_s: float,
                     deadline: float, world: int) -> tuple[int, float]:
    """Time extra steps until the window is at least ``min_window_s`` long; returns (extra
    steps, the whole window's seconds). Runs in rounds, each sized by the step time the
    previous one measured, so a slow start is topped up by the clock. Every rank of a
    data-parallel group takes the same decisions (the slowest rank's window, the smallest step
    count), or their steps would not pair up in the all-reduce."""
    window_s = _group_max(window_s, world)
    step_s = window_s / max(timed_steps, 1)
    extra = 0
    for _ in range(16):  # a bound only: one or two rounds reach the minimum
        n = _extension_steps(min_window_s - window_s, step_s, (deadline - time.perf_counter()) / 2)
        if world > 1:
            n = int(_all_reduce([float(n)], ["min"])[0])
        if n <= 0:
            break
        _sync(stepper.device)
        _barrier(world)
        t = time.perf_counter()
        for _ in range(n):
            stepper.step()
        _sync(stepper.device)
        _barrier(world)
        round_s = _group_max(time.perf_counter() - t, world)
        window_s += round_s
        step_s = round_s / n
        extra += n
    return extra, window_s


def _snapshot(model: nn.Module, opt: torch.optim.Optimizer) -> tuple[dict[str, Any], dict[str, Any]]:
    """Weights, buffers and optimizer state, copied to host memory (no device memory taken)."""
    def host(x: Any) -> Any:
        if isinstance(x, torch.Tensor):
            return x.detach().to("cpu", copy=True)
        if isinstance(x, dict):
            return {k: host(v) for k, v in x.items()}
        if isinstance(x, list | tuple):
            return type(x)(host(v) for v in x)
        return x

    return host(model.state_dict()), host(opt.state_dict())


def _restore(model: nn.Module, opt: torch.optim.Optimizer, saved: tuple[dict[str, Any], dict[str, Any]]) -> None:
    model.load_state_dict(saved[0])
    opt.load_state_dict(saved[1])  # moves the state to each parameter's device


def _node_id() -> str:
    """The Ray node this process runs on (its hostname outside Ray)."""
    import sys

    if "ray" in sys.modules:
        try:
            import ray

            if ray.is_initialized():
                return str(ray.get_runtime_context().get_node_id())
        except Exception:  # not in a Ray worker after all
            pass
    return socket.gethostname()


def _barrier(world: int) -> None:
    if world > 1:
        torch.distributed.barrier()


def _all_reduce(values: list[float], ops: list[str]) -> list[float]:
    """Combine one number per rank: "max", "min", "sum" or "mean" (gloo and nccl alike)."""
    dist = torch.distributed
    world = dist.get_world_size()
    backend_device = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else torch.device("cpu")
    out = []
    for v, op in zip(values, ops):
        t = torch.tensor([v], dtype=torch.float64, device=backend_device)
        red = {"max": dist.ReduceOp.MAX, "min": dist.ReduceOp.MIN}.get(op, dist.ReduceOp.SUM)
        dist.all_reduce(t, op=red)
        out.append(float(t.item()) / (world if op == "mean" else 1))
    return out


def _all_gather(obj: Any) -> list[Any]:
    gathered: list[Any] = [None] * torch.distributed.get_world_size()
    torch.distributed.all_gather_object(gathered, obj)
    return gathered


def _check_bn(model: nn.Module) -> None:
    for name, m in model.named_modules():
        if isinstance(m, nn.modules.batchnorm._BatchNorm) and m.running_mean is not None:
            if not (torch.isfinite(m.running_mean).all() and torch.isfinite(m.running_var).all()):
                raise NonFiniteError(f"NaN in BatchNorm running statistics of {name or 'model'}")


def _evaluate(model: nn.Module, val: Any, device: torch.device, batch: int) -> float:
    """Top-1 accuracy on the held-out split, at the trial's own batch size (what fits in training fits here)."""
    model.eval()
    correct = total = 0
    with torch.no_grad():
        for x, y in DataLoader(val, batch_size=batch, shuffle=False):
            pred = model(x.to(device)).argmax(dim=1)
            correct += int((pred.cpu() == y).sum())
            total += len(y)
    model.train()
    return correct / total if total else 0.0


def pick_device() -> torch.device:
    return torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")


def device_name(device: torch.device, threads: int) -> str:
    if device.type == "cuda":
        return f"cuda:{device.index} {torch.cuda.get_device_name(device)}"
    return f"cpu ({threads} threads)"


class _Stepper:
    """Runs optimizer steps and keeps the per-step checks (timeout, memory cap, finite loss)."""

    def __init__(self, model: nn.Module, opt: torch.optim.Optimizer, batches: Iterator[Any],
                 device: torch.device, deadline: float, mem: PeakRss | None, batch: int) -> None:
        self.model, self.opt, self.batches, self.device = model, opt, batches, device
        self.batch = batch
        self.short_batches = 0  # batches smaller than the worker's batch size (must stay 0)
        self.deadline, self.mem = deadline, mem
        self.loss_fn = nn.CrossEntropyLoss()
        self.wait_s = 0.0
        self.steps = 0
        self.last_loss = float("nan")
        self._check_every = 1 if device.type == "cpu" else 10  # .item() syncs a GPU: not every step

    def step(self) -> None:
        t = time.perf_counter()
        x, y = next(self.batches)
        self.wait_s += time.perf_counter() - t
        if len(y) != self.batch:
            self.short_batches += 1
        x = x.to(self.device, non_blocking=True)
        y = y.to(self.device, non_blocking=True)
        loss = self.loss_fn(self.model(x), y)
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        self.opt.step()
        self.steps += 1
        self._loss = loss
        if self.steps % self._check_every == 0:
            self.check_loss(loss)
        if self.mem is not None:
            self.mem.poll()
        if self.mem is not None and self.mem.exceeded.is_set():
            raise MemoryCapExceeded(self.mem.peak_bytes, self.mem.cap_bytes or 0)
        if time.perf_counter() > self.deadline:
            raise TrialTimeout("timeout: still training after budget.trial_timeout_s")

    def check_loss(self, loss: torch.Tensor | None = None) -> None:
        value = float((loss if loss is not None else self._loss).item())
        self.last_loss = value
        if not math.isfinite(value):
            raise NonFiniteError(f"non-finite loss ({value}) at step {self.steps}")


def _train_and_measure(config: Config, params: dict[str, Any], *, device: torch.device, threads: int,
                       deadline: float, extra: dict[str, Any] | None, trace_dir: Path | None,
                       info: dict[str, Any], validate: bool = True, rank: int = 0, world: int = 1) -> dict[str, float]:
    """Train and measure on one worker; with ``world`` > 1 this runs on every rank of an
    initialised process group (DDP, a DistributedSampler with drop_last) and the figures are
    combined across ranks: global samples_per_s, mean device_util, largest peak memory."""
    seed = config.search.seed
    torch.manual_seed(seed)
    global_batch = params["batch_size"]
    batch = global_batch // world  # per worker
    budget = config.budget
    total_steps = budget.train_samples // global_batch
    if total_steps < 2:
        raise ValueError(
            f"budget.train_samples = {budget.train_samples} gives {total_steps} step(s) at batch_size {batch}; "
            f"need at least 2 (one warm-up, one timed)"
        )
    warmup = min(budget.warmup_steps, total_steps - 1)
    prof_steps = 0
    if config.profile.enabled and trace_dir is not None:
        p = config.profile
        prof_steps = (p.wait + p.warmup + p.active) * p.repeat
        if total_steps - warmup - prof_steps < 1:
            info["profile"] = f"skipped: {total_steps} steps leave no room for {prof_steps} profiled steps"
            prof_steps = 0
    timed_steps = total_steps - warmup - prof_steps

    ds = build_datasets(config.data, num_classes=config.model.num_classes, seed=seed, extra=extra)
    if len(ds.train) < batch:  # type: ignore[arg-type]
        raise ValueError(f"the training set has {len(ds.train)} samples, fewer than batch_size {batch}")  # type: ignore[arg-type]
    info["data"] = ds.description

    cap = cap_bytes(config.resources.device_memory,
                    torch.cuda.get_device_properties(device).total_memory if device.type == "cuda" else None)
    if cap is not None:
        info["memory_cap_bytes"] = cap
    if config.resources.device_memory is not None and cap is None:
        info["memory_cap"] = "a fractional cap needs a device with known total memory: not enforced on CPU"
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
        if cap is not None:
            total = torch.cuda.get_device_properties(device).total_memory
            torch.cuda.set_per_process_memory_fraction(min(1.0, cap / total), device)
    gen = torch.Generator().manual_seed(seed)
    nw = config.data.num_workers
    sampler = None
    if world > 1:
        from torch.utils.data.distributed import DistributedSampler

        # every rank gets the same number of full batches: no short or empty last batch (the
        # seed's NaN-BatchNorm failure on multiple GPUs)
        sampler = DistributedSampler(ds.train, num_replicas=world, rank=rank, shuffle=True, seed=seed, drop_last=True)
    loader = DataLoader(ds.train, batch_size=batch, shuffle=sampler is None, sampler=sampler, drop_last=True,
                        num_workers=nw, pin_memory=device.type == "cuda", generator=gen if sampler is None else None,
                        persistent_workers=nw > 0)

    if device.type == "cpu":
        _prime(config, ds.train, device, extra)
    # the CPU peak (and cap) comes from the profiled last warm-up step; sampling RSS every step
    # (a /proc read on the hot path, and a second, noisier cap check) only when there is none
    mem_ctx: Any = PeakRss(cap) if device.type == "cpu" and warmup == 0 else contextlib.nullcontext()
    with mem_ctx as mem:
        model = build_model(config.model, extra).to(device)
        model.train()
        net: nn.Module = model
        if world > 1:
            from torch.nn.parallel import DistributedDataParallel

            net = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
        opt = torch.optim.SGD(net.parameters(), lr=params["lr"], momentum=config.optimizer.momentum,
                              weight_decay=config.optimizer.weight_decay)
        stepper = _Stepper(net, opt, _cycle(loader, sampler), device, deadline, mem, batch)

        step_peak: int | None = None
        for i in range(warmup):
            if device.type == "cpu" and i == warmup - 1:
                # the last warm-up step runs under the memory profiler: tensor-level peak bytes
                step_peak = step_peak_bytes(stepper.step)
                info["peak_mem_method"] = "torch memory profiler, last warm-up step (tensor bytes)"
                if cap is not None and step_peak > cap:
                    raise MemoryCapExceeded(step_peak, cap)
            else:
                stepper.step()
        if warmup:
            stepper.check_loss()

        # the timed window: end to end, data loading included, device synchronised at both edges
        cpu = CpuUtilWindow(threads=torch.get_num_threads() + nw)
        gpu_ctx: Any = contextlib.nullcontext()
        if device.type == "cuda":
            try:
                from tune_batch.measure.nvml import GpuSampler

                gpu_ctx = GpuSampler([device.index or 0])
            except DeviceMonitorError as e:
                info["device_util"] = f"not measured: {e}"
        _sync(device)
        _barrier(world)
        stepper.wait_s = 0.0
        cpu.start()
        with gpu_ctx as gpu:
            if gpu is not None:
                gpu.mark_start()
            t0 = time.perf_counter()
            for _ in range(timed_steps):
                stepper.step()
            _sync(device)
            _barrier(world)
            t1 = time.perf_counter()
            # the peak of the budget's own steps, before any snapshot could add to it
            cuda_peak = int(torch.cuda.max_memory_allocated(device)) if device.type == "cuda" else None
            window_s = t1 - t0
            extra_steps = 0
            if budget.min_window_s > 0 and _group_max(window_s, world) < budget.min_window_s:
                # a short window: time more steps, then put the weights back so that training
                # (and val_acc) still sees exactly train_samples; the copy is outside the window
                stepper.check_loss()
                budget_loss = stepper.last_loss
                saved = _snapshot(model, opt)
                extra_steps, window_s = _lengthen_window(stepper, window_s, timed_steps, budget.min_window_s,
                                                         deadline, world)
            if gpu is not None:
                gpu.mark_end()
        cpu_window = cpu.stop()
        wait_s = stepper.wait_s
        stepper.check_loss()
        if extra_steps:
            _restore(model, opt, saved)
            del saved
            stepper.last_loss = budget_loss
            info["window_extension_steps"] = extra_steps

        if prof_steps:
            info["trace_dir"] = str(trace_dir)
            info["profile_step_s"] = _profile(stepper, config, trace_dir)  # type: ignore[arg-type]

        if cuda_peak is not None:
            peak = cuda_peak
            info["peak_mem_method"] = "torch.cuda.max_memory_allocated"
        elif step_peak is not None:
            peak = step_peak
        else:  # no warm-up step to profile: the process's resident-memory high-water mark
            peak = mem.peak_bytes
            info["peak_mem_method"] = f"RSS high-water mark above the pre-model baseline ({mem.method})"
        _check_bn(model)
        val_acc = _evaluate(model, ds.val, device, batch) if validate and rank == 0 else float("nan")

    measured_steps = timed_steps + extra_steps
    timed_samples = measured_steps * global_batch
    if world > 1:
        # the slowest rank's window, the largest rank's peak, the mean wait: the group's figures
        window_s, peak, wait_s = _all_reduce([window_s, float(peak), wait_s], ["max", "max", "mean"])
        info["short_batches"] = int(_all_reduce([float(stepper.short_batches)], ["sum"])[0])
        info["nodes"] = sorted(set(_all_gather(socket.gethostname())))
        info["node_ids"] = sorted(set(_all_gather(_node_id())))
    else:
        info["short_batches"] = stepper.short_batches
        info["nodes"] = [socket.gethostname()]
        info["node_ids"] = [_node_id()]
    info["per_worker_batch"] = batch
    sps = timed_samples / window_s
    if device.type == "cuda":
        window = getattr(gpu, "window", None)  # None when NVML could not be opened
        util = window.device_util if window is not None else None
        info.update(window.telemetry() if window is not None else {"nvml_samples": 0})
    else:
        util = cpu_window.util
        info["device_util_raw"] = cpu_window.util_raw
    if world > 1 and util is not None:
        util = _all_reduce([float(util)], ["mean"])[0]
    info.update(steps=total_steps, warmup_steps=warmup, timed_steps=measured_steps, timed_samples=timed_samples,
                profiled_steps=prof_steps, train_samples_done=total_steps * global_batch, world_size=world,
                final_loss=stepper.last_loss)
    metrics = {
        "samples_per_s": sps,
        "peak_mem_bytes": float(peak),
        "data_wait_frac": min(1.0, wait_s / window_s),
        "timed_s": window_s,
        "step_time_s": window_s / measured_steps,
    }
    if util is not None:
        metrics["device_util"] = float(util)
    if device.type == "cuda" and "energy_j" in info:
        metrics["energy_j_per_sample"] = info["energy_j"] / timed_samples
    if validate and rank == 0:
        metrics["val_acc"] = val_acc
    if "profile_step_s" in info:
        info["profiler_overhead"] = info["profile_step_s"] / metrics["step_time_s"] - 1.0
    _mfu(config, extra, ds.train[0][0].shape, device, threads, sps, trace_dir, metrics, info)
    info["bottleneck"], info["suggestion"] = bottleneck(metrics, device.type, nw)
    return metrics


_FLOPS_CACHE: dict[Any, tuple[float, bool]] = {}


def _mfu(config: Config, extra: dict[str, Any] | None, sample_shape: Any, device: torch.device, threads: int,
         sps: float, trace_dir: Path | None, metrics: dict[str, Any], info: dict[str, Any]) -> None:
    """Model FLOPs per sample (counted once per model and input shape) x samples_per_s / peak."""
    from tune_batch.measure.flops import model_flops_per_sample, resolve_peak

    key = (config.model.model_dump_json(), tuple(sample_shape), repr(sorted((extra or {}).items())))
    if key not in _FLOPS_CACHE:
        counted = None
        model = build_model(config.model, extra)
        has_conv = any(isinstance(m, nn.modules.conv._ConvNd) for m in model.modules())
        try:  # on the meta device nothing is computed or allocated
            counted = model_flops_per_sample(model.to("meta"), tuple(sample_shape), "meta")
        except Exception:  # some ops have no meta kernel: count on the CPU instead
            counted = model_flops_per_sample(build_model(config.model, extra), tuple(sample_shape), "cpu")
        _FLOPS_CACHE[key] = (counted, has_conv)
    per_sample, has_conv = _FLOPS_CACHE[key]
    run_dir = trace_dir.parent.parent if trace_dir is not None else None
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else f"cpu x{threads} threads"
    peak = resolve_peak(device, name, torch.get_default_dtype(), config_peak=config.resources.peak_flops,
                        cache_dir=run_dir, host=socket.gethostname(), has_conv=has_conv)
    world = int(info.get("world_size", 1))
    metrics["model_flops_per_s"] = per_sample * sps
    metrics["mfu"] = per_sample * sps / (peak.flops_per_s * world)
    info["model_flops_per_sample"] = per_sample
    info["peak_flops_per_s"] = peak.flops_per_s
    info["peak_source"] = peak.source
    if metrics["mfu"] > 1.0:
        info["mfu_flag"] = (f"MFU {metrics['mfu']:.2f} > 1: the peak ({peak.source}) is too low for this model's kernels; "
                            f"set resources.peak_flops")


def bottleneck(metrics: dict[str, float], device_type: str, num_workers: int) -> tuple[str, str]:
    """Where the timed window went: input-bound, launch-bound (CUDA) or compute-bound, with a hint."""
    wait = metrics.get("data_wait_frac", 0.0)
    util = metrics.get("device_util")
    if wait >= 0.2:
        hint = f"{wait:.0%} of the window waited for data: raise data.num_workers (now {num_workers})"
        if device_type == "cuda":
            hint += ", keep pin_memory on, move decoding/augmentation off the critical path"
        return "input-bound", hint
    if device_type == "cuda" and util is not None and util < 0.6 and metrics.get("step_time_s", 1.0) < 0.02:
        return "launch-bound", ("short steps and an idle GPU between kernels: raise batch_size, or cut Python and "
                                "launch overhead (torch.compile, CUDA graphs)")
    return "compute-bound", "the device's arithmetic sets the pace: mixed precision or a larger batch raises throughput"


def _prime(config: Config, train: Any, device: torch.device, extra: dict[str, Any] | None) -> None:
    """One throwaway step at batch 2 before the memory baseline, so that once-per-process
    costs (kernel caches, thread pools) are not counted as this batch size's memory."""
    x, y = next(iter(DataLoader(train, batch_size=2, shuffle=False)))
    model = build_model(config.model, extra).to(device)
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=0.0, momentum=config.optimizer.momentum)
    nn.functional.cross_entropy(model(x.to(device)), y.to(device)).backward()
    opt.step()
    del model, opt


def _profile(stepper: _Stepper, config: Config, trace_dir: Path) -> float:
    """Run the profiled steps (after the timed window) with the seed's torch.profiler setup;
    returns their mean step time, to compare with the timed window's (profiler overhead)."""
    from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler

    p = config.profile
    trace_dir.mkdir(parents=True, exist_ok=True)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if stepper.device.type == "cuda" else [])
    n = (p.wait + p.warmup + p.active) * p.repeat
    with _quiet_native_stderr(), profile(
            activities=activities, schedule=schedule(wait=p.wait, warmup=p.warmup, active=p.active, repeat=p.repeat),
            on_trace_ready=tensorboard_trace_handler(str(trace_dir)), record_shapes=p.record_shapes,
            profile_memory=p.profile_memory, with_stack=p.with_stack) as prof:
        _sync(stepper.device)
        t0 = time.perf_counter()
        for _ in range(n):
            stepper.step()
            prof.step()
        _sync(stepper.device)
        return (time.perf_counter() - t0) / n


def skip_result(config: Config, params: dict[str, Any], trial_id: Any, skip_reason: str | None) -> TrialResult | None:
    """The ``skipped`` record of a config that breaks the batch rules or that the memory model
    rules out (no training, zero training time), or None when it is to run."""
    params = normalize_params(params)
    bad = space_mod.violation(params, config.space)
    if not (bad or skip_reason):
        return None
    return TrialResult(trial_id, params, "skipped", f"space: {bad}" if bad else skip_reason, {}, 0.0,
                       {"host": socket.gethostname(), "train_s": 0.0})


def run_trial(config: Config, params: dict[str, Any], *, trial_id: int | str | None = None,
              extra: dict[str, Any] | None = None, threads: int | None = None,
              run_dir: str | Path | None = None, skip_reason: str | None = None,
              validate: bool = True, rank: int = 0, world: int = 1) -> TrialResult:
    """Run one measured trial of ``params`` (batch_size, lr, num_gpus) under ``config``.

    ``threads``: torch intra-op threads for this trial (restored afterwards). ``run_dir``:
    where profiler traces go (``traces/<trial_id>``). ``skip_reason``: the feasibility model's
    verdict; the trial is recorded as ``skipped`` without training. ``validate=False`` leaves
    out the validation pass (memory probes). ``rank``/``world``: this process is one worker of
    an initialised process group (see ``distributed.py``); there, faults are raised so the
    whole group stops at once. Otherwise never raises for trial faults.
    """
    start = time.perf_counter()
    params = normalize_params(params)
    info: dict[str, Any] = {"host": socket.gethostname(), "pid": os.getpid()}

    def result(status: str, reason: str | None = None, metrics: dict[str, float] | None = None,
               tb: str | None = None) -> TrialResult:
        return TrialResult(trial_id, params, status, reason, metrics or {}, time.perf_counter() - start, info, tb)

    skipped = skip_result(config, params, trial_id, skip_reason)
    if skipped is not None:
        return skipped
    if params["num_gpus"] > 1 and world == 1:
        return result("failed", "num_gpus > 1 runs on a worker group: use the ray backend "
                                "(tune_batch.distributed.run_data_parallel)")

    prev_threads = torch.get_num_threads()
    device = pick_device()
    try:
        if threads:
            torch.set_num_threads(threads)
        info["device"] = device_name(device, torch.get_num_threads())
        trace_dir = Path(run_dir) / "traces" / str(trial_id) if run_dir is not None else None
        metrics = _train_and_measure(config, params, device=device, threads=torch.get_num_threads(),
                                     deadline=start + config.budget.trial_timeout_s, extra=extra,
                                     trace_dir=trace_dir, info=info, validate=validate, rank=rank, world=world)
        metrics["duration_s"] = time.perf_counter() - start
        return result("ok", None, metrics)
    except (TrialTimeout, NonFiniteError) as e:
        if world > 1:
            raise
        return result("failed", str(e))
    except Exception as e:  # the trial boundary: every fault becomes a record
        if world > 1:
            raise  # the group's driver records it once, for every rank
        if is_oom_error(e):
            return result("oom", f"{type(e).__name__}: {str(e).splitlines()[0][:300]}")
        return result("failed", f"{type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}",
                      tb=traceback.format_exc())
    finally:
        torch.set_num_threads(prev_threads)
        gc.collect()
        if device.type == "cuda":
            torch.cuda.set_per_process_memory_fraction(1.0, device)
            torch.cuda.empty_cache()
