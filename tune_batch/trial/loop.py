"""The training loop of a trial: the optimizer, the batches, and the step.

``Stepper.step`` is the one place a training step happens; what a step does (loss, backward,
optimizer) lives here and nowhere else.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, Subset

from tune_batch.config import Config
from tune_batch.config.train import OPTIMIZERS
from tune_batch.errors import TrialConfigError
from tune_batch.measure.cpu import PeakRss
from tune_batch.measure.oom import MemoryCapExceeded
from tune_batch.trial.evaluate import accuracy, evaluate
from tune_batch.trial.faults import NonFiniteError, TrialTimeout
from tune_batch.workload import build_model
from tune_batch.workload.batches import inputs_and_labels, loader
from tune_batch.workload.resolve import resolve_callable


def make_optimizer(config: Config, params: Any, lr: float) -> torch.optim.Optimizer:
    """``optimizer.name`` from torch.optim with its weight decay and kwargs (SGD: the seed's
    momentum too). Raises TypeError for keyword arguments the optimizer does not take."""
    o = config.optimizer
    return getattr(torch.optim, OPTIMIZERS[o.name])(params, lr=lr, **o.keyword_args)


def batch_len(batch: Any) -> int:
    """The samples in a batch of any structure: the first dimension of its first tensor."""
    if isinstance(batch, torch.Tensor):
        return int(batch.shape[0])
    items = batch.values() if isinstance(batch, dict) else batch if isinstance(batch, list | tuple) else []
    for item in items:
        n = batch_len(item)
        if n >= 0:
            return n
    return -1


def take(batch: Any, n: int) -> Any:
    """The first ``n`` samples of a batch of any structure."""
    if isinstance(batch, torch.Tensor):
        return batch[:n]
    if isinstance(batch, dict):
        return {k: take(v, n) for k, v in batch.items()}
    if isinstance(batch, list | tuple):
        return type(batch)(take(v, n) for v in batch)
    return batch


def split_batch(batch: Any, n: int) -> list[Any]:
    """``batch`` as ``n`` micro-batches along the first dimension, whatever its structure
    (tensors, tuples, lists, dicts); other leaves are shared."""
    if n == 1:
        return [batch]
    if isinstance(batch, torch.Tensor):
        return list(torch.tensor_split(batch, n))
    if isinstance(batch, dict):
        parts = {k: split_batch(v, n) for k, v in batch.items()}
        return [{k: parts[k][i] for k in batch} for i in range(n)]
    if isinstance(batch, list | tuple):
        parts_seq = [split_batch(v, n) for v in batch]
        return [type(batch)(p[i] for p in parts_seq) for i in range(n)]
    return [batch] * n


def autocast(device: torch.device, precision: str) -> Any:
    """The autocast context of ``train.precision`` (bf16 / fp16), else none."""
    if precision in ("bf16", "fp16"):
        return torch.autocast(device.type, dtype=torch.bfloat16 if precision == "bf16" else torch.float16)
    return contextlib.nullcontext()


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


@dataclass(frozen=True)
class Recipe:
    """How a step trains: precision (autocast, and a gradient scaler for fp16), micro-batches
    per optimizer step, the user's own step function, linear learning-rate warm-up, memory
    format. The default is the seed's loop: fp32, one micro-batch, cross-entropy."""

    precision: str = "fp32"
    accumulation: int = 1
    step_fn: Callable[..., Any] | None = None
    warmup_steps: int = 0
    channels_last: bool = False

    @classmethod
    def of(cls, config: Config, accumulation: int = 1) -> Recipe:
        fn = resolve_callable(config.train.step, "train.step") if config.train.step else None
        return cls(config.train.precision, accumulation, fn, config.optimizer.warmup_steps, config.train.channels_last)


def batch_loss(recipe: Recipe, model: nn.Module, batch: Any, device: torch.device,
               loss_fn: Callable[..., torch.Tensor]) -> torch.Tensor:
    """The loss of one (micro-)batch: the user's ``train.step``, or ``loss_fn`` (cross-entropy)
    of ``(inputs, labels)``."""
    if recipe.step_fn is not None:
        return recipe.step_fn(model, batch, device)
    x, y = inputs_and_labels(batch, "the built-in loss", "train.step: 'pkg.module:function' returning the loss of one "
                             "batch")
    x = x.to(device, non_blocking=True)
    if recipe.channels_last and x.dim() == 4:
        x = x.contiguous(memory_format=torch.channels_last)
    return loss_fn(model(x), y.to(device, non_blocking=True))


def forward_pass(config: Config, train: Any, model: nn.Module, samples: int) -> Any:
    """The loss of the first ``samples`` training samples on the CPU without gradients, as a trial
    computes it (``first_loss`` checks it; preflight times it: a floor on a trial's training time)."""
    with torch.no_grad():
        return batch_loss(Recipe.of(config), model, next(iter(loader(train, samples, shuffle=False))),
                          torch.device("cpu"), nn.CrossEntropyLoss())


