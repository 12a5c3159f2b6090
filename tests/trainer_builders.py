"""Builders of ``train.loop`` trainers used by the tests (real Lightning, Transformers and Keras
code paths, sized to train in seconds). Each imports its trainer inside the function."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from tests.workloads import oom_above
from tune_batch.config import DataConfig
from tune_batch.workload.data import digits
from tune_batch.workload.models import small_cnn

#: The learning rate each Lightning training step saw (the tests read it; same process).
SEEN_LRS: list[float] = []


def _digits() -> Any:
    return digits(DataConfig(name="digits", resize=16, val_samples=300), seed=0)


def lightning_cnn(limit: int | None = None, base_lr: float = 0.01, scheduler: bool = False) -> dict[str, Any]:
    """small_cnn (width 8) on digits at 16 px; ``limit``: the model raises torch.OutOfMemoryError,
    as the CUDA allocator does, for batches larger than it."""
    import lightning.pytorch as pl
    import torch.nn.functional as F

    class Module(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = oom_above(10, limit) if limit is not None else small_cnn(10, width=8)

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            x, y = batch
            SEEN_LRS.append(self.trainer.optimizers[0].param_groups[0]["lr"])
            return F.cross_entropy(self.net(x), y)

        def validation_step(self, batch: Any, batch_idx: int) -> None:
            x, y = batch
            self.log("val_acc", (self.net(x).argmax(dim=1) == y).float().mean())

        def configure_optimizers(self) -> Any:
            opt = torch.optim.SGD(self.parameters(), lr=base_lr, momentum=0.9)
            if not scheduler:
                return opt
            return [opt], [torch.optim.lr_scheduler.StepLR(opt, step_size=1000, gamma=0.5)]

    ds = _digits()
    return {"module": Module(), "train": ds.train, "val": ds.val}


class _TinyCausalLM(nn.Module):
    """A Transformers-shaped model without a hub download: returns an output with ``.loss``."""

    def __init__(self, vocab: int = 32, dim: int = 32, limit: int | None = None) -> None:
        super().__init__()
        self.embed, self.head, self.limit = nn.Embedding(vocab, dim), nn.Linear(dim, vocab), limit

    def forward(self, input_ids: torch.Tensor, labels: torch.Tensor | None = None, **_: Any) -> Any:
        from transformers.modeling_outputs import CausalLMOutput

        if self.training and self.limit is not None and input_ids.shape[0] > self.limit:
            raise torch.OutOfMemoryError(f"CUDA out of memory. Tried to allocate {input_ids.shape[0]} sequences")
        logits = self.head(self.embed(input_ids))
        loss = None
        if labels is not None:
            loss = nn.functional.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), labels[:, 1:].reshape(-1))
        return CausalLMOutput(loss=loss, logits=logits)


def hf_tiny(limit: int | None = None, gpt2: bool = False, accumulation: int = 1) -> dict[str, Any]:
    """A tiny causal LM (GPT-2 from a config with ``gpt2``) on seeded token sequences."""
    from tune_batch.workload.examples.hf_tiny_gpt2 import CausalTokens
    from tune_batch.workload.tiny_lm import data

    train, val = data(samples=512, val_samples=64, context=15, vocab=32)
    if gpt2:
        from transformers import GPT2Config, GPT2LMHeadModel

        model: nn.Module = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=32, n_positions=16))
    else:
        model = _TinyCausalLM(limit=limit)
    return {"model": model, "train_dataset": CausalTokens(train.tokens), "eval_dataset": CausalTokens(val.tokens),
            "args": {"gradient_accumulation_steps": accumulation, "per_device_eval_batch_size": 64}}


def hf_tiny_seen(out: str) -> dict[str, Any]:
    """``hf_tiny`` (GPT-2) noting, per rank (``RANK``) in ``out``/seen<rank>.json, the first training
    batch's first tokens, the evaluation's samples and the parameters' sum after training."""
    import json
    import os

    from transformers import TrainerCallback

    pieces = hf_tiny(gpt2=True)
    model, seen = pieces["model"], {"first_batch": None, "eval_samples": 0}

    def note(module: nn.Module, args: Any, kwargs: dict[str, Any]) -> None:
        ids = kwargs.get("input_ids", args[0] if args else None)
        if module.training and seen["first_batch"] is None:
            seen["first_batch"] = ids[:, 0].tolist()
        elif not module.training:
            seen["eval_samples"] += int(ids.shape[0])

    class Done(TrainerCallback):
        def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            seen["params_sum"] = float(sum(p.detach().double().sum() for p in model.parameters()))

        def on_evaluate(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            with open(os.path.join(out, f"seen{os.environ['RANK']}.json"), "w") as f:
                json.dump(seen, f)

    model.register_forward_pre_hook(note, with_kwargs=True)
    return {**pieces, "callbacks": [Done()]}


def keras_dense() -> dict[str, Any]:
    from tune_batch.workload.examples.keras_dense import build

    return build(hidden=16, val_samples=300)


def not_a_dict() -> list[int]:
    return [1, 2, 3]


def lightning_without_train() -> dict[str, Any]:
    return {"module": lightning_cnn()["module"]}


def lightning_with_plain_module() -> dict[str, Any]:
    return {"module": small_cnn(10, width=8), "train": _digits().train}
