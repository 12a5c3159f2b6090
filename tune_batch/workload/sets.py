"""A seeded set-classification task and a permutation-invariant classifier for it (Deep Sets:
each element embedded and transformed alone, summed over the set, then a network on the sum): the
held-out workload ``benchmarks/heldout/sets_adamax.yaml``, offline.

Each example is a set of ``size`` tokens drawn with replacement from ``vocab``. Every token carries
a hidden seeded vector of ``factors`` numbers; a set's summary is the sum of its tokens' vectors
over the square root of its size. Each class scores the summary with a seeded linear term plus a
seeded quadratic form (weighted by ``quadratic``: the sum alone, read linearly, does not decide
it), and the label is the
class with the highest score plus Gaussian noise (``noise`` x the SD of the scores): the order of
the elements carries nothing, and accuracy levels off below 1."""

from __future__ import annotations

import torch
from torch import nn
from torch.utils.data import Dataset, TensorDataset


def data(rows: int = 16384, val_rows: int = 8192, size: int = 16, vocab: int = 64, factors: int = 4,
         classes: int = 5, noise: float = 0.15, quadratic: float = 2.0, seed: int = 0) -> tuple[Dataset, Dataset]:
    """(train, val): ``rows`` and ``val_rows`` sets of ``size`` integer tokens below ``vocab``,
    labelled ``0 .. classes-1``."""
    if size < 2 or vocab < 2 or factors < 1 or classes < 2:
        raise ValueError(f"size ({size}), vocab ({vocab}) and classes ({classes}) must be at least 2, "
                         f"factors ({factors}) at least 1")
    gen = torch.Generator().manual_seed(seed + 7919)
    n = rows + val_rows
    x = torch.randint(0, vocab, (n, size), generator=gen)
    hidden = torch.randn(vocab, factors, generator=gen)
    summary = hidden[x].sum(1) / size ** 0.5  # (n, factors)
    linear = torch.randn(factors, classes, generator=gen)
    quad = torch.randn(classes, factors, factors, generator=gen) * (quadratic / factors ** 0.5)
    score = summary @ linear + torch.einsum("nf,cfg,ng->nc", summary, quad, summary)
    score = score + noise * score.std() * torch.randn(score.shape, generator=gen)
    y = score.argmax(1)
    return TensorDataset(x[:rows], y[:rows]), TensorDataset(x[rows:], y[rows:])


class SetClassifier(nn.Module):
    """Deep Sets: an embedding and a per-element network, a sum over the set, then a network on the
    sum and a linear head. The same output for any order of a set's elements."""

    def __init__(self, num_classes: int, vocab: int, embed: int, hidden: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, embed)
        self.phi = nn.Sequential(nn.Linear(embed, hidden), nn.ReLU(), nn.Linear(hidden, hidden))
        self.rho = nn.Sequential(nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, num_classes))

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.rho(self.phi(self.embed(tokens)).sum(1))


def model(num_classes: int = 5, vocab: int = 64, embed: int = 32, hidden: int = 64) -> nn.Module:
    """The builder (``model.name: tune_batch.workload.sets:model``)."""
    return SetClassifier(num_classes, vocab, embed, hidden)
