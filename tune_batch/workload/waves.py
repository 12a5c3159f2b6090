"""A seeded set of noisy 1-D waveforms and a small 1-D convolutional classifier for it: the
held-out time-series workload (``benchmarks/heldout/waves_conv1d.yaml``), offline.

Each sample is one channel of ``length`` points: one of six shapes (sine, square, triangle,
sawtooth, a rising chirp, a decaying sine) with its own frequency, phase and amplitude, plus white
noise of standard deviation ``noise``. The label is the shape. With heavy noise some shapes look
alike at low frequency, so validation accuracy levels off below 1."""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.utils.data import Dataset, TensorDataset

SHAPES = ("sine", "square", "triangle", "sawtooth", "chirp", "decaying")


def _waves(n: int, length: int, noise: float, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    label = torch.randint(0, len(SHAPES), (n,), generator=gen)
    cycles = 1.5 + 4.5 * torch.rand((n, 1), generator=gen)  # over the whole window
    phase = torch.rand((n, 1), generator=gen)
    amp = 0.6 + 0.8 * torch.rand((n, 1), generator=gen)
    t = torch.linspace(0.0, 1.0, length)[None, :]
    u = cycles * t + phase  # cycles elapsed
    frac = u - torch.floor(u)
    sine = torch.sin(2 * math.pi * u)
    shapes = torch.stack([
        sine,
        torch.sign(sine),
        4.0 * torch.abs(frac - 0.5) - 1.0,
        2.0 * frac - 1.0,
        torch.sin(2 * math.pi * (cycles * t * t + phase)),  # frequency rising from 0 to 2 x cycles
        torch.exp(-3.0 * t) * sine * 1.8,
    ], 1)  # (n, shapes, length)
    x = amp * shapes[torch.arange(n), label] + noise * torch.randn((n, length), generator=gen)
    return x[:, None, :].contiguous(), label


def data(rows: int = 16384, val_rows: int = 2048, length: int = 128, noise: float = 1.0,
         seed: int = 0) -> tuple[Dataset, Dataset]:
    """(train, val): ``rows`` and ``val_rows`` waveforms of shape (1, ``length``), labelled by
    their shape (``0 .. 5``, in the order of ``SHAPES``)."""
    if length < 16:
        raise ValueError(f"length = {length}: must be at least 16 points")
    gen = torch.Generator().manual_seed(seed + 32452843)
    x, y = _waves(rows + val_rows, length, noise, gen)
    return TensorDataset(x[:rows], y[:rows]), TensorDataset(x[rows:], y[rows:])


class Conv1dClassifier(nn.Module):
    """Three 1-D convolutions with GroupNorm and ReLU (the first two followed by max-pooling),
    global average pooling, and a linear head."""

    def __init__(self, num_classes: int, width: int, groups: int) -> None:
        super().__init__()

        def block(cin: int, cout: int, k: int) -> list[nn.Module]:
            return [nn.Conv1d(cin, cout, k, padding=k // 2), nn.GroupNorm(groups, cout), nn.ReLU()]

        self.body = nn.Sequential(*block(1, width, 7), nn.MaxPool1d(2), *block(width, 2 * width, 5),
                                  nn.MaxPool1d(2), *block(2 * width, 2 * width, 3), nn.AdaptiveAvgPool1d(1),
                                  nn.Flatten())
        self.head = nn.Linear(2 * width, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(x))


def model(num_classes: int = len(SHAPES), width: int = 16, groups: int = 4) -> nn.Module:
    """The model builder (``model.name: tune_batch.workload.waves:model``)."""
    return Conv1dClassifier(num_classes, width, groups)
