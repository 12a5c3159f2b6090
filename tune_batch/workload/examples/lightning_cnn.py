"""``train.loop: lightning`` example: a LightningModule around the small CNN, on digits.

What a user writes: the module (its own optimizer in ``configure_optimizers``, its own logged
metrics) and a builder returning it with the data. tune_batch sets the DataLoader's batch size
and scales the optimizer's learning rate to the searched one.
"""

from __future__ import annotations

from typing import Any

import lightning.pytorch as pl
import torch
import torch.nn.functional as F

from tune_batch.config import DataConfig
from tune_batch.workload.data import digits
from tune_batch.workload.models import small_cnn


class DigitsCNN(pl.LightningModule):
    def __init__(self, width: int = 16, lr: float = 0.01, momentum: float = 0.9) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.net = small_cnn(10, width=width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = F.cross_entropy(self.net(x), y)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        logits = self.net(x)
        self.log("val_loss", F.cross_entropy(logits, y))
        self.log("val_acc", (logits.argmax(dim=1) == y).float().mean())

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr, momentum=self.hparams.momentum)


def build(width: int = 16, resize: int = 32, val_samples: int = 360) -> dict[str, Any]:
    """The pieces of ``train.loop: lightning``: the module, the training and validation data,
    and the user's own Trainer settings."""
    ds = digits(DataConfig(name="digits", resize=resize, val_samples=val_samples), seed=0)
    return {"module": DigitsCNN(width), "train": ds.train, "val": ds.val,
            "trainer": {"precision": "32-true", "gradient_clip_val": 5.0}}
