"""Evaluation after training: top-1 accuracy on the held-out split, and the model's health."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader

from tune_batch.config.metrics import OBJECTIVE_METRICS
from tune_batch.errors import TrialConfigError
from tune_batch.trial.faults import NonFiniteError
from tune_batch.workload.batches import inputs_and_labels, loader


def check_batchnorm(model: nn.Module) -> None:
    """Raise NonFiniteError when a BatchNorm running statistic is NaN or infinite."""
    for name, m in model.named_modules():
        if isinstance(m, nn.modules.batchnorm._BatchNorm) and m.running_mean is not None:
            if not (torch.isfinite(m.running_mean).all() and torch.isfinite(m.running_var).all()):
                raise NonFiniteError(f"NaN in BatchNorm running statistics of {name or 'model'}")


def accuracy(model: nn.Module, val: Any, device: torch.device, batch: int) -> float:
    """Top-1 accuracy on ``val``, at the trial's own batch size (what fits in training fits here)."""
    model.eval()
    correct = total = 0
    with torch.no_grad():
        for b in loader(val, batch, shuffle=False):
            x, y = inputs_and_labels(b, "the built-in evaluation (val_acc)", "train.evaluate: 'pkg.module:function' "
                                     "returning {metric: value} (and objectives naming them)")
            pred = model(x.to(device)).argmax(dim=1)
            correct += int((pred.cpu() == y).sum())
            total += len(y)
    model.train()
    return correct / total if total else 0.0


def not_given(config: Any, scores: Any) -> list[str]:
    """The config's validation objectives (those no trial measures itself) missing from ``scores``,
    what an evaluation returned or a trainer logged."""
    return [m for m in config.metric_names if m not in OBJECTIVE_METRICS and m not in scores]


def evaluate(config: Any, model: nn.Module, val: Any, device: torch.device, batch: int) -> dict[str, float]:
    """The trial's validation metrics: ``train.evaluate`` called as ``fn(model, loader, device)``
    (a loader of ``val`` at the trial's batch size, the model in eval mode, no gradients) when
    the config names one, else ``{"val_acc": top-1 accuracy}``. Raises ValueError for a result
    that is not a mapping of names to finite numbers."""
    if config.train.evaluate is None:
        return {"val_acc": accuracy(model, val, device, batch)}
    from tune_batch.workload.resolve import resolve_callable

    fn = resolve_callable(config.train.evaluate, "train.evaluate")
    model.eval()
    try:
        with torch.no_grad():
            out = fn(model, loader(val, batch, shuffle=False), device)
    finally:
        model.train()
    if not isinstance(out, dict) or not out:
        raise TrialConfigError(f"train.evaluate = {config.train.evaluate!r} returned {type(out).__name__}, not a "
                               f"dict of metric names to numbers")
    scores = {}
    for name, value in out.items():
        try:
            scores[str(name)] = float(value)
        except (TypeError, ValueError) as e:
            raise TrialConfigError(f"train.evaluate returned {name}={value!r}: not a number") from e
    missing = not_given(config, scores)
    if missing:  # every trial would be measured and left off the front for it
        raise TrialConfigError(f"objective {missing[0]!r} is not among what train.evaluate = "
                               f"{config.train.evaluate!r} returned ({', '.join(sorted(scores))}); return it there or "
                               f"name one of those in objectives")
    return scores


def chance_rate(val: Any) -> float | None:
    """The majority-class share of ``val``'s labels: the accuracy of always answering the most
    common class (what a model that learned nothing can reach). None without integer labels."""
    counts: dict[int, int] = {}
    try:
        for _, y in DataLoader(val, batch_size=1024, shuffle=False):
            labels = torch.as_tensor(y)
            if labels.is_floating_point():  # a regression target: no classes
                return None
            for label, n in zip(*torch.unique(labels.reshape(-1), return_counts=True)):
                counts[int(label)] = counts.get(int(label), 0) + int(n)
    except (TypeError, ValueError, RuntimeError):
        return None
    total = sum(counts.values())
    return max(counts.values()) / total if total else None