def first_loss(config: Config, train: Any, val: Any, model: nn.Module, smallest: int = 2) -> float:
    """The loss of the first 2 training samples through ``model`` on the CPU, without gradients,
    as a trial computes it, and the evaluation of 2 validation samples: a model that cannot take
    the data (images too small for its pooling, a batch structure it does not read, labels beyond
    its classes, a step that returns no scalar) fails here, before a search starts (a
    ``train.step`` that fails on 2 samples is given ``smallest``, a trial's fewest). The built-in
    accuracy must run; ``train.evaluate`` must return every objective it measures, as numbers,
    though an error it raises on so few samples is left to the trials (an AUC needs both
    classes). Raises what the model, ``train.step`` or the built-in evaluation raised,
    TrialConfigError for what the user's evaluation returned, or ValueError for a loss that is
    not one number."""
    recipe, cpu = Recipe.of(config), torch.device("cpu")
    model.train()
    try:
        loss = forward_pass(config, train, model, 2)
    except Exception:
        if recipe.step_fn is None or smallest <= 2:
            raise
        # the user's step may need more samples than 2: the fewest a trial gives it decide
        loss = forward_pass(config, train, model, smallest)
    with torch.no_grad():
        few = Subset(val, range(min(2, len(val))))
        if config.train.evaluate is None:
            accuracy(model, few, cpu, 2)
        else:  # the user's evaluation: what it returns (every objective it measures, as numbers)
            try:
                evaluate(config, model, few, cpu, 2)
            except TrialConfigError:
                raise
            except Exception:  # noqa: BLE001 - it may need more than 2 samples (an AUC, a class count): trials say
                pass
    if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
        shape = tuple(loss.shape) if isinstance(loss, torch.Tensor) else type(loss).__name__
        raise ValueError(f"the loss is {shape}, not one number (train.step must return the batch's loss, a scalar)")
    return float(loss)


class Stepper:
    """Runs optimizer steps and keeps the per-step checks (timeout, memory cap, finite loss).
    ``wait_s`` accumulates the time spent waiting for batches. ``model`` is what trains (a
    DistributedDataParallel wrapper in a group: micro-batches before the last skip its
    all-reduce)."""

    def __init__(self, model: nn.Module, opt: torch.optim.Optimizer, batches: Iterator[Any],
                 device: torch.device, deadline: float, mem: PeakRss | None, batch: int,
                 recipe: Recipe = Recipe()) -> None:
        self.model, self.opt, self.batches, self.device = model, opt, batches, device
        self.batch = batch
        self.recipe = recipe
        self.short_batches = 0  # batches smaller than the worker's batch size (must stay 0)
        self.deadline, self.mem = deadline, mem
        self.loss_fn = nn.CrossEntropyLoss()
        self.wait_s = 0.0
        self.steps = 0
        self.last_loss = float("nan")
        self._loss: torch.Tensor | None = None
        self._check_every = 1 if device.type == "cpu" else 10  # .item() syncs a GPU: not every step
        self._base_lrs = [g["lr"] for g in opt.param_groups]
        self.scaler = torch.amp.GradScaler(device.type) if recipe.precision == "fp16" else None
        self.first_step_s: float | None = None  # the first step (a compiled model compiles in it)

    def loss_of(self, batch: Any, model: nn.Module | None = None) -> torch.Tensor:
        """The loss of one (micro-)batch through ``model`` (default: what trains)."""
        return batch_loss(self.recipe, self.model if model is None else model, batch, self.device, self.loss_fn)

    def autocast_loss(self, batch: Any, model: nn.Module | None = None) -> torch.Tensor:
        """``loss_of`` under the recipe's autocast (what the gradient noise scale measures; it
        passes the bare model, so a data-parallel group's all-reduce is not entered alone)."""
        with autocast(self.device, self.recipe.precision):
            return self.loss_of(batch, model)

    def _warm_up_lr(self) -> None:
        if self.recipe.warmup_steps > 0:
            scale = min(1.0, (self.steps + 1) / self.recipe.warmup_steps)
            for g, base in zip(self.opt.param_groups, self._base_lrs):
                g["lr"] = base * scale

    def step(self) -> None:
        t = time.perf_counter()
        if self.steps == 0:
            self._first_t = t
        batch = next(self.batches)
        self.wait_s += time.perf_counter() - t
        n = batch_len(batch)
        if n != self.batch:
            self.short_batches += 1
        micro = split_batch(batch, self.recipe.accumulation)
        self.opt.zero_grad(set_to_none=True)
        total: torch.Tensor | None = None
        for i, mb in enumerate(micro):
            last = i == len(micro) - 1
            sync = contextlib.nullcontext() if last or not hasattr(self.model, "no_sync") else self.model.no_sync()
            with sync:
                with autocast(self.device, self.recipe.precision):
                    loss = self.loss_of(mb)
                share = batch_len(mb) / n if n > 0 and len(micro) > 1 else 1.0
                scaled = loss.float() * share
                (self.scaler.scale(scaled) if self.scaler is not None else scaled).backward()
            total = scaled.detach() if total is None else total + scaled.detach()
        self._warm_up_lr()
        if self.scaler is not None:
            self.scaler.step(self.opt)
            self.scaler.update()
        else:
            self.opt.step()
        self.steps += 1
        self._loss = total
        if self.steps == 1:
            self.check_loss()  # syncs the device: the first step's seconds are its own
            self.first_step_s = time.perf_counter() - self._first_t
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


@contextlib.contextmanager
def precision_flags(precision: str, device: torch.device) -> Iterator[None]:
    """``tf32``: CUDA matmuls and cuDNN convolutions in TF32 for the duration (put back after)."""
    if precision != "tf32" or device.type != "cuda":
        yield
        return
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


def release_memory(device: torch.device) -> None:
    """What an out-of-memory attempt held, given back before the next one."""
    import gc

    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)


def prime(config: Config, train: Any, device: torch.device, extra: dict[str, Any] | None) -> None:
    """One throwaway step at batch 2 before the memory baseline, so that once-per-process
    costs (kernel caches, thread pools) are not counted as this batch size's memory."""
    batch = next(iter(loader(train, 2, shuffle=False)))
    model = build_model(config.model, extra).to(device)
    model.train()
    opt = make_optimizer(config, model.parameters(), 0.0)
    stepper = Stepper(model, opt, iter([batch]), device, float("inf"), None, 2, Recipe.of(config))
    stepper.step()
    del model, opt, stepper
