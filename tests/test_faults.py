"""Fault injection, for real: each trial of one search meets a different fault; the search
finishes, every trial is one record with its status and reason, no Optuna trial stays RUNNING."""

from __future__ import annotations

import json
import os
from pathlib import Path

import optuna
import pytest

from tests.conftest import tiny_config
from tune_batch.pipeline.search import search

EXPECTED = {
    16: ("failed", "injected fault: the model raised"),
    32: ("diverged", "non-finite loss"),
    64: ("oom", "OutOfMemoryError"),
    96: ("failed", "timeout: still running"),
    256: ("failed", "ray:"),  # the trial's process was killed: Ray reports the dead actor
    48: ("ok", None),
}


@pytest.mark.serial
@pytest.mark.slow
@pytest.mark.ray
def test_every_fault_is_a_record_and_the_search_finishes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          capfd: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("TUNE_BATCH_HANG_GRACE_S", "3")  # the hung trial is stopped 6 + 3 s after it starts, not 6 + 10
    sizes = list(EXPECTED)
    cfg = tiny_config(model={"name": "tests.workloads:faulty", "kwargs": {}}, space={"batch_size": sizes},
                      budget={"trials": len(sizes), "train_samples": 1024, "trial_timeout_s": 6},
                      resources={"feasibility_model": False})
    run = tmp_path / "run"
    storage = f"sqlite:///{tmp_path / 'faults.db'}"
    study = optuna.create_study(study_name="faults", storage=storage, directions=cfg.directions)
    for b in sizes:  # enqueued trials run first: one of each fault
        study.enqueue_trial({"batch_size": b, "lr": 0.05, "num_gpus": 1})
    search(cfg, run, storage_url=storage, study_name="faults", quiet=True)
    # each fault is one line of progress and a record, not Ray Tune's traceback of the failed task
    # (the stopped hung trial and the killed process: 30-40 lines each before)
    err = capfd.readouterr().err
    assert "Trial task failed" not in err and "Traceback (most recent call last)" not in err, err[-3000:]
    assert "TUNE_PRINT_ALL_TRIAL_ERRORS" not in os.environ  # put back

    recs = [json.loads(x) for x in (run / "trials.jsonl").read_text().splitlines()]
    assert len(recs) == len(sizes)  # one record per trial run
    by_batch = {r["params"]["batch_size"]: r for r in recs}
    assert set(by_batch) == set(sizes)
    for b, (status, words) in EXPECTED.items():
        rec = by_batch[b]
        assert rec["status"] == status, (b, rec["status"], rec["reason"])
        if words:
            assert words in rec["reason"], (b, rec["reason"])
    assert "budget.trial_timeout_s + 3 s grace" in by_batch[96]["reason"]  # the override reached the trial
    trials = optuna.load_study(study_name="faults", storage=storage).get_trials()
    states = [t.state for t in trials]
    assert len(states) == len(sizes) and optuna.trial.TrialState.RUNNING not in states
    # a diverged trial is infeasible information for the sampler, not a FAIL
    diverged = next(t for t in trials if t.params["batch_size"] == 32)
    assert diverged.state == optuna.trial.TrialState.COMPLETE and diverged.system_attrs["constraints"][2] > 0


def test_a_dead_data_loader_worker_is_a_failed_record() -> None:
    from tune_batch.trial import run_trial

    cfg = tiny_config(data={"name": "tests.workloads:dying_loader", "kwargs": {"n": 512}, "num_workers": 1},
                      budget={"train_samples": 512})
    res = run_trial(cfg, {"batch_size": 16, "lr": 0.05, "num_gpus": 1})
    assert res.status == "failed"
    assert "DataLoader worker" in res.reason and "exited unexpectedly" in res.reason


def test_an_unexpected_error_in_a_ray_trial_is_named_by_the_error_itself() -> None:
    """Ray wraps a trial's own exception; the record names that one, without Ray's colour codes
    (the reason was the wrapper's first line: the actor's name in ANSI colours, and no error)."""
    import traceback

    from ray.exceptions import RayTaskError

    from tune_batch.backends.ray.callbacks import error_reason
    from tune_batch.errors import ConfigError

    def wrapped(e: BaseException) -> BaseException:
        try:
            raise e
        except BaseException as inner:  # noqa: BLE001 - wrapped as Ray wraps a trial's exception
            return RayTaskError("ImplicitFunc.train", traceback.format_exc(), inner, pid=1, ip="127.0.0.1",
                                proctitle="ray::ImplicitFunc.train()", actor_repr="ray_trainable").as_instanceof_cause()

    assert error_reason(wrapped(KeyError(2))) == "ray: KeyError: 2"
    assert error_reason(wrapped(ValueError("bad shape\nmore"))) == "ray: ValueError: bad shape"
    assert error_reason(wrapped(ConfigError("x: not allowed"))) == "x: not allowed"  # our own: its message alone
    assert "\x1b" not in error_reason(RayTaskError("f", "tb", None, proctitle="ray::f()"))


