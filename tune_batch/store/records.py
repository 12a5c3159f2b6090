"""Typed trial records: what one trial was, measured, and where it ran.

``TrialResult`` is built once, at the end of a trial (or by the policy for a skipped one), and
read everywhere by attribute. On disk (``trials.jsonl``) it keeps the flat shape of earlier
versions: ``{"trial_id", "params", "status", "reason", "metrics": {...}, "duration_s",
"info": {...}, "traceback"}``; keys this version does not know are kept in ``other`` so old
and newer files load and write back unchanged.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Iterable
from dataclasses import dataclass, field, fields
from enum import Enum
from typing import Any

from tune_batch.errors import CONFIG_FAULT


class Status(str, Enum):
    """A trial's outcome. Only ``ok`` is feasible (can be on a front)."""

    OK = "ok"
    OOM = "oom"  # ran out of device memory (or over resources.device_memory)
    SKIPPED = "skipped"  # ruled out before running (batch rules, memory model): no compute spent
    DIVERGED = "diverged"  # the loss (or a BatchNorm statistic) became NaN or infinite: the lr is too high
    FAILED = "failed"  # an exception or a timeout; the reason is kept

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class Params:
    """The searched point: global batch size, learning rate, data-parallel workers, and the
    user's own hyperparameters (``extra``, from ``Objective(extra_space=...)``)."""

    batch_size: int
    lr: float
    num_gpus: int = 1
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def per_worker_batch(self) -> int:
        return self.batch_size // self.num_gpus

    @classmethod
    def of(cls, raw: Params | dict[str, Any]) -> Params:
        """batch_size and num_gpus as int, lr as float; other keys are the user's extras."""
        if isinstance(raw, Params):
            return raw
        extra = {k: v for k, v in raw.items() if k not in ("batch_size", "lr", "num_gpus")}
        return cls(int(raw["batch_size"]), float(raw["lr"]), int(raw.get("num_gpus", 1)), extra)

    def to_dict(self) -> dict[str, Any]:
        return {"batch_size": self.batch_size, "lr": self.lr, "num_gpus": self.num_gpus, **self.extra}


@functools.cache
def _field_names(cls: type) -> frozenset[str]:
    """A record class's field names (``dataclasses.fields`` is slow, and ``get`` runs per value read)."""
    return frozenset(f.name for f in fields(cls))  # type: ignore[arg-type]


class _Flat:
    """A frozen dataclass of optional fields written as one flat JSON object (None left out),
    with the keys it does not know kept in ``other``."""

    other: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "other"}  # type: ignore[arg-type]
        return {**{k: v for k, v in out.items() if v is not None}, **self.other}

    @classmethod
    def from_dict(cls, raw: dict[str, Any] | None) -> Any:
        raw = dict(raw or {})
        known = {f.name for f in fields(cls) if f.name != "other"}  # type: ignore[arg-type]
        return cls(**{k: raw.pop(k) for k in list(raw) if k in known}, other=raw)

    def get(self, name: str) -> Any:
        """A field by name (objectives and report columns are chosen by name in the config)."""
        if name != "other" and name in _field_names(type(self)):
            return getattr(self, name)
        return self.other.get(name)

    def with_(self, **changes: Any) -> Any:
        return dataclasses.replace(self, **changes)  # type: ignore[type-var]


@dataclass(frozen=True)
class Metrics(_Flat):
    """Measured figures (units in the names; see DESIGN.md for each definition)."""

    samples_per_s: float | None = None
    samples_per_s_ci: float | None = None  # 95 % half-width from the scatter of the window's timed blocks
    device_util: float | None = None
    val_acc: float | None = None
    mfu: float | None = None
    model_flops_per_s: float | None = None
    peak_mem_bytes: float | None = None
    # the figure held against the memory limit: the window, the largest batch of the data, a validation batch and
    # the first optimizer step (CUDA: the allocator's reserved peak over the whole trial)
    peak_mem_worst_bytes: float | None = None
    data_wait_frac: float | None = None
    timed_s: float | None = None
    step_time_s: float | None = None
    energy_j_per_sample: float | None = None
    scaling_efficiency: float | None = None
    grad_noise_scale: float | None = None  # B_simple = tr(Sigma) / |G|^2 at the end of the trial
    goodput: float | None = None  # samples_per_s x the statistical efficiency of the batch
    duration_s: float | None = None
    other: dict[str, Any] = field(default_factory=dict)

    def value(self, name: str) -> float | None:
        """The metric ``name`` as a float, or None when it was not measured."""
        v = self.get(name)
        return None if v is None else float(v)

    def has_finite(self, names: list[str]) -> bool:
        vals = [self.value(n) for n in names]
        return all(v is not None and math.isfinite(v) for v in vals)


