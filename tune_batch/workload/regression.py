"""A seeded tabular regression set (Friedman's first function, scikit-learn's ``make_friedman1``:
a sine of a product, a square and two linear terms in 5 features, the rest noise features, plus
Gaussian noise), with its mean-squared-error step and evaluation: the held-out regression
workload (``benchmarks/heldout/friedman_mlp.yaml``), offline. Targets are standardised with the
training rows' statistics, so a model that predicts their mean scores ``val_mse`` about 1."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.utils.data import Dataset, TensorDataset


def data(rows: int = 16384, val_rows: int = 2048, features: int = 20, noise: float = 1.0,
         seed: int = 0) -> tuple[Dataset, Dataset]:
    """(train, val): ``rows`` training and ``val_rows`` validation rows of ``features``
    standardised float features (5 of them informative) and one standardised float target
    (``noise``: the Gaussian noise's SD on the unstandardised target, whose own SD is about 5)."""
    from sklearn.datasets import make_friedman1

    x, y = make_friedman1(n_samples=rows + val_rows, n_features=features, noise=noise, random_state=seed + 104729)
    xt = torch.tensor(x, dtype=torch.float32)
    xt = (xt - xt[:rows].mean(0)) / xt[:rows].std(0).clamp_min(1e-6)
    yt = torch.tensor(y, dtype=torch.float32)
    yt = (yt - yt[:rows].mean()) / yt[:rows].std().clamp_min(1e-6)
    return TensorDataset(xt[:rows], yt[:rows]), TensorDataset(xt[rows:], yt[rows:])


def model(num_classes: int = 2, in_features: int = 20, hidden: int = 256, depth: int = 3) -> nn.Module:
    """The model builder: the built-in ``mlp`` with one output, the prediction
    (``model.num_classes`` is not used: a regression has no classes)."""
    from tune_batch.workload.models import mlp

    return mlp(num_classes=1, in_features=in_features, hidden=hidden, depth=depth)


def step(model: nn.Module, batch: Any, device: torch.device) -> torch.Tensor:
    """``train.step``: the mean squared error of a batch (the model's one output per row)."""
    x, y = batch
    return nn.functional.mse_loss(model(x.to(device)).reshape(-1), y.to(device).reshape(-1))


def evaluate(model: nn.Module, loader: Any, device: torch.device) -> dict[str, float]:
    """``train.evaluate``: the mean squared error over the loader (``val_mse``)."""
    total, n = 0.0, 0
    for x, y in loader:
        pred = model(x.to(device)).reshape(-1)
        total += float(nn.functional.mse_loss(pred, y.to(device).reshape(-1), reduction="sum"))
        n += y.numel()
    return {"val_mse": total / max(1, n)}
