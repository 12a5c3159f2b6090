"""``train.loop: lightning``: a trial in the user's Lightning ``Trainer``.

The builder returns ``{"module": LightningModule, "train": Dataset or DataLoader, "val": Dataset or
DataLoader (optional), "trainer": dict of Trainer keyword arguments (optional)}``. The trial runs
``Trainer(**trainer, max_steps=<the trial's steps>, devices=1, callbacks=[*theirs, meter])`` (one
rank of a worker group: Lightning's DDP over the group's process group) on a
DataLoader of the searched batch size (divided by ``accumulate_grad_batches``), with the searched
learning rate put into the optimizer ``configure_optimizers`` made; then ``Trainer.validate``
on ``val`` gives the metrics the module logs (``val_acc``, ``val_loss``, ...). Validation is
not run inside ``fit``: it would land in the timed window.
"""

from __future__ import annotations

import os
import tempfile
from typing import Any

import lightning.pytorch as pl
import torch

from tune_batch.config import Config
from tune_batch.store.records import Params
from tune_batch.trial.loop import batch_len
from tune_batch.trial.setup import MemoryCap, StepPlan
from tune_batch.trial.trainers.common import (
    TrainerRun,
    build_pieces,
    chance_of,
    group_totals,
    loader_of,
    micro_batch,
    scale_lr,
    set_size,
    wrong_piece,
)
from tune_batch.trial.trainers.curve import CurveRecorder, RunLength, meter_for, sized
from tune_batch.trial.trainers.meter import Meter

LOGGERS = ("lightning", "lightning.pytorch", "lightning.fabric", "pytorch_lightning")
#: Trainer settings a trial decides (the user's values are replaced).
OWNED = ("max_steps", "max_epochs", "devices", "num_nodes", "strategy", "num_sanity_val_steps", "callbacks")
#: Defaults a trial changes unless the user set them: no files, no console output per trial.
QUIET_DEFAULTS = {"logger": False, "enable_checkpointing": False, "enable_progress_bar": False,
                  "enable_model_summary": False}


class MeterCallback(pl.Callback):
    """Drives the :class:`Meter` from Lightning's hooks and sets the learning rate once the
    optimizers exist. An optimizer step ends when ``trainer.global_step`` moves."""

    def __init__(self, meter: Meter, lr: float, accumulation: int) -> None:
        self.meter, self.lr, self.accumulation = meter, lr, accumulation
        self.lr_factor: float | None = None
        self._samples = 0
        self._global_step = 0

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.lr_factor = scale_lr(list(trainer.optimizers), [c.scheduler for c in trainer.lr_scheduler_configs],
                                  self.lr)
        self._global_step = trainer.global_step
        self.meter.train_begin()

    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any,
                             batch_idx: int) -> None:
        if batch_idx % self.accumulation == 0:
            self.meter.step_begin()
        self._samples += max(0, batch_len(batch))

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        if trainer.global_step == self._global_step:
            return  # a micro-batch before the optimizer step
        self._global_step = trainer.global_step
        loss = outputs.get("loss") if isinstance(outputs, dict) else outputs
        samples, self._samples = self._samples, 0
        self.meter.step_end(samples, loss if isinstance(loss, torch.Tensor) else None)

    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException) -> None:
        self.meter.abort()


def _pieces(config: Config) -> dict[str, Any]:
    pieces = build_pieces(config)
    if not isinstance(pieces["module"], pl.LightningModule):
        raise wrong_piece(config, "module", pieces["module"], "a lightning.pytorch.LightningModule")
    for key in ("train", "val"):
        data_types = torch.utils.data.Dataset | torch.utils.data.DataLoader
        if pieces.get(key) is not None and not isinstance(pieces[key], data_types):
            raise wrong_piece(config, key, pieces[key], "a torch Dataset or DataLoader")
    if not isinstance(pieces.get("trainer") or {}, dict):
        raise wrong_piece(config, "trainer", pieces["trainer"], "a dict of lightning.pytorch.Trainer keyword arguments")
    return pieces


def describe(config: Config) -> tuple[str, int]:
    """The builder's pieces, built once and checked: a one-line description, and the training set's
    samples."""
    pieces = _pieces(config)
    n_params = sum(p.numel() for p in pieces["module"].parameters())
    n = set_size(pieces["train"])
    return (f"{type(pieces['module']).__name__} ({n_params / 1e6:.2f}M parameters) in Lightning {pl.__version__}'s "
            f"Trainer on {n} training samples"), n


class CurveCallback(pl.Callback):
    """A confirmation run's evaluations: Lightning's own validation every ``val_check_interval``
    (on a worker group of ``world`` ranks, each rank's shard averaged over the ranks)."""

    def __init__(self, recorder: CurveRecorder, world: int = 1) -> None:
        self.recorder, self.world = recorder, world

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.recorder.start()

    def on_validation_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.recorder.eval_begin()

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.recorder.eval_end(_across(_floats(trainer.callback_metrics), self.world))
        if self.recorder.stopped:  # at the target (confirm.stop_at_target): Lightning ends after this step
            trainer.should_stop = True


def _floats(metrics: Any) -> dict[str, float]:
    return {str(k): float(v) for k, v in dict(metrics).items()}