@dataclass(frozen=True)
class TrialInfo(_Flat):
    """How a trial ran: placement, its step accounting, how each figure was measured, and the
    device telemetry beside them. Diagnostics only: nothing here is an objective."""

    # placement
    host: str | None = None
    pid: int | None = None
    device: str | None = None
    data: str | None = None
    world_size: int | None = None
    per_worker_batch: int | None = None
    nodes: list[str] | None = None
    node_ids: list[str] | None = None
    launcher: str | None = None
    group_start_s: float | None = None
    watchdog: bool | None = None
    train_s: float | None = None  # 0.0 for a skipped trial: no training
    seed: int | None = None  # data order and initialisation (search.seed, or a repeat's own)
    repeat_of: int | str | None = None  # a repeat (another seed) of this trial's config
    confirm_of: int | str | None = None  # a confirmation run (longer budget) of this trial's config
    rung: int | None = None  # a confirmation run's escalation round (2, 3, ...: 4x longer each); None: the first
    free_skip: bool | None = None  # a skipped proposal the sampler was asked again for: not part of budget.trials
    curve: list[list[float]] | None = None  # confirmation: [samples, train seconds, val_acc, loss] per validation
    start_value: float | None = None  # confirmation: its metric before the first step (the untrained model)
    planned_samples: int | None = None  # confirmation: the samples it was to train (more than done: it stopped)
    stopped_at_target: bool | None = None  # confirmation: ended at the given target (confirm.stop_at_target)
    chance_acc: float | None = None  # the majority-class share of the validation set
    # the training loop
    loop: str | None = None  # train.loop: tune_batch's own, or the user's trainer (lightning, transformers, keras)
    precision: str | None = None
    optimizer: str | None = None
    accumulation_steps: int | None = None
    micro_batch_size: int | None = None
    compile_s: float | None = None
    # step accounting
    steps: int | None = None
    warmup_steps: int | None = None
    timed_steps: int | None = None
    timed_samples: int | None = None
    profiled_steps: int | None = None
    profile_active_steps: int | None = None  # of those, the ones the trace records (profile.active x repeat)
    train_samples_done: int | None = None
    window_extension_steps: int | None = None
    short_batches: int | None = None
    final_loss: float | None = None
    # what else used the machine during the window (a disturbed window is not a property of the config)
    others_cpu_frac: float | None = None
    steal_frac: float | None = None
    other_gpu_processes: int | None = None  # other compute processes on the trial's GPUs (NVML)
    other_gpu_mem_bytes: int | None = None
    other_gpu_note: str | None = None
    disturbed: bool | None = None
    # memory
    memory_cap_bytes: int | None = None
    memory_cap: str | None = None
    peak_mem_method: str | None = None
    memory_limit_bytes: int | None = None  # the cap, or (CUDA) the device less other processes at the start
    device_memory_bytes: int | None = None  # the device's total memory (CUDA)
    other_gpu_mem_start_bytes: int | None = None  # other processes' memory on the GPU at the start (NVML)
    peak_mem_worst_method: str | None = None  # what the worst case ran (trial.worst)
    worst_case_s: float | None = None  # seconds the worst case took (after everything a trial reports)
    peak_mem_reserved_bytes: int | None = None  # CUDA: the allocator's reserved peak of the window
    peak_mem_worst_allocated_bytes: int | None = None  # CUDA: the allocated peak of the whole trial
    memory_quarters_bytes: list[float] | None = None  # a confirmation run's peak per quarter of its steps
    memory_kept_bytes: list[list[float]] | None = None  # [step, memory kept between steps] along the run
    memory_growth: dict[str, Any] | None = None  # analysis.growth.Growth of the kept memory: a leak?
    # utilization and device telemetry (CPU: device_util_raw; CUDA: NVML)
    device_util_raw: float | None = None
    device_util_method: str | None = None
    device_util_polled: float | None = None
    device_util_note: str | None = None
    nvml_samples: int | None = None
    nvml_mem_used_max_bytes: int | None = None
    power_w: float | None = None
    energy_j: float | None = None
    sm_active: float | None = None
    tensor_active: float | None = None
    gpm: str | None = None
    # profiler
    trace_dir: str | None = None
    profile_step_s: float | None = None
    profiler_overhead: float | None = None
    profile: str | None = None
    # MFU
    model_flops_per_sample: float | None = None
    peak_flops_per_s: float | None = None
    peak_source: str | None = None
    mfu_flag: str | None = None
    # gradient noise scale (after validation, like the profiler)
    statistical_efficiency: float | None = None
    gns_note: str | None = None
    gns_batches: int | None = None
    gns_small_batch: int | None = None
    gns_grad_sq: float | None = None
    gns_trace_sigma: float | None = None
    gns_s: float | None = None
    gns_cost_frac: float | None = None  # its seconds / the trial's training seconds (outside the window)
    gns_lower_bound: bool | None = None  # grad_noise_scale is a 95 % lower bound (signal not clear of noise)
    # verdict
    bottleneck: str | None = None
    suggestion: str | None = None
    other: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class TrialResult:
    """One finished trial. ``trial_id`` is the Optuna trial number (or a label, e.g. "probe")."""

    trial_id: int | str | None
    params: Params
    status: Status
    reason: str | None = None
    metrics: Metrics = field(default_factory=Metrics)
    duration_s: float = 0.0
    info: TrialInfo = field(default_factory=TrialInfo)
    traceback: str | None = None
    ray_trial_id: str | None = None

    @property
    def searched(self) -> bool:
        """A trial of the search itself (not a repeat with another seed, not a confirmation run)."""
        return self.info.repeat_of is None and self.info.confirm_of is None

    @property
    def counted(self) -> bool:
        """A searched trial that uses up ``budget.trials``: every one but a proposal the policy
        skipped and the sampler was asked again for (``info.free_skip``: no compute, no trial)."""
        return self.searched and not self.info.free_skip

    @property
    def kind(self) -> str:
        """``trial`` (searched), ``repeat`` (another seed) or ``confirm`` (a confirmation run)."""
        if self.info.repeat_of is not None:
            return "repeat"
        return "confirm" if self.info.confirm_of is not None else "trial"

    @property
    def feasible(self) -> bool:
        """``ok``: the only status whose figures can be on a front."""
        return self.status is Status.OK

    def replace(self, **changes: Any) -> TrialResult:
        return dataclasses.replace(self, **changes)

    def to_record(self) -> dict[str, Any]:
        """The JSON-able record written to ``trials.jsonl``."""
        rec: dict[str, Any] = {
            "trial_id": self.trial_id, "params": self.params.to_dict(), "status": self.status.value,
            "reason": self.reason, "metrics": self.metrics.to_dict(), "duration_s": self.duration_s,
            "info": self.info.to_dict(), "traceback": self.traceback,
        }
        if self.ray_trial_id is not None:
            rec["ray_trial_id"] = self.ray_trial_id
        return rec

    @classmethod
    def from_record(cls, rec: dict[str, Any]) -> TrialResult:
        """A record read back; raises ValueError (naming what is wrong) when it is not one."""
        try:
            status = Status(rec["status"])
            params = Params.of(rec["params"])
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"not a trial record ({type(e).__name__}: {e})") from e
        metrics = rec.get("metrics") or {}
        info = rec.get("info") or {}
        if not isinstance(metrics, dict) or not isinstance(info, dict):
            raise ValueError("not a trial record (metrics and info must be objects)")
        return cls(rec.get("trial_id"), params, status, rec.get("reason"), Metrics.from_dict(metrics),
                   float(rec.get("duration_s") or 0.0), TrialInfo.from_dict(info), rec.get("traceback"),
                   rec.get("ray_trial_id"))


