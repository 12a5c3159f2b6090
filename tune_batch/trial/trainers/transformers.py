"""``train.loop: transformers``: a trial in the user's Hugging Face ``Trainer``.

The builder returns ``Trainer`` pieces: ``{"model", "train_dataset", "eval_dataset" (optional),
"args": dict of TrainingArguments fields or a TrainingArguments (optional), "data_collator",
"compute_metrics", "callbacks", "processing_class", "optimizers" (optional)}``. The trial sets
``per_device_train_batch_size`` (the searched batch divided by ``gradient_accumulation_steps``),
``learning_rate``, ``max_steps`` (the trial's steps) and ``seed``; it turns off what would land in
the timed window or halve the batch behind the search's back (evaluation and checkpoints during
training, ``auto_find_batch_size``) and drops the short last batch; everything else in ``args``
stays the user's. ``Trainer.evaluate`` afterwards gives ``eval_loss`` and what
``compute_metrics`` returns. The loss and the samples of each step are read by a forward hook on
the model (it only reads the output). On a worker group (``num_gpus`` > 1) each rank runs the
Trainer's DDP on the group's process group, a micro-batch of batch_size / num_gpus per rank.
"""

from __future__ import annotations

import dataclasses
import numbers
import tempfile
from typing import Any

import torch
import transformers
from transformers import Trainer, TrainerCallback, TrainingArguments
from transformers.trainer_callback import PrinterCallback, ProgressCallback

from tune_batch.config import Config
from tune_batch.store.records import Params
from tune_batch.trial.loop import batch_len
from tune_batch.trial.setup import MemoryCap, StepPlan
from tune_batch.trial.trainers.common import TrainerRun, build_pieces, group_totals, micro_batch, scale_lr, wrong_piece
from tune_batch.trial.trainers.curve import CurveRecorder, EvalPlan, RunLength, meter_for, sized
from tune_batch.trial.trainers.meter import Meter

LOGGERS = ("transformers", "accelerate")
#: evaluate()'s own timing, not metrics of the config
_EVAL_TIMING = ("eval_runtime", "eval_samples_per_second", "eval_steps_per_second", "epoch")


class MeterCallback(TrainerCallback):
    """Drives the :class:`Meter` from the Trainer's step hooks; ``on_step_begin`` comes after the
    step's batches were fetched, so their loading is in the gap the window counts as waiting."""

    def __init__(self, meter: Meter) -> None:
        self.meter = meter
        self.samples = 0
        self.loss: torch.Tensor | None = None

    def forward_hook(self, module: torch.nn.Module, args: Any, kwargs: Any, output: Any) -> None:
        if not module.training:
            return
        self.samples += max(0, batch_len(kwargs) if kwargs else batch_len(args))
        loss = getattr(output, "loss", None) if not isinstance(output, dict) else output.get("loss")
        if isinstance(loss, torch.Tensor):
            self.loss = loss.detach()

    def on_train_begin(self, args: TrainingArguments, state: Any, control: Any, **kwargs: Any) -> None:
        self.meter.train_begin()

    def on_step_begin(self, args: TrainingArguments, state: Any, control: Any, **kwargs: Any) -> None:
        self.meter.step_begin()

    def on_step_end(self, args: TrainingArguments, state: Any, control: Any, **kwargs: Any) -> None:
        samples, self.samples = self.samples, 0
        self.meter.step_end(samples, self.loss)


def _pieces(config: Config) -> dict[str, Any]:
    pieces = build_pieces(config)
    if not isinstance(pieces["model"], torch.nn.Module):
        raise wrong_piece(config, "model", pieces["model"], "a transformers PreTrainedModel (a torch nn.Module)")
    args = pieces.get("args")
    if args is not None and not isinstance(args, dict | TrainingArguments):
        raise wrong_piece(config, "args", args, "a dict of TrainingArguments fields, or a TrainingArguments")
    if isinstance(args, dict):
        known = {f.name for f in dataclasses.fields(TrainingArguments)}
        bad = sorted(set(args) - known)
        if bad:
            raise wrong_piece(config, f"args[{bad[0]!r}]", args[bad[0]], "TrainingArguments field names")
    return pieces


