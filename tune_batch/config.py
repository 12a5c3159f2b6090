"""Typed, validated configuration: ``load_config(path, overrides)``.

Every section rejects unknown keys; every error names the dotted field, the bad value and
what is allowed, in one line (:class:`~tune_batch.errors.ConfigError`).
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import Field, ValidationError, field_validator, model_validator

from tune_batch.config_errors import describe, relevant
from tune_batch.config_train import OptimizerConfig, TrainConfig
from tune_batch.config_train import Section as _Section
from tune_batch.errors import ConfigError
from tune_batch.metrics import OBJECTIVE_METRICS
from tune_batch.sizes import parse_memory
from tune_batch.yamlio import apply_overrides, read_yaml

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

    @field_validator("name")
    @classmethod
    def _known(cls, v: str) -> str:
        if v not in BUILTIN_DATASETS and ":" not in v:
            raise ValueError(f"allowed: {' | '.join(BUILTIN_DATASETS)} | pkg.module:function")
        return v


class BatchRange(_Section):
    min: int = Field(16, ge=1)
    max: int = Field(512, ge=1)

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
    high: float = Field(1e-1, gt=0.0)
    log: bool = True

    @model_validator(mode="after")
    def _order(self) -> LrRange:
        if not (math.isfinite(self.low) and math.isfinite(self.high)):
            raise ValueError("low and high must be finite numbers")
        if self.low > self.high:
            raise ValueError(f"low = {self.low} > high = {self.high}: need low < high (or low = high for one fixed lr)")
        return self


class SpaceConfig(_Section):
    batch_size: BatchRange | list[int] = Field(default_factory=BatchRange)
    """Powers of two in [min, max], or an explicit list of global batch sizes."""
    lr: LrRange = Field(default_factory=LrRange)
    num_gpus: list[int] = Field(default_factory=lambda: [1])
    """Data-parallel worker counts to try (GPUs, or CPU worker processes without GPUs)."""
    min_batch_per_gpu: int = Field(16, ge=1)
    """Each worker gets at least this many samples per step (the seed: 16 per GPU)."""

    @field_validator("batch_size")
    @classmethod
    def _batch_list(cls, v: BatchRange | list[int]) -> BatchRange | list[int]:
        if isinstance(v, list):
            if not v:
                raise ValueError("the list is empty: give at least one batch size")
            bad = [b for b in v if b < 1]
            if bad:
                raise ValueError(f"{bad[0]} is not allowed: batch sizes must be >= 1")
            if len(set(v)) != len(v):
                raise ValueError("the list has duplicates")
        return v

    @field_validator("num_gpus")
    @classmethod
    def _gpus(cls, v: list[int]) -> list[int]:
        if not v:
            raise ValueError("the list is empty: give at least one GPU count, e.g. [1]")
        bad = [n for n in v if n < 1]
        if bad:
            raise ValueError(f"{bad[0]} is not allowed: GPU counts must be >= 1")
        if len(set(v)) != len(v):
            raise ValueError("the list has duplicates")
        return v

    def batch_choices(self) -> list[int]:
        """All global batch sizes of the space, ascending."""
        if isinstance(self.batch_size, list):
            return sorted(self.batch_size)
        out, b = [], self.batch_size.min
        while b <= self.batch_size.max:
            out.append(b)
            b *= 2
        return out

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


class ObjectiveConfig(_Section):
    metric: str
    direction: Literal["maximize", "minimize"] = "maximize"

    @field_validator("metric")
    @classmethod
    def _known(cls, v: str) -> str:
        if v not in OBJECTIVE_METRICS and not re.fullmatch(r"(val|eval)_\w+", v):
            raise ValueError(f"allowed: {', '.join(OBJECTIVE_METRICS)}, or a val_* / eval_* metric the evaluation returns")
        return v


def _default_objectives() -> list[ObjectiveConfig]:
    return [
        ObjectiveConfig(metric="samples_per_s", direction="maximize"),
        ObjectiveConfig(metric="device_util", direction="maximize"),
        ObjectiveConfig(metric="val_acc", direction="maximize"),
    ]


class BudgetConfig(_Section):
    trials: int = Field(12, ge=1)
    """Trials in the whole search (a resumed search counts those already run). A proposal the
    policy skips (no compute) is recorded but uses no trial: the sampler is asked again."""
    train_samples: int = Field(4096, ge=1)
    """Training samples every trial sees, warm-up included: trials are compared at equal data."""
    warmup_steps: int = Field(3, ge=0)
    """Optimizer steps run before the timed window (they train, but are not timed)."""
    min_window_s: float | None = Field(None, ge=0)
    """Shortest timed window: when the budget's timed steps end sooner (fast configs), the trial
    times extra steps until the window is this long, for a steadier samples/s and, on CUDA,
    enough NVML samples; the weights and optimizer state are restored afterwards, so training
    and val_acc still see exactly ``train_samples``. 0 turns it off. Default (null): 2 s on CUDA
    (NVML's sample period, launch-bound configs drifting), 1 s on a CPU, where identical trials
    with 1 s and 2 s windows spread alike (README, "The timed window")."""
    trial_timeout_s: float = Field(600.0, gt=0)
    """A trial still running after this many seconds ends as failed."""
    gns_batches: int = Field(4, ge=0, le=1000)
    """Batches the gradient noise scale is estimated on, after validation (0: not estimated;
    then goodput is not measured)."""

    def window_floor(self, device_type: str) -> float:
        """The shortest timed window on a device of ``device_type`` ("cuda", "cpu", ...)."""
        if self.min_window_s is not None:
            return self.min_window_s
        return 2.0 if device_type == "cuda" else 1.0


class ResourcesConfig(_Section):
    device_memory: str | float | int | None = None
    """Memory cap per device: a size ("24GiB", "512MiB"), a byte count, a fraction of the device
    (0.5), or null."""
    cpus_per_trial: Literal["auto"] | int = "auto"
    """CPUs a one-worker trial asks Ray for; auto: all of a node's CPUs when there is no GPU."""
    memory_margin: float = Field(0.1, ge=0.0, lt=1.0)
    """Safety margin under the cap for ``max-batch``'s answer (the search's feasibility model
    skips only configs predicted over the cap itself)."""
    peak_flops: float | None = Field(None, gt=0)
    """Peak FLOP/s of one device for MFU, when it is not a known GPU and should not be measured."""
    feasibility_model: bool = True
    """Skip, without running, configs that cannot fit: at or above a per-worker batch that ran
    out of memory, or predicted over the cap by a memory fit of finished trials."""

    @field_validator("device_memory")
    @classmethod
    def _memory(cls, v: str | float | int | None) -> str | float | int | None:
        if v is not None:
            parse_memory(v)
        return v

    @field_validator("cpus_per_trial")
    @classmethod
    def _cpus(cls, v: str | int) -> str | int:
        if isinstance(v, int) and v < 1:
            raise ValueError("must be 'auto' or an integer >= 1")
        return v


class SearchConfig(_Section):
    backend: Literal["ray", "optuna"] = "ray"
    sampler: Literal["tpe", "nsga2", "gp", "random"] = "gp"
    """gp (with ``scale_probe``): scripts/bench_search.py's default, judged by the worst case over
    eight measured grids and four memory caps at 25 % of the grid (see README, "Choosing the
    sampler"); tpe (constant liar) may suit many concurrent trials better (not measured)."""
    seed: int = 0
    address: str | None = None
    """null: start a local Ray instance; 'auto' or 'ray://host:port': use an existing cluster."""
    seed_ladder: bool = False
    """Start a new search with the batch-size ladder (smallest, every other power of two, largest;
    at most a third of the budget) at square-root-scaled learning rates, then let the sampler take
    over. Off by default: with gp it lowered the worst case of the replay benchmark."""
    scale_probe: bool = True
    """gp, tpe: after the random start, first scale the best config to other batch sizes (samplers.ScaledProbe)."""
    log_to: list[Literal["mlflow"]] = Field(default_factory=list)
    """Experiment trackers the search's records, front and recommendation are sent to."""
    tracking_uri: str | None = None
    """MLflow tracking URI (default: sqlite:///RUN_DIR/mlflow.db, a local store in the run directory)."""


class RepeatsConfig(_Section):
    candidates: int = Field(3, ge=0)
    """Front candidates re-measured with other seeds before the recommendation is made: the
    recommended point, the best in each objective, then the nearest to it (0: none)."""
    seeds: int = Field(2, ge=0)
    """Extra seeds (data order and initialisation) per candidate (0: none). Their spread is the
    search's measured noise of accuracy, utilization and samples/s."""


class ConfirmConfig(_Section):
    candidates: int = Field(3, ge=0)
    """Front candidates trained again at a longer budget after the search, with validation along
    the way; the recommendation then comes from these runs (0: no confirmation)."""
    train_samples: int | None = Field(None, ge=1)
    """Samples each confirmation run trains (default: 4 x budget.train_samples)."""
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
    """The value of confirm.metric to reach, in its direction (default: see target_fraction)."""
    target_fraction: float = Field(0.95, gt=0.0, le=1.0)
    """Default target: this x the best val_acc any candidate reached; for another metric, this
    share of the way from its first validation to the best value any candidate reached."""

    @model_validator(mode="after")
    def _length(self) -> ConfirmConfig:
        if self.train_samples is not None and self.epochs is not None:
            raise ValueError(f"give train_samples ({self.train_samples}) or epochs ({self.epochs}), not both")
        return self


class BaselineConfig(_Section):
    batch_size: int = Field(ge=1)
    """The batch size the user trains with today (global, as batch_size everywhere)."""
    lr: float = Field(gt=0)
    """The learning rate the user trains with today."""
    num_gpus: int = Field(1, ge=1)
    """The GPU count the user trains with today."""


class ProfileConfig(_Section):
    enabled: bool = False
    wait: int = Field(1, ge=0)
    warmup: int = Field(1, ge=0)
    active: int = Field(3, ge=1)
    repeat: int = Field(1, ge=1)
    record_shapes: bool = True
    profile_memory: bool = True
    with_stack: bool = False


class Config(_Section):
    name: str = "tune-batch"
    model: ModelConfig = Field(default_factory=ModelConfig)
    data: DataConfig = Field(default_factory=DataConfig)
    optimizer: OptimizerConfig = Field(default_factory=OptimizerConfig)
    train: TrainConfig = Field(default_factory=TrainConfig)
    space: SpaceConfig = Field(default_factory=SpaceConfig)
    objectives: list[ObjectiveConfig] = Field(default_factory=_default_objectives)
    budget: BudgetConfig = Field(default_factory=BudgetConfig)
    resources: ResourcesConfig = Field(default_factory=ResourcesConfig)
    search: SearchConfig = Field(default_factory=SearchConfig)
    repeats: RepeatsConfig = Field(default_factory=RepeatsConfig)
    confirm: ConfirmConfig = Field(default_factory=ConfirmConfig)
    baseline: BaselineConfig | None = None
    """The config the user runs today, confirmed beside the candidates (needs confirmation): the
    summary's first line says how much sooner the recommendation reaches the target."""
    profile: ProfileConfig = Field(default_factory=ProfileConfig)

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}", v):
            raise ValueError("use 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit")
        return v

    @field_validator("objectives")
    @classmethod
    def _objectives(cls, v: list[ObjectiveConfig]) -> list[ObjectiveConfig]:
        if not v:
            raise ValueError("give at least one objective")
        names = [o.metric for o in v]
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise ValueError(f"metric {sorted(dup)[0]!r} appears twice")
        return v

    @model_validator(mode="after")
    def _custom_metrics(self) -> Config:
        custom = [m for m in self.metric_names if m not in OBJECTIVE_METRICS]
        if custom and self.train.evaluate is None and self.train.loop == "tune_batch":  # a trainer logs its own
            raise ValueError(f"objective {custom[0]!r} is not measured by the built-in evaluation (val_acc); set "
                             f"train.evaluate to a function returning it")
        return self

    @model_validator(mode="after")
    def _confirm_metric(self) -> Config:
        c = self.confirm
        if c.metric is not None and c.metric != "val_acc" and c.metric not in self.metric_names:
            raise ValueError(f"confirm.metric = {c.metric!r}: allowed: val_acc or an objective ("
                             f"{', '.join(self.metric_names)})")
        if c.metric not in (None, "val_acc") and c.metric in OBJECTIVE_METRICS:
            raise ValueError(f"confirm.metric = {c.metric!r}: a measurement, not a validation metric; allowed: val_acc "
                             f"or an objective train.evaluate returns")
        if c.metric == "val_acc" and self.train.evaluate is not None and "val_acc" not in self.metric_names:
            raise ValueError("confirm.metric = 'val_acc': train.evaluate replaces the built-in accuracy; name one of "
                             "its objectives")
        if c.target is not None and self.confirm_metric == ("val_acc", "maximize") and not 0 < c.target <= 1:
            raise ValueError(f"confirm.target = {c.target}: a val_acc target must be in (0, 1]")
        return self

    @property
    def confirm_metric(self) -> tuple[str, str] | None:
        """(name, direction) of the metric confirmation reads time to target on; None when
        ``train.evaluate`` measures no objective it could be."""
        if self.train.evaluate is None and self.train.loop == "tune_batch":  # a trainer loop logs its own metrics
            return "val_acc", "maximize"
        name = self.confirm.metric
        if name is None:
            name = next((m for m in self.metric_names if m == "val_acc" or m not in OBJECTIVE_METRICS), None)
        if name is None:
            return None
        return name, next((o.direction for o in self.objectives if o.metric == name), "maximize")

    @property
    def metric_names(self) -> list[str]:
        return [o.metric for o in self.objectives]

    @property
    def directions(self) -> list[str]:
        return [o.direction for o in self.objectives]

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json")


