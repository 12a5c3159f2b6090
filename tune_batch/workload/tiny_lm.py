"""A tiny causal language model on synthetic token sequences: the shipped example of a
workload that is not image classification (``configs/tiny_lm.yaml``). Offline, seconds.

The sequences come from a seeded random Markov chain over ``vocab`` tokens (each token has a
few likely successors), so the next token can be learnt but not memorised, and the best
achievable loss is the chain's entropy. Batches are dicts (``input_ids``, ``labels``), to
exercise the user step and evaluation contract.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn
from torch.utils.data import Dataset


class TokenSequences(Dataset):
    """``n`` sequences of ``context + 1`` tokens; item i is {"input_ids", "labels"} (shifted by one)."""

    def __init__(self, tokens: torch.Tensor) -> None:
        self.tokens = tokens

    def __len__(self) -> int:
        return len(self.tokens)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        seq = self.tokens[i]
        return {"input_ids": seq[:-1], "labels": seq[1:]}


def data(samples: int = 4096, val_samples: int = 512, context: int = 32, vocab: int = 64, successors: int = 4,
         seed: int = 0) -> tuple[Dataset, Dataset]:
    """(train, val) sequences of a seeded Markov chain: each token has ``successors`` likely
    next tokens (probabilities 0.55, 0.25, ...) and a small chance of any other."""
    g = torch.Generator().manual_seed(seed + 104729)
    probs = torch.full((vocab, vocab), 0.02 / vocab)
    weights = torch.tensor([0.55, 0.25, 0.12, 0.06][:successors])
    for t in range(vocab):
        nxt = torch.randperm(vocab, generator=g)[:successors]
        probs[t, nxt] += weights * 0.98 / weights.sum()
    probs /= probs.sum(dim=1, keepdim=True)
    n = samples + val_samples
    seqs = torch.empty(n, context + 1, dtype=torch.long)
    seqs[:, 0] = torch.randint(0, vocab, (n,), generator=g)
    for j in range(1, context + 1):
        seqs[:, j] = torch.multinomial(probs[seqs[:, j - 1]], 1, generator=g).squeeze(1)
    return TokenSequences(seqs[:samples]), TokenSequences(seqs[samples:])


class TinyCausalLM(nn.Module):
    """Token and position embeddings, ``layers`` pre-norm transformer blocks with a causal mask,
    a tied output head."""

    def __init__(self, vocab: int, dim: int, layers: int, heads: int, context: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        nn.init.normal_(self.embed.weight, std=0.02)  # small, as GPT-2: the tied head starts near uniform
        self.pos = nn.Parameter(torch.zeros(context, dim))
        block = nn.TransformerEncoderLayer(dim, heads, 4 * dim, dropout=0.0, batch_first=True, norm_first=True)
        self.blocks = nn.TransformerEncoder(block, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(dim)
        self.register_buffer("mask", nn.Transformer.generate_square_subsequent_mask(context), persistent=False)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        t = input_ids.shape[1]
        h = self.embed(input_ids) + self.pos[:t]
        h = self.blocks(h, mask=self.mask[:t, :t], is_causal=True)
        return self.norm(h) @ self.embed.weight.T


def model(num_classes: int = 64, dim: int = 64, layers: int = 2, heads: int = 4, context: int = 32) -> nn.Module:
    """The model builder (``model.num_classes`` is the vocabulary)."""
    return TinyCausalLM(num_classes, dim, layers, heads, context)


def step(model: nn.Module, batch: dict[str, torch.Tensor], device: torch.device) -> torch.Tensor:
    """``train.step``: next-token cross-entropy of a batch of dicts."""
    ids, labels = batch["input_ids"].to(device), batch["labels"].to(device)
    logits = model(ids)
    return nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1))


def evaluate(model: nn.Module, loader: Any, device: torch.device) -> dict[str, float]:
    """``train.evaluate``: mean next-token loss over the loader, and its perplexity."""
    total, tokens = 0.0, 0
    for batch in loader:
        ids, labels = batch["input_ids"].to(device), batch["labels"].to(device)
        logits = model(ids)
        total += float(nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1),
                                                   reduction="sum"))
        tokens += labels.numel()
    loss = total / max(1, tokens)
    return {"val_loss": loss, "val_perplexity": math.exp(min(loss, 50.0))}
