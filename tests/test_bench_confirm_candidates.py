"""scripts/bench_confirm_candidates.py's candidate rules: what each hands confirmation from the
short-budget figures a search saw (metric, samples/s per config)."""

from __future__ import annotations

import pytest

from tests.conftest import script


@pytest.fixture(scope="module")
def replay():
    with script("bench_confirm_candidates") as module:
        yield module


# (batch, lr) -> (val_acc at the trial budget, samples/s)
SEEN = {(16, 0.003): (0.96, 1000.0), (16, 0.03): (0.97, 1100.0), (64, 0.1): (0.95, 3000.0),
        (256, 0.3): (0.90, 5000.0), (256, 0.01): (0.60, 5200.0), (32, 0.001): (0.80, 1500.0)}


def test_the_shipped_rule_hands_the_knee_the_most_accurate_and_the_quickest_near_the_top(replay) -> None:
    got = replay.candidates("current", SEEN, 3, "maximize")
    assert got[1] == (16, 0.03)  # the most accurate, after the knee
    assert len(got) == 3 == len(set(got))
    # near the top (>= 0.95 x 0.97): 16/0.003, 16/0.03, 64/0.1; the quickest of them per sample next
    assert (64, 0.1) in got


def test_rules_that_reach_for_low_learning_rates_do(replay) -> None:
    assert replay.candidates("lowlr", SEEN, 3, "maximize")[:2] == [(16, 0.03), (16, 0.003)]
    # the near-top ones by lr: 0.003, 0.03, 0.1; spread takes the lowest, the middle and the highest
    assert replay.candidates("spread_top", SEEN, 3, "maximize") == [(16, 0.003), (16, 0.03), (64, 0.1)]
    # at 0.90 of the top, 256/0.3 (0.90) joins: the highest rate is now 0.3
    assert replay.candidates("spread_top90", SEEN, 3, "maximize")[-1] == (256, 0.3)
    # each batch size's best, spread over the batch sizes (16, 32, 64, 256 -> the first, a middle, the last)
    per_batch = replay.candidates("per_batch", SEEN, 3, "maximize")
    assert per_batch[0] == (16, 0.03) and per_batch[-1] == (256, 0.3)


def test_a_loss_is_near_the_top_from_below(replay) -> None:
    losses = {k: (1.0 / acc, sps) for k, (acc, sps) in SEEN.items()}  # smaller is better
    assert replay.candidates("spread_top", losses, 3, "minimize") == [(16, 0.003), (16, 0.03), (64, 0.1)]
