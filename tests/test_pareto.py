from __future__ import annotations

import optuna
from hypothesis import given, settings
from hypothesis import strategies as st

from tune_batch.analysis.pareto import dominates, front, knee_index, non_dominated
from tune_batch.store.records import TrialResult

optuna.logging.set_verbosity(optuna.logging.WARNING)

small = st.integers(0, 4).map(float)


def _result(i: int, metrics: dict, status: str = "ok") -> TrialResult:
    return TrialResult.from_record({"trial_id": i, "params": {"batch_size": 16, "lr": 0.1}, "status": status,
                                    "metrics": metrics})  # few distinct values: many ties and duplicates


@settings(max_examples=60, deadline=None)
@given(
    directions=st.lists(st.sampled_from(["maximize", "minimize"]), min_size=2, max_size=3),
    data=st.data(),
)
def test_front_equals_optunas_best_trials(directions: list[str], data: st.DataObject) -> None:
    n = data.draw(st.integers(1, 14))
    k = len(directions)
    points = data.draw(st.lists(st.lists(small, min_size=k, max_size=k), min_size=n, max_size=n))
    feasible = data.draw(st.lists(st.booleans(), min_size=n, max_size=n))
    study = optuna.create_study(directions=directions)
    for p, ok in zip(points, feasible):
        t = study.ask()
        t.set_constraint("memory", 0.0 if ok else 1.0)
        study.tell(t, p)
    records = [_result(i, {f"m{k}": v for k, v in enumerate(p)}, "ok" if ok else "oom")
               for i, (p, ok) in enumerate(zip(points, feasible))]
    ours = {r.trial_id for r in front(records, [f"m{k}" for k in range(len(directions))], directions)}
    theirs = {t.number for t in study.best_trials}
    assert ours == theirs


def test_dominates_and_duplicates() -> None:
    assert dominates([1, 1], [1, 2]) and not dominates([1, 2], [1, 2])
    assert non_dominated([[1, 1], [1, 1], [2, 0], [3, 3]], ["minimize", "minimize"]) == [0, 1, 2]
    assert non_dominated([[1, 1], [2, 0]], ["maximize", "maximize"]) == [0, 1]
    assert non_dominated([[float("nan"), 1], [0, 0]], ["maximize", "maximize"]) == [1]


def test_knee_is_the_balanced_point() -> None:
    points = [[10.0, 0.0], [8.0, 8.0], [0.0, 10.0]]
    assert knee_index(points, ["maximize", "maximize"]) == 1
    # the same with one objective minimised: directions are read in one place
    flipped = [[a, -b] for a, b in points]
    assert knee_index(flipped, ["maximize", "minimize"]) == 1
    assert knee_index([], ["maximize"]) is None