# Ray 2.60's message when its memory monitor kills a trial's process (from a search run with
# RAY_memory_usage_threshold=0.02; the object store's figures and the worker list cut)
MONITOR_KILL = """1 worker(s) were killed due to the node running low on memory. Memory on the node (IP: 127.0.0.1, \
ID: c92455bc) was 2.71GB used / 23.54GB limit (0.115034)
OOM kill reason: Memory usage 2907627520B exceeded threshold of 505523872B (2.0% of 25276194816B limit)
Ray killed 1 worker(s) based on the killing policy
Selected to kill: (Task: job ID=01000000, task name=ImplicitFunc.__init__, pid=17261, actual memory used=0.05GB, \
worker ID=3b2baed0)
]
Top 10 memory users: PID\tMEM(GB)\tCOMMAND
16518\t0.51\t/root/.pyenv/versions/3.11.7/bin/python3 -m tune_batch search configs/quickstart.yaml
Refer to the documentation on how to address the out of memory issue: https://docs.ray.io/en/latest/ray-observabi"""


def test_a_process_rays_memory_monitor_killed_is_said_in_one_line() -> None:
    """The reason was the last line of Ray's message ("Refer to the documentation on how to
    address the out of memory issue: https..."), which says neither what happened nor to what."""
    from ray.exceptions import OutOfMemoryError

    from tune_batch.backends.ray.callbacks import error_reason
    from tune_batch.backends.ray.data_parallel import classify_failure
    from tune_batch.backends.ray.group import GroupError
    from tune_batch.store.records import Status

    said = ("killed by Ray's memory monitor (host memory): the node used 2.71GB of 23.54GB, over its threshold "
            "(2.0% of the limit); this trial's process used 0.05GB; Ray kills the most recently started task")
    assert error_reason(MONITOR_KILL).startswith(said)  # the text Tune keeps
    assert error_reason(OutOfMemoryError(MONITOR_KILL)).startswith(said)  # the exception
    assert "\n" not in error_reason(MONITOR_KILL)
    status, reason = classify_failure(GroupError({1: OutOfMemoryError(MONITOR_KILL)}))  # a rank of a group
    assert status is Status.FAILED and reason.startswith("a worker was " + said)
    assert error_reason("Traceback ...\nValueError: bad shape") == "ray: ValueError: bad shape"  # others as before


