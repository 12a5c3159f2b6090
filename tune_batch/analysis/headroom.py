"""How close a config runs to the memory limit, read from its records: its worst-case peak over
every run of it (trials, repeats, confirmation runs), the limit it ran under (the cap, else on
CUDA the device less what other processes held), the margin that leaves, whether that keeps
``resources.memory_margin``, and whether its memory grew along a confirmation run (a leak?).

The recommendation is a config that keeps the margin (:func:`keep_margin`); the feasibility
model keeps none (it only skips configs predicted over the cap itself).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from tune_batch.analysis.growth import describe
from tune_batch.config import Config
from tune_batch.measure.oom import cap_bytes
from tune_batch.store.records import Status, TrialResult


def worst_bytes(r: TrialResult) -> float | None:
    """A run's worst-case peak: ``peak_mem_worst_bytes``, else (no worst case measured) its window's."""
    m = r.metrics
    return m.peak_mem_worst_bytes if m.peak_mem_worst_bytes is not None else m.peak_mem_bytes


@dataclass(frozen=True)
class Headroom:
    """A config's worst-case peak against its memory limit (bytes), and its memory growth."""

    worst_bytes: float | None
    limit_bytes: float | None
    limit: str  # what the limit is
    margin_asked: float
    device: str | None  # where the worst case was measured
    growth: dict[str, Any] | None = None  # the fastest growth flagged in its confirmation runs

    @property
    def margin_left(self) -> float | None:
        """The share of the limit the worst case leaves free (None: no limit or no peak known)."""
        if self.worst_bytes is None or not self.limit_bytes:
            return None
        return 1.0 - self.worst_bytes / self.limit_bytes

    @property
    def keeps_margin(self) -> bool:
        left = self.margin_left
        return left is None or left >= self.margin_asked - 1e-9

    def shortfall(self) -> str:
        """Why it does not keep the margin, in words."""
        return (f"its worst-case peak {(self.worst_bytes or 0) / 2**20:.1f} MiB leaves {self.margin_left or 0:.0%} of "
                f"{self.limit} ({(self.limit_bytes or 0) / 2**20:.1f} MiB), under resources.memory_margin "
                f"{self.margin_asked:.0%}")

    def to_dict(self) -> dict[str, Any]:
        return {"peak_mem_worst_bytes": self.worst_bytes, "memory_margin": self.margin_left,
                "memory_margin_asked": self.margin_asked, "memory_limit_bytes": self.limit_bytes,
                "memory_limit": self.limit, "measured_on": self.device, "memory_growth": self.growth}

    def line(self) -> str:
        """The memory of a recommendation in one line."""
        if self.worst_bytes is None:
            return "memory: no peak measured"
        peak = f"worst-case peak {self.worst_bytes / 2**20:.1f} MiB on {self.device or 'an unknown device'}"
        if self.margin_left is None:
            return (f"memory: {peak}; no memory limit known, so the {self.margin_asked:.0%} margin is not checked "
                    f"(set resources.device_memory to a size)")
        verdict = "keeps" if self.keeps_margin else "does NOT keep"
        return (f"memory: {peak}, {self.margin_left:.0%} under {self.limit} of {self.limit_bytes / 2**20:.1f} MiB "
                f"({verdict} resources.memory_margin {self.margin_asked:.0%})")


def headroom(config: Config, runs: Sequence[TrialResult]) -> Headroom:
    """The headroom of a config from its ``runs`` (those not ``ok`` are left out)."""
    ok = [r for r in runs if r.status is Status.OK]
    measured = [(w, r) for r in ok if (w := worst_bytes(r)) is not None]
    worst, worst_run = max(measured, key=lambda x: x[0]) if measured else (None, None)
    total = next((r.info.device_memory_bytes for r in ok if r.info.device_memory_bytes), None)
    cap = cap_bytes(config.resources.device_memory, total)
    limits = [r.info.memory_limit_bytes for r in ok if r.info.memory_limit_bytes]
    limit = min(limits) if limits else cap
    how = ("the cap (resources.device_memory)" if limit is not None and limit == cap
           else "the device's memory less other processes'" if limit is not None else "no limit")
    grew = [g for r in ok if (g := r.info.memory_growth) and g.get("flagged")]
    growth = max(grew, key=lambda g: g.get("bytes_per_1000_steps") or 0.0) if grew else None
    return Headroom(worst, limit, how, config.resources.memory_margin,
                    worst_run.info.device if worst_run is not None else None, growth)


def growth_line(h: Headroom) -> str | None:
    """"memory grows by X per 1000 steps ...: a leak?" for a config whose memory grew, else None."""
    if h.growth is None:
        return None
    return f"{describe(h.growth)} in its confirmation runs: a leak?"


P = Any  # a points.Point: its runs are what the headroom is read from


def keep_margin(config: Config, front: Sequence[P], feasible: Sequence[P], k: int | None,
                choose: Callable[[Sequence[P]], int | None]) -> tuple[P | None, list[str]]:
    """The recommended point among ``front`` (``k``, chosen there) when it keeps the margin; else
    ``choose`` among the front points that do, else among the front of the feasible points that
    do (``choose`` picks from the points it is given; their own front when they are not one).
    Returns (the point or None, notes saying what was passed over and why)."""
    if k is None:
        return None, []
    rec = front[k]
    h = headroom(config, rec.runs)
    if h.keeps_margin:
        return rec, []
    why = f"trial {rec.trial.trial_id} not recommended: {h.shortfall()}"
    safe_front = [p for p in front if headroom(config, p.runs).keeps_margin]
    pool = safe_front or [p for p in feasible if headroom(config, p.runs).keeps_margin]
    if not pool:
        return None, [why, "no measured config leaves resources.memory_margin: no recommendation"]
    i = choose(pool)
    return (pool[i] if i is not None else None), [why + ("" if safe_front else "; nothing on the front does")]
