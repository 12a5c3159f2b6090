"""The sections the answer is decided on: ``confirm`` (the candidates trained again at length),
``goal`` (the user's own run) and ``baseline`` (the config the user runs today)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from tune_batch.config.train import Section as _Section

CONFIRM_TRIALS = 8  # a confirmation run's default length, in search trials


class ConfirmConfig(_Section):
    candidates: int = Field(2, ge=0)
    """Front candidates trained again at a longer budget after the search, with validation along
    the way; the recommendation then comes from these runs (0: no confirmation). When the short
    trials learned nothing, at least 3, spread over the searched learning rates."""
    train_samples: int | None = Field(None, ge=1)
    """Samples each confirmation run trains (default: 8 x budget.train_samples)."""
    epochs: float | None = Field(None, gt=0)
    """Instead of train_samples: passes over the training set."""
    evaluations: int = Field(16, ge=2, le=1000)
    """Validations along each confirmation run (its curve; time to target is read from it)."""
    seeds: int = Field(2, ge=1)
    """Confirmation runs per candidate (seeds search.seed, +1, ...); time to target is their median."""
    metric: str | None = None
    """The metric time to target is read on: val_acc, or an objective train.evaluate returns
    (e.g. val_loss); default: val_acc, or the first objective train.evaluate measures."""
    target: float | None = None
    """The value of confirm.metric to reach, in its direction (default: see target_from)."""
    target_from: Literal["level", "best"] = "level"
    """The default target's reference: "level", the best candidate's level (its runs' median of
    the mean of each run's last quarter of validations), or "best", the best value any run reached."""
    target_fraction: float | None = Field(None, gt=0.0, le=1.0)
    """Default target: this x that reference for val_acc; for another metric, this share of the
    way from its first validation to it. Default: 0.99 of the level, 0.95 of the best reached."""
    escalations: int = Field(2, ge=0, le=4)
    """When the short trials and the confirmation runs learned nothing: at most this many more rounds, each
    4x longer, over the better half of the last (successive halving) until one learns (0: none; no goal length)."""
    replace_unreached: bool = True
    """A candidate that missed the target is replaced once by the next (docs/decision.md, a second look)."""
    horizon_beta: float | None = Field(None, gt=0.0, le=2.0)
    """Also confirm the first candidate at a lower learning rate, lr x (confirmation samples / trial
    samples)^-horizon_beta, its own runs beside the others (record ids <trial>h...): the best rate
    of a short run is often too high for a long one with Adam-like optimizers (docs/benchmarks.md,
    bench_lr_horizon). Off (None) by default: not yet judged on a held-out workload."""
    rank_by: Literal["runs", "blend"] = "blend"
    """What orders the candidates that reached the target: "runs", their confirmation runs' median
    time to it; "blend", the geometric mean of that time and the time the search's gradient noise
    scale predicts for each from the other candidates' runs (docs/decision.md). Either way a
    candidate whose runs were slower than another's beyond their spread is not ranked ahead of it."""
    stop_at_target: bool = False
    """With a target given (goal.target or confirm.target), a run (tune_batch's own loop, one
    worker or a worker group, or a trainer loop) ends at the first validation that reaches it: what
    follows cannot change its time to it, and a long goal run costs only its way to the target.
    Off by default: the memory watch then sees only the steps before the target, so a slow leak
    can go unflagged."""

    @model_validator(mode="after")
    def _length(self) -> ConfirmConfig:
        if self.train_samples is not None and self.epochs is not None:
            raise ValueError(f"give train_samples ({self.train_samples}) or epochs ({self.epochs}), not both")
        return self


class GoalConfig(_Section):
    train_samples: int | None = Field(None, ge=1)
    """The length of the run the answer is for, in samples: confirmation runs train this long
    (at least budget.train_samples: a run shorter than a trial is refused)."""
    epochs: float | None = Field(None, gt=0)
    """Instead of train_samples: passes over the training set."""
    target: float | None = None
    """The value of the confirmation metric the run must reach: the answer is the config soonest
    to it (within the goal's length, when one is given). Without it, a goal length asks for the
    config with the best metric at that length."""

    @model_validator(mode="after")
    def _given(self) -> GoalConfig:
        if self.train_samples is not None and self.epochs is not None:
            raise ValueError(f"give train_samples ({self.train_samples}) or epochs ({self.epochs}), not both")
        if self.train_samples is None and self.epochs is None and self.target is None:
            raise ValueError("give the run's length (train_samples or epochs), its target, or both")
        return self

    @property
    def length_given(self) -> bool:
        return self.train_samples is not None or self.epochs is not None


class BaselineConfig(_Section):
    batch_size: int = Field(ge=1)
    """The batch size the user trains with today (global, as batch_size everywhere)."""
    lr: float = Field(gt=0)
    """The learning rate the user trains with today."""
    num_gpus: int = Field(1, ge=1)
    """The GPU count the user trains with today (its workers split batch_size evenly)."""

    @model_validator(mode="after")
    def _splits(self) -> BaselineConfig:
        if self.batch_size % self.num_gpus:
            raise ValueError(f"batch_size {self.batch_size} does not split evenly over num_gpus {self.num_gpus} "
                             f"workers: give a multiple of {self.num_gpus}")
        return self
