"""Batches of a data set: its own collate function, a loader that uses it, and the largest batch
the data can produce (what a trial's memory probe trains one step on: ``data.worst_case``).

With the default collation every sample of a batch has one shape, so a data set whose samples
vary in shape brings its own ``collate_fn`` (an attribute of the data set, e.g. padding a batch
to its longest sequence). Without one, every batch of a batch size is the same size, and the
batches a trial trains on are already the largest.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset, Subset

from tune_batch.errors import WorkloadError
from tune_batch.workload.resolve import resolve_callable

#: Samples whose sizes are read to find the largest; a larger data set is read on a seeded random
#: subset of this many (the note says so: ``data.worst_case`` can name the true largest batch).
MAX_SCAN = 100_000


def collate_of(dataset: Any) -> Callable[[list[Any]], Any] | None:
    """The data set's own ``collate_fn`` (looked up through a ``Subset``), or None: the default."""
    fn = getattr(dataset, "collate_fn", None)
    if callable(fn):
        return fn  # type: ignore[no-any-return]
    return collate_of(dataset.dataset) if isinstance(dataset, Subset) else None


def loader(dataset: Any, batch_size: int, **kwargs: Any) -> DataLoader:
    """A DataLoader of ``dataset`` that batches as training does (its own collate_fn, if any)."""
    return DataLoader(dataset, batch_size=batch_size, collate_fn=collate_of(dataset), **kwargs)


def inputs_and_labels(batch: Any, who: str, instead: str) -> tuple[Any, Any]:
    """``batch`` as (inputs, labels) tensors; ValueError saying what it is instead and what to give
    (``who`` reads such batches; ``instead`` is the config that takes any other)."""
    if isinstance(batch, list | tuple) and len(batch) == 2 and all(isinstance(t, torch.Tensor) for t in batch):
        return batch[0], batch[1]
    what = (f"a dict of {', '.join(map(str, batch))}" if isinstance(batch, dict) else
            f"a {type(batch).__name__} of {len(batch)}" if isinstance(batch, list | tuple) else type(batch).__name__)
    raise ValueError(f"{who} takes (inputs, labels) batches and this data's are {what}; give {instead}")


def numel(item: Any) -> int:
    """Elements in every tensor of a sample or batch of any structure."""
    if isinstance(item, torch.Tensor):
        return int(item.numel())
    if isinstance(item, dict):
        return sum(numel(v) for v in item.values())
    if isinstance(item, list | tuple):
        return sum(numel(v) for v in item)
    return 0


def samples_in(batch: Any) -> int:
    """The first dimension of a batch's first tensor (-1 when it holds none)."""
    if isinstance(batch, torch.Tensor):
        return int(batch.shape[0]) if batch.dim() else -1
    items = batch.values() if isinstance(batch, dict) else batch if isinstance(batch, list | tuple) else []
    return next((n for n in (samples_in(v) for v in items) if n >= 0), -1)


@dataclass(frozen=True)
class Largest:
    """The ``n`` largest samples of a data set: their indices (largest first) and how they were found."""

    indices: list[int]
    how: str


def largest(dataset: Any, n: int, seed: int = 0) -> Largest | None:
    """The indices of the ``n`` samples with the most elements; None when the data set has no
    collate_fn (every batch is then the same size). Reads every sample up to MAX_SCAN of them."""
    if collate_of(dataset) is None:
        return None
    size = len(dataset)
    if size <= MAX_SCAN:
        scan: list[int] = list(range(size))
    else:
        scan = torch.randperm(size, generator=torch.Generator().manual_seed(seed))[:MAX_SCAN].tolist()
    sizes = sorted(((numel(dataset[i]), i) for i in scan), reverse=True)[:n]
    where = f"of {size} samples" if size <= MAX_SCAN else (f"of a random {MAX_SCAN} of {size} samples (set "
                                                           f"data.worst_case for the true largest batch)")
    return Largest([i for _, i in sizes], f"the {len(sizes)} largest {where} ({sizes[-1][0]}-{sizes[0][0]} "
                                          f"elements each)")


def worst_batch(spec: str, dataset: Dataset, n: int, seed: int = 0) -> tuple[Any, str] | None:
    """(the largest batch of ``n`` samples the training data can produce, how it was found) for
    ``data.worst_case``: "auto" (:func:`largest`; None for data of one shape), "off" (None), or
    ``pkg.module:function`` called as ``fn(batch_size=n, dataset=dataset)``. Raises WorkloadError
    when the hook returns no batch of ``n`` samples."""
    if spec == "off":
        return None
    if spec == "auto":
        top = largest(dataset, n, seed)
        if top is None:
            return None
        collate = collate_of(dataset)
        assert collate is not None
        return collate([dataset[i] for i in top.indices]), top.how
    batch = resolve_callable(spec, "data.worst_case")(batch_size=n, dataset=dataset)
    if samples_in(batch) != n:
        raise WorkloadError(f"data.worst_case = {spec!r} returned a batch of {samples_in(batch)} samples; it must "
                            f"return one batch of batch_size ({n}) samples, as the training loader gives")
    return batch, f"data.worst_case = {spec}"


def worst_val(spec: str, val: Any, n: int, seed: int = 0) -> tuple[Any, str]:
    """(a data set of one validation batch at batch size ``n``, what it is): the largest ``n``
    validation samples where they vary in shape (``spec`` "auto"), else the first ``n``."""
    n = max(1, min(n, len(val)))
    top = largest(val, n, seed) if spec == "auto" else None
    if top is None:
        return Subset(val, list(range(n))), f"the first {n} validation samples"
    return Subset(val, top.indices), "validation: " + top.how
