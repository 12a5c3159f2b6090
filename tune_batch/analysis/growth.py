"""Memory that grows along a run: a least-squares line through the memory kept between steps
(read at several points from the first quarter of a run to the last), in bytes per 1000 steps,
and whether the growth is beyond noise (a leak?). Plain numbers in, a frozen record out."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from tune_batch.analysis.noise import t95

#: Growth over the whole run below both of these is not called a leak, however steady: a cache
#: filling once, an allocator's block rounding (the kept readings of a run without a leak do not
#: move at all: CPU tensor bytes, CUDA allocated bytes).
FLOOR_BYTES = 1 << 20
FLOOR_SHARE = 0.01  # of the run's peak


@dataclass(frozen=True)
class Growth:
    """``bytes_per_1000_steps`` +- ``ci_bytes_per_1000_steps`` (95 %) of the kept memory; ``flagged``
    when its lower bound is above zero and the growth over the run beyond the floors above."""

    bytes_per_1000_steps: float | None
    ci_bytes_per_1000_steps: float | None
    first_to_last_bytes: float | None  # the last reading less the first
    steps: int  # the steps between the first reading and the last
    readings: int
    flagged: bool
    how: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def growth(kept: Sequence[Sequence[float]], peak_bytes: float | None = None) -> Growth:
    """The growth of ``kept`` ([step, bytes] pairs, steps ascending); needs three readings at two
    or more steps for a slope and its noise."""
    xs, ys = [float(k[0]) for k in kept], [float(k[1]) for k in kept]
    n = len(xs)
    if n < 3 or len(set(xs)) < 2:
        return Growth(None, None, None, 0, n, False, f"not measured: {n} reading(s), need 3 at 2 steps or more")
    line = statistics.linear_regression(xs, ys)
    mx = statistics.fmean(xs)
    sxx = sum((x - mx) ** 2 for x in xs)
    resid = sum((y - (line.intercept + line.slope * x)) ** 2 for x, y in zip(xs, ys))
    se = math.sqrt(resid / (n - 2) / sxx) if n > 2 else math.inf
    half = t95(n - 2) * se
    span = xs[-1] - xs[0]
    floor = max(FLOOR_BYTES, FLOOR_SHARE * (peak_bytes or 0.0))
    flagged = line.slope - half > 0 and line.slope * span > floor
    how = (f"least squares over {n} readings of the memory kept between steps (steps {xs[0]:.0f}-{xs[-1]:.0f}); "
           f"a leak is flagged when the slope's 95 % lower bound is above 0 and the growth over those steps above "
           f"{floor / 2**20:.1f} MiB")
    return Growth(1000 * line.slope, 1000 * half, ys[-1] - ys[0], int(span), n, flagged, how)


def describe(g: dict[str, Any] | Growth) -> str:
    """"memory grows by X MiB per 1000 steps (+- Y)" in a line's words."""
    d = g.to_dict() if isinstance(g, Growth) else g
    rate, ci = d.get("bytes_per_1000_steps") or 0.0, d.get("ci_bytes_per_1000_steps")
    pm = f" +- {ci / 2**20:.2f}" if ci is not None and math.isfinite(ci) else ""
    return f"memory grows by {rate / 2**20:.2f}{pm} MiB per 1000 steps"