def _arguments(pieces: dict[str, Any], overrides: dict[str, Any], root: str) -> TrainingArguments:
    user = pieces.get("args")
    if isinstance(user, TrainingArguments):
        return dataclasses.replace(user, output_dir=root, **overrides)
    return TrainingArguments(**{"output_dir": root, **(user or {}), **overrides})


def accumulation_of(pieces: dict[str, Any]) -> int:
    user = pieces.get("args")
    value = user.gradient_accumulation_steps if isinstance(user, TrainingArguments) else (user or {}).get(
        "gradient_accumulation_steps", 1)
    return int(value)


def describe(config: Config) -> tuple[str, int]:
    """The builder's pieces, built once and checked: a one-line description, and the training set's
    samples."""
    pieces = _pieces(config)
    n_params = sum(p.numel() for p in pieces["model"].parameters())
    n = len(pieces["train_dataset"])
    return (f"{type(pieces['model']).__name__} ({n_params / 1e6:.2f}M parameters) in Transformers "
            f"{transformers.__version__}'s Trainer on {n} training samples"), n


class CurveCallback(TrainerCallback):
    """A confirmation run's evaluations: the Trainer's own every ``eval_steps`` (and, in versions
    that do, at the last step); each follows the ``on_step_end`` where the Trainer's flow callback
    (called before ours) has set ``control.should_evaluate``."""

    def __init__(self, recorder: CurveRecorder) -> None:
        self.recorder = recorder

    def on_train_begin(self, args: TrainingArguments, state: Any, control: Any, **kwargs: Any) -> None:
        self.recorder.start()

    def on_step_end(self, args: TrainingArguments, state: Any, control: Any, **kwargs: Any) -> None:
        if control.should_evaluate:
            self.recorder.eval_begin()

    def on_evaluate(self, args: TrainingArguments, state: Any, control: Any, metrics: Any = None,
                    **kwargs: Any) -> None:
        self.recorder.eval_end(_scores(metrics or {}))
        if self.recorder.stopped:  # at the target (confirm.stop_at_target): the Trainer ends after this step
            control.should_training_stop = True


def _scores(out: dict[str, Any]) -> dict[str, float]:
    # numbers.Real: numpy's float32 too (a worker group's gathered losses average to one)
    return {k: float(v) for k, v in out.items() if k not in _EVAL_TIMING and isinstance(v, numbers.Real)}


def _overrides(config: Config, params: Params, plan: StepPlan, device: torch.device, micro: int,
               evals: EvalPlan | None, world: int = 1) -> dict[str, Any]:
    """The TrainingArguments a trial decides (the rest of the user's stay)."""
    timing: dict[str, Any] = {"eval_strategy": "no"}
    if evals is not None:
        timing = {"eval_strategy": "steps", "eval_steps": evals.every}
    group: dict[str, Any] = {}
    if world > 1:  # the group's process group, joined already: the Trainer's DDP runs on it
        group = {"ddp_backend": "nccl" if device.type == "cuda" else "gloo", "ddp_find_unused_parameters": False}
    return {"per_device_train_batch_size": micro, "learning_rate": params.lr, "max_steps": plan.total,
            "seed": config.search.seed, "save_strategy": "no", "auto_find_batch_size": False,
            "dataloader_drop_last": True, "disable_tqdm": True, "use_cpu": device.type == "cpu", **group, **timing}


class _Trainer(Trainer):
    """The Trainer with one change: ``dataloader_drop_last`` (set so that every training step has
    the searched batch) does not reach the evaluation, which sees the whole evaluation set. (It
    did: 64 evaluation samples at an evaluation batch of 64 on two ranks gave no batch at all, and
    one rank's evaluation nothing; on one rank, the last short batch went unevaluated.)"""

    def get_eval_dataloader(self, eval_dataset: Any = None) -> Any:
        drop = self.args.dataloader_drop_last
        self.args.dataloader_drop_last = False
        try:
            return super().get_eval_dataloader(eval_dataset)
        finally:
            self.args.dataloader_drop_last = drop


