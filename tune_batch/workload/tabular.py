"""A seeded tabular classification set (scikit-learn's ``make_classification``: informative,
redundant and noise features, overlapping classes): the decision benchmark's held-out tabular
workload (``benchmarks/heldout/tabular_mlp.yaml``), offline."""

from __future__ import annotations

import torch
from torch.utils.data import Dataset, TensorDataset


def data(rows: int = 16384, val_rows: int = 2048, features: int = 40, classes: int = 8,
         seed: int = 0, flip_y: float = 0.02, class_sep: float = 0.8) -> tuple[Dataset, Dataset]:
    """(train, val): ``rows`` training and ``val_rows`` validation rows of ``features``
    standardised float features (half of them informative) and ``classes`` integer labels;
    ``flip_y``: the share of labels (training and validation alike) replaced by a random class;
    ``class_sep``: how far apart the classes' clusters lie (larger: easier)."""
    from sklearn.datasets import make_classification

    x, y = make_classification(n_samples=rows + val_rows, n_features=features, n_informative=features // 2,
                               n_redundant=features // 4, n_classes=classes, n_clusters_per_class=2,
                               class_sep=class_sep, flip_y=flip_y, random_state=seed + 7919)
    xt = torch.tensor(x, dtype=torch.float32)
    xt = (xt - xt[:rows].mean(0)) / xt[:rows].std(0).clamp_min(1e-6)  # the training rows' statistics
    yt = torch.tensor(y, dtype=torch.long)
    return TensorDataset(xt[:rows], yt[:rows]), TensorDataset(xt[rows:], yt[rows:])
