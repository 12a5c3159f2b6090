"""What exists only to measure: the warm-up's memory reading, the timed window (and the steps
that only lengthen it), and the profiled steps. Results are frozen dataclasses."""

from __future__ import annotations

import contextlib
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from tune_batch.config import Config
from tune_batch.errors import DeviceMonitorError
from tune_batch.measure.cpu import CpuUtilWindow, CpuWindow
from tune_batch.measure.memory import quiet_native_stderr, step_peak_bytes
from tune_batch.measure.oom import MemoryCapExceeded
from tune_batch.trial.collective import all_reduce, barrier, group_max
from tune_batch.trial.loop import Stepper, sync


def warm_up(stepper: Stepper, steps: int, cap: int | None) -> int | None:
    """Run the untimed warm-up steps. On the CPU the last one runs under the memory profiler
    and its tensor-level peak bytes are returned (held against ``cap``); None elsewhere."""
    peak = None
    for i in range(steps):
        if stepper.device.type == "cpu" and i == steps - 1:
            peak = step_peak_bytes(stepper.step)
            if cap is not None and peak > cap:
                raise MemoryCapExceeded(peak, cap)
        else:
            stepper.step()
    if steps:
        stepper.check_loss()
    return peak


@dataclass(frozen=True)
class Window:
    """The timed window: end to end, data loading included, device synchronised at both edges."""

    seconds: float
    steps: int  # the budget's timed steps and the extension's
    extension_steps: int
    wait_s: float
    cuda_peak_bytes: int | None  # the allocator's peak over the budget's own steps
    cpu: CpuWindow
    gpu: Any  # measure.gpu_window.GpuWindow, or None
    gpu_note: str | None
    blocks: tuple[tuple[int, float], ...] = ()  # (steps, seconds) of each timed block: the scatter
    cuda_reserved_bytes: int | None = None  # the allocator's reserved peak over the budget's own steps


BLOCKS = 8  # timed blocks per window, synchronised at their edges (the per-block scatter is the noise)


