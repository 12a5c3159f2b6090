"""Out-of-memory: the one predicate that decides what counts as OOM, and the memory cap.

OOM is a result (status ``oom``), not an error; everything :func:`is_oom_error` rejects is
a real failure and keeps its traceback.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from tune_batch.config import parse_memory

# Allocation-failure messages of the CUDA caching allocator, cuBLAS, cuDNN and the CPU
# allocator, for errors that reach us as plain RuntimeError (older code paths, C++ layers).
_OOM_MESSAGES = (
    "cuda out of memory",
    "out of memory",
    "cublas_status_alloc_failed",
    "cudnn_status_alloc_failed",
    "cudnn_status_not_enough_workspace",
    "defaultcpuallocator: can't allocate memory",
    "can't allocate memory",
)


class MemoryCapExceeded(RuntimeError):
    """The trial's measured peak memory went over ``resources.device_memory`` (CPU enforcement)."""

    def __init__(self, peak_bytes: float, cap_bytes: int, where: str = "") -> None:
        super().__init__(f"out of memory: measured peak {peak_bytes / 2**20:.1f} MiB exceeds the cap of "
                         f"{cap_bytes / 2**20:.1f} MiB" + (f" {where}" if where else ""))
        self.peak_bytes = peak_bytes
        self.cap_bytes = cap_bytes


def _is_torch_oom(exc: BaseException) -> bool:
    # compare by class name and module so this module never has to import torch
    return any(c.__name__ == "OutOfMemoryError" and c.__module__.startswith("torch") for c in type(exc).__mro__)


def is_oom_error(exc: BaseException) -> bool:
    """True when ``exc`` (or an exception it was raised from) means the device ran out of memory."""
    seen: set[int] = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, (MemoryCapExceeded, MemoryError)) or _is_torch_oom(e):
            return True
        if isinstance(e, RuntimeError) and any(m in str(e).lower() for m in _OOM_MESSAGES):
            return True
        e = e.__cause__ or e.__context__
    return False


def cap_bytes(device_memory: str | float | int | None, device_total_bytes: int | None) -> int | None:
    """The cap in bytes for one device, or None when uncapped.

    A fraction needs the device's total memory; a fraction on a device whose total is
    unknown is None (uncapped), and callers say so.
    """
    if device_memory is None:
        return None
    kind, amount = parse_memory(device_memory)
    if kind == "bytes":
        return int(amount)
    if device_total_bytes is None:
        return None
    return int(amount * device_total_bytes)


# ---------------------------------------------------------------- the memory line


@dataclass(frozen=True)
class MemoryFit:
    """``peak_mem_bytes ~= intercept_bytes + slope_bytes x per-worker batch`` (least squares)."""

    intercept_bytes: float
    slope_bytes: float
    n_points: int
    batch_range: tuple[int, int]

    def predict(self, per_worker_batch: int) -> float:
        return self.intercept_bytes + self.slope_bytes * per_worker_batch


def fit_memory(points: list[tuple[int, float]]) -> MemoryFit | None:
    """Least-squares line through (per-worker batch, peak bytes); None with fewer than two
    distinct batch sizes. A negative slope (noise) is clamped to zero."""
    xs = [float(b) for b, _ in points]
    if len(set(xs)) < 2:
        return None
    ys = [float(p) for _, p in points]
    line = statistics.linear_regression(xs, ys)
    if line.slope >= 0:
        return MemoryFit(line.intercept, line.slope, len(xs), (int(min(xs)), int(max(xs))))
    return MemoryFit(statistics.fmean(ys), 0.0, len(xs), (int(min(xs)), int(max(xs))))
