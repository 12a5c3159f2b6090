"""Data-parallel trials on CPU worker processes (gloo), and a search across a two-node Ray cluster."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import tiny_config
from tune_batch.backends.ray import plan_resources
from tune_batch.runner import search

pytestmark = [pytest.mark.ray, pytest.mark.slow]


def _records(run: Path) -> list[dict]:
    return [json.loads(x) for x in (run / "trials.jsonl").read_text().splitlines()]


def test_oom_or_hang_on_one_worker_ends_the_group_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import optuna

    # three trials in this order: OOM on rank 1 only; rank 1 hung for good; then a one-worker
    # trial, which can only run if the hung group's workers (all of this machine's CPUs) were freed
    monkeypatch.setenv("TUNE_BATCH_GROUP_START_SLACK_S", "25")  # group start here: 20-25 s
    cfg = tiny_config(model={"name": "tests.workloads:oom_on_rank", "kwargs": {"rank": 1, "hang_batch": 16}},
                      space={"batch_size": [32, 64], "num_gpus": [1, 2]},
                      budget={"trials": 3, "trial_timeout_s": 15}, resources={"feasibility_model": False})
    storage = f"sqlite:///{tmp_path / 'dp.db'}"
    study = optuna.create_study(study_name="dp", storage=storage, directions=cfg.directions)
    for b, n in ((64, 2), (32, 2), (64, 1)):
        study.enqueue_trial({"batch_size": b, "lr": 0.05, "num_gpus": n})
    search(cfg, tmp_path / "run", storage_url=storage, study_name="dp", quiet=True)
    recs = _records(tmp_path / "run")
    assert len(recs) == 3  # each recorded once, not per rank
    by = {(r["params"]["batch_size"], r["params"]["num_gpus"]): r for r in recs}
    oom, hung, single = by[(64, 2)], by[(32, 2)], by[(64, 1)]
    assert oom["status"] == "oom" and "rank 1 only" in oom["reason"], oom["reason"]
    assert oom["duration_s"] < 15 + 25  # ended by the fault: no rank waited in a collective
    assert hung["status"] == "failed" and "group was still running" in hung["reason"], hung["reason"]
    assert single["status"] == "ok", single["reason"]  # the hung group's CPUs came back


def test_resource_plan_without_gpus() -> None:
    cfg = tiny_config(space={"num_gpus": [1, 2, 4]})
    plan = plan_resources(cfg, {"CPU": 2.0}, node_cpus=2.0)
    assert plan.gpu_choices == [1, 2] and "[4] dropped" in plan.notes[0]
    assert plan.request(1) == {"CPU": 2.0} and plan.concurrent == 1
    # the group and its trial fit the node exactly: nothing waits forever
    assert 2 * plan.worker_cpus(2) + plan.request(2)["CPU"] <= 2.0
    two_nodes = plan_resources(cfg, {"CPU": 2.0}, node_cpus=1.0)
    assert two_nodes.worker_cpus(2) + two_nodes.request(2)["CPU"] <= 1.0  # one worker per node
    gpus = plan_resources(cfg, {"CPU": 16.0, "GPU": 4.0}, node_cpus=16.0)
    assert gpus.gpu_choices == [1, 2, 4] and gpus.request(1) == {"CPU": 4.0, "GPU": 1.0} and gpus.concurrent == 4


def test_search_across_a_two_node_cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import tempfile

    import ray
    from ray.cluster_utils import Cluster

    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")  # a loopback test cluster; nothing written to ~/.ray
    tmp_root = tempfile.mkdtemp(prefix="tbc-", dir="/tmp")  # short: socket paths have a length limit
    monkeypatch.setenv("RAY_TMPDIR", tmp_root)  # Ray's default /tmp/ray moves under it
    # both nodes on loopback, as a local search is (Ray would advertise the LAN address)
    from ray._private import ray_constants

    from tune_batch.backends.ray.session import LOOPBACK_ENV

    monkeypatch.setenv(LOOPBACK_ENV, "0")
    monkeypatch.setattr(ray_constants, "ENABLE_RAY_CLUSTER", False)
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    cluster.add_node(num_cpus=1)
    try:
        ray.init(address=cluster.address)
        # a minimum window longer than the budget's timed steps: the extra steps pair up on both ranks
        cfg = tiny_config(space={"batch_size": [64], "num_gpus": [2]},
                          budget={"trials": 1, "train_samples": 1024, "min_window_s": 1.5})
        search(cfg, tmp_path / "run", quiet=True)
        (rec,) = _records(tmp_path / "run")
        assert rec["status"] == "ok", rec["reason"]
        info, m = rec["info"], rec["metrics"]
        assert info["world_size"] == 2 and info["launcher"] == "ray.train.torch.TorchTrainer"
        assert info["per_worker_batch"] == 32
        assert info["short_batches"] == 0  # every worker saw only full batches
        assert info["train_samples_done"] == 1024 and info["timed_samples"] == info["timed_steps"] * 64  # global
        # topped up by the clock on both ranks: at least the minimum whatever the load (no timing bound)
        assert info["window_extension_steps"] > 0 and m["timed_s"] >= 1.5
        assert 0 < m["device_util"] <= 1 and m["val_acc"] > 0.2 and m["peak_mem_bytes"] > 0
        assert m["goodput"] > 0  # the noise scale ran on rank 0 through the bare model: no lone all-reduce
        assert len(rec["info"]["node_ids"]) == 2  # one worker on each node
        assert rec["info"]["node_ids"] == sorted(n["NodeID"] for n in ray.nodes() if n["Alive"])
        assert {n["NodeManagerAddress"] for n in ray.nodes() if n["Alive"]} == {"127.0.0.1"}
    finally:
        ray.shutdown()
        cluster.shutdown()
        import shutil

        shutil.rmtree(tmp_root, ignore_errors=True)