# ---------------------------------------------------------------- loading


#: Where a config may hold a Python callable instead of "pkg.module:function" (notebooks).
CALLABLE_SLOTS = {"model": ("model", "name"), "data": ("data", "name"), "step": ("train", "step"),
                  "evaluate": ("train", "evaluate"), "builder": ("train", "builder")}


def _with_callables(raw: dict[str, Any], given: dict[str, Any]) -> dict[str, Any]:
    """``raw`` with every Python callable (in its slots, or ``given`` by slot name) registered
    and replaced by the string that names it."""
    raw = {k: dict(v) if isinstance(v, dict) else v for k, v in raw.items()}
    for slot, (section, key) in CALLABLE_SLOTS.items():
        fn = given.get(slot)
        if fn is None and isinstance(raw.get(section), dict) and callable(raw[section].get(key)):
            fn = raw[section][key]
        sec = raw.setdefault(section, {}) if fn is not None else None
        if isinstance(sec, dict):
            from tune_batch.workload.resolve import register  # loads torch: only when a callable is given

            sec[key] = register(fn)
    return raw


def config_from_dict(raw: dict[str, Any], source: str = "config", **callables: Any) -> Config:
    """Validate a plain dict into a Config; the first problem raises ConfigError. ``model``,
    ``data``, ``step``, ``evaluate`` and ``builder`` may be Python callables (keyword arguments, or in their
    places in ``raw``) instead of "pkg.module:function" strings."""
    unknown = set(callables) - set(CALLABLE_SLOTS)
    if unknown:
        raise ConfigError(f"{source}: unknown builder {sorted(unknown)[0]!r}; allowed: {', '.join(CALLABLE_SLOTS)}")
    raw = _with_callables(raw, callables)
    try:
        return Config.model_validate(raw)
    except ValidationError as e:
        errors = relevant(Config, e.errors())
        first = describe(Config, errors[0])
        more = f" (and {len(errors) - 1} more problem{'s' if len(errors) > 2 else ''})" if len(errors) > 1 else ""
        raise ConfigError(f"{source}: {first}{more}") from e


def load_config(path: str | Path, overrides: list[str] | None = None, **callables: Any) -> Config:
    """Load and validate a YAML config, applying ``--set``-style overrides first; ``model``,
    ``data``, ``step``, ``evaluate``: Python callables that replace those entries.

    Raises :class:`ConfigError` naming the field, the bad value and what is allowed.
    """
    raw = apply_overrides(read_yaml(path), overrides)
    return config_from_dict(raw, source=str(path), **callables)


def dump_config(config: Config) -> str:
    """The resolved config as YAML text (loads back to an equal Config)."""
    return yaml.safe_dump(config.to_dict(), sort_keys=False)