def _fresh_accelerate_state() -> None:
    """Accelerate keeps the process's distributed state (one worker, or a group's rank and its
    backend) in a process-wide singleton that a Trainer reads once: a trial process that ran
    another group, or none, would hand the next Trainer the old one."""
    from accelerate.state import AcceleratorState

    AcceleratorState._reset_state(reset_partial_state=True)


def train(config: Config, params: Params, plan: StepPlan | RunLength, device: torch.device, cap: MemoryCap,
          deadline: float, validate: bool, world: int = 1) -> TrainerRun:
    """Run the trial's steps in the user's Trainer (a ``RunLength``: a confirmation run, evaluated
    by the Trainer's ``eval_steps``); raises on any fault. ``world`` > 1: this is one rank of a
    worker group (the Trainer's DDP on the group's process group, each rank a micro-batch of
    batch_size / world; its evaluation gathers every rank's shard, so every rank reads the same
    scores); samples are the group's, the peak memory its largest rank's."""
    meter = meter_for(plan, device, cap.bytes, deadline)
    pieces = _pieces(config)
    plan, evals = sized(meter, plan, len(pieces["train_dataset"]))
    accumulation = accumulation_of(pieces)
    micro = micro_batch(config, params.batch_size // world, accumulation, "gradient_accumulation_steps")
    if len(pieces["train_dataset"]) < micro:
        raise ValueError(f"the training set has {len(pieces['train_dataset'])} samples, fewer than batch_size {micro}")
    if evals is not None and pieces.get("eval_dataset") is None:
        raise ValueError("train.builder returned no 'eval_dataset': confirmation's evaluations have nothing to run on")
    callback = MeterCallback(meter)
    recorder = CurveRecorder(meter, evals) if evals is not None else None
    ours: list[TrainerCallback] = [callback, *([CurveCallback(recorder)] if recorder is not None else [])]
    model = pieces["model"]
    hook = model.register_forward_hook(callback.forward_hook, with_kwargs=True)
    optimizers = pieces.get("optimizers")
    if optimizers is not None and optimizers[0] is not None:  # the user's own optimizer: scaled, as in Lightning
        scale_lr([optimizers[0]], [optimizers[1]] if optimizers[1] is not None else [], params.lr)
    try:
        with tempfile.TemporaryDirectory(prefix="tune_batch-transformers-") as root:
            _fresh_accelerate_state()
            args = _arguments(pieces, _overrides(config, params, plan, device, micro, evals, world), root)
            meter.data_workers = args.dataloader_num_workers
            extra = {k: pieces[k] for k in ("eval_dataset", "data_collator", "compute_metrics", "processing_class",
                                            "optimizers") if pieces.get(k) is not None}
            trainer = _Trainer(model=model, args=args, train_dataset=pieces["train_dataset"],
                              callbacks=[*(pieces.get("callbacks") or []), *ours], **extra)
            for quiet_cb in (PrinterCallback, ProgressCallback):  # a trial prints nothing per step
                trainer.remove_callback(quiet_cb)
            try:
                trainer.train()
            finally:
                meter.abort()
                hook.remove()
            window = meter.finish()
            peak, method = meter.peak()
            scores: dict[str, float] = {}
            if (validate and pieces.get("eval_dataset") is not None) or (recorder is not None and recorder.needs_final):
                if recorder is not None:
                    trainer.remove_callback(CurveCallback)  # this evaluation is recorded here, once
                    recorder.eval_begin()
                scores = _scores(trainer.evaluate())
                if recorder is not None:
                    recorder.eval_end(scores)
    finally:
        hook.remove()
    precision = "bf16" if args.bf16 else "fp16" if args.fp16 else "fp32"
    peak, points = group_totals(peak, recorder.points if recorder is not None else None, world)
    return TrainerRun(window, peak, method, scores if validate else {}, meter.last_loss,
                      f"{type(pieces['train_dataset']).__name__} of {len(pieces['train_dataset'])} samples",
                      meter.steps, meter.samples_done * world, meter.window_samples * world, accumulation, micro,
                      precision, args.dataloader_num_workers,
                      notes={"trainer": f"transformers {transformers.__version__}"}, curve=points,
                      kept=recorder.kept if recorder is not None else None)
