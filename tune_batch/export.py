"""The recommendation in a trainer's own terms: ``tune-batch export RUN_DIR --to lightning |
transformers | keras``, and :func:`to_lightning`, :func:`to_transformers`, :func:`to_keras`.

The searched ``batch_size`` is the global batch per optimizer step: a trainer that splits it
gets its own pieces back (per device, per micro-batch with the accumulation the recommended
trial ran). Reads the run directory only; imports no trainer.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tune_batch.errors import UserError

TARGETS = ("lightning", "transformers", "keras")


@dataclass(frozen=True)
class Recommended:
    """The recommended config of a run directory, and where it was measured."""

    trial_id: Any
    batch_size: int
    lr: float
    num_gpus: int
    accumulation: int  # micro-batches per optimizer step in the recommended trial
    loop: str  # train.loop of the run: tune_batch's own, or the trainer it was measured in
    method: str
    measured: str  # the objectives as the front shows them (``Report.measured``)
    confirmed: str | None = None  # what its confirmation runs measured (``Report.confirmed``)
    optimizer: str | None = None  # the optimizer tune_batch's own loop trained it with, in words

    @property
    def micro_batch(self) -> int:
        """Samples per device per micro-batch."""
        return self.batch_size // self.num_gpus // self.accumulation


def recommended(run_dir: str | Path) -> Recommended:
    """The recommendation of ``run_dir`` (rebuilt from its records, as ``tune-batch report``).
    Raises UserError when it is not a run directory or nothing is recommended."""
    from tune_batch.decide.recommend import decide
    from tune_batch.store.rundir import RunDir

    run = RunDir(run_dir)
    if not run.exists():
        raise UserError(f"run_dir {str(run_dir)!r}: no config.yaml there; give a directory written by "
                        f"'tune-batch search'")
    config = run.load_config()
    records, warnings = run.records()
    report = decide(config, records, warnings)
    rec = report.recommended
    if rec is None:
        raise UserError(f"run_dir {str(run_dir)!r}: nothing is recommended ({report.why_none}); nothing to export")
    p = rec.params
    return Recommended(rec.trial_id, p.batch_size, p.lr, p.num_gpus, int(rec.info.accumulation_steps or 1),
                       config.train.loop, report.method, report.measured(rec), report.confirmed(rec),
                       optimizer_words(config) if config.train.loop == "tune_batch" else None)


def optimizer_words(config: Any) -> str:
    """The optimizer a trial of tune_batch's own loop trains with: the learning rate holds for it."""
    o = config.optimizer
    kwargs = o.keyword_args
    warm = f", the lr warmed up linearly over its first {o.warmup_steps} steps" if o.warmup_steps else ""
    return f"{o.name}(" + ", ".join(f"{k}={v}" for k, v in kwargs.items()) + f"){warm}"


def to_transformers(run_dir: str | Path) -> dict[str, Any]:
    """``TrainingArguments`` fields of the recommendation: ``per_device_train_batch_size``,
    ``learning_rate``, and ``gradient_accumulation_steps`` when the trial accumulated."""
    return transformers_kwargs(recommended(run_dir))


def transformers_kwargs(r: Recommended) -> dict[str, Any]:
    out: dict[str, Any] = {"per_device_train_batch_size": r.micro_batch, "learning_rate": r.lr}
    if r.accumulation > 1:
        out["gradient_accumulation_steps"] = r.accumulation
    return out


def to_lightning(run_dir: str | Path) -> dict[str, Any]:
    """The recommendation for Lightning: the DataLoader's ``batch_size``, ``Trainer`` keyword
    arguments (``devices``; ``accumulate_grad_batches`` when the trial accumulated) and the
    optimizer's learning rate (``lr``: the first param group's)."""
    return lightning_kwargs(recommended(run_dir))


