"""The Pareto front and the choice on it: non-dominated sort, scaling, hypervolume (any number
of objectives), the knee and the choice of the recommended point.

Everything works on "smaller is better" values from :func:`objectives.to_minimize`; scaled
values are in [0, 1] with 1 = best.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from tune_batch.analysis.noise import beyond
from tune_batch.analysis.objectives import is_feasible, to_minimize
from tune_batch.errors import UserError
from tune_batch.store.records import TrialResult

KNEE_METHOD = ("knee: closest to the ideal point after scaling each objective to [0, 1] over the feasible "
               "trials' range")

#: The hypervolume's reference point, in scaled objective space: each objective scaled to
#: [0, 1] (0 = the worst bound, 1 = the best), the reference 10 % beyond the worst bound, so a
#: front point at the worst value of one objective still adds volume.
REFERENCE = -0.1

Prefer = str | dict[str, float] | None


def dominates(a: Sequence[float], b: Sequence[float]) -> bool:
    """a dominates b (both to minimise): no worse in every objective, better in one."""
    return all(x <= y for x, y in zip(a, b)) and any(x < y for x, y in zip(a, b))


def non_dominated(points: Sequence[Sequence[float]], directions: Sequence[str]) -> list[int]:
    """Indices of the points no other point dominates. Duplicates of a front point are all kept
    (as Optuna's ``best_trials`` keeps them). Points with a non-finite value are excluded."""
    pts = [to_minimize(p, directions) for p in points]
    finite = [i for i, p in enumerate(pts) if all(math.isfinite(v) for v in p)]
    return [i for i in finite if not any(dominates(pts[j], pts[i]) for j in finite if j != i)]


def noisy_non_dominated(values: Sequence[Sequence[float]], cis: Sequence[Sequence[float | None]],
                        directions: Sequence[str]) -> list[int]:
    """Indices of the front points: those that no point *on the front* dominates beyond noise, j
    dominating i when j is better than i beyond their combined half-widths in one objective and i
    is better than j beyond them in none. Points within noise of each other in every objective
    both stay.

    "On the front" matters because this domination is not transitive: a slow config at 0.76 is
    dominated by a faster one at 0.70 (inside its noise), that one by a faster one at 0.60, and
    so on; put off by any dominating point, the front held only the fast configs near chance,
    each beaten beyond the noise in val_acc by the first (scripts/bench_front_replay.py). So the
    points are decided in the order of the domination: one whose dominators are all decided is
    on the front unless one of them is. Points caught in a cycle of it (none seen) stay unless a
    front point dominates them."""
    finite = [i for i, p in enumerate(values) if all(math.isfinite(v) for v in p)]
    # larger is better, turned once per point (not once per pair: better_beyond's reading, inlined)
    by = _dominators(finite, values, cis, directions)
    beaten: dict[int, list[int]] = {i: [] for i in finite}
    for i, js in by.items():
        for j in js:
            beaten[j].append(i)
    left = {i: len(by[i]) for i in finite}  # dominators not decided yet
    on: dict[int, bool] = {}
    pending = list(finite)
    while pending:
        ready = [i for i in pending if not left[i]]
        front_so_far = {j for j, v in on.items() if v}  # every point of a round against the same front
        # none ready: some undecided points beat each other in a cycle; those go by the front
        # decided so far, and the points they beat wait for them
        for i in ready or [i for i in pending if i in _beaters(i, by, on)]:
            on[i] = not any(j in front_so_far for j in by[i])
            for k in beaten[i]:
                left[k] -= 1
        pending = [i for i in pending if i not in on]
    return [i for i in finite if on[i]]


#: Cells of one block of the pairwise comparison (float64: 32 MiB an array)
PAIR_CELLS = 2**22


def _dominators(finite: list[int], values: Sequence[Sequence[float]], cis: Sequence[Sequence[float | None]],
                directions: Sequence[str]) -> dict[int, list[int]]:
    """For each point of ``finite``, the points that dominate it beyond noise (better beyond the two
    half-widths combined in one objective, worse beyond them in none; ``better_beyond``'s reading),
    every pair at once: pair by pair in Python, a progress line per trial of a 1000-trial search
    took seconds each."""
    import numpy as np

    if not finite:
        return {}
    up = -np.array([to_minimize(values[i], directions) for i in finite], dtype=float)  # larger is better
    half = np.array([[c or 0.0 for c in cis[i]] for i in finite], dtype=float)
    out: dict[int, list[int]] = {}
    rows = max(1, PAIR_CELLS // (len(finite) * up.shape[1]))  # [rows, n, objectives] arrays: 32 MiB at most
    for lo in range(0, len(finite), rows):
        gap = np.hypot(half[lo:lo + rows, None, :], half[None, :, :])  # [i, j, objective]
        ahead = up[None, :, :] - up[lo:lo + rows, None, :]  # j's lead over i
        beats = (ahead > gap).any(axis=2) & ~(-ahead > gap).any(axis=2)  # [i, j]: j dominates i
        out.update({finite[lo + r]: [finite[j] for j in np.flatnonzero(row)] for r, row in enumerate(beats)})
    return out


def _beaters(i: int, by: dict[int, list[int]], decided: dict[int, bool]) -> set[int]:
    """The undecided points that beat ``i`` directly or through other undecided points."""
    seen: set[int] = set()
    stack = [j for j in by[i] if j not in decided]
    while stack:
        j = stack.pop()
        if j not in seen:
            seen.add(j)
            stack.extend(k for k in by[j] if k not in decided)
    return seen


def better_beyond(a: Sequence[float], b: Sequence[float], ci_a: Sequence[float | None],
                  ci_b: Sequence[float | None], directions: Sequence[str]) -> list[int]:
    """Indices of the objectives in which ``a`` is better than ``b`` by more than their combined
    half-widths."""
    ga, gb = ([-v for v in to_minimize(p, directions)] for p in (a, b))  # larger is better
    return [k for k, (x, y, cx, cy) in enumerate(zip(ga, gb, ci_a, ci_b)) if beyond(x, y, cx, cy)]


def within_noise(a: Sequence[float], b: Sequence[float], ci_a: Sequence[float | None],
                 ci_b: Sequence[float | None]) -> bool:
    """Whether two points differ by no more than their noise in every objective."""
    return not any(beyond(x, y, cx, cy) or beyond(y, x, cy, cx) for x, y, cx, cy in zip(a, b, ci_a, ci_b))


def feasible(results: Sequence[TrialResult], metrics: Sequence[str]) -> list[TrialResult]:
    return [r for r in results if is_feasible(r, metrics)]


def _points(results: Sequence[TrialResult], metrics: Sequence[str]) -> list[list[float]]:
    return [[r.metrics.value(m) for m in metrics] for r in results]  # type: ignore[misc]


def front(results: Sequence[TrialResult], metrics: Sequence[str], directions: Sequence[str]) -> list[TrialResult]:
    """The feasible results on the Pareto front of ``metrics``, in the given order."""
    ok = feasible(results, metrics)
    return [ok[i] for i in non_dominated(_points(ok, metrics), directions)]


def normalise(points: Sequence[Sequence[float]], directions: Sequence[str],
              bounds: Sequence[tuple[float, float]] | None = None) -> list[list[float]]:
    """Scale each objective to [0, 1] with 1 = best, using ``bounds`` (lo, hi) per objective in
    the metric's own units, or the points' own min and max. A constant objective scales to 1."""
    k = len(directions)
    if bounds is None:
        bounds = [(min(p[i] for p in points), max(p[i] for p in points)) if points else (0.0, 1.0) for i in range(k)]
    # bounds as "smaller is better": the best bound is the smaller one
    lo_hi = [sorted(to_minimize([lo, hi], [d, d])) for (lo, hi), d in zip(bounds, directions)]
    out = []
    for p in points:
        row = []
        for v, (best, worst) in zip(to_minimize(p, directions), lo_hi):
            span = worst - best
            row.append(1.0 if span <= 0 else (worst - v) / span)
        out.append(row)
    return out


def hypervolume(points: Sequence[Sequence[float]], ref: float = REFERENCE) -> float:
    """Exact hypervolume of scaled points (1 = best in every objective) above the reference
    point ``(ref, ..., ref)``, for any number of objectives: slices along the last objective
    (between consecutive levels the dominated volume is the (k-1)-dimensional hypervolume of the
    points at least that high), keeping only non-dominated points at each level."""
    pts = [tuple(float(v) for v in p) for p in points]
    pts = [p for p in pts if all(v > ref for v in p)]
    if not pts:
        return 0.0
    if len(pts[0]) == 1:
        return max(p[0] for p in pts) - ref
    keep = non_dominated(pts, ["maximize"] * len(pts[0]))
    pts = sorted({pts[i] for i in keep}, key=lambda p: -p[-1])
    levels = sorted({p[-1] for p in pts}, reverse=True)
    vol = 0.0
    for i, z in enumerate(levels):
        below = levels[i + 1] if i + 1 < len(levels) else ref
        vol += hypervolume([p[:-1] for p in pts if p[-1] >= z], ref) * (z - below)
    return vol


def knee_index(values: Sequence[Sequence[float]], directions: Sequence[str],
               bounds: Sequence[tuple[float, float]] | None = None) -> int | None:
    """The point closest (Euclidean) to the ideal point after scaling each objective to [0, 1]
    (1 = best) by ``bounds`` (default: the points' own ranges)."""
    if not values:
        return None
    scaled = normalise(values, directions, bounds)
    dist = [math.sqrt(sum((1.0 - min(1.0, u)) ** 2 for u in row)) for row in scaled]
    return min(range(len(values)), key=lambda i: (dist[i], i))


def choose(values: Sequence[Sequence[float]], metrics: Sequence[str], directions: Sequence[str], prefer: Prefer = None,
           bounds: Sequence[tuple[float, float]] | None = None) -> tuple[int | None, str]:
    """The index of the recommended point among ``values`` (front points) and how it was chosen:
    the knee by default, the best point in one metric (``prefer="samples_per_s"``), or the best
    weighted sum of the objectives scaled to [0, 1] (``prefer={"samples_per_s": 2, "val_acc": 1}``)."""
    kn = knee_index(values, directions, bounds)
    if kn is None or prefer is None:
        return kn, KNEE_METHOD
    scaled = normalise(values, directions, bounds)
    if isinstance(prefer, str):
        k = list(metrics).index(prefer)
        return max(range(len(values)), key=lambda i: (scaled[i][k], i == kn, -i)), \
            f"prefer {prefer}: the front point best in {prefer}"
    w = [prefer.get(m, 0.0) for m in metrics]
    best = max(range(len(values)), key=lambda i: (sum(wi * u for wi, u in zip(w, scaled[i])), -i))
    shown = ", ".join(f"{m}={prefer[m]:g}" for m in metrics if m in prefer)
    return best, f"prefer weights {shown}: the best weighted sum of objectives scaled to [0, 1]"


def parse_prefer(text: str | None, metrics: Sequence[str]) -> Prefer:
    """``--prefer``: a metric name, or weights ``metric=w,metric=w``. Raises UserError."""
    if not text:
        return None
    allowed = ", ".join(metrics) + ", time_to_target, device_seconds_to_target"
    if text in ("time_to_target", "device_seconds_to_target"):  # from the confirmation runs (decision.decide)
        return text
    if "=" not in text:
        if text not in metrics:
            raise UserError(f"--prefer {text!r}: not an objective; allowed: {allowed} "
                            f"(or weights like samples_per_s=2,val_acc=1)")
        return text
    weights: dict[str, float] = {}
    for part in text.split(","):
        name, _, w = part.partition("=")
        name = name.strip()
        if name not in metrics:
            raise UserError(f"--prefer {text!r}: {name!r} is not an objective; allowed: {allowed}")
        try:
            weights[name] = float(w)
        except ValueError as e:
            raise UserError(f"--prefer {text!r}: weight {w!r} of {name} is not a number") from e
        if not weights[name] >= 0:
            raise UserError(f"--prefer {text!r}: weights must be >= 0")
    if not any(weights.values()):
        raise UserError(f"--prefer {text!r}: at least one weight must be > 0")
    return weights
