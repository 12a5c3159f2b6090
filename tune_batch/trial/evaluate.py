"""Evaluation after training: top-1 accuracy on the held-out split, and the model's health."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader

from tune_batch.trial.faults import NonFiniteError


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
        for x, y in DataLoader(val, batch_size=batch, shuffle=False):
            pred = model(x.to(device)).argmax(dim=1)
            correct += int((pred.cpu() == y).sum())
            total += len(y)
    model.train()
    return correct / total if total else 0.0
