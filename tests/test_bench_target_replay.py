"""scripts/bench_target_replay.py: a stored search decided with and without the target read again."""

from __future__ import annotations

import tarfile

import pytest

from tests.conftest import REPO, script


@pytest.fixture(scope="module")
def replay():
    with script("bench_target_replay") as module:
        yield module


def test_the_held_out_search_that_recommended_nothing_now_answers(replay, tmp_path) -> None:
    """sets_adamax's seed-0 default search: its best candidate (32 / 0.0088) reached the target
    0.7555 in one of two runs, so nothing was recommended; read again from the level both runs
    reached (0.744), the same config is recommended. Seed 1's answer does not change."""
    with tarfile.open(REPO / "benchmarks" / "heldout" / "sets_adamax_searches.tgz") as tar:
        tar.extractall(tmp_path, filter="data")
    zero = replay.both(tmp_path / "sets_adamax-search-0")
    assert zero["before"] is None and zero["now"] == (32, pytest.approx(0.00875664))
    assert zero["target_before"] == pytest.approx(0.7555, abs=1e-4)
    assert zero["target_now"] == pytest.approx(0.99 * 0.7437, abs=1e-3)
    one = replay.both(tmp_path / "sets_adamax-search-1")
    assert one["before"] == one["now"] is not None and one["target_before"] == one["target_now"]
