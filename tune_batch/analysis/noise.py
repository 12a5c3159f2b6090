"""Noise statistics: confidence half-widths of means, and "different beyond noise".

A difference inside the measured noise is not a result: every figure a user reads carries a
95 % half-width (``<metric>_ci``), and comparisons use :func:`beyond`.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tune_batch.config import Config
    from tune_batch.store.records import TrialResult

# Student's t, two-sided 95 %, by degrees of freedom (1..30); 1.96 beyond
_T95 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145,
        2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048,
        2.045, 2.042)


def t95(df: int) -> float:
    """The two-sided 95 % quantile of Student's t with ``df`` degrees of freedom."""
    if df < 1:
        return math.inf
    return _T95[df - 1] if df <= len(_T95) else 1.96


def mean_ci(values: Sequence[float]) -> tuple[float, float | None]:
    """(mean, 95 % half-width of the mean); the half-width is None for fewer than two values."""
    vals = [float(v) for v in values]
    m = statistics.fmean(vals)
    if len(vals) < 2:
        return m, None
    return m, t95(len(vals) - 1) * statistics.stdev(vals) / math.sqrt(len(vals))


def rate_ci(blocks: Sequence[tuple[int, float]], rate: float) -> float | None:
    """95 % half-width of a throughput ``rate`` measured over timed blocks of (steps, seconds):
    the blocks' time per step scatter, as a relative standard error, applied to the rate."""
    per_step = [s / n for n, s in blocks if n > 0 and s > 0]
    if len(per_step) < 2:
        return None
    mean = statistics.fmean(per_step)
    rel_se = statistics.stdev(per_step) / math.sqrt(len(per_step)) / mean
    return rate * t95(len(per_step) - 1) * rel_se


def pooled_sd(groups: Sequence[Sequence[float]]) -> tuple[float | None, int]:
    """The standard deviation pooled over ``groups`` (each value's distance from its own group's
    mean) and its degrees of freedom; ``(None, 0)`` when no group has two values."""
    ss, df = 0.0, 0
    for g in groups:
        if len(g) >= 2:
            m = statistics.fmean(g)
            ss += sum((x - m) ** 2 for x in g)
            df += len(g) - 1
    return (math.sqrt(ss / df), df) if df else (None, 0)


def slower_beyond_noise(times: dict[object, Sequence[float]],
                        groups: Mapping[object, object] | None = None) -> set[object]:
    """The keys whose times (seconds, > 0) are longer than another key's beyond noise: the gap of
    their mean log times outside its 95 % interval, from the log times' spread pooled over every
    key (the runs of one key alone give too wide an interval). Nothing is, where no key has two.

    ``groups`` names each key's noise process (a confirmation candidate's GPU count): the spread
    for a pair is then pooled over the keys of those two groups only. A 2-worker group on a
    2-core machine reached one target in 3.97 and 8.41 s while one-worker pairs beside it were
    within 12 % of each other; pooled together, the group's spread hid a 1.57x gap between two
    one-worker candidates whose runs did not overlap."""
    logs = {k: [math.log(t) for t in ts if t > 0] for k, ts in times.items()}
    logs = {k: v for k, v in logs.items() if v}
    group = {k: (groups or {}).get(k) for k in logs}
    mean = {k: statistics.fmean(v) for k, v in logs.items()}
    slower: set[object] = set()
    for a in logs:
        for b in logs:
            if a == b or a in slower:
                continue
            sd, df = pooled_sd([v for k, v in logs.items() if group[k] in (group[a], group[b])])
            if sd is not None and mean[a] - mean[b] > t95(df) * sd * math.sqrt(1 / len(logs[a]) + 1 / len(logs[b])):
                slower.add(a)
    return slower


def beyond(a: float, b: float, ci_a: float | None, ci_b: float | None) -> bool:
    """Whether a > b by more than the noise of the two (their half-widths combined)."""
    tol = math.hypot(ci_a or 0.0, ci_b or 0.0)
    return a - b > tol


def chance_floor(config: Config, records: Sequence[TrialResult]) -> tuple[float, float]:
    """(chance, the least val_acc beyond it): chance is the validation set's majority-class rate
    the records measured (1 / num_classes where none did); beyond it means above chance by more
    than the binomial sampling noise (95 %) of the validation set."""
    rates = [r.info.chance_acc for r in records if r.info.chance_acc is not None]
    chance = max(rates) if rates else 1.0 / config.model.num_classes
    return chance, chance + 1.96 * math.sqrt(chance * (1 - chance) / max(1, config.data.val_samples))
