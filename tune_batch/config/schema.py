"""The config's schema: typed, validated sections (``loading`` reads YAML into it).

Every section rejects unknown keys; every error names the dotted field, the bad value and
what is allowed, in one line (:class:`~tune_batch.errors.ConfigError`).
"""

from __future__ import annotations

import math
import re
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from tune_batch.config.decision import CONFIRM_TRIALS, BaselineConfig, ConfirmConfig, GoalConfig
from tune_batch.config.metrics import OBJECTIVE_METRICS, is_evaluated
from tune_batch.config.sizes import parse_memory
from tune_batch.config.space import SpaceConfig
from tune_batch.config.train import OptimizerConfig, TrainConfig
from tune_batch.config.train import Section as _Section

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
    """Where cifar10 / imagefolder files live (cifar10: the folder holding cifar-10-batches-py;
    imagefolder: class folders, or train/ and val/ of them; every image's header is read first)."""
    download: bool = False
    """Download cifar10 when its files are missing (needs the network)."""
    resize: int | None = Field(32, gt=0, le=4096)
    """Square input side in pixels; null keeps the data set's own size."""
    val_samples: int = Field(500, gt=0)
    """Held-out samples used for val_acc."""
    num_workers: int = Field(0, ge=0)
    """DataLoader worker processes."""
    synthetic_samples: int = Field(4096, gt=0)
    """Training pool size of the synthetic data set (held as one tensor up to 512 MiB with the
    validation images; a larger set, e.g. at 224 px, is made when read from a bank of noise images)."""
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


class ObjectiveConfig(_Section):
    metric: str
    """A metric every trial measures (samples_per_s, device_util, val_acc, mfu, peak_mem_bytes,
    data_wait_frac, duration_s, goodput), or a val_* metric that train.evaluate returns."""
    direction: Literal["maximize", "minimize"] = "maximize"
    """maximize or minimize."""

    @field_validator("metric")
    @classmethod
    def _known(cls, v: str) -> str:
        if v not in OBJECTIVE_METRICS and not is_evaluated(v):
            raise ValueError(f"allowed: {', '.join(OBJECTIVE_METRICS)}, or a val_* / eval_* metric the evaluation "
                             f"returns")
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
    with 1 s and 2 s windows spread alike (docs/measurement.md, "The timed window")."""
    trial_timeout_s: float = Field(600.0, gt=0)
    """A trial still running after this many seconds ends as failed."""

    def steps_short(self, batch_size: int) -> str | None:
        """Why a trial at ``batch_size`` cannot be measured (fewer than two steps: one warm-up,
        one timed), or None."""
        steps = self.train_samples // batch_size
        if steps >= 2:
            return None
        return (f"budget.train_samples = {self.train_samples} gives {steps} step(s) at batch_size {batch_size}; "
                f"need at least 2 (one warm-up, one timed)")
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
    """Share of the memory limit (the cap, else the device less other processes) the answer leaves free: the
    recommendation's and ``max-batch``'s worst-case peak; the feasibility model skips only configs over the cap."""
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
    """ray: trials as Ray Tune trials (a local instance or a cluster; data-parallel trials on a
    group of Ray actors); optuna: plain Optuna in this process (one-worker trials only)."""
    sampler: Literal["tpe", "nsga2", "gp", "random"] = "gp"
    """gp (with ``scale_probe``): scripts/bench_search.py's default, judged by the worst case over
    eight measured grids and four memory caps at 25 % of the grid (see docs/benchmarks.md,
    "Choosing the sampler"); tpe (constant liar) may suit many concurrent trials better (not measured)."""
    seed: int = 0
    """Seed of the sampler and of each trial's data order and initialisation (repeats and
    confirmation runs take the next seeds)."""
    address: str | None = None
    """null: start a local Ray instance; 'auto' or 'ray://host:port': use an existing cluster."""
    seed_ladder: bool = False
    """Start a new search with the batch-size ladder (smallest, every other power of two, largest;
    at most a third of the budget) at square-root-scaled learning rates, then let the sampler take
    over. Off by default: with gp it lowered the worst case of the replay benchmark."""
    scale_probe: bool = True
    """gp, tpe: after the random start, first scale the best config to other batch sizes
    (study.samplers.ScaledProbe)."""
    log_to: list[Literal["mlflow"]] = Field(default_factory=list)
    """Experiment trackers the search's records, front and recommendation are sent to."""
    tracking_uri: str | None = None
    """MLflow tracking URI (default: the MLFLOW_TRACKING_URI environment variable where set, else
    sqlite:///RUN_DIR/mlflow.db, a local store in the run directory)."""


