"""Confirmation at length in the user's trainer: the config trained for the confirmation budget in
the same trainer, evaluated by the trainer's own evaluation at the interval it supports
(Lightning ``val_check_interval``, Transformers ``eval_steps``; Keras, which validates per epoch
only, by ``model.evaluate`` from the callback every ``every`` steps, as ``fit`` itself does at an
epoch's end). The curve is the one of ``trial.curve``: [samples, training seconds, the metric's
value, loss] per evaluation, training seconds without the evaluations. With a stop test
(``confirm.stop_at_target``) the run ends at the first evaluation it holds for: the recorder
closes the meter's window there and each trainer's callback tells its trainer to stop
(Lightning ``trainer.should_stop``, Transformers ``control.should_training_stop``, Keras
``model.stop_training``).
"""

from __future__ import annotations

import math
import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from tune_batch.analysis.growth import growth
from tune_batch.config import Config
from tune_batch.measure.memory import kept_bytes, kept_reading_at, kept_scope
from tune_batch.store.records import Metrics, Params, Status, TrialInfo, TrialResult
from tune_batch.trial.loop import sync
from tune_batch.trial.setup import StepPlan
from tune_batch.trial.trainers.meter import Meter


@dataclass(frozen=True)
class EvalPlan:
    """Evaluate ``metric`` every ``every`` optimizer steps of ``total`` (and at the end); ``until``:
    the run ends at the first evaluation whose value it is true for."""

    every: int
    total: int
    metric: str
    until: Callable[[float], bool] | None = field(default=None, compare=False)

    def due(self, steps: int) -> bool:
        return steps % self.every == 0 or steps == self.total

    @property
    def count(self) -> int:
        """How many evaluations the run has."""
        return -(-self.total // self.every)

    def index(self, steps: int) -> int:
        """The 0-based index of the evaluation at ``steps``."""
        return self.count - 1 if steps >= self.total else steps // self.every - 1


class CurveRecorder:
    """The curve of a run whose evaluations the trainer starts and ends (``eval_begin`` /
    ``eval_end``): training seconds are the wall time since ``start`` without the evaluations."""

    def __init__(self, meter: Meter, plan: EvalPlan) -> None:
        self.meter, self.plan = meter, plan
        self.points: list[list[float]] = []
        self.kept: list[list[float]] = []  # [optimizer step, memory kept between steps] at each evaluation
        self._t0: float | None = None
        self._e0: float | None = None
        self._eval_s = 0.0
        self.stopped = False  # the stop test held at the last evaluation: the trainer is told to stop

    def start(self) -> None:
        self._t0 = time.perf_counter()

    def eval_begin(self) -> None:
        if self.stopped:  # a trainer that evaluates once more on its way out: not the run's
            return
        sync(self.meter.device)  # the training seconds are the steps'
        self._e0 = time.perf_counter()
        # the memory kept between steps, read here so that its seconds count as the evaluation's
        # (at most KEPT_READINGS evaluations read it: each reading is a full garbage collection)
        if kept_reading_at(self.plan.index(self.meter.steps), self.plan.count):
            self.kept.append([float(self.meter.steps), kept_bytes(self.meter.device)])

    def eval_end(self, scores: dict[str, float]) -> None:
        if self.stopped:
            return
        assert self._t0 is not None and self._e0 is not None, "eval_end() without start() and eval_begin()"
        name = self.plan.metric
        if name not in scores:
            raise ValueError(f"confirmation reads {name!r}; the trainer's evaluation logged "
                             f"{', '.join(sorted(scores)) or 'nothing'}")
        train_s = self._e0 - self._t0 - self._eval_s
        self._eval_s += time.perf_counter() - self._e0
        self._e0 = None
        value = float(scores[name])
        self.points.append([float(self.meter.samples_done), train_s, value, self.meter.last_loss])
        if self.plan.until is not None and self.meter.steps < self.plan.total and self.plan.until(value):
            self.stopped = True
            self.meter.stop_now()

    @property
    def needs_final(self) -> bool:
        """Whether the run's last step has no evaluation yet (a run stopped at its test has one)."""
        return not self.stopped and (not self.points or self.points[-1][0] < self.meter.samples_done)


class RunLength:
    """A confirmation run's steps and evaluations, decided once the builder's training set is
    there (``confirm.epochs`` / ``goal.epochs`` are passes over it; a length in samples needs no
    size). ``plan`` and ``evals``: the steps and evaluations, once ``sized``; before, a placeholder
    plan a meter can start with."""

    def __init__(self, config: Config, batch_size: int, until: Callable[[float], bool] | None = None) -> None:
        self.config, self.batch_size, self.until = config, batch_size, until
        self.plan = StepPlan(2, 0, 2, 0)
        self.evals: EvalPlan | None = None

    def sized(self, train_size: int) -> tuple[StepPlan, EvalPlan]:
        """The run's steps and evaluations for a training set of ``train_size`` samples. Raises
        ValueError where the run would get fewer than 2 steps."""
        samples = self.config.confirm_samples(train_size)
        assert samples is not None, "a length in epochs with no training set size"
        total = samples // self.batch_size
        if total < 2:
            what = "confirm.train_samples" if self.config.confirm_samples(None) is not None else "the epochs"
            raise ValueError(f"a confirmation run of batch_size {self.batch_size} gets {total} step(s) "
                             f"({samples} samples): raise {what}")
        self.plan, self.evals = StepPlan(total, 0, total, 0), eval_plan(self.config, total, self.until)
        return self.plan, self.evals


def meter_for(plan: StepPlan | RunLength, device: torch.device, cap_bytes: int | None, deadline: float) -> Meter:
    """A run's meter, started before the builder's pieces are built (its CPU memory baseline comes
    before the model); a confirmation run's (``RunLength``) on a placeholder until ``sized``."""
    return Meter(plan.plan if isinstance(plan, RunLength) else plan, device, cap_bytes, deadline)


def sized(meter: Meter, plan: StepPlan | RunLength, train_size: int) -> tuple[StepPlan, EvalPlan | None]:
    """A trial's steps as given (no evaluations), or a confirmation run's (``RunLength``) sized
    for the builder's training set of ``train_size`` samples, the meter told."""
    if not isinstance(plan, RunLength):
        return plan, None
    steps, evals = plan.sized(train_size)
    meter.resize(steps)
    return steps, evals


def eval_plan(config: Config, total: int, until: Callable[[float], bool] | None = None) -> EvalPlan:
    """``confirm.evaluations`` evenly spaced evaluations of the confirmation metric."""
    name = (config.confirm_metric or ("val_acc", "maximize"))[0]
    return EvalPlan(max(1, math.ceil(total / config.confirm.evaluations)), total, name, until)


def confirm_trainer(config: Config, params: Params, timeout_s: float, *, confirm_of: int | str | None = None,
                    start: float | None = None, until: Callable[[float], bool] | None = None,
                    world: int = 1) -> TrialResult:
    """A confirmation run in the user's trainer, as long as ``config.confirm_samples`` says for the
    builder's training set (``timeout_s`` from ``start``); the ``ok`` record with its curve.
    ``until``: the run ends at the first evaluation whose value it is true for. Raises on any fault
    (the caller's trial boundary turns it into a record). ``world`` > 1: one rank of the run's
    worker group."""
    from tune_batch.trial.setup import apply_memory_cap, device_name, pick_device
    from tune_batch.trial.trainers import group_kwargs, loop_module
    from tune_batch.trial.trainers.common import quiet, seed_everything

    start = time.perf_counter() if start is None else start
    # no warm-up step to profile: the memory profiler would land in the curve's training seconds
    length = RunLength(config, params.batch_size, until)
    device = pick_device()
    cap = apply_memory_cap(config, device)
    seed_everything(config.search.seed)
    module = loop_module(config.train.loop)
    with quiet(module.LOGGERS), kept_scope():
        run = module.train(config, params, length, device, cap, start + timeout_s, False, **group_kwargs(config, world))
    total = length.plan.total
    assert run.curve and length.evals is not None, "a trainer loop returned no curve"
    done, train_s, value, loss = run.curve[-1]
    sps = done / train_s if train_s > 0 else None
    metric = length.evals.metric
    metrics = Metrics(samples_per_s=sps, val_acc=value if metric == "val_acc" else None,
                      other={} if metric == "val_acc" else {metric: value},
                      peak_mem_bytes=run.peak_bytes, duration_s=time.perf_counter() - start)
    kept = run.kept or []
    info = TrialInfo(host=socket.gethostname(), pid=os.getpid(), confirm_of=confirm_of, seed=config.search.seed,
                     loop=config.train.loop, device=device_name(device, torch.get_num_threads()), data=run.data,
                     curve=run.curve, chance_acc=run.chance_acc, steps=run.steps, train_samples_done=int(done),
                     train_s=train_s, final_loss=loss, world_size=world, per_worker_batch=params.batch_size // world,
                     planned_samples=total * params.batch_size, stopped_at_target=run.steps < total or None,
                     precision=run.precision, accumulation_steps=run.accumulation, micro_batch_size=run.micro_batch,
                     memory_cap_bytes=cap.bytes, peak_mem_method=run.peak_method, memory_kept_bytes=kept,
                     memory_growth=growth(kept, run.peak_bytes).to_dict())
    return TrialResult(None, params, Status.OK, None, metrics, metrics.duration_s or 0.0, info)
