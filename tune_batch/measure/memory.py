"""Tensor memory of one training step on the CPU, from torch's memory profiler.

The profiler records every allocation and free of the step (activations, gradients, optimizer
state, inputs); the peak of their running total is what a GPU allocator's peak statistic
would show: tensor bytes, free of allocator and page noise. Uses
``torch.profiler._memory_profiler`` (private to torch, pinned by the project's torch range).
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable, Iterator


@contextlib.contextmanager
def _kineto_errors_only() -> Iterator[None]:
    """kineto (the profiler's C++ side) logs every start and stop; keep errors only, for the
    duration (the user's own setting wins; the variable is restored afterwards)."""
    before = os.environ.get("KINETO_LOG_LEVEL")
    if before is None:
        os.environ["KINETO_LOG_LEVEL"] = "5"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("KINETO_LOG_LEVEL", None)


@contextlib.contextmanager
def quiet_native_stderr() -> Iterator[None]:
    """Silence C++ writes to fd 2 (kineto's start/stop lines) for the duration; Python
    exceptions are unaffected, and fd 2 is restored in ``finally``."""
    with _kineto_errors_only():
        try:
            sys.stderr.flush()
            saved = os.dup(2)
        except (OSError, ValueError):
            yield
            return
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, 2)
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            os.close(devnull)


def step_peak_bytes(step: Callable[[], None]) -> int:
    """Run ``step`` once under the memory profiler; return its peak tensor bytes on the CPU."""
    import torch
    from torch.profiler import ProfilerActivity, profile
    from torch.profiler._memory_profiler import MemoryProfileTimeline

    with quiet_native_stderr():
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True, record_shapes=True,
                     with_stack=True) as prof:
            step()
    timeline = MemoryProfileTimeline(prof._memory_profile())
    _, sizes = timeline._coalesce_timeline(torch.device("cpu"))
    return int(max((sum(s) for s in sizes), default=0))