class RepeatsConfig(_Section):
    candidates: int = Field(3, ge=0)
    """Front candidates re-measured with other seeds before the recommendation is made: the
    recommended point, the best in each objective, then the nearest to it (0: none)."""
    seeds: int = Field(2, ge=0)
    """Extra seeds (data order and initialisation) per candidate (0: none). Their spread is the
    search's measured noise of accuracy, utilization and samples/s."""


class ProfileConfig(_Section):
    enabled: bool = False
    """Profile every trial and write its trace (TensorBoard format) under the run directory's
    traces/ (``probe`` turns it on unless ``--set profile.enabled=false``)."""
    wait: int = Field(1, ge=0)
    """Steps the profiler skips before it warms up (torch.profiler.schedule's wait)."""
    warmup: int = Field(1, ge=0)
    """Steps it runs but does not record, before the recorded ones (schedule's warmup)."""
    active: int = Field(3, ge=1)
    """Steps recorded in the trace (schedule's active)."""
    repeat: int = Field(1, ge=1)
    """Cycles of wait, warmup and active steps (schedule's repeat)."""
    record_shapes: bool = True
    """Record the input shapes of each operator."""
    profile_memory: bool = True
    """Record the memory each operator allocates and frees."""
    with_stack: bool = False
    """Record the Python call stack of each operator (larger traces)."""


def short_goal(given: str, goal_samples: int, trial_samples: int) -> str:
    """Why a goal run shorter than one trial is refused, and what to give instead."""
    return (f"{given} is shorter than one trial (budget.train_samples = {trial_samples}): the search would train "
            f"every config longer than your whole run; give budget.train_samples well under it (an eighth: "
            f"{max(1, goal_samples // 8)})")


