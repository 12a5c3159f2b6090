"""scripts/bench_decision.py's reading of its own measurements: a search's regret with the
interval its side-by-side rounds allow, a printed output read back for pooling, and the
side-by-side runs that stop at the shortest length reaching the target."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import script, tiny_config

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def bench():
    with script("bench_decision") as module:
        yield module


def test_a_regret_interval_is_as_wide_as_the_rounds_disagree(bench) -> None:
    best = [1.0, 1.2, 0.8, 1.1, 0.9]
    assert bench.regret_interval([2 * x for x in best], best) == (pytest.approx(2.0), pytest.approx(2.0))
    lo, hi = bench.regret_interval([0.5, 2.0, 1.0, 3.0, 0.7], [1.0, 1.0, 1.0, 1.0, 1.0])
    assert lo < 1.0 < hi and hi >= 2.0  # the point estimate (1.0) inside, the rounds' spread shown


def test_a_printed_output_reads_back_as_rows(bench) -> None:
    rows = bench.parse_output(REPO / "benchmarks" / "bench_decision_parse_example.txt")
    names = [w["name"] for w in rows["workloads"]]
    assert names == ["decision_quickstart_fine.json", "decision_synthetic_fine.json"]
    first = rows["workloads"][0]["rows"][0]
    assert (first["seed"], first["batch_size"], first["regret"]) == (43, 64, 1.49)
    arms = {a["key"]: a["times_s"] for a in first["arms"]}
    assert arms["recommended"] == [0.72, 1.06, 1.01, 0.73, 1.19] and arms["best"] == [0.62, 0.97, 0.83, 0.68, 0.54]
    assert first["pred_fresh"] == [0.91, 1.23, 1.12] and first["compute"] == 0.12
    assert rows["gns_trial_cost"] == pytest.approx(0.268)
    assert [len(w["rows"]) for w in rows["workloads"]] == [3, 3]


@pytest.mark.slow
def test_a_side_run_trains_longer_only_when_the_target_is_not_reached(bench) -> None:
    # the table's config: 4096 samples validated every 256 (16 times)
    cfg = tiny_config(confirm={"train_samples": 4096, "evaluations": 16})
    params = {"batch_size": 32, "lr": 0.05, "num_gpus": 1}
    reached = bench.side_run(cfg, params, 1, 0.0)  # reached at the first validation
    assert [c[0] for c in reached] == [256.0, 512.0]  # an eighth of the length, at the table's spacing
    never = bench.side_run(cfg, params, 1, 1.01)
    assert never[-1][0] == 4096.0 and len(never) == 16
    # the same seed: the long run's first validations are the short run's
    assert [c[2] for c in never[:2]] == [c[2] for c in reached]
