"""``train.loop: transformers`` example: a two-layer GPT-2 built from a config (no download) on
a synthetic token corpus (the seeded Markov chain of ``tune_batch.workload.tiny_lm``).

What a user writes: the model, the data sets and their own ``TrainingArguments`` fields. tune_batch
sets ``per_device_train_batch_size`` and ``learning_rate``; ``eval_loss`` comes from the Trainer's
own ``evaluate()``.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils.data import Dataset
from transformers import GPT2Config, GPT2LMHeadModel

from tune_batch.workload.tiny_lm import data


class CausalTokens(Dataset):
    """Token sequences as a causal LM's examples: the model shifts ``labels`` itself."""

    def __init__(self, tokens: torch.Tensor) -> None:
        self.tokens = tokens

    def __len__(self) -> int:
        return len(self.tokens)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.tokens[i], "labels": self.tokens[i]}


def build(samples: int = 4096, val_samples: int = 512, context: int = 32, vocab: int = 64, n_layer: int = 2,
          n_embd: int = 64, n_head: int = 2) -> dict[str, Any]:
    """The Trainer pieces of ``train.loop: transformers``."""
    train, val = data(samples=samples, val_samples=val_samples, context=context - 1, vocab=vocab)
    model = GPT2LMHeadModel(GPT2Config(n_layer=n_layer, n_embd=n_embd, n_head=n_head, vocab_size=vocab,
                                       n_positions=context, bos_token_id=0, eos_token_id=0))
    return {"model": model, "train_dataset": CausalTokens(train.tokens), "eval_dataset": CausalTokens(val.tokens),
            "args": {"optim": "adamw_torch", "weight_decay": 0.01, "warmup_steps": 5, "lr_scheduler_type": "linear",
                     "per_device_eval_batch_size": 128, "logging_steps": 50}}