def budget_used(records: Iterable[TrialResult]) -> int:
    """How many of ``budget.trials`` the records use: searched trials, free skips left out."""
    return sum(1 for r in records if r.counted)


def config_mistake(rec: TrialResult) -> str | None:
    """The config mistake ``rec`` ended on, one every trial would meet (``errors.TrialConfigError``:
    its reason without the ``config: `` mark); None when it ended otherwise."""
    reason = rec.reason or ""
    if rec.status is Status.FAILED and reason.startswith(CONFIG_FAULT):
        return reason.removeprefix(CONFIG_FAULT)
    return None


#: Searched trials that all failed alike, and none other, after which a search stops: the fault
#: is the workload's (a file no trial can read), not a config's.
ALIKE_FAILURES = 3


def failing_alike(records: Iterable[TrialResult]) -> str | None:
    """What every searched trial so far failed on, where there are ALIKE_FAILURES or more of
    them, each ``failed`` with the same reason (not a timeout: that one depends on the config),
    and nothing else finished; None otherwise."""
    ran = [r for r in records if r.counted]
    if len(ran) < ALIKE_FAILURES or any(r.status is not Status.FAILED for r in ran):
        return None
    reasons = {r.reason or "" for r in ran}
    if len(reasons) != 1 or next(iter(reasons)).startswith("timeout"):
        return None
    return f"the first {len(ran)} trials all failed alike ({next(iter(reasons))})"
