"""scripts/bench_confirm_target.py's replay of the confirmation's choice: an early own target
picks the config that is fast at first and then levels off below the late yardstick; a target at
the best reached, or a longer confirmation, picks the one that gets there."""

from __future__ import annotations

import math

import pytest

from tests.conftest import script


@pytest.fixture(scope="module")
def replay():
    with script("bench_confirm_target") as module:
        yield module


def _row(b: int, lr: float, seed: int, values: list[float]) -> dict:
    curve = [[1024.0 * (i + 1), 1.0 * (i + 1), v, 0.0] for i, v in enumerate(values)]
    return {"params": {"batch_size": b, "lr": lr}, "seed": seed, "status": "ok", "curve": curve,
            "train_s": curve[-1][1]}


def test_an_early_own_target_picks_the_fast_starter_that_never_reaches_the_late_target(replay) -> None:
    # 64 validations of 1024 samples. "high": 0.80 at once, then flat at 0.85. "low": slower,
    # 0.87 after 16 validations (one confirmation of 4 trials of 4096), 0.989 at the end.
    high = [0.80] + [0.85] * 63
    low = [0.99 - 0.6 * math.exp(-i / 10) for i in range(1, 65)]
    rows = [_row(16, 0.1, s, high) for s in range(3)] + [_row(16, 0.01, s, low) for s in range(3)]
    stick, by_rule, sets = replay.study("quickstart", rows, 2, 4096.0)
    assert stick["target"] == pytest.approx(0.99 * low[-1])
    assert sets == 3  # one set of the two points, each of the 3 seeds held back once
    regrets, misses = by_rule[(0.95, 4, 1.0)]  # the default: 0.95 x 0.869 is passed by "high" at its 2nd validation
    assert regrets == [math.inf] * 3 and misses == [1.0] * 3
    for rule in [(1.0, 4, 1.0), (0.95, 8, 1.0), (0.99, 8, 1.0)]:  # the best reached, or twice as long: "low"
        regrets, misses = by_rule[rule]
        assert regrets == [1.0] * 3 and misses == [0.0] * 3, rule


def test_the_lower_learning_rate_wins_among_candidates_within_the_factor(replay) -> None:
    runs = {(16, 0.1): {0: [[1024.0, 1.0, 0.9]]}, (16, 0.01): {0: [[1024.0, 1.0, 0.5], [2048.0, 1.2, 0.9]]}}
    assert replay.choose(tuple(runs), runs, (0,), 4096.0, 0.95, "maximize") == [(16, 0.1)]
    assert replay.choose(tuple(runs), runs, (0,), 4096.0, 0.95, "maximize", within=1.25) == [(16, 0.01)]
    assert replay.choose(tuple(runs), runs, (0,), 4096.0, 0.95, "maximize", within=1.1) == [(16, 0.1)]
