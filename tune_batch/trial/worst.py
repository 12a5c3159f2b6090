"""The worst case of a trial's memory, measured last: one training step on the largest batch the
data can produce (``data.worst_case``), and one validation batch at the trial's batch size, each
held against the cap. What the window's batches miss (a rare long sequence) and what happens
outside it (validation) is then inside the figure the memory limit is checked against.

CPU: each runs under torch's memory profiler (tensor bytes, as the window's peak); a validation
never touches the gradients and optimizer state it lives beside, so their bytes are added. CUDA:
the allocator's peaks since the trial started cover these and everything before them (the first
optimizer step, the budget's steps, the validation pass): allocated, and reserved, which the cap
applies to. Runs after everything a trial reports, so the model it changes is measured no more.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from tune_batch.config import Config
from tune_batch.measure.memory import step_peak_bytes
from tune_batch.measure.oom import MemoryCapExceeded
from tune_batch.trial.evaluate import evaluate
from tune_batch.trial.faults import NonFiniteError
from tune_batch.trial.loop import Stepper, sync
from tune_batch.workload import Datasets
from tune_batch.workload.batches import numel, samples_in, worst_batch, worst_val


@dataclass(frozen=True)
class WorstCase:
    """The worst case's peaks in bytes; ``peak_bytes`` is the one held against the limit."""

    peak_bytes: float  # CPU: the largest of the readings below; CUDA: the reserved peak of the whole trial
    allocated_bytes: float | None  # CUDA: the allocated peak of the whole trial
    train_step_bytes: float | None  # CPU: the step on the largest batch (None: data of one shape)
    eval_bytes: float | None  # CPU: the validation batch, with the gradients and optimizer state beside it
    how: str
    seconds: float


def held_bytes(model: nn.Module, opt: torch.optim.Optimizer) -> int:
    """Bytes of the gradients and the optimizer state (each storage once)."""
    storages: dict[int, int] = {}
    tensors = [p.grad for p in model.parameters() if p.grad is not None]
    tensors += [v for state in opt.state.values() for v in state.values() if isinstance(v, torch.Tensor)]
    for t in tensors:
        s = t.untyped_storage()
        storages[s.data_ptr()] = s.nbytes()
    return sum(storages.values())


def step_on(stepper: Stepper, batch: Any) -> None:
    """One optimizer step of ``stepper`` on ``batch`` (its loss is not what this measures: a
    non-finite one is let pass); the stepper's own batches are put back afterwards."""
    saved = stepper.batches, stepper.batch
    stepper.batches, stepper.batch = iter([batch]), samples_in(batch)
    try:
        stepper.step()
    except NonFiniteError:
        pass
    finally:
        stepper.batches, stepper.batch = saved


def _held_to_cap(peak: float, cap: int | None, where: str) -> float:
    if cap is not None and peak > cap:
        raise MemoryCapExceeded(peak, cap, where)
    return peak


def probe(config: Config, stepper: Stepper, model: nn.Module, ds: Datasets, batch: int,
          cap: int | None) -> WorstCase | None:
    """The worst case of a worker training ``batch`` samples per step (None with
    ``data.worst_case: off``). Raises MemoryCapExceeded (CPU) or the allocator's out of memory
    (CUDA) when it does not fit: the trial is then ``oom``."""
    spec = config.data.worst_case
    if spec == "off":
        return None
    t0 = time.perf_counter()
    device = stepper.device
    worst = worst_batch(spec, ds.train, batch, config.search.seed)
    val, val_how = worst_val(spec, ds.val, batch, config.search.seed)
    how = (f"one step on {worst[1]} ({numel(worst[0])} elements)" if worst is not None
           else "the window's batches (data of one shape)") + f"; {val_how} at batch size {batch}"
    if device.type == "cuda":
        if worst is not None:
            step_on(stepper, worst[0])
        evaluate(config, model, val, device, batch)
        sync(device)
        return WorstCase(float(torch.cuda.max_memory_reserved(device)), float(torch.cuda.max_memory_allocated(device)),
                         None, None, how, time.perf_counter() - t0)
    train_b = None
    if worst is not None:
        train_b = _held_to_cap(step_peak_bytes(lambda: step_on(stepper, worst[0])), cap,
                               f"on the largest batch of the data ({worst[1]})")
    eval_b = _held_to_cap(step_peak_bytes(lambda: evaluate(config, model, val, device, batch))
                          + held_bytes(model, stepper.opt), cap, f"on a validation batch ({val_how})")
    return WorstCase(max(train_b or 0.0, eval_b), None, train_b, eval_b, how, time.perf_counter() - t0)
