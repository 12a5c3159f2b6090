"""Pareto front: non-dominated sort for any number of objectives with their directions."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any


def _as_minimize(points: Sequence[Sequence[float]], directions: Sequence[str]) -> list[list[float]]:
    signs = [1.0 if d == "minimize" else -1.0 for d in directions]
    return [[s * float(v) for s, v in zip(signs, p)] for p in points]


def dominates(a: Sequence[float], b: Sequence[float]) -> bool:
    """a dominates b (both to minimise): no worse in every objective, better in one."""
    return all(x <= y for x, y in zip(a, b)) and any(x < y for x, y in zip(a, b))


def non_dominated(points: Sequence[Sequence[float]], directions: Sequence[str]) -> list[int]:
    """Indices of the points no other point dominates. Duplicates of a front point are all kept
    (as Optuna's ``best_trials`` keeps them). Points with a non-finite value are excluded."""
    pts = _as_minimize(points, directions)
    finite = [i for i, p in enumerate(pts) if all(math.isfinite(v) for v in p)]
    front = []
    for i in finite:
        if not any(dominates(pts[j], pts[i]) for j in finite if j != i):
            front.append(i)
    return front


def front_records(records: Sequence[dict[str, Any]], metrics: Sequence[str], directions: Sequence[str]) -> list[dict[str, Any]]:
    """The feasible (``ok``) records on the Pareto front of ``metrics``, in record order."""
    ok = [r for r in records if r.get("status") == "ok" and all(m in (r.get("metrics") or {}) for m in metrics)]
    pts = [[r["metrics"][m] for m in metrics] for r in ok]
    return [ok[i] for i in non_dominated(pts, directions)]


# ---------------------------------------------------------------- hypervolume

#: The reference point, in normalised objective space: each objective is scaled to [0, 1]
#: (0 = the worst bound, 1 = the best), and the reference sits 10 % beyond the worst bound, so
#: a front point at the worst value of one objective still adds volume.
REFERENCE = -0.1


def normalise(points: Sequence[Sequence[float]], directions: Sequence[str],
              bounds: Sequence[tuple[float, float]] | None = None) -> list[list[float]]:
    """Scale each objective to [0, 1] with 1 = best, using ``bounds`` (lo, hi) per objective or
    the points' own min and max. A constant objective scales to 1."""
    k = len(directions)
    if bounds is None:
        bounds = [(min(p[i] for p in points), max(p[i] for p in points)) if points else (0.0, 1.0) for i in range(k)]
    out = []
    for p in points:
        row = []
        for i, d in enumerate(directions):
            lo, hi = bounds[i]
            span = hi - lo
            u = 1.0 if span <= 0 else (float(p[i]) - lo) / span
            row.append(u if d == "maximize" else 1.0 - u)
        out.append(row)
    return out


def _hv2(pts: list[tuple[float, float]], ref: float) -> float:
    """Area dominated by maximised 2-D points above (ref, ref)."""
    pts = sorted({p for p in pts if p[0] > ref and p[1] > ref}, key=lambda p: (-p[0], -p[1]))
    area, best_y = 0.0, ref
    for x, y in pts:
        if y > best_y:
            area += (x - ref) * (y - best_y)
            best_y = y
    return area


def hypervolume(points: Sequence[Sequence[float]], ref: float = REFERENCE) -> float:
    """Exact hypervolume of maximised, normalised points (2 or 3 objectives; 1 is a length)
    above the reference point ``(ref, ..., ref)``."""
    pts = [tuple(float(v) for v in p) for p in points]
    if not pts:
        return 0.0
    k = len(pts[0])
    if k == 1:
        return max(0.0, max(p[0] for p in pts) - ref)
    if k == 2:
        return _hv2(pts, ref)  # type: ignore[arg-type]
    if k == 3:
        # slice along the third objective: between consecutive z levels the dominated area is
        # the 2-D hypervolume of the points at least that high
        zs = sorted({p[2] for p in pts if p[2] > ref}, reverse=True)
        vol = 0.0
        for i, z in enumerate(zs):
            below = zs[i + 1] if i + 1 < len(zs) else ref
            vol += _hv2([(p[0], p[1]) for p in pts if p[2] >= z], ref) * (z - below)
        return vol
    raise ValueError(f"exact hypervolume is implemented for 1-3 objectives, not {k}")


def front_hypervolume(records: Sequence[dict[str, Any]], metrics: Sequence[str], directions: Sequence[str],
                      bounds: Sequence[tuple[float, float]] | None = None) -> float:
    """Hypervolume of the feasible records' front, normalised by ``bounds`` (default: the
    feasible records' own ranges)."""
    ok = [r for r in records if r.get("status") == "ok" and all(m in (r.get("metrics") or {}) for m in metrics)]
    pts = [[r["metrics"][m] for m in metrics] for r in ok]
    if not pts:
        return 0.0
    return hypervolume(normalise(pts, directions, bounds))
