"""The searched space's section of the config: global batch sizes, the learning rate's range and
the GPU counts (``space``)."""

from __future__ import annotations

import math

from pydantic import Field, field_validator, model_validator

from tune_batch.config.train import Section as _Section


class BatchRange(_Section):
    min: int = Field(16, ge=1)
    """The smallest global batch size (a power of two)."""
    max: int = Field(512, ge=1)
    """The largest global batch size (a power of two, at least min)."""

    @model_validator(mode="after")
    def _powers(self) -> BatchRange:
        for key in ("min", "max"):
            v = getattr(self, key)
            if v & (v - 1):
                raise ValueError(f"{key} = {v}: must be a power of two (e.g. 16, 32, 64)")
        if self.min > self.max:
            raise ValueError(f"min = {self.min} > max = {self.max}: the range is empty")
        return self


class LrRange(_Section):
    low: float = Field(1e-3, gt=0.0)
    """The smallest learning rate searched."""
    high: float = Field(1e-1, gt=0.0)
    """The largest learning rate searched (at least low)."""
    log: bool = True
    """Sample the learning rate on a log scale."""

    @model_validator(mode="after")
    def _order(self) -> LrRange:
        if not (math.isfinite(self.low) and math.isfinite(self.high)):
            raise ValueError("low and high must be finite numbers")
        if self.low > self.high:
            raise ValueError(f"low = {self.low} > high = {self.high}: need low < high (or low = high for one fixed lr)")
        return self


def _counts(v: list[int], one: str, many: str) -> list[int]:
    """A list of counts (batch sizes, GPU counts): not empty, each >= 1, no duplicates."""
    if not v:
        raise ValueError(f"the list is empty: give at least one {one}")
    bad = [n for n in v if n < 1]
    if bad:
        raise ValueError(f"{bad[0]} is not allowed: {many} must be >= 1")
    if len(set(v)) != len(v):
        raise ValueError("the list has duplicates")
    return v


class SpaceConfig(_Section):
    batch_size: BatchRange | list[int] = Field(default_factory=BatchRange)
    """Powers of two in [min, max], or an explicit list of global batch sizes."""
    lr: LrRange = Field(default_factory=LrRange)
    """The learning rate's range (low = high fixes one learning rate)."""
    num_gpus: list[int] = Field(default_factory=lambda: [1])
    """Data-parallel worker counts to try (GPUs, or CPU worker processes without GPUs)."""
    min_batch_per_gpu: int = Field(16, ge=1)
    """Each worker gets at least this many samples per step (the seed: 16 per GPU)."""

    @field_validator("batch_size")
    @classmethod
    def _batch_list(cls, v: BatchRange | list[int]) -> BatchRange | list[int]:
        return _counts(v, "batch size", "batch sizes") if isinstance(v, list) else v

    @field_validator("num_gpus")
    @classmethod
    def _gpus(cls, v: list[int]) -> list[int]:
        return _counts(v, "GPU count, e.g. [1]", "GPU counts")

    def batch_choices(self) -> list[int]:
        """All global batch sizes of the space, ascending."""
        if isinstance(self.batch_size, list):
            return sorted(self.batch_size)
        out, b = [], self.batch_size.min
        while b <= self.batch_size.max:
            out.append(b)
            b *= 2
        return out

    def configurations(self) -> int | None:
        """How many configurations the space holds where it is finite (one learning rate): the
        (batch size, GPU count) pairs that split evenly with min_batch_per_gpu each; else None."""
        if self.lr.low != self.lr.high:
            return None
        return sum(1 for b in self.batch_choices() for n in self.num_gpus
                   if b % n == 0 and b >= self.min_batch_per_gpu * n)

    @model_validator(mode="after")
    def _each_gpu_count_has_a_batch(self) -> SpaceConfig:
        choices = self.batch_choices()
        for n in self.num_gpus:
            need = self.min_batch_per_gpu * n
            if not any(b % n == 0 and b >= need for b in choices):
                raise ValueError(
                    f"num_gpus = {n} needs a batch_size divisible by {n} and >= "
                    f"min_batch_per_gpu ({self.min_batch_per_gpu}) x {n} = {need}, "
                    f"but the largest batch_size is {max(choices)}"
                )
        return self
