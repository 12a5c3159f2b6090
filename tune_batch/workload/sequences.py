"""A seeded token-sequence classification set, and a recurrent, a bag-of-tokens and an attention
classifier for it: the held-out workloads ``benchmarks/heldout/gru_majority.yaml``,
``bag_adagrad.yaml`` and ``attn_majority.yaml``, offline.

Each sequence is ``length`` tokens. Its label is one of ``classes`` signal tokens; every position
holds that token with probability ``signal``, otherwise a token drawn uniformly from the whole
vocabulary (signal tokens included). The label is which signal token the sequence holds most of
(ties resolved by the token drawn as the label), so the model must count across the sequence; with
a weak signal some sequences' counts mislead, and validation accuracy levels off below 1."""

from __future__ import annotations

import torch
from torch import nn
from torch.utils.data import Dataset, TensorDataset


def _sequences(n: int, length: int, vocab: int, classes: int, signal: float,
               gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    drawn = torch.randint(0, classes, (n,), generator=gen)
    noise = torch.randint(0, vocab, (n, length), generator=gen)
    keep = torch.rand((n, length), generator=gen) < signal
    tokens = torch.where(keep, drawn[:, None], noise)
    counts = torch.stack([(tokens == c).sum(1) for c in range(classes)], 1).float()
    counts[torch.arange(n), drawn] += 0.5  # a tie goes to the drawn token
    return tokens, counts.argmax(1)


def data(rows: int = 16384, val_rows: int = 2048, length: int = 32, vocab: int = 32, classes: int = 4,
         signal: float = 0.12, seed: int = 0) -> tuple[Dataset, Dataset]:
    """(train, val): ``rows`` and ``val_rows`` sequences of ``length`` integer tokens below
    ``vocab``, each labelled by the signal token (``0 .. classes-1``) it holds most of."""
    if not 0 < classes <= vocab:
        raise ValueError(f"classes = {classes}: must be between 1 and vocab ({vocab})")
    gen = torch.Generator().manual_seed(seed + 15485863)
    x, y = _sequences(rows + val_rows, length, vocab, classes, signal, gen)
    return TensorDataset(x[:rows], y[:rows]), TensorDataset(x[rows:], y[rows:])


class GRUClassifier(nn.Module):
    """Token embedding, a one-layer GRU, and a linear head on its last hidden state."""

    def __init__(self, num_classes: int, vocab: int, embed: int, hidden: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, embed)
        self.gru = nn.GRU(embed, hidden, batch_first=True)
        self.head = nn.Linear(hidden, num_classes)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        _, last = self.gru(self.embed(tokens))
        return self.head(last[-1])


def model(num_classes: int = 4, vocab: int = 32, embed: int = 32, hidden: int = 64) -> nn.Module:
    """The model builder (``model.name: tune_batch.workload.sequences:model``)."""
    return GRUClassifier(num_classes, vocab, embed, hidden)


class BagClassifier(nn.Module):
    """A bag of tokens: the mean of the sequence's token embeddings (order ignored), one hidden
    layer, and a linear head."""

    def __init__(self, num_classes: int, vocab: int, embed: int, hidden: int) -> None:
        super().__init__()
        self.bag = nn.EmbeddingBag(vocab, embed, mode="mean")
        self.mlp = nn.Sequential(nn.ReLU(), nn.Linear(embed, hidden), nn.ReLU(), nn.Linear(hidden, num_classes))

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.mlp(self.bag(tokens))


def bag_model(num_classes: int = 4, vocab: int = 32, embed: int = 64, hidden: int = 64) -> nn.Module:
    """The bag-of-tokens builder (``model.name: tune_batch.workload.sequences:bag_model``)."""
    return BagClassifier(num_classes, vocab, embed, hidden)


class AttentionClassifier(nn.Module):
    """Token and position embeddings, one pre-norm Transformer encoder block (self-attention and a
    feed-forward layer), the mean over positions, and a linear head."""

    def __init__(self, num_classes: int, vocab: int, length: int, embed: int, heads: int, ff: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, embed)
        self.position = nn.Parameter(torch.zeros(length, embed))
        self.block = nn.TransformerEncoderLayer(embed, heads, ff, dropout=0.0, batch_first=True, norm_first=True)
        self.norm = nn.LayerNorm(embed)
        self.head = nn.Linear(embed, num_classes)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens) + self.position[: tokens.shape[1]]
        return self.head(self.norm(self.block(x)).mean(1))


def attention_model(num_classes: int = 4, vocab: int = 32, length: int = 32, embed: int = 32, heads: int = 2,
                    ff: int = 64) -> nn.Module:
    """The attention builder (``model.name: tune_batch.workload.sequences:attention_model``)."""
    return AttentionClassifier(num_classes, vocab, length, embed, heads, ff)
