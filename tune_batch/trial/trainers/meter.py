"""The measurement a trainer's callback drives: the same timed window, peak memory and per-step
checks as tune_batch's own loop, whatever trainer runs the steps.

The meter is made before the user's builder runs (the CPU's resident-memory baseline, when there
is no warm-up step to profile). A callback calls :meth:`Meter.train_begin` once, then
:meth:`Meter.step_begin` before the first
micro-batch of every optimizer step and :meth:`Meter.step_end` after the optimizer step. The
first ``plan.warmup`` steps are not timed; the window opens when the last of them ends (device
synchronised) and closes when the trial's last step ends, in :data:`~tune_batch.trial.window.BLOCKS`
blocks synchronised at their edges. Raises from inside the trainer (so the trainer stops):
:class:`~tune_batch.measure.oom.MemoryCapExceeded` when the last warm-up step's peak is over the cap,
:class:`~tune_batch.trial.faults.NonFiniteError` for a NaN or infinite loss,
:class:`~tune_batch.trial.faults.TrialTimeout` past the deadline.
"""

from __future__ import annotations

import contextlib
import math
import time
from typing import Any

import torch

from tune_batch.measure.cpu import CpuUtilWindow, PeakRss
from tune_batch.measure.memory import StepPeak
from tune_batch.measure.oom import MemoryCapExceeded
from tune_batch.trial.faults import NonFiniteError, TrialTimeout
from tune_batch.trial.loop import sync
from tune_batch.trial.setup import StepPlan
from tune_batch.trial.window import BLOCKS, Window, _gpu_sampler

PEAK_PROFILED = "torch memory profiler, last warm-up step (tensor bytes)"


