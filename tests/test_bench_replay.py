"""scripts/bench_search.py's replay of a grid measured with a training seed per repeat: a search
reads one seed's landscape, and is scored at the mean over seeds."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import script

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def bench_search():
    with script("bench_search") as module:
        yield module


def _point(b: int, lr: float, runs: list[tuple[str, float | None]], peak: float, median_ok: bool = True) -> dict:
    """A grid point as --measure stores it (its median record ok when any run was), or, with
    ``median_ok`` False, as a one-seed table merged with later seeds' runs can hold it."""
    ok = [a for s, a in runs if s == "ok"] if median_ok else []
    metrics = ({"samples_per_s": 1000.0 * b ** 0.5, "peak_mem_bytes": peak, "val_acc": ok[0], "timed_s": 1.0}
               if ok else {})
    return {"trial_id": 0, "params": {"batch_size": b, "lr": lr, "num_gpus": 1},
            "status": "ok" if ok else "diverged", "reason": None if ok else "non-finite loss", "metrics": metrics,
            "duration_s": 2.0, "info": {}, "samples_per_s_runs": [metrics["samples_per_s"]] * 3 if ok else [],
            "seed_runs": [{"seed": k, "status": s, "reason": None if s == "ok" else "non-finite loss",
                           "duration_s": 2.0, "val_acc": a} for k, (s, a) in enumerate(runs)]}


@pytest.fixture(scope="module")
def table() -> dict:
    config = json.loads((REPO / "benchmarks" / "plain_sgd_mlp_grid.json").read_text())["config"]
    return {"config": config, "lr_grid": [0.01, 0.1], "batch_sizes": [16, 32], "seeds": [0, 1, 2], "records": [
        _point(16, 0.01, [("ok", 0.5), ("ok", 0.6), ("ok", 0.7)], 100.0),
        _point(16, 0.1, [("ok", 0.8), ("diverged", None), ("diverged", None)], 100.0),
        _point(32, 0.01, [("ok", 0.4), ("ok", 0.2), ("ok", 0.3)], 200.0),
        _point(32, 0.1, [("diverged", None), ("ok", 0.9), ("ok", 0.6)], 200.0, median_ok=False),
    ]}


def test_each_search_seed_reads_its_own_landscape(bench_search, table) -> None:
    rp = bench_search.Replay(table, None)
    assert rp.landscapes == 3
    assert [rp.lookup(16, 0.011, k)[0].metrics.val_acc for k in range(3)] == [0.5, 0.6, 0.7]
    assert [rp.lookup(32, 0.09, k)[0].status.value for k in range(3)] == ["diverged", "ok", "ok"]
    # ok in this seed only: the point's median record diverged, its batch size's step is used
    ok_once = rp.lookup(32, 0.1, 2)[0]
    assert ok_once.metrics.val_acc == 0.6 and ok_once.metrics.samples_per_s == pytest.approx(1000.0 * 32 ** 0.5)
    assert rp.lookup(16, 0.1, 1)[0].status.value == "diverged"


def test_the_truth_is_the_mean_over_seeds_feasible_by_majority(bench_search, table) -> None:
    rp = bench_search.Replay(table, None)
    truth = {(r.params.batch_size, r.params.lr): r for r in rp.full()}
    assert truth[(16, 0.01)].metrics.val_acc == pytest.approx(0.6)
    assert not truth[(16, 0.1)].feasible  # diverged in two seeds of three
    # ok in two seeds of three: feasible, the diverged seed counted at chance (1 / 10 classes)
    assert truth[(32, 0.1)].metrics.val_acc == pytest.approx((0.1 + 0.9 + 0.6) / 3)
    # a search that found (16, 0.1) in seed 0's landscape is scored at its truth: not feasible
    found = rp.lookup(16, 0.1, 0)[0]
    assert found.feasible and not rp.truth_of(found).feasible


def test_a_batch_over_the_cap_is_out_of_memory_in_every_seed(bench_search, table) -> None:
    rp = bench_search.Replay(table, 150.0)
    assert {rp.lookup(32, lr, k)[0].status.value for lr in (0.01, 0.1) for k in range(3)} == {"oom"}
    assert rp.lookup(16, 0.01, 0)[0].status.value == "ok"


def test_a_table_without_seed_runs_is_its_own_truth(bench_search, table) -> None:
    single = {**table, "records": [{k: v for k, v in r.items() if k != "seed_runs"} for r in table["records"]]}
    rp = bench_search.Replay(single, None)
    assert rp.landscapes == 1
    assert rp.lookup(16, 0.1, 0)[0].metrics.val_acc == 0.8
    assert {(r.params.batch_size, r.params.lr): r.feasible for r in rp.full()} == {
        (16, 0.01): True, (16, 0.1): True, (32, 0.01): True, (32, 0.1): False}
    assert rp.full()[1].metrics.val_acc == 0.8


@pytest.mark.slow
def test_add_seeds_trains_the_next_seeds_and_merges_only_status_and_val_acc(bench_search, tmp_path,
                                                                            monkeypatch) -> None:
    """--add-seeds on a table the test writes (two points, one seed): the next seed of each point
    is really trained (the table's stored config, search.seed 1) and appended to its seed_runs,
    the step-work metrics untouched; every run is kept in the runs file; a replay then reads two
    landscapes."""
    import argparse

    from tests.conftest import tiny_config

    cfg = tiny_config(budget={"train_samples": 256})
    points = [_point(16, 0.05, [("ok", 0.5)], 100.0), _point(32, 0.05, [("ok", 0.4)], 200.0)]
    path = tmp_path / "t_grid.json"
    path.write_text(json.dumps({"config": cfg.to_dict(), "lr_grid": [0.05], "batch_sizes": [16, 32], "seeds": [0],
                                "records": points}))
    monkeypatch.setattr(bench_search, "TABLE", path)
    bench_search.add_seeds(argparse.Namespace(add_seeds=1))
    out = json.loads(path.read_text())
    assert out["seeds"] == [0, 1] and out["seed_runs_added"][0]["seeds"] == [1]
    for before, after in zip(points, out["records"]):
        assert after["metrics"] == before["metrics"] and after["samples_per_s_runs"] == before["samples_per_s_runs"]
        first, added = after["seed_runs"]
        assert first == before["seed_runs"][0]
        assert added["seed"] == 1 and added["status"] == "ok" and 0.0 <= added["val_acc"] <= 1.0
    runs = [json.loads(line) for line in (tmp_path / "t_grid.seeds1-1.runs.jsonl").read_text().splitlines()]
    assert [(r["seed"], r["params"]["batch_size"]) for r in runs] == [(1, 16), (1, 32)]
    assert [r["metrics"]["val_acc"] for r in runs] == [r["seed_runs"][1]["val_acc"] for r in out["records"]]
    assert bench_search.Replay(out, None).landscapes == 2
    path.write_text(json.dumps({**out, "records": [{**p, "seed_runs": None} for p in out["records"]]}))
    with pytest.raises(SystemExit, match="no seed_runs"):
        bench_search.add_seeds(argparse.Namespace(add_seeds=1))