class Config(_Section):
    name: str = "tune-batch"
    """The search's name: the Optuna study, the MLflow experiment and the default run directory
    (runs/<name>-<timestamp>); 1-64 letters, digits, '.', '_' or '-'."""
    model: ModelConfig = Field(default_factory=ModelConfig)
    """The network every trial trains."""
    data: DataConfig = Field(default_factory=DataConfig)
    """The data set: the training pool and the held-out validation samples."""
    optimizer: OptimizerConfig = Field(default_factory=OptimizerConfig)
    """The torch.optim optimizer every trial trains with (its learning rate is searched: space.lr)."""
    train: TrainConfig = Field(default_factory=TrainConfig)
    """The training step: precision, accumulation, memory format, compilation, and the user's own
    step and evaluation."""
    space: SpaceConfig = Field(default_factory=SpaceConfig)
    """What is searched: the global batch size, the learning rate and the GPU count."""
    objectives: list[ObjectiveConfig] = Field(default_factory=_default_objectives)
    """The metrics the search optimises, each with its direction."""
    budget: BudgetConfig = Field(default_factory=BudgetConfig)
    """What each trial, and the whole search, may spend."""
    resources: ResourcesConfig = Field(default_factory=ResourcesConfig)
    """The memory cap, the CPUs of a trial, the peak FLOP/s for MFU, and the feasibility model."""
    search: SearchConfig = Field(default_factory=SearchConfig)
    """How the search runs: backend, sampler, seed, Ray cluster and experiment trackers."""
    repeats: RepeatsConfig = Field(default_factory=RepeatsConfig)
    """Front candidates measured again with other seeds before the recommendation is made."""
    confirm: ConfirmConfig = Field(default_factory=ConfirmConfig)
    """Front candidates trained again at length; the recommendation then comes from their time to
    target."""
    goal: GoalConfig | None = None
    """The user's own run: its length and/or the target it must reach. Confirmation and the
    recommendation answer that run (default: confirm.train_samples and confirm's default target)."""
    baseline: BaselineConfig | None = None
    """The config the user runs today, confirmed beside the candidates (needs confirmation): the
    summary's first line says how much sooner the recommendation reaches the target."""
    profile: ProfileConfig = Field(default_factory=ProfileConfig)
    """torch.profiler over a few steps of each trial, after its timed window."""

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
    def _trainer_optimizer(self) -> Config:
        own = self.optimizer.own_loop_settings
        if own and self.train.loop != "tune_batch":
            key, value = next(iter(own.items()))
            raise ValueError(f"optimizer.{key} = {value!r} is tune_batch's own loop setting; with train.loop = "
                             f"{self.train.loop!r} your trainer makes the optimizer: set it there (optimizer.name "
                             f"still says how lr scales with the batch: sgd linearly, adam and the like by its "
                             f"square root)")
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
        g = self.goal
        if g is not None:
            if g.target is not None and c.target is not None:
                raise ValueError(f"goal.target ({g.target}) and confirm.target ({c.target}): give one; for the "
                                 f"goal's, drop confirm.target (--set confirm.target=null)")
            if g.length_given and (c.train_samples is not None or c.epochs is not None):
                key = "confirm.train_samples" if c.train_samples is not None else "confirm.epochs"
                raise ValueError(f"goal.train_samples/epochs and {key}: give one (the goal's length is the "
                                 f"confirmation runs' length); for the goal's, drop {key} (--set {key}=null)")
            if g.target is not None and self.confirm_metric == ("val_acc", "maximize") and not 0 < g.target <= 1:
                raise ValueError(f"goal.target = {g.target}: a val_acc target must be in (0, 1]")
            if g.train_samples is not None and g.train_samples < self.budget.train_samples:
                raise ValueError(short_goal(f"goal.train_samples = {g.train_samples}", g.train_samples,
                                            self.budget.train_samples))
            if c.candidates == 0:
                raise ValueError("goal: the run it describes is answered by confirmation runs; confirm.candidates "
                                 "is 0 (set it to 1 or more, or drop goal)")
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

    def confirm_samples(self, train_size: int | None) -> int | None:
        """Samples a confirmation run trains: the goal's length (``goal.train_samples``, or
        ``goal.epochs`` passes over the training set), ``confirm.train_samples``, ``confirm.epochs``,
        or by default ``CONFIRM_TRIALS`` (8) x ``budget.train_samples`` (chosen on the development
        workloads: ``scripts/bench_confirm_target.py``; at 4x the target levels were set early in
        training). None for a length in epochs while the training set's size is not known."""
        c = self._length_section
        if c.train_samples is not None:
            return c.train_samples
        if c.epochs is not None:
            return None if train_size is None else max(1, math.ceil(c.epochs * train_size))
        return CONFIRM_TRIALS * self.budget.train_samples

    @property
    def confirm_epochs(self) -> float | None:
        """A confirmation run's length where it is given in passes over the training set
        (``goal.epochs``, else ``confirm.epochs``, as ``confirm_samples`` reads them); else None."""
        c = self._length_section
        return c.epochs if c.train_samples is None else None

    @property
    def _length_section(self) -> GoalConfig | ConfirmConfig:
        """The section a confirmation run's length comes from: the goal's where it gives one."""
        return self.goal if self.goal is not None and self.goal.length_given else self.confirm

    @property
    def given_target_at(self) -> tuple[str, float] | None:
        """(the key, the value) of the target the user gave: goal.target, else confirm.target (never
        both); None: the confirmation reads a default one from its runs."""
        if self.goal is not None and self.goal.target is not None:
            return "goal.target", self.goal.target
        return None if self.confirm.target is None else ("confirm.target", self.confirm.target)

    @property
    def given_target(self) -> float | None:
        """The value of ``given_target_at``."""
        return None if self.given_target_at is None else self.given_target_at[1]

    @property
    def metric_names(self) -> list[str]:
        return [o.metric for o in self.objectives]

    @property
    def directions(self) -> list[str]:
        return [o.direction for o in self.objectives]

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json")
