"""The tiny causal LM (``tiny_lm``) on sequences of varying length: most are short, a few run to
the full context, and a batch is padded to its longest sequence (the data sets' ``collate_fn``).
A step's memory follows the longest sequence in its batch, so a short window of random batches
rarely sees the peak a long run meets (``configs/tiny_lm_varlen.yaml``; docs/memory.md).
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn
from torch.utils.data import Dataset

from tune_batch.workload import tiny_lm

IGNORE = -100  # cross_entropy's default ignore_index: the padded positions of the labels


class VarLenSequences(Dataset):
    """Item i: {"input_ids", "labels"} of its own length (``lengths[i]`` tokens, labels shifted by one)."""

    def __init__(self, tokens: torch.Tensor, lengths: torch.Tensor) -> None:
        self.tokens, self.lengths = tokens, lengths

    def __len__(self) -> int:
        return len(self.tokens)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        seq = self.tokens[i, : int(self.lengths[i]) + 1]
        return {"input_ids": seq[:-1], "labels": seq[1:]}

    @staticmethod
    def collate_fn(items: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
        """Pads a batch to its longest sequence (inputs with token 0, labels with IGNORE)."""
        t = max(len(x["input_ids"]) for x in items)
        ids = torch.zeros(len(items), t, dtype=torch.long)
        labels = torch.full((len(items), t), IGNORE, dtype=torch.long)
        for k, x in enumerate(items):
            ids[k, : len(x["input_ids"])] = x["input_ids"]
            labels[k, : len(x["labels"])] = x["labels"]
        return {"input_ids": ids, "labels": labels}


def data(samples: int = 4096, val_samples: int = 512, context: int = 256, short_min: int = 8, short_max: int = 32,
         long_share: float = 1 / 512, vocab: int = 64, seed: int = 0) -> tuple[Dataset, Dataset]:
    """(train, val): the tiny LM's Markov-chain sequences, each of a length drawn once per sample:
    uniform in [short_min, short_max], or the whole ``context`` for a ``long_share`` of them."""
    g = torch.Generator().manual_seed(seed + 7907)
    n = samples + val_samples
    lengths = torch.randint(short_min, short_max + 1, (n,), generator=g)
    long = torch.rand(n, generator=g) < long_share
    lengths[long] = context
    # the chain is drawn from the seed alone: the long sequences come from the same one as the short
    short, _ = tiny_lm.data(n, 1, short_max, vocab, seed=seed)
    tokens = torch.zeros(n, context + 1, dtype=torch.long)
    tokens[:, : short_max + 1] = short.tokens  # type: ignore[attr-defined]
    if long.any():
        full, _ = tiny_lm.data(int(long.sum()), 1, context, vocab, seed=seed)
        tokens[long] = full.tokens  # type: ignore[attr-defined]
    return (VarLenSequences(tokens[:samples], lengths[:samples]),
            VarLenSequences(tokens[samples:], lengths[samples:]))


def model(num_classes: int = 64, dim: int = 64, layers: int = 2, heads: int = 4, context: int = 256) -> nn.Module:
    """The tiny LM, its position table and causal mask sized for the longest sequence."""
    return tiny_lm.model(num_classes, dim, layers, heads, context)


def step(model: nn.Module, batch: dict[str, torch.Tensor], device: torch.device) -> torch.Tensor:
    """``train.step``: next-token cross-entropy over the real (not padded) positions."""
    return tiny_lm.step(model, batch, device)


def evaluate(model: nn.Module, loader: Any, device: torch.device) -> dict[str, float]:
    """``train.evaluate``: mean next-token loss, its perplexity, and the top-1 token accuracy
    (``val_acc``), over the real positions."""
    total, correct, tokens = 0.0, 0, 0
    for batch in loader:
        ids, labels = batch["input_ids"].to(device), batch["labels"].to(device)
        logits = model(ids)
        real = labels != IGNORE
        total += float(nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1),
                                                   reduction="sum"))
        correct += int((logits.argmax(-1) == labels)[real].sum())
        tokens += int(real.sum())
    loss = total / max(1, tokens)
    return {"val_loss": loss, "val_perplexity": math.exp(min(loss, 50.0)), "val_acc": correct / max(1, tokens)}
