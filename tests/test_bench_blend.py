"""scripts/bench_blend.py: the replay that finds where ranking confirmed candidates by their runs
alone would recommend another config than the blend with the noise-scale prediction, and the
ratio it reads from the side-by-side runs."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from tests.conftest import script

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def bench_blend():
    with script("bench_blend") as module:
        yield module


def test_a_stored_search_names_its_workload_by_the_longest_prefix(bench_blend) -> None:
    assert bench_blend.workload_of("attn_majority-search-1") == "attn_majority"
    assert bench_blend.workload_of("bn_wd_cnn-goal-target-4") == "bn_wd_cnn"
    assert bench_blend.workload_of("quickstart-search-0") is None  # development: not read
    assert bench_blend.workload_of("attn_majority_grid") is None


def test_the_stored_search_where_the_blend_overruled_the_runs_is_found(bench_blend) -> None:
    """attn_majority seed 1 (stored): 128 / 0.0091's runs reached the search's target in 5.41 s,
    16 / 0.0025's in 7.89 s; the blend recommended the second."""
    rows = bench_blend.replay([REPO / "benchmarks" / "heldout" / "attn_majority_searches.tgz"], [])
    by = {r["search"]: r for r in rows}
    one = by["attn_majority-search-1"]
    assert one["differ"] and one["contenders"] == 2 and one["blended"]
    assert one["blend"]["batch_size"] == 16 and one["runs"]["batch_size"] == 128
    assert one["runs_s"] == pytest.approx(5.41, abs=0.01) and one["blend_s"] == pytest.approx(7.89, abs=0.01)
    assert not by["attn_majority-search-0"]["differ"]  # the blend's pick had the quickest runs there


def test_the_median_ratio_orders_a_config_that_never_reached_as_slowest(bench_blend) -> None:
    quicker = ([1.0, 1.1, 0.9], [2.0, 2.2, 1.8])  # the runs' pick half the blend's time
    never = ([math.inf] * 3, [3.0, 3.0, 3.0])
    point, lo, hi = bench_blend.median_ratio([quicker, quicker, quicker], reps=200)
    assert point == pytest.approx(0.5) and lo <= 0.5 <= hi < 1
    assert bench_blend.median_ratio([never], reps=50)[0] == math.inf
    assert bench_blend.ratio(math.inf, math.inf) == 1.0
