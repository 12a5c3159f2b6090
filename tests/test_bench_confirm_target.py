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
    stick, by_rule, sets, helds = replay.study("quickstart", rows, 2, 4096.0)
    assert stick["target"] == pytest.approx(0.99 * low[-1])
    assert sets == 3 and helds == [0, 1, 2]  # one set of the two points, each of the 3 seeds held back once
    # the default: 0.95 x 0.869 is passed by "high" at its 2nd validation; so is the level rule's
    # target at 4 trials (high's level 0.85 is above low's, 0.848, over its last 4 validations)
    for rule in [("best", 0.95, 4, 1.0), ("level", 1.0, 4, 1.0)]:
        regrets, misses = by_rule[rule]
        assert regrets == [math.inf] * 3 and misses == [1.0] * 3, rule
    # the best reached, or twice as long ("low" levels at 0.955 over validations 25-32), or the
    # best final value at 4 trials (0.869 against 0.85, no spread between seeds): "low"
    for rule in [("best", 1.0, 4, 1.0), ("best", 0.95, 8, 1.0), ("best", 0.99, 8, 1.0), ("level", 0.98, 8, 1.0),
                 ("at_length", 1.0, 4, 1.0)]:
        regrets, misses = by_rule[rule]
        assert regrets == [1.0] * 3 and misses == [0.0] * 3, rule


def test_the_lower_learning_rate_wins_among_candidates_within_the_factor(replay) -> None:
    runs = {(16, 0.1): {0: [[1024.0, 1.0, 0.9]]}, (16, 0.01): {0: [[1024.0, 1.0, 0.5], [2048.0, 1.2, 0.9]]}}
    assert replay.choose(tuple(runs), runs, (0,), 4096.0, 0.95, "maximize") == [(16, 0.1)]
    assert replay.choose(tuple(runs), runs, (0,), 4096.0, 0.95, "maximize", within=1.25) == [(16, 0.01)]
    assert replay.choose(tuple(runs), runs, (0,), 4096.0, 0.95, "maximize", within=1.1) == [(16, 0.1)]


def test_at_length_takes_the_quicker_of_two_finals_within_noise(replay) -> None:
    # two runs each; a's final mean 0.90, b's 0.89, the runs' pooled spread 0.02: within noise, and
    # b's runs took less time (2 s against 4 s); c is far below and quicker still
    runs = {(16, 0.01): [[[1024.0, 4.0, 0.88]], [[1024.0, 4.0, 0.92]]],
            (64, 0.01): [[[1024.0, 2.0, 0.87]], [[1024.0, 2.0, 0.91]]],
            (256, 0.01): [[[1024.0, 1.0, 0.50]], [[1024.0, 1.0, 0.52]]]}
    assert replay.at_length(runs, "maximize") == [(64, 0.01)]
    tight = {k: [[[c[0], c[1], {16: 0.90, 64: 0.89, 256: 0.5}[k[0]]]] for (c,) in v]
             for k, v in runs.items()}  # no spread between any runs: a is alone at the top
    assert replay.at_length(tight, "maximize") == [(16, 0.01)]
    assert replay.level([[1.0, 1.0, v] for v in (0.1, 0.2, 0.3, 0.5, 0.6, 0.7, 0.8, 0.9)]) == pytest.approx(0.85)


def test_a_loss_target_from_the_untrained_value_does_not_move_with_the_first_validation(replay) -> None:
    # a loss already near its level at the first validation (1.39 against 1.31): 0.99 of the way
    # from there is within 0.001 of the level; from the untrained 4.16 it is 0.03 above it
    curves = {(32, 0.01): [[[512.0, 1.0, 1.39, 0.0], [1024.0, 2.0, 1.31, 0.0]]] * 2}
    near = replay.level_target(curves, 0.99, "minimize")
    assert near == pytest.approx(1.39 + 0.99 * (1.31 - 1.39))
    far = replay.level_target(curves, 0.99, "minimize", starts=[4.16, 4.16])
    assert far == pytest.approx(4.16 + 0.99 * (1.31 - 4.16))
    assert replay.level_target(curves, 0.99, "maximize", starts=[0.1]) == pytest.approx(0.99 * 1.31)  # acc: no start
    replay.STARTS.update({(32, 0): 4.16, (32, 1): 4.16})
    try:
        runs = {(32, 0.01): {0: curves[(32, 0.01)][0], 1: curves[(32, 0.01)][0]},
                (64, 0.01): {0: [[512.0, 0.5, 1.36, 0.0], [1024.0, 1.0, 1.34, 0.0]],
                             1: [[512.0, 0.5, 1.36, 0.0], [1024.0, 1.0, 1.34, 0.0]]}}
        pick = replay.choose(((32, 0.01), (64, 0.01)), runs, (0, 1), 1024.0, 0.98, "minimize", kind="level_start")
        assert pick == [(64, 0.01)]  # 0.98 from 4.16: 1.367, which 64 reaches at 0.5 s, 32 at 2.0 s
        assert replay.choose(((32, 0.01), (64, 0.01)), runs, (0, 1), 1024.0, 0.98, "minimize",
                             kind="level") == [(32, 0.01)]  # from the first validations: 1.311, only 32
    finally:
        replay.STARTS.clear()
