"""Seeded images that take a whole run to learn: each class a smooth random pattern, each sample
that pattern at its own random offset (up to ``shift`` pixels each way, wrapping around), scaled,
and buried in noise. The built-in ``synthetic`` set moves every sample by the same offset, and a
small CNN reads it almost perfectly after one pass. Here the network has to learn the patterns
wherever they sit, through heavier noise. It is the decision benchmark's held-out BatchNorm CNN
workload (``benchmarks/heldout/bn_wd_cnn.yaml``); offline."""

from __future__ import annotations

import torch
from torch.utils.data import Dataset, TensorDataset

from tune_batch.workload.data import class_patterns


def data(samples: int = 8192, val_samples: int = 1024, side: int = 28, classes: int = 10, noise: float = 3.0,
         shift: int = 6, seed: int = 0) -> tuple[Dataset, Dataset]:
    """(train, val): ``samples`` and ``val_samples`` float images of 3 x ``side`` x ``side`` with
    labels in ``range(classes)``, drawn from one seeded generator (the same call, the same data)."""
    g = torch.Generator().manual_seed(seed + 7919)
    protos = class_patterns(g, classes, side, 7)
    n = samples + val_samples
    y = torch.randint(0, classes, (n,), generator=g)
    scale = 0.5 + torch.rand(n, 1, 1, 1, generator=g)
    offsets = torch.randint(-shift, shift + 1, (n, 2), generator=g)
    # each sample's own offset: index the pattern's rows and columns modulo the side (a roll per sample)
    rows = (torch.arange(side).view(1, side) - offsets[:, :1]) % side
    cols = (torch.arange(side).view(1, side) - offsets[:, 1:]) % side
    base = protos[y]
    base = base.gather(2, rows.view(n, 1, side, 1).expand(n, 3, side, side))
    base = base.gather(3, cols.view(n, 1, 1, side).expand(n, 3, side, side))
    x = base * scale + noise * torch.randn(n, 3, side, side, generator=g)
    return TensorDataset(x[:samples], y[:samples]), TensorDataset(x[samples:], y[samples:])
