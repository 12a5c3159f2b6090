"""``train.loop: keras``: a trial in the user's Keras 3 ``model.fit``, on the torch backend.

The builder returns ``{"model": a compiled keras.Model, "x", "y" (optional), "validation_data":
(x, y) (optional), "callbacks" (optional)}``. The trial sets the optimizer's ``learning_rate``
and calls ``model.fit(x, y, batch_size=<searched>, epochs=..., callbacks=[*theirs, meter])``,
stopped after the trial's steps; ``model.evaluate(*validation_data, return_dict=True)`` then
gives the metrics it was compiled with, named as Keras names validation metrics (``val_loss``;
an accuracy as ``val_acc``). Keras keeps the short last batch of each epoch, as the user's own
``fit`` does: the window counts its real samples (``info.short_batches``).

Keras is measured on the torch backend (``KERAS_BACKEND=torch``), where its tensors are torch
tensors: the same memory profiler and CUDA statistics apply.
"""

from __future__ import annotations

import math
import os
from typing import Any

import torch

from tune_batch.config import Config
from tune_batch.errors import WorkloadError
from tune_batch.store.records import Params
from tune_batch.trial.setup import MemoryCap, StepPlan
from tune_batch.trial.trainers.common import TrainerRun, build_pieces, chance_of, wrong_piece
from tune_batch.trial.trainers.curve import CurveRecorder, RunLength, meter_for, sized
from tune_batch.trial.trainers.meter import Meter


def _import_keras() -> Any:
    """Keras on the torch backend; the environment variable is put back after the import."""
    chosen = os.environ.get("KERAS_BACKEND")
    if chosen not in (None, "torch"):
        raise WorkloadError(f"train.loop = keras measures Keras on the torch backend; KERAS_BACKEND = {chosen!r}: "
                            f"allowed: torch (or unset)")
    os.environ["KERAS_BACKEND"] = "torch"
    try:
        import keras
    finally:
        if chosen is None:
            os.environ.pop("KERAS_BACKEND", None)
    if keras.backend.backend() != "torch":
        raise WorkloadError(f"train.loop = keras: Keras was already imported with the {keras.backend.backend()!r} "
                            f"backend; allowed: torch (set KERAS_BACKEND=torch before importing keras)")
    return keras


keras = _import_keras()
LOGGERS = ("keras",)


class MeterCallback(keras.callbacks.Callback):
    """Drives the :class:`Meter` from Keras's batch hooks and stops ``fit`` after the trial's
    steps. ``on_train_batch_begin`` comes after the batch was drawn."""

    def __init__(self, meter: Meter, samples: int, batch_size: int, recorder: CurveRecorder | None = None,
                 validation: Any = None) -> None:
        super().__init__()
        self.meter, self.samples, self.batch_size = meter, samples, batch_size
        self.per_epoch = math.ceil(samples / batch_size)
        self.short_batches = 0
        self.recorder, self.validation = recorder, validation

    def on_train_begin(self, logs: Any = None) -> None:
        self.meter.train_begin()
        if self.recorder is not None:
            self.recorder.start()

    def on_train_batch_begin(self, batch: int, logs: Any = None) -> None:
        self.meter.step_begin()

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        n = self.batch_size if batch < self.per_epoch - 1 else self.samples - (self.per_epoch - 1) * self.batch_size
        self.short_batches += int(n < self.batch_size)
        self.meter.step_end(n, (logs or {}).get("loss"))
        if self.recorder is not None and self.recorder.plan.due(self.meter.steps):
            # Keras validates per epoch only (validation_freq): a confirmation run's evaluations
            # every `every` steps are model.evaluate, as fit itself runs it at an epoch's end
            self.recorder.eval_begin()
            x, y = self.validation
            self.recorder.eval_end(_scores(self.model.evaluate(x, y, batch_size=self.batch_size, verbose=0,
                                                               return_dict=True)))
        if self.meter.steps >= self.meter.plan.total or (self.recorder is not None and self.recorder.stopped):
            self.model.stop_training = True


