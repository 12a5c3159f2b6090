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
from typing import Any


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


class StepPeak:
    """The memory profiler around one step whose start and end are separate calls (a trainer's
    callback hooks): ``start()``, the step, then ``stop()`` returns its peak tensor bytes on the CPU.
    The profiler does not change what the step computes."""

    def __init__(self) -> None:
        self._quiet: contextlib.ExitStack | None = None
        self._prof: Any = None

    def start(self) -> None:
        from torch.profiler import ProfilerActivity, profile

        self._quiet = contextlib.ExitStack()
        self._quiet.enter_context(quiet_native_stderr())
        self._prof = self._quiet.enter_context(
            profile(activities=[ProfilerActivity.CPU], profile_memory=True, record_shapes=True, with_stack=True))

    def stop(self) -> int:
        import torch
        from torch.profiler._memory_profiler import MemoryProfileTimeline

        assert self._quiet is not None, "stop() before start()"
        quiet, self._quiet = self._quiet, None
        quiet.close()  # leaves the profiler (it has recorded the step), then puts fd 2 back
        timeline = MemoryProfileTimeline(self._prof._memory_profile())
        _, sizes = timeline._coalesce_timeline(torch.device("cpu"))
        return int(max((sum(s) for s in sizes), default=0))

    def cancel(self) -> None:
        """Leave the profiler without reading it (the step raised)."""
        if self._quiet is not None:
            quiet, self._quiet = self._quiet, None
            quiet.close()


def step_peak_bytes(step: Callable[[], None]) -> int:
    """Run ``step`` once under the memory profiler; return its peak tensor bytes on the CPU."""
    peak = StepPeak()
    peak.start()
    try:
        step()
    except BaseException:
        peak.cancel()
        raise
    return peak.stop()


def live_tensor_bytes(device_type: str = "cpu") -> int:
    """Bytes of the distinct storages of every tensor on ``device_type`` that Python can reach,
    after a garbage collection: the tensor memory a process keeps, free of allocator noise (memory
    held only inside C++, such as an autograd graph's saved tensors, is not seen)."""
    import gc
    import warnings

    import torch

    gc.collect()
    storages: dict[int, int] = {}
    with warnings.catch_warnings():  # a deprecated torch object warns when its class is looked at
        warnings.simplefilter("ignore")
        tensors = [o for o in gc.get_objects() if isinstance(o, torch.Tensor)]
    for obj in tensors:
        if obj.device.type == device_type:
            try:
                s = obj.untyped_storage()
                storages[s.data_ptr()] = s.nbytes()
            except (RuntimeError, NotImplementedError):
                # sparse, nested and other storage-less layouts; the fake tensors a torch.compile
                # left reachable have a storage but no data pointer (they hold no memory)
                continue
    return sum(storages.values())


#: The most readings of the kept memory a run takes at its evaluations. Each reading is a full
#: garbage collection (and, on a CPU, a walk over every Python object): 0.15-0.45 s in a process
#: that has torch, Ray and Lightning loaded, which made 32 readings 12.6 of a 16.5 s confirmation
#: run's wall (2.7 s of training). Eight points spread over the run fit the growth line as well.
KEPT_READINGS = 8


def kept_reading_at(i: int, n: int) -> bool:
    """Whether the ``i``-th (0-based) of a run's ``n`` evaluations reads the kept memory: at most
    ``KEPT_READINGS`` of them, evenly strided, the last one always."""
    stride = -(-n // KEPT_READINGS)
    return (n - 1 - i) % stride == 0


def kept_bytes(device: Any) -> float:
    """The tensor memory a process keeps between steps (after a garbage collection): CUDA's
    allocated bytes, or the bytes of the tensors Python can reach on a CPU."""
    import gc

    import torch

    if device.type == "cuda":
        gc.collect()
        return float(torch.cuda.memory_allocated(device))
    return float(live_tensor_bytes(device.type))
