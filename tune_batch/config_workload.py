"""The workload's sections of the config: ``model`` and ``data`` (what a trial trains, on what)."""

from __future__ import annotations

from typing import Any

from pydantic import Field, field_validator

from tune_batch.config_train import Section as _Section

BUILTIN_DATASETS = ("cifar10", "digits", "synthetic", "imagefolder")


class ModelConfig(_Section):
    name: str = "resnet18"
    """A torchvision model name (``resnet18``) or ``pkg.module:function`` returning an nn.Module."""
    pretrained: bool = False
    """Load torchvision's default weights (needs the network the first time)."""
    num_classes: int = Field(10, ge=2)
    """Output classes; a pretrained head is replaced when it differs."""
    kwargs: dict[str, Any] = Field(default_factory=dict)
    """Extra keyword arguments passed to the model builder."""


class DataConfig(_Section):
    name: str = "digits"
    """cifar10 | digits | synthetic | imagefolder | ``pkg.module:function``."""
    root: str = "./data"
    """Where cifar10 / imagefolder files live (cifar10: the folder holding cifar-10-batches-py)."""
    download: bool = False
    """Download cifar10 when its files are missing (needs the network)."""
    resize: int | None = Field(32, gt=0, le=4096)
    """Square input side in pixels; null keeps the data set's own size."""
    val_samples: int = Field(500, gt=0)
    """Held-out samples used for val_acc."""
    num_workers: int = Field(0, ge=0)
    """DataLoader worker processes."""
    synthetic_samples: int = Field(4096, gt=0)
    """Training pool size of the synthetic data set."""
    kwargs: dict[str, Any] = Field(default_factory=dict)
    """Extra keyword arguments passed to a ``pkg.module:function`` data builder."""
    worst_case: str = "auto"
    """The batch each trial's memory probe also trains one step on: auto (the largest the data can produce, when the
    data set has a collate_fn), off, or pkg.module:function returning one batch, called fn(batch_size=, dataset=)."""

    @field_validator("name")
    @classmethod
    def _known(cls, v: str) -> str:
        if v not in BUILTIN_DATASETS and ":" not in v:
            raise ValueError(f"allowed: {' | '.join(BUILTIN_DATASETS)} | pkg.module:function")
        return v

    @field_validator("worst_case", mode="before")
    @classmethod
    def _worst_case(cls, v: object) -> object:
        if isinstance(v, bool):  # YAML reads a bare off / on as a boolean
            return "auto" if v else "off"
        if isinstance(v, str) and v not in ("auto", "off") and ":" not in v:
            raise ValueError("allowed: auto | off | pkg.module:function returning one batch")
        return v