def _across(scores: dict[str, float], world: int) -> dict[str, float]:
    """A worker group's evaluation: each rank validated its shard (Lightning's DistributedSampler),
    and logged its own value unless the module syncs it (``sync_dist``): the mean over the ranks
    (the same value where it was synced). Every rank calls this at the same point."""
    if world <= 1:
        return scores
    from tune_batch.trial import collective

    names = sorted(scores)
    return dict(zip(names, collective.all_reduce([scores[k] for k in names], ["mean"] * len(names), world)))


def _group(world: int, device: torch.device) -> dict[str, Any]:
    """The Trainer settings of one rank of a worker group of ``world`` (torchrun's variables set,
    the process group joined: Lightning's environment reads the first and keeps the second)."""
    if world <= 1:
        return {"devices": 1}
    from lightning.pytorch.strategies import DDPStrategy

    local = int(os.environ.get("LOCAL_WORLD_SIZE", world))
    return {"devices": local, "num_nodes": world // local,
            "strategy": DDPStrategy(process_group_backend="nccl" if device.type == "cuda" else "gloo")}


def train(config: Config, params: Params, plan: StepPlan | RunLength, device: torch.device, cap: MemoryCap,
          deadline: float, validate: bool, world: int = 1) -> TrainerRun:
    """Run the trial's steps in the user's Lightning Trainer (a ``RunLength``: a confirmation run,
    evaluated by Lightning's ``val_check_interval``); raises on any fault. ``world`` > 1: this is
    one rank of a worker group (Lightning's DDP, each rank a micro-batch of batch_size / world);
    samples are the group's, the peak memory its largest rank's, the evaluation the ranks' mean."""
    meter = meter_for(plan, device, cap.bytes, deadline)
    pieces = _pieces(config)
    plan, evals = sized(meter, plan, set_size(pieces["train"]))
    user = dict(pieces.get("trainer") or {})
    accumulation = int(user.get("accumulate_grad_batches", 1))
    micro = micro_batch(config, params.batch_size // world, accumulation, "accumulate_grad_batches")
    seed = config.search.seed
    loader = loader_of(pieces["train"], micro, train=True, seed=seed)
    val = pieces.get("val")
    if evals is not None and val is None:
        raise ValueError("train.builder returned no 'val': confirmation's validations have nothing to run on")
    val_loader = loader_of(val, micro, train=False, seed=seed) if val is not None else None
    meter.data_workers = loader.num_workers
    callback = MeterCallback(meter, params.lr, accumulation)
    theirs = user.get("callbacks") or []
    ours: list[pl.Callback] = [callback]
    timing: dict[str, Any] = {}
    recorder = CurveRecorder(meter, evals) if evals is not None else None
    if recorder is not None:
        ours.append(CurveCallback(recorder, world))
        timing = {"val_check_interval": evals.every * accumulation, "check_val_every_n_epoch": None}  # type: ignore[union-attr]
    with tempfile.TemporaryDirectory(prefix="tune_batch-lightning-") as root:
        kwargs = {"default_root_dir": root, **QUIET_DEFAULTS, **{k: v for k, v in user.items() if k not in OWNED},
                  "max_steps": plan.total, "max_epochs": -1, **_group(world, device), "num_sanity_val_steps": 0,
                  "accelerator": user.get("accelerator", "gpu" if device.type == "cuda" else "cpu"),
                  "callbacks": [*(theirs if isinstance(theirs, list) else [theirs]), *ours], **timing}
        trainer = pl.Trainer(**kwargs)
        module = pieces["module"]
        try:
            trainer.fit(module, train_dataloaders=loader, val_dataloaders=val_loader if recorder else None)
        finally:
            meter.abort()
        window = meter.finish()
        peak, method = meter.peak()
        scores: dict[str, float] = {}
        if (validate or (recorder is not None and recorder.needs_final)) and val_loader is not None:
            # a confirmation run's evaluation after its last step (one its val_check_interval did not
            # end on) is recorded by CurveCallback's hooks, which Trainer.validate calls too
            out = trainer.validate(module, dataloaders=val_loader, verbose=False)
            scores = _across(_floats(out[0] if out else {}), world)
    val_set = val.dataset if isinstance(val, torch.utils.data.DataLoader) else val
    peak, points = group_totals(peak, recorder.points if recorder is not None else None, world)
    return TrainerRun(window, peak, method, scores if validate else {}, meter.last_loss,
                      f"{type(loader.dataset).__name__} of {len(loader.dataset)} samples",  # type: ignore[arg-type]
                      meter.steps, meter.samples_done * world, meter.window_samples * world, accumulation, micro,
                      str(trainer.precision), loader.num_workers, _chance(val_set) if val is not None else None,
                      notes={"lr_factor": callback.lr_factor, "trainer": f"lightning {pl.__version__}"},
                      curve=points,
                      kept=recorder.kept if recorder is not None else None)


def _chance(val: Any) -> float | None:
    """The majority-class share of a validation set of (input, label) pairs (None otherwise)."""
    try:
        return chance_of([val[i][1] for i in range(len(val))])
    except (TypeError, IndexError, KeyError):
        return None
