"""A seeded categorical-fields classification set and a field-embedding classifier for it (the
kind of model click-through and recommendation tables are fitted with): the held-out workload
``benchmarks/heldout/fields_radam.yaml``, offline.

Each row holds ``fields`` categorical values, field f's drawn from its own ``cardinality`` values
with Zipf-like frequencies (a few values common, most rare). Each class scores every value of every
field (a seeded Gaussian table) and every value pair of the fields paired as (0, 1), (2, 3), ...;
a row's label is the class with the highest sum of its scores plus Gaussian noise (``noise`` x
the SD of that sum): first-order effects alone do not decide it, and the noise keeps accuracy below 1."""

from __future__ import annotations

import torch
from torch import nn
from torch.utils.data import Dataset, TensorDataset


def _rows(n: int, fields: int, cardinality: int, gen: torch.Generator) -> torch.Tensor:
    weights = 1.0 / torch.arange(1, cardinality + 1, dtype=torch.float64) ** 0.8  # Zipf-like frequencies
    cols = [torch.multinomial(weights, n, replacement=True, generator=gen) for _ in range(fields)]
    return torch.stack(cols, 1)


def data(rows: int = 16384, val_rows: int = 2048, fields: int = 8, cardinality: int = 16, classes: int = 6,
         noise: float = 0.3, pair_weight: float = 1.0, seed: int = 0) -> tuple[Dataset, Dataset]:
    """(train, val): ``rows`` and ``val_rows`` rows of ``fields`` integer values below
    ``cardinality`` (field f's value v is ``f * cardinality + v`` in the tensor: one shared
    vocabulary), labelled ``0 .. classes-1``; ``pair_weight`` scales the pair scores against the
    single-value ones."""
    if fields < 2 or cardinality < 2 or classes < 2:
        raise ValueError(f"fields ({fields}), cardinality ({cardinality}) and classes ({classes}): "
                         "each must be at least 2")
    gen = torch.Generator().manual_seed(seed + 104729)
    x = _rows(rows + val_rows, fields, cardinality, gen)
    single = torch.randn(fields, cardinality, classes, generator=gen)
    pairs = torch.randn(fields // 2, cardinality, cardinality, classes, generator=gen) * pair_weight
    score = single[torch.arange(fields), x].sum(1)  # (n, classes)
    for p in range(fields // 2):
        score += pairs[p, x[:, 2 * p], x[:, 2 * p + 1]]
    score += noise * torch.randn(score.shape, generator=gen) * (fields + fields // 2) ** 0.5
    y = score.argmax(1)
    x = x + torch.arange(fields) * cardinality  # one shared vocabulary
    return TensorDataset(x[:rows], y[:rows]), TensorDataset(x[rows:], y[rows:])


class FieldClassifier(nn.Module):
    """One embedding table for every field's values, the row's field embeddings concatenated, two
    hidden layers, and a linear head."""

    def __init__(self, num_classes: int, fields: int, cardinality: int, embed: int, hidden: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(fields * cardinality, embed)
        self.mlp = nn.Sequential(nn.Linear(fields * embed, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
                                 nn.Linear(hidden, num_classes))

    def forward(self, values: torch.Tensor) -> torch.Tensor:
        return self.mlp(self.embed(values).flatten(1))


def model(num_classes: int = 6, fields: int = 8, cardinality: int = 16, embed: int = 16,
          hidden: int = 128) -> nn.Module:
    """The builder (``model.name: tune_batch.workload.categorical:model``)."""
    return FieldClassifier(num_classes, fields, cardinality, embed, hidden)