def _timed_blocks(stepper: Stepper, steps: int, world: int, n_blocks: int = BLOCKS) -> list[tuple[int, float]]:
    """Run ``steps`` steps in up to ``n_blocks`` blocks; the device is synchronised (and the
    ranks meet) at each block's end, so each block's seconds are its own."""
    out = []
    sizes = [steps // n_blocks + (1 if i < steps % n_blocks else 0) for i in range(min(n_blocks, steps))]
    for n in sizes:
        t = time.perf_counter()
        for _ in range(n):
            stepper.step()
        sync(stepper.device)
        barrier(world)
        out.append((n, time.perf_counter() - t))
    return out


def extension_steps(remaining_s: float, step_s: float, room_s: float) -> int:
    """Extra steps of ``step_s`` seconds that cover ``remaining_s`` more seconds of window,
    within ``room_s`` (half of the time left before the trial's deadline); at least one while
    any window is missing and there is room."""
    if remaining_s <= 0 or room_s <= 0:
        return 0
    return max(1, math.ceil(min(remaining_s, room_s) / max(step_s, 1e-6)))


def _lengthen(stepper: Stepper, window_s: float, steps: int, min_window_s: float,
              world: int) -> tuple[int, float, list[tuple[int, float]]]:
    """Time extra steps until the window is at least ``min_window_s``; returns (extra steps,
    the whole window's seconds, the extra blocks). In rounds, each sized by the step time the
    previous one measured, so a slow start is topped up by the clock. Every rank of a
    data-parallel group takes the same decisions (the slowest rank's window, the smallest
    count), or their steps would not pair up in the all-reduce."""
    step_s = window_s / max(steps, 1)
    extra, blocks = 0, []
    for _ in range(16):  # a bound only: one or two rounds reach the minimum
        n = extension_steps(min_window_s - window_s, step_s, (stepper.deadline - time.perf_counter()) / 2)
        n = int(all_reduce([float(n)], ["min"], world)[0])
        if n <= 0:
            break
        sync(stepper.device)
        barrier(world)
        t = time.perf_counter()
        round_blocks = _timed_blocks(stepper, n, world)
        round_s = group_max(time.perf_counter() - t, world)
        window_s, step_s, extra = window_s + round_s, round_s / n, extra + n
        blocks += round_blocks
    return extra, window_s, blocks


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


def _gpu_sampler(device: torch.device) -> tuple[Any, str | None]:
    if device.type != "cuda":
        return contextlib.nullcontext(), None
    try:
        from tune_batch.measure.nvml import GpuSampler

        return GpuSampler([device.index or 0]), None
    except DeviceMonitorError as e:
        return contextlib.nullcontext(), f"not measured: {e}"


def timed_window(stepper: Stepper, model: nn.Module, steps: int, config: Config, world: int) -> Window:
    """Time ``steps`` steps. A window shorter than ``budget.min_window_s`` (null: the device's
    default, ``BudgetConfig.window_floor``) is lengthened with extra steps, after which weights,
    buffers and optimizer state are put back (copies kept in host memory, outside the window), so
    training still sees exactly ``train_samples``."""
    device = stepper.device
    min_s = config.budget.window_floor(device.type)
    cpu = CpuUtilWindow(threads=torch.get_num_threads() + config.data.num_workers)
    sampler, gpu_note = _gpu_sampler(device)
    sync(device)
    barrier(world)
    stepper.wait_s = 0.0
    cpu.start()
    extra, saved, budget_loss = 0, None, stepper.last_loss
    counters: tuple[int, Any] = (stepper.steps, None)
    with sampler as gpu:
        if gpu is not None:
            gpu.mark_start()
        t0 = time.perf_counter()
        blocks = _timed_blocks(stepper, steps, world)
        window_s = time.perf_counter() - t0
        cuda_peak = int(torch.cuda.max_memory_allocated(device)) if device.type == "cuda" else None
        cuda_reserved = int(torch.cuda.max_memory_reserved(device)) if device.type == "cuda" else None
        if min_s > 0 and group_max(window_s, world) < min_s:
            stepper.check_loss()
            budget_loss = stepper.last_loss
            saved = _snapshot(model, stepper.opt)
            counters = stepper.steps, (stepper.scaler.state_dict() if stepper.scaler is not None else None)
            extra, window_s, more = _lengthen(stepper, group_max(window_s, world), steps, min_s, world)
            blocks += more
        if gpu is not None:
            gpu.mark_end()
    cpu_window = cpu.stop()
    wait_s = stepper.wait_s
    stepper.check_loss()
    if saved is not None:
        model.load_state_dict(saved[0])
        stepper.opt.load_state_dict(saved[1])  # moves the state to each parameter's device
        stepper.last_loss = budget_loss
        stepper.steps = counters[0]  # the learning-rate warm-up goes on from the budget's own steps
        if stepper.scaler is not None and counters[1] is not None:
            stepper.scaler.load_state_dict(counters[1])
    return Window(window_s, steps + extra, extra, wait_s, cuda_peak, cpu_window,
                  getattr(sampler, "window", None), gpu_note, tuple(blocks), cuda_reserved)


def profile_steps(stepper: Stepper, config: Config, trace_dir: Path) -> float:
    """Run the profiled steps (after the timed window) with the seed's torch.profiler set-up;
    returns their mean step time, to compare with the timed window's (profiler overhead)."""
    from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler

    p = config.profile
    trace_dir.mkdir(parents=True, exist_ok=True)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if stepper.device.type == "cuda" else [])
    n = (p.wait + p.warmup + p.active) * p.repeat
    with quiet_native_stderr(), profile(
            activities=activities, schedule=schedule(wait=p.wait, warmup=p.warmup, active=p.active, repeat=p.repeat),
            on_trace_ready=tensorboard_trace_handler(str(trace_dir)), record_shapes=p.record_shapes,
            profile_memory=p.profile_memory, with_stack=p.with_stack) as prof:
        sync(stepper.device)
        t0 = time.perf_counter()
        for _ in range(n):
            stepper.step()
            prof.step()
        sync(stepper.device)
        return (time.perf_counter() - t0) / n
