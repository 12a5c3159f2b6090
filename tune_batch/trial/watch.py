"""A confirmation run's memory, watched over the whole run: the peak of each quarter of its steps
(validations included), the memory kept between steps along the way (its growth: a leak?), and
on the CPU the cap.

CUDA: the allocator's peak statistics, reset at each quarter's start (allocated, and reserved,
which the cap applies to); memory kept is ``memory_allocated`` between steps. CPU: no allocator
keeps a peak, so steps run under torch's memory profiler (tensor bytes, the window's measure):
the first of each quarter (the run's first optimizer step among them) and every step whose batch
holds more elements than any profiled before in its quarter (a longer sequence). A profiled step's batch is
drawn before the profiler starts (its size decides whether to profile), so the in-memory data set
it is cut from is not counted, as a GPU would not hold it (a trial's window, drawn inside, counts
it). Memory kept is the bytes of the tensors Python can reach
(``measure.memory.live_tensor_bytes``); its growth since the run's first reading is added to the
profiled peaks (tensors no later step touches, e.g. a leak, are invisible to the profiler). The
process's resident memory would not do: every profiled step leaves some 0.1-0.2 MiB of it behind
(measured), a growth of the watch's own making. Time spent measuring is taken out of the run's
training seconds: a profiled step counts as the interval's mean unprofiled step.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch

from tune_batch.analysis.growth import Growth, growth
from tune_batch.measure.memory import kept_bytes, step_peak_bytes
from tune_batch.measure.oom import MemoryCapExceeded
from tune_batch.trial.loop import Stepper
from tune_batch.workload.batches import numel

_EMPTY = object()


class Peekable(Iterator[Any]):
    """An iterator whose next item can be looked at before it is taken."""

    def __init__(self, it: Iterator[Any]) -> None:
        self._it, self._next = it, _EMPTY

    def __next__(self) -> Any:
        if self._next is _EMPTY:
            return next(self._it)
        item, self._next = self._next, _EMPTY
        return item

    def peek(self) -> Any:
        if self._next is _EMPTY:
            self._next = next(self._it)
        return self._next


@dataclass(frozen=True)
class RunMemory:
    """What the watch saw, in bytes: the peak over the run, per quarter, the memory kept between
    steps ([step, bytes]), its growth, and on CUDA the reserved peak."""

    peak_bytes: float | None
    quarters_bytes: list[float]
    kept: list[list[float]]
    growth: Growth
    reserved_bytes: float | None
    method: str
    profiled_steps: int


def quarter_of(step: int, total: int) -> int:
    """The quarter (0-3) of the run's ``step`` (1-based) of ``total``."""
    return min(3, (step - 1) * 4 // max(1, total))


class RunWatch:
    """Watches the steps of one run (``step``) and reads the memory kept between them (``keep``)."""

    def __init__(self, device: torch.device, total_steps: int, cap: int | None) -> None:
        self.device, self.total, self.cap = device, total_steps, cap
        self.cuda = device.type == "cuda"
        self.quarters: list[float | None] = [None] * 4
        self.reserved: list[float | None] = [None] * 4
        self.kept: list[list[float]] = []
        self._profiled: list[float | None] = [None] * 4  # CPU: the largest profiled step of each quarter
        self._largest = [-1] * 4  # CPU: elements of the largest batch profiled in each quarter
        self.profiled_steps = 0
        # this interval's measuring: (seconds outside any step, profiled steps, their seconds)
        self._extra_s, self._n_prof, self._prof_s = 0.0, 0, 0.0

    def _first_of_quarter(self, step: int) -> bool:
        return step == 1 or quarter_of(step, self.total) != quarter_of(step - 1, self.total)

    def _last_of_quarter(self, step: int) -> bool:
        return step == self.total or quarter_of(step, self.total) != quarter_of(step + 1, self.total)

    def step(self, stepper: Stepper, batches: Peekable, step: int) -> None:
        """Run the run's ``step`` (1-based) of ``stepper``, whose batches are ``batches``."""
        q = quarter_of(step, self.total)
        if self.cuda:
            if self._first_of_quarter(step):
                torch.cuda.reset_peak_memory_stats(self.device)
            stepper.step()
            if self._last_of_quarter(step):
                self.quarters[q] = float(torch.cuda.max_memory_allocated(self.device))
                self.reserved[q] = float(torch.cuda.max_memory_reserved(self.device))
                self.keep(step, inside=True)
            return
        n = numel(batches.peek())
        if self._first_of_quarter(step) or n > self._largest[q]:
            t = time.perf_counter()
            peak = step_peak_bytes(stepper.step) + self._kept_growth()
            self._n_prof, self._prof_s = self._n_prof + 1, self._prof_s + time.perf_counter() - t
            self.profiled_steps += 1
            self._largest[q] = max(self._largest[q], n)
            self._profiled[q] = max(self._profiled[q] or 0.0, peak)
            if self.cap is not None and peak > self.cap:
                raise MemoryCapExceeded(peak, self.cap, f"at step {step} of {self.total} of a confirmation run "
                                                        f"(a batch of {n} elements)")
        else:
            stepper.step()
        if self._last_of_quarter(step):
            self.keep(step, inside=True)
            self.quarters[q] = (self._profiled[q] or 0.0) + self._kept_growth()

    def _kept_growth(self) -> float:
        return max(0.0, self.kept[-1][1] - self.kept[0][1]) if self.kept else 0.0

    def keep(self, step: int, inside: bool = False) -> None:
        """Read the memory kept between steps after ``step`` (``inside``: in the middle of timed
        training, so its seconds are taken out of the training seconds)."""
        if self.kept and self.kept[-1][0] == step:
            return
        t = time.perf_counter()
        self.kept.append([float(step), kept_bytes(self.device)])
        if inside:
            self._extra_s += time.perf_counter() - t

    def train_seconds(self, wall_s: float, steps: int) -> float:
        """The training seconds of an interval of ``steps`` steps that took ``wall_s``: without the
        reads, each profiled step at the interval's mean unprofiled step time."""
        plain_s = wall_s - self._extra_s - self._prof_s
        out = wall_s - self._extra_s
        if self._n_prof and steps > self._n_prof:
            out = plain_s * steps / (steps - self._n_prof)
        self._extra_s, self._n_prof, self._prof_s = 0.0, 0, 0.0
        return out

    def result(self, validation_bytes: float | None = None) -> RunMemory:
        """What the run's memory was; ``validation_bytes`` (CPU: a validation batch's reading) is
        part of the run's peak. Growth is read from the first quarter's end to the last."""
        quarters = [q for q in self.quarters if q is not None]
        peaks = [*quarters, *([validation_bytes] if validation_bytes is not None else [])]
        peak = max(peaks) if peaks else None
        g = growth(self.kept, peak)
        reserved = [r for r in self.reserved if r is not None]
        method = ("torch.cuda max_memory_allocated / max_memory_reserved per quarter; kept: memory_allocated"
                  if self.cuda else
                  f"torch memory profiler on {self.profiled_steps} step(s) (each quarter's first, and every batch "
                  f"larger than those before in its quarter) plus the growth of the tensor memory kept between steps")
        return RunMemory(peak, [float(q) for q in quarters], self.kept, g, max(reserved) if reserved else None,
                         method, self.profiled_steps)
