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
