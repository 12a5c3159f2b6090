"""scripts/bench_lr_horizon.py: where the best learning rate lies after a trial's samples and at a
late target, on a stored grid (no training)."""

from __future__ import annotations

import math

import pytest

from tests.conftest import script


@pytest.fixture(scope="module")
def horizon():
    with script("bench_lr_horizon") as module:
        yield module


def test_the_vertex_refines_a_best_rate_within_half_a_grid_step(horizon) -> None:
    assert horizon.vertex([-1.0, 0.0, 1.0], [1.0, 2.0, 1.0], 1) == pytest.approx(0.0)
    # y = -0.55 x^2 + 0.45 x + 2 through the three: its top at 0.45 / 1.1
    assert horizon.vertex([-1.0, 0.0, 1.0], [1.0, 2.0, 1.9], 1) == pytest.approx(0.45 / 1.1)
    assert horizon.vertex([-1.0, 0.0, 1.0], [0.0, 2.0, 2.5], 1) == pytest.approx(0.5)  # 0.83: clipped to half a step
    assert horizon.vertex([-1.0, 0.0, 1.0], [3.0, 2.0, 1.0], 0) == -1.0  # at an end of the grid: as it is


def test_a_grid_whose_long_run_wants_a_lower_rate_reads_a_positive_beta(horizon) -> None:
    """Five rates at 3 seeds: after a trial's 4096 samples the highest rate is best; the late target
    is reached soonest, at 8192 samples, by the middle rate, 1/10 of it: beta = ln 10 / ln 2."""
    lrs = [0.001, 0.00316228, 0.01, 0.0316228, 0.1]
    short = [0.1, 0.2, 0.3, 0.4, 0.5]
    reach = [32768, 16384, 8192, 16384, 32768]
    by = {}
    for lr, s, r in zip(lrs, short, reach):
        curve = [[n, n / 1000, s if n <= 4096 else (0.95 if n >= r else 0.6)] for n in range(2048, 65537, 2048)]
        by[(32, float(f"{lr:.6g}"))] = [{"params": {"batch_size": 32, "lr": lr}, "curve": curve}] * 3
    (cell,) = horizon.cells("quickstart", {"direction": "maximize", "target": 0.9}, by)  # 65536 long: trials of 4096
    assert cell["short_lr"] == pytest.approx(0.1) and cell["long_lr"] == pytest.approx(0.01)
    assert cell["grid_steps"] == -2 and cell["horizon"] == 2.0
    assert cell["beta"] == pytest.approx(math.log(10) / math.log(2))
    assert cell["long_ttt_s"] == pytest.approx(8.192)
