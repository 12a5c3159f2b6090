"""The training loop of a trial: the optimizer, the batches, and the step.

``Stepper.step`` is the one place a training step happens; what a step does (loss, backward,
optimizer) lives here and nowhere else.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader

from tune_batch.config import Config
from tune_batch.measure.cpu import PeakRss
from tune_batch.oom import MemoryCapExceeded
from tune_batch.trial.faults import NonFiniteError, TrialTimeout
from tune_batch.workload import build_model


def make_optimizer(config: Config, params: Any, lr: float) -> torch.optim.Optimizer:
    """The seed's optimizer: SGD with the config's momentum and weight decay."""
    return torch.optim.SGD(params, lr=lr, momentum=config.optimizer.momentum,
                           weight_decay=config.optimizer.weight_decay)


def cycle(loader: DataLoader, sampler: Any = None) -> Iterator[Any]:
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


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class Stepper:
    """Runs optimizer steps and keeps the per-step checks (timeout, memory cap, finite loss).
    ``wait_s`` accumulates the time spent waiting for batches."""

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
        self._loss: torch.Tensor | None = None
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
            self.check_loss()
        if self.mem is not None:
            self.mem.poll()
            if self.mem.exceeded.is_set():
                raise MemoryCapExceeded(self.mem.peak_bytes, self.mem.cap_bytes or 0)
        if time.perf_counter() > self.deadline:
            raise TrialTimeout("timeout: still training after budget.trial_timeout_s")

    def check_loss(self) -> None:
        """Read the last loss (a device sync); raise NonFiniteError when it is NaN or infinite."""
        if self._loss is None:
            return
        value = float(self._loss.item())
        self.last_loss = value
        if not math.isfinite(value):
            raise NonFiniteError(f"non-finite loss ({value}) at step {self.steps}")


def prime(config: Config, train: Any, device: torch.device, extra: dict[str, Any] | None) -> None:
    """One throwaway step at batch 2 before the memory baseline, so that once-per-process
    costs (kernel caches, thread pools) are not counted as this batch size's memory."""
    x, y = next(iter(DataLoader(train, batch_size=2, shuffle=False)))
    model = build_model(config.model, extra).to(device)
    model.train()
    opt = make_optimizer(config, model.parameters(), 0.0)
    nn.functional.cross_entropy(model(x.to(device)), y.to(device)).backward()
    opt.step()
    del model, opt