@pytest.mark.slow
@pytest.mark.ray
def test_a_search_whose_trial_rays_memory_monitor_kills_records_why(tmp_path: Path) -> None:
    """For real: Ray's memory monitor told to act above 0.1 % of the node's memory (any machine is
    over it) kills the trial's process; the record says so in one line."""
    import subprocess
    import sys

    from tests.conftest import REPO

    env = {**os.environ, "RAY_memory_usage_threshold": "0.001", "RAY_memory_monitor_refresh_ms": "100",
           "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    out = tmp_path / "out"
    p = subprocess.run([sys.executable, "-m", "tune_batch", "search", str(REPO / "configs/quickstart.yaml"),
                        "--set", "budget.trials=1", "--set", "confirm.candidates=0", "--set", "repeats.seeds=0",
                        "--set", "baseline=null", "--output", str(out)],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    (rec,) = [json.loads(x) for x in (out / "trials.jsonl").read_text().splitlines()]
    assert rec["status"] == "failed"
    assert rec["reason"].startswith("killed by Ray's memory monitor (host memory): the node used "), rec["reason"]
    assert "killed by Ray's memory monitor" in p.stdout


@pytest.mark.parametrize("backend", ["optuna", "ray"])
@pytest.mark.slow
def test_a_config_mistake_every_trial_meets_stops_the_search_after_the_first(tmp_path: Path, backend: str) -> None:
    """A lightning search whose objective its module never logged trained all 4 trials to fail
    each the same way (ValueError: objective 'eval_loss' is not among what the trainer's
    evaluation logged); on a GPU workload that is the whole budget spent on one typo."""
    from tune_batch.errors import CONFIG_FAULT, TrialConfigError

    cfg = tiny_config(train={"evaluate": "tests.workloads:eval_not_a_dict_on_the_whole_set"},
                      search={"backend": backend},
                      objectives=[{"metric": "samples_per_s", "direction": "maximize"},
                                  {"metric": "val_loss", "direction": "minimize"}],
                      budget={"trials": 4, "train_samples": 256})
    with pytest.raises(TrialConfigError) as e:
        search(cfg, tmp_path / "run", quiet=True)
    (rec,) = [json.loads(x) for x in (tmp_path / "run" / "trials.jsonl").read_text().splitlines()]
    assert rec["status"] == "failed" and rec["reason"].startswith(CONFIG_FAULT + "train.evaluate = ")
    assert str(e.value).startswith("train.evaluate = 'tests.workloads:eval_not_a_dict_on_the_whole_set' returned "
                                   "list, not a dict")
    assert "(trial 0); every trial would end the same way, so the search stopped after 1 of 4 trial(s)" in str(e.value)
    assert (tmp_path / "run" / "pareto.json").exists()  # the reports are written as after any search
    from tune_batch.backends.signals import config_fault

    assert config_fault["record"] is None  # nothing left to stop the next search in this process


def test_a_search_whose_first_trials_all_fail_alike_stops(tmp_path: Path) -> None:
    """A sample no trial can read (a corrupt file past what preflight reads) failed every trial of
    the budget with the same OSError; now the search stops after the first 3 and says why."""
    from tune_batch.errors import TrialConfigError
    from tune_batch.store.records import ALIKE_FAILURES

    cfg = tiny_config(data={"name": "tests.workloads:one_unreadable_sample", "resize": None},
                      search={"backend": "optuna"}, budget={"trials": 6, "train_samples": 256})
    with pytest.raises(TrialConfigError) as e:
        search(cfg, tmp_path / "run", quiet=True)
    recs = [json.loads(x) for x in (tmp_path / "run" / "trials.jsonl").read_text().splitlines()]
    assert len(recs) == ALIKE_FAILURES == 3 and {r["status"] for r in recs} == {"failed"}
    assert str(e.value).startswith("the first 3 trials all failed alike (OSError: cannot read sample 9: the file is "
                                   "corrupt)")
    assert "so the search stopped after 3 of 6 trial(s)" in str(e.value) and "fix what they failed on" in str(e.value)


def test_trials_failing_for_their_config_do_not_stop_a_search() -> None:
    """Alike failures stop a search only when nothing else finished and it is no timeout (which
    depends on the config: a large batch is slow)."""
    from tune_batch.store.records import Params, Status, TrialResult, failing_alike

    def rec(i: int, status: Status, reason: str | None) -> TrialResult:
        return TrialResult(i, Params.of({"batch_size": 16, "lr": 0.01, "num_gpus": 1}), status, reason=reason)

    alike = [rec(i, Status.FAILED, "OSError: x") for i in range(3)]
    assert failing_alike(alike) == "the first 3 trials all failed alike (OSError: x)"
    assert failing_alike(alike[:2]) is None
    assert failing_alike([*alike, rec(3, Status.OK, None)]) is None
    assert failing_alike([rec(i, Status.FAILED, "timeout: still running after 6 s") for i in range(3)]) is None
    assert failing_alike([*alike[:2], rec(2, Status.FAILED, "OSError: y")]) is None


def test_a_config_mistake_on_a_rank_of_a_group_is_said_by_its_own_message() -> None:
    """A worker group's rank raising a config mistake read "config: ray::_RankActor.run() (pid=...,
    actor_id=...)": the first line of Ray's wrapper of the error, which is an instance of its class
    too, was taken before the error itself."""
    from ray.exceptions import RayTaskError

    from tune_batch.backends.ray.data_parallel import classify_failure
    from tune_batch.backends.ray.group import GroupError
    from tune_batch.errors import TrialConfigError
    from tune_batch.store.records import Status

    mistake = TrialConfigError("objective 'eval_loss' is not among what the trainer's evaluation logged (nothing)")
    wrapped = RayTaskError("_RankActor.run", "Traceback ...", mistake, actor_repr="<_RankActor>").as_instanceof_cause()
    assert isinstance(wrapped, TrialConfigError) and str(wrapped).splitlines()[0] != str(mistake)
    status, reason = classify_failure(GroupError({1: wrapped}))
    assert status is Status.FAILED and reason == f"config: {mistake}", reason