def block_sizes(steps: int, n_blocks: int = BLOCKS) -> list[int]:
    """``steps`` split into up to ``n_blocks`` blocks, the first ones one step longer."""
    return [steps // n_blocks + (1 if i < steps % n_blocks else 0) for i in range(min(n_blocks, steps))]


class Meter:
    """The trial's window and checks, driven by a trainer's callback (see the module docstring).
    ``data_workers``: the trainer's DataLoader workers (their CPU time counts in the window)."""

    def __init__(self, plan: StepPlan, device: torch.device, cap_bytes: int | None, deadline: float,
                 data_workers: int = 0) -> None:
        self.plan, self.device, self.cap_bytes, self.deadline = plan, device, cap_bytes, deadline
        self.data_workers = data_workers
        self.steps = 0  # optimizer steps ended
        self.samples_done = 0
        self.last_loss = float("nan")
        self.step_peak: int | None = None  # the last warm-up step's tensor peak (CPU)
        self.window: Window | None = None
        self._sizes = block_sizes(plan.timed)
        self._blocks: list[tuple[int, float]] = []
        self._block_steps = 0
        self._t0: float | None = None
        self._block_t = 0.0
        self._last_end: float | None = None
        self._wait_s = 0.0
        self._window_samples = 0
        self._profiler: StepPeak | None = None
        self._rss: PeakRss | None = None
        self._stack = contextlib.ExitStack()
        self._cpu: CpuUtilWindow | None = None
        self._gpu: Any = None
        self._gpu_note: str | None = None
        self._check_every = 1 if device.type == "cpu" else 10  # a loss read syncs a GPU: not every step
        self._rss_peak: int | None = None
        if plan.warmup == 0 and device.type == "cpu":  # no warm-up step to profile: RSS above the pre-model baseline
            self._rss = self._stack.enter_context(PeakRss(cap_bytes))

    def resize(self, plan: StepPlan) -> None:
        """The run's steps, once known: a confirmation run's length can be passes over the training
        set, whose size the builder's pieces give (built after the meter, whose CPU memory reading
        starts before the model is). Before the first step, with the same warm-up."""
        assert self.steps == 0 and plan.warmup == self.plan.warmup, "resize() after training began"
        self.plan, self._sizes = plan, block_sizes(plan.timed)

    @property
    def timing(self) -> bool:
        return self._t0 is not None and self.window is None

    @property
    def window_samples(self) -> int:
        return self._window_samples

    def train_begin(self) -> None:
        """Before the first step: with no warm-up the window opens now."""
        if self.plan.warmup == 0:
            self._open()
        self._profile_next()

    def _profile_next(self) -> None:
        """The last warm-up step runs under the memory profiler (CPU), from the end of the step
        before it: the fetch of its batch is in it, as in tune_batch's loop."""
        if self.steps == self.plan.warmup - 1 and self.device.type == "cpu" and self._profiler is None:
            self._profiler = StepPeak()
            self._profiler.start()

    def step_begin(self) -> None:
        if self.timing and self._last_end is not None:
            self._wait_s += time.perf_counter() - self._last_end

    def step_end(self, samples: int, loss: Any = None) -> None:
        """An optimizer step of ``samples`` samples ended; ``loss``: its loss (a tensor or a
        number; None when the trainer does not give it)."""
        self.steps += 1
        self.samples_done += samples
        if self._profiler is not None:
            profiler, self._profiler = self._profiler, None
            self.step_peak = profiler.stop()
            if self.cap_bytes is not None and self.step_peak > self.cap_bytes:
                raise MemoryCapExceeded(self.step_peak, self.cap_bytes)
        if loss is not None and (self.steps % self._check_every == 0 or self.steps in (self.plan.warmup,
                                                                                         self.plan.total)):
            self._check(loss)
        if self._rss is not None:
            self._rss.poll()
            if self._rss.exceeded.is_set():
                raise MemoryCapExceeded(self._rss.peak_bytes, self._rss.cap_bytes or 0)
        if self.timing:
            self._in_window(samples)
        elif self._t0 is None and self.steps == self.plan.warmup:
            self._open()
        if time.perf_counter() > self.deadline:
            raise TrialTimeout("timeout: still training after budget.trial_timeout_s")
        self._profile_next()
        self._last_end = time.perf_counter()

    def _check(self, loss: Any) -> None:
        value = float(loss.detach().float().item()) if isinstance(loss, torch.Tensor) else float(loss)
        self.last_loss = value
        if not math.isfinite(value):
            raise NonFiniteError(f"non-finite loss ({value}) at step {self.steps}")

    def _open(self) -> None:
        sync(self.device)
        self._cpu = CpuUtilWindow(threads=torch.get_num_threads() + self.data_workers)
        sampler, self._gpu_note = _gpu_sampler(self.device)
        self._gpu = self._stack.enter_context(sampler)
        self._cpu.start()
        if self._gpu is not None:
            self._gpu.mark_start()
        self._t0 = self._block_t = self._last_end = time.perf_counter()

    def _in_window(self, samples: int) -> None:
        self._window_samples += samples
        self._block_steps += 1
        if self._block_steps < self._sizes[len(self._blocks)]:
            return
        now = self._end_block()
        if len(self._blocks) == len(self._sizes):
            self._close(now)

    def _end_block(self) -> float:
        """The running block ends here (device synchronised); returns the time it ended."""
        sync(self.device)
        now = time.perf_counter()
        self._blocks.append((self._block_steps, now - self._block_t))
        self._block_t, self._block_steps = now, 0
        return now

    def _close(self, now: float) -> None:
        assert self._t0 is not None and self._cpu is not None
        cuda_peak = int(torch.cuda.max_memory_allocated(self.device)) if self.device.type == "cuda" else None
        if self._gpu is not None:
            self._gpu.mark_end()
        cpu = self._cpu.stop()
        gpu_window = getattr(self._gpu, "window", None)
        self._rss_peak = self._rss.peak_bytes if self._rss is not None else None
        self._stack.close()  # the GPU sampler (and the RSS sampler) stop here
        self.window = Window(now - self._t0, self.steps - self.plan.warmup, 0, self._wait_s, cuda_peak, cpu,
                             gpu_window, self._gpu_note, tuple(self._blocks))

    def stop_now(self) -> None:
        """The run ends before its last step (a confirmation run at its target): the window
        closes here, over the steps timed so far."""
        if not self.timing:
            return
        if self._block_steps:
            self._close(self._end_block())
        else:
            sync(self.device)
            self._close(time.perf_counter())

    def abort(self) -> None:
        """Stop what samples (the trainer raised): the profiler, the RSS and GPU samplers."""
        if self._profiler is not None:
            self._profiler.cancel()
            self._profiler = None
        self._stack.close()

    def finish(self) -> Window:
        """The closed window; raises RuntimeError when the trainer stopped before the trial's
        last step (its own early stopping, a step limit of its own)."""
        self.abort()
        if self.window is None:
            raise RuntimeError(f"the trainer stopped after {self.steps} of the trial's {self.plan.total} optimizer "
                               f"steps (an early-stopping callback or a step/epoch limit of its own?)")
        return self.window

    def peak(self) -> tuple[float, str]:
        """(peak bytes, how they were measured) once the window closed."""
        assert self.window is not None
        if self.window.cuda_peak_bytes is not None:
            return float(self.window.cuda_peak_bytes), "torch.cuda.max_memory_allocated"
        if self.step_peak is not None:
            return float(self.step_peak), PEAK_PROFILED
        assert self._rss is not None and self._rss_peak is not None
        return float(self._rss_peak), f"RSS high-water mark above the pre-model baseline ({self._rss.method})"