def lightning_kwargs(r: Recommended) -> dict[str, Any]:
    trainer: dict[str, Any] = {"devices": r.num_gpus}
    if r.accumulation > 1:
        trainer["accumulate_grad_batches"] = r.accumulation
    return {"dataloader": {"batch_size": r.micro_batch}, "trainer": trainer, "optimizer": {"lr": r.lr}}


def to_keras(run_dir: str | Path) -> dict[str, Any]:
    """The recommendation for Keras: ``fit`` keyword arguments (``batch_size``) and the
    optimizer's (``learning_rate``; ``gradient_accumulation_steps`` when the trial accumulated)."""
    return keras_kwargs(recommended(run_dir))


def keras_kwargs(r: Recommended) -> dict[str, Any]:
    optimizer: dict[str, Any] = {"learning_rate": r.lr}
    if r.accumulation > 1:
        optimizer["gradient_accumulation_steps"] = r.accumulation
    return {"fit": {"batch_size": r.batch_size // r.num_gpus // r.accumulation}, "optimizer": optimizer}


EXPORTERS = {"lightning": lightning_kwargs, "transformers": transformers_kwargs, "keras": keras_kwargs}


def _call(name: str, kwargs: dict[str, Any], indent: str = "") -> str:
    return f"{indent}{name}(" + ", ".join(f"{k}={v!r}" for k, v in kwargs.items()) + ")"


def header(r: Recommended, target: str) -> list[str]:
    """Comment lines: which trial, how it was chosen, what it measured, where it was measured."""
    lines = [f"# tune_batch: trial {r.trial_id} ({r.method}): batch_size={r.batch_size} lr={r.lr:.6g} "
             f"num_gpus={r.num_gpus}; measured {r.measured}",
             *([f"# {r.confirmed}"] if r.confirmed else []),
             f"# measured in: {r.loop}" + ("" if r.loop == "tune_batch" else " (the user's own trainer)")]
    if r.optimizer:
        lines.append(f"# trained with {r.optimizer}: the lr holds for that optimizer; give yours the same")
    if r.loop != target:
        lines.append(f"# not measured in {target}'s loop: a search with train.loop: {target} measures it there")
    return lines


def render(target: str, run_dir: str | Path) -> str:
    """The text ``tune-batch export RUN_DIR --to target`` prints."""
    if target not in EXPORTERS:
        raise UserError(f"--to {target!r}: allowed: {', '.join(TARGETS)}")
    r = recommended(run_dir)
    kwargs = EXPORTERS[target](r)
    lines = header(r, target)
    if target == "transformers":
        lines += ["TrainingArguments(", *(f"    {k}={v!r}," for k, v in kwargs.items()),
                  "    ...,  # your other fields", ")"]
    elif target == "lightning":
        lines += [_call("DataLoader", {"batch_size": kwargs["dataloader"]["batch_size"]}).replace("(", "(dataset, ", 1),
                  _call("Trainer", kwargs["trainer"]),
                  f"# in configure_optimizers: lr={kwargs['optimizer']['lr']!r} (the first param group's"
                  + ("; tune_batch kept the other groups' and the scheduler's ratios to it)" if r.loop == "lightning"
                     else ")")]
    else:
        lines += [f"model.optimizer.{k} = {v!r}" for k, v in kwargs["optimizer"].items()]
        lines.append(_call("model.fit", kwargs["fit"]).replace("(", "(x, y, ", 1))
    return "\n".join(lines)


def render_json(target: str, run_dir: str | Path) -> tuple[str, str | None]:
    """The keyword arguments as JSON (``--json``), and a note when the run was measured in
    another loop than ``target``'s (for stderr: stdout stays JSON)."""
    if target not in EXPORTERS:
        raise UserError(f"--to {target!r}: allowed: {', '.join(TARGETS)}")
    r = recommended(run_dir)
    note = None if r.loop == target else f"note: measured in {r.loop}'s loop, not in {target}'s"
    return json.dumps(EXPORTERS[target](r), indent=2), note