def _pieces(config: Config) -> dict[str, Any]:
    pieces = build_pieces(config)
    model = pieces["model"]
    if not isinstance(model, keras.Model):
        raise wrong_piece(config, "model", model, "a compiled keras.Model")
    if getattr(model, "optimizer", None) is None:
        raise wrong_piece(config, "model", model, "a keras.Model compiled with an optimizer (model.compile(...))")
    val = pieces.get("validation_data")
    if val is not None and not (isinstance(val, tuple | list) and len(val) == 2):
        raise wrong_piece(config, "validation_data", val, "an (x, y) pair")
    return pieces


def describe(config: Config) -> tuple[str, int]:
    """The builder's pieces, built once and checked: a one-line description, and the training set's
    samples."""
    pieces = _pieces(config)
    n = len(pieces["x"])
    return (f"{type(pieces['model']).__name__} ({pieces['model'].count_params() / 1e6:.2f}M parameters) in Keras "
            f"{keras.__version__} fit (torch backend) on {n} training samples"), n


def _set_lr(model: Any, lr: float) -> None:
    try:
        model.optimizer.learning_rate = lr
    except TypeError as e:  # a LearningRateSchedule: Keras will not take a constant over it
        raise ValueError(f"train.loop = keras sets the optimizer's learning_rate to the searched lr; this optimizer "
                         f"has a schedule ({e}); give it a constant learning_rate") from e


def _scores(out: dict[str, Any]) -> dict[str, float]:
    """evaluate()'s metrics as Keras names validation metrics (val_*), an accuracy as val_acc."""
    scores = {}
    for name, value in out.items():
        key = "val_acc" if name in ("accuracy", "acc", "sparse_categorical_accuracy", "categorical_accuracy") \
            else f"val_{name}"
        scores[key] = float(value)
    return scores


def train(config: Config, params: Params, plan: StepPlan | RunLength, device: torch.device, cap: MemoryCap,
          deadline: float, validate: bool) -> TrainerRun:
    """Run the trial's steps in the user's ``model.fit`` (a ``RunLength``: a confirmation run,
    evaluated by ``model.evaluate`` from the callback); raises on any fault."""
    meter = meter_for(plan, device, cap.bytes, deadline)
    keras.utils.set_random_seed(config.search.seed)
    pieces = _pieces(config)
    model, x, y = pieces["model"], pieces["x"], pieces.get("y")
    n = len(x)
    plan, evals = sized(meter, plan, n)
    if n < params.batch_size:
        raise ValueError(f"the training set has {n} samples, fewer than batch_size {params.batch_size}")
    _set_lr(model, params.lr)
    val = pieces.get("validation_data")
    if evals is not None and val is None:
        raise ValueError("train.builder returned no 'validation_data': confirmation's evaluations have nothing to "
                         "run on")
    recorder = CurveRecorder(meter, evals) if evals is not None else None
    callback = MeterCallback(meter, n, params.batch_size, recorder, val)
    epochs = math.ceil(plan.total / callback.per_epoch)
    try:
        model.fit(x, y, batch_size=params.batch_size, epochs=epochs, shuffle=True, verbose=0,
                  callbacks=[*(pieces.get("callbacks") or []), callback])
    finally:
        meter.abort()
    window = meter.finish()
    peak, method = meter.peak()
    scores: dict[str, float] = {}
    if validate and val is not None:
        scores = _scores(model.evaluate(val[0], val[1], batch_size=params.batch_size, verbose=0, return_dict=True))
    return TrainerRun(window, peak, method, scores, meter.last_loss, f"{type(x).__name__} of {n} samples",
                      meter.steps, meter.samples_done, meter.window_samples, 1, params.batch_size,
                      keras.config.dtype_policy().name, 0,
                      chance_of(val[1]) if val is not None else None, callback.short_batches,
                      notes={"trainer": f"keras {keras.__version__} (torch backend)"},
                      curve=recorder.points if recorder is not None else None,
                      kept=recorder.kept if recorder is not None else None)
